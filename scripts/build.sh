#!/usr/bin/env bash
# Sets up (if needed) and builds attnlab into build/ (CMake + Ninja, Release).
#   scripts/build.sh                 everything: library, CLI, tests, benchmarks, fuzz replay
#   scripts/build.sh attnlab_cli     only the named targets (run.sh builds just the CLI)
# ATTNLAB_BUILD_DIR picks the build folder; ATTNLAB_CMAKE_ARGS adds configure options.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
BUILD_DIR="${ATTNLAB_BUILD_DIR:-build}"
if [ ! -f "$BUILD_DIR/build.ninja" ]; then
  # shellcheck disable=SC2086
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release ${ATTNLAB_CMAKE_ARGS:-}
fi
targets=()
for t in "$@"; do targets+=(--target "$t"); done
cmake --build "$BUILD_DIR" -j "$(nproc)" "${targets[@]}"
