#!/usr/bin/env bash
# The test command: sets up, builds, and runs every test (unit, PyTorch oracle, CLI).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/build.sh
BUILD_DIR="${ATTNLAB_BUILD_DIR:-build}"
ctest --test-dir "$BUILD_DIR" --output-on-failure -j "$(nproc)" "$@"
