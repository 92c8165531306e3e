#!/usr/bin/env bash
# Builds attnlab for 64-bit ARM (AArch64: the baseline kernels compile to NEON) with Debian's
# cross compiler and runs the engine's kernel tests under qemu-user on this x86-64 machine.
# Correctness only: emulated time says nothing about speed on real ARM hardware.
#
#   scripts/arm64_check.sh [BUILD_DIR]        (default build-arm64; takes ~15-25 min on 2 cores)
#   ARM64_TESTS='gtest filter' scripts/arm64_check.sh    (default: the kernel tests + the model)
#
# Installs g++-aarch64-linux-gnu and qemu-user with apt when missing. The target's libraries
# (oneDNN, GoogleTest, and the header-only nlohmann-json, CLI11, Eigen) are Debian's own
# packages for arm64 (or "all"), downloaded from the machine's apt mirror and unpacked under
# BUILD_DIR/sysroot with dpkg-deb -x: nothing is installed into the host's dpkg database (its
# libdnnl-dev for amd64 and arm64 cannot be installed side by side). Exit status 0 when every
# selected test passes under emulation.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-arm64}
sysroot=$(realpath -m "$build/sysroot")

need=()
command -v aarch64-linux-gnu-g++ >/dev/null || need+=(g++-aarch64-linux-gnu)
command -v qemu-aarch64 >/dev/null || need+=(qemu-user)
if [ ${#need[@]} -gt 0 ]; then
  echo "arm64_check: installing ${need[*]}"
  apt-get update -q >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${need[@]}" >/dev/null
fi

# The arm64 packages: apt prints the amd64 (or "all") file's URL; an arch-specific package of the
# same source version sits next to it with _arm64.deb.
mkdir -p "$build/debs" "$sysroot"
if [ ! -f "$sysroot/.unpacked" ]; then
  arch_pkgs=(libdnnl2 libdnnl-dev libgtest-dev)
  all_pkgs=(nlohmann-json3-dev libcli11-dev libeigen3-dev)
  apt-get update -q >/dev/null
  mapfile -t uris < <(apt-get --print-uris -qq download "${arch_pkgs[@]}" "${all_pkgs[@]}" |
                      awk '{gsub("\047", "", $1); print $1}')
  [ ${#uris[@]} -eq 6 ] || { echo "arm64_check: apt gave ${#uris[@]} URLs, expected 6" >&2; exit 1; }
  for u in "${uris[@]}"; do
    u=${u/_amd64.deb/_arm64.deb}
    f="$build/debs/$(basename "$u")"
    [ -s "$f" ] || curl -sSf -o "$f" "$u" || { echo "arm64_check: cannot download $u" >&2; exit 1; }
    dpkg-deb -x "$f" "$sysroot"
  done
  touch "$sysroot/.unpacked"
fi

export ATTNLAB_ARM64_SYSROOT=$sysroot
if [ ! -f "$build/build.ninja" ]; then
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_TOOLCHAIN_FILE=cmake/toolchains/aarch64-linux-gnu.cmake \
    -DATTNLAB_PYTHON=OFF -DATTNLAB_BUILD_BENCHMARKS=OFF -DATTNLAB_WERROR=ON
fi
cmake --build "$build" -j "$(nproc)" --target attnlab_tests attnlab_cli

file "$build/attnlab_tests" | grep -q "ARM aarch64" ||
  { echo "arm64_check: $build/attnlab_tests is not an AArch64 binary" >&2; exit 1; }
filter=${ARM64_TESTS:-"AttentionFlash*:AttentionDecode*:AttentionReference*:AttentionExplicit*:AttentionMask*:SimdTarget*:Ops.*:HalfKvCache*:WeightGemm*:Gemm*:LinearAttention*:Rope*:Gpt.*"}
run=(qemu-aarch64 -L /usr/aarch64-linux-gnu -E "LD_LIBRARY_PATH=$sysroot/usr/lib/aarch64-linux-gnu")
echo "arm64_check: $("${run[@]}" "$build/attnlab" --version)"
echo "arm64_check: running $build/attnlab_tests --gtest_filter='$filter' under qemu-aarch64"
ATTNLAB_BIN="$build/attnlab" "${run[@]}" "$build/attnlab_tests" --gtest_filter="$filter" --gtest_brief=1
echo "arm64_check: OK"
