#!/usr/bin/env bash
# Builds ggml (static, CPU backend only, Release) and bench/ggml/ggml_flash_bench.c against it,
# in BUILD_DIR (outside the repo), then runs the driver with the remaining arguments.
#
#   bench/ggml/run.sh GGML_SRC_DIR BUILD_DIR [--isa native|avx2] [driver args...]
#
# --isa native (default): GGML_NATIVE=ON (-march=native; AVX-512 on an AVX-512 machine).
# --isa avx2: GGML_NATIVE=OFF with SSE4.2/AVX/AVX2/FMA/F16C/BMI2 and every AVX-512/AMX/VNNI
#             option off, so ggml's AVX2 path can be measured on an AVX-512 machine.
# The ggml commit comes from `git -C GGML_SRC_DIR rev-parse HEAD` (when GGML_SRC_DIR/.git
# exists), else $GGML_COMMIT, else ggml's own ggml_commit(). Nothing is downloaded.
# JOBS (default 1) sets the build parallelism.
set -euo pipefail

usage() { echo "usage: $0 GGML_SRC_DIR BUILD_DIR [--isa native|avx2] [driver args...]" >&2; exit 2; }
[ $# -ge 2 ] || usage
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
src=$(cd "$1" && pwd)
build=$(realpath -m "$2")
shift 2
isa=native
if [ "${1:-}" = "--isa" ]; then
  [ $# -ge 2 ] || usage
  isa=$2
  shift 2
fi

if [ ! -f "$src/include/ggml.h" ] || [ ! -f "$src/CMakeLists.txt" ]; then
  echo "$0: $src is not a ggml source tree (no include/ggml.h)" >&2; exit 2
fi
case "$build/" in
  "$(cd "$here/../.." && pwd)"/*) echo "$0: BUILD_DIR must be outside the repository" >&2; exit 2 ;;
esac

case "$isa" in
  native) isa_flags=(-DGGML_NATIVE=ON) ;;
  avx2) isa_flags=(-DGGML_NATIVE=OFF -DGGML_SSE42=ON -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON
                   -DGGML_F16C=ON -DGGML_BMI2=ON -DGGML_AVX_VNNI=OFF -DGGML_AVX512=OFF
                   -DGGML_AVX512_VBMI=OFF -DGGML_AVX512_VNNI=OFF -DGGML_AVX512_BF16=OFF
                   -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF) ;;
  *) usage ;;
esac
mkdir -p "$build"

commit=""
[ -e "$src/.git" ] && commit=$(git -C "$src" rev-parse HEAD 2>/dev/null || true)
commit=${commit:-${GGML_COMMIT:-}}

# A two-target wrapper project, generated in BUILD_DIR: ggml as a subdirectory + the driver.
mkdir -p "$build/wrapper"
cat > "$build/wrapper/CMakeLists.txt" <<EOF
cmake_minimum_required(VERSION 3.14)
project(ggml_flash_bench C CXX)
add_subdirectory("$src" ggml)
add_executable(ggml_flash_bench "$here/ggml_flash_bench.c")
target_link_libraries(ggml_flash_bench PRIVATE ggml ggml-cpu m)
if(NOT "$commit" STREQUAL "")
  target_compile_definitions(ggml_flash_bench PRIVATE GGML_BENCH_COMMIT="$commit")
endif()
EOF

cmake -S "$build/wrapper" -B "$build" -DCMAKE_BUILD_TYPE=Release \
  -DBUILD_SHARED_LIBS=OFF -DGGML_BACKEND_DL=OFF -DGGML_CPU=ON \
  -DGGML_BLAS=OFF -DGGML_METAL=OFF -DGGML_CUDA=OFF -DGGML_VULKAN=OFF -DGGML_OPENCL=OFF \
  -DGGML_LLAMAFILE=OFF -DGGML_CCACHE=OFF -DGGML_OPENMP=ON \
  -DGGML_BUILD_TESTS=OFF -DGGML_BUILD_EXAMPLES=OFF "${isa_flags[@]}" >"$build/configure.log" 2>&1 ||
  { cat "$build/configure.log" >&2; exit 1; }
cmake --build "$build" --target ggml_flash_bench -j "${JOBS:-1}" >"$build/build.log" 2>&1 ||
  { tail -n 40 "$build/build.log" >&2; exit 1; }

exec "$build/ggml_flash_bench" "$@"
