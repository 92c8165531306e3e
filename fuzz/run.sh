#!/usr/bin/env bash
# libFuzzer for attnlab's parsers and command line (fuzz/README.md). Needs clang++ and
# libclang-rt-14-dev (Debian packages clang, libclang-rt-dev); no downloads.
#
#   fuzz/run.sh build                  configure + build build-fuzz/ (clang++,
#                                      -fsanitize=fuzzer,address,undefined)
#   fuzz/run.sh run TARGET [SECONDS]   fuzz one target (default 600 s)
#   fuzz/run.sh all [SECONDS]          every target, one after another
#   fuzz/run.sh replay                 every committed corpus file through its libFuzzer target
#
# New inputs go to build-fuzz/corpus/TARGET (the committed seeds in fuzz/corpus/TARGET are only
# read); crashes, leaks and timeouts to build-fuzz/artifacts/. Copy a crashing input to
# fuzz/corpus/TARGET/regress-<what> once it is fixed, so the replay test keeps it fixed.
# Set JOBS (default 2) for the build; everything runs under `nice -n 19`.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${ATTNLAB_FUZZ_BUILD_DIR:-build-fuzz}
JOBS=${JOBS:-2}
TARGETS=(safetensors checkpoint llmc gpt2_tokenizer bpe_vocab model_config train_config npy
         token_file cli)

build() {
  if [ ! -f "$BUILD/build.ninja" ]; then
    # oneDNN is linked against GCC's OpenMP runtime; use it from clang too (omp.h API calls only).
    nice -n 19 cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS=-O1 \
      -DCMAKE_CXX_COMPILER=clang++ -DATTNLAB_FUZZ=ON -DATTNLAB_BUILD_TESTS=OFF \
      -DATTNLAB_BUILD_BENCHMARKS=OFF \
      -DOpenMP_CXX_FLAGS=-fopenmp=libgomp -DOpenMP_CXX_LIB_NAMES=gomp \
      -DOpenMP_gomp_LIBRARY="$(g++ -print-file-name=libgomp.so)"
  fi
  local t=()
  for name in "${TARGETS[@]}"; do t+=("${name}_fuzzer"); done
  nice -n 19 cmake --build "$BUILD" -j "$JOBS" --target "${t[@]}"
}

fuzz_one() {
  local name=$1 seconds=${2:-600}
  mkdir -p "$BUILD/corpus/$name" "$BUILD/artifacts"
  local dict=()
  [ -f "fuzz/dict/$name.dict" ] && dict=(-dict="fuzz/dict/$name.dict")
  echo "fuzz: $name for $seconds s"
  ATTNLAB_NUM_THREADS=1 nice -n 19 "$BUILD/fuzz/${name}_fuzzer" "$BUILD/corpus/$name" \
    "fuzz/corpus/$name" "${dict[@]}" -max_total_time="$seconds" -timeout=20 \
    -rss_limit_mb=2560 -max_len=16384 -close_fd_mask=3 -print_final_stats=1 \
    -artifact_prefix="$BUILD/artifacts/$name-"
}

case "${1:-}" in
  build) build ;;
  run) build; fuzz_one "$2" "${3:-600}" ;;
  all)
    build
    for name in "${TARGETS[@]}"; do fuzz_one "$name" "${2:-600}"; done
    ;;
  replay)
    build
    for name in "${TARGETS[@]}"; do
      ATTNLAB_NUM_THREADS=1 nice -n 19 "$BUILD/fuzz/${name}_fuzzer" -runs=0 "fuzz/corpus/$name" \
        -close_fd_mask=3
    done
    ;;
  *) sed -n 2,16p "$0"; exit 2 ;;
esac
