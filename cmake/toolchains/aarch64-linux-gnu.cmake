# Cross-compiles attnlab for 64-bit ARM Linux (AArch64, NEON) with Debian's cross compiler
# (g++-aarch64-linux-gnu). The target's libraries (oneDNN, GoogleTest and the header-only
# packages) come from Debian's arm64 and all packages unpacked under ATTNLAB_ARM64_SYSROOT (an
# environment variable: toolchain files are read several times during configure), and the
# tests run under qemu-user (qemu-aarch64). scripts/arm64_check.sh does all of it.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
if(NOT DEFINED ENV{ATTNLAB_ARM64_SYSROOT})
  message(FATAL_ERROR "set ATTNLAB_ARM64_SYSROOT to the folder holding the unpacked arm64 packages "
                      "(scripts/arm64_check.sh)")
endif()
# The cross compiler's own libc/libstdc++/libgomp live in /usr/aarch64-linux-gnu; every library
# and package config is searched for there and in the unpacked packages only, never on the host.
set(CMAKE_FIND_ROOT_PATH "$ENV{ATTNLAB_ARM64_SYSROOT}" /usr/aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)
# Test binaries run under user-mode emulation (ctest, gtest_discover_tests).
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64 -L /usr/aarch64-linux-gnu
    -E "LD_LIBRARY_PATH=$ENV{ATTNLAB_ARM64_SYSROOT}/usr/lib/aarch64-linux-gnu")
