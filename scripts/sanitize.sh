#!/usr/bin/env bash
# The test suite under sanitizers (docs/SANITIZERS.md). Run after scripts/setup.sh (CI runs it
# right after scripts/test.sh).
#
#   scripts/sanitize.sh asan   AddressSanitizer + UndefinedBehaviorSanitizer build in build-asan/
#                              (GCC, -O1 -g1), then every test: unit tests, PyTorch oracles, CLI
#                              scripts (they run the sanitized CLI), the fuzz corpus replay
#   scripts/sanitize.sh tsan   ThreadSanitizer build of the unit tests in build-tsan/, then the
#                              tests of every threaded component: thread pool, gemm wrapper, ops,
#                              flash, decode and linear attention, RoPE, attention statistics,
#                              representation metrics, analysis, GPT forward/backward and its
#                              caches, auxiliary losses, trainer, concurrent tokenizer
#                              (TSAN_OPTIONS suppressions=scripts/tsan.supp, empty so far)
#
# Extra arguments go to ctest (e.g. -R Tokenizer). ATTNLAB_JOBS sets the parallelism (default:
# the number of cores). Sanitizer reports abort the test that triggers them (halt_on_error).
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-}
shift || true
JOBS=${ATTNLAB_JOBS:-$(nproc)}

# The threaded kernels and their users (ctest -R regex, gtest suite names): every suite whose
# code runs on the ThreadPool (ParallelFor / ForBlocks) or starts threads (docs/SANITIZERS.md).
TSAN_TESTS='^((ThreadPool|Gemm|Ops|AttentionFlash|AttentionReference|AttentionDecode|LinearAttention|Rope[A-Za-z]*|AttentionStats|RepresentationMetrics|Analysis|Gpt|HalfKvCache|AuxiliaryLosses|Trainer)\.|TokenizerGpt2\.EncodesConcurrently$)'

case "$mode" in
  asan)
    if [ ! -f build-asan/build.ninja ]; then
      # -g1: line tables are all a sanitizer report needs, and the build is 30% faster than -g.
      cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS=-O1 \
        -DCMAKE_CXX_FLAGS_DEBUG=-g1 -DATTNLAB_SANITIZE="address;undefined" \
        -DATTNLAB_BUILD_BENCHMARKS=OFF -DATTNLAB_BASELINE_ARCH=x86-64
    fi
    cmake --build build-asan -j "$JOBS"
    export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:strict_string_checks=1:detect_stack_use_after_return=1:check_initialization_order=1}
    export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
    ctest --test-dir build-asan --output-on-failure -j "$JOBS" --timeout 1500 "$@"
    ;;
  tsan)
    if [ ! -f build-tsan/build.ninja ]; then
      cmake -S . -B build-tsan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS=-O1 \
        -DCMAKE_CXX_FLAGS_DEBUG=-g1 -DATTNLAB_SANITIZE=thread -DATTNLAB_BUILD_BENCHMARKS=OFF
    fi
    cmake --build build-tsan -j "$JOBS" --target attnlab_tests
    export TSAN_OPTIONS=${TSAN_OPTIONS:-suppressions=$PWD/scripts/tsan.supp:halt_on_error=1:second_deadlock_stack=1:history_size=4}
    # Several threads per test, so the kernels really run in parallel.
    export ATTNLAB_NUM_THREADS=${ATTNLAB_NUM_THREADS:-4}
    ctest --test-dir build-tsan --output-on-failure -j "$JOBS" --timeout 1500 -R "$TSAN_TESTS" "$@"
    ;;
  *)
    sed -n 2,16p "$0"
    exit 2
    ;;
esac
