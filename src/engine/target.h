// The compile-time side of the engine's SIMD dispatch (attnlab/simd_target.h is the run-time
// side). A translation unit compiled with ATTNLAB_TARGET=N (CMake compiles the *_kernel.cc files
// once per target, see CMakeLists.txt) builds the per-target code for target N; any other unit
// builds the baseline, with the build's own flags.
//
// Per-target headers (simd.h, micro_gemm.h) and kernel files put their code between
// ATTNLAB_TARGET_BEGIN and ATTNLAB_TARGET_END, inside namespace attnlab::ATTNLAB_TARGET_NS, AFTER
// all their #includes. Why both: the pragma gives exactly that code the target's instruction
// set (std:: templates and the shared inline helpers stay baseline code, so the linker can never
// pick an AVX-512 copy of an inline function for a caller on an AVX2 machine), and the namespace
// gives each target's code its own symbols (no ODR clash between the copies).
#ifndef ATTNLAB_ENGINE_TARGET_H_
#define ATTNLAB_ENGINE_TARGET_H_

// Target ids, as in attnlab::SimdTarget.
#define ATTNLAB_TARGET_ID_BASELINE 0
#define ATTNLAB_TARGET_ID_AVX2 1
#define ATTNLAB_TARGET_ID_AVX512 2

#if !defined(ATTNLAB_TARGET) || ATTNLAB_TARGET == ATTNLAB_TARGET_ID_BASELINE
#define ATTNLAB_TARGET_NS baseline
#define ATTNLAB_TARGET_BEGIN
#define ATTNLAB_TARGET_END
// The baseline's vector width follows the build's flags (x86-64-v2: 16-byte SSE vectors).
#if defined(__AVX512F__)
#define ATTNLAB_TARGET_BYTES 64
#elif defined(__AVX2__) && defined(__FMA__)
#define ATTNLAB_TARGET_BYTES 32
#else
#define ATTNLAB_TARGET_BYTES 16
#endif
// The targets ADD instruction sets to the build's own flags (not "arch=x86-64-v3", which would
// replace them: under -march=native the intrinsics then carry more ISA than the region and
// cannot be inlined into it). With the default x86-64-v2 baseline, avx2 is exactly x86-64-v3 and
// avx512 exactly x86-64-v4.
#elif ATTNLAB_TARGET == ATTNLAB_TARGET_ID_AVX2
#define ATTNLAB_TARGET_NS avx2
#define ATTNLAB_TARGET_BYTES 32
#if defined(__clang__)
#define ATTNLAB_TARGET_BEGIN                                                                  \
  _Pragma("clang attribute push(__attribute__((target(\"avx,avx2,fma,f16c,bmi,bmi2,lzcnt,movbe\"))), apply_to = function)")
#define ATTNLAB_TARGET_END _Pragma("clang attribute pop")
#else
#define ATTNLAB_TARGET_BEGIN \
  _Pragma("GCC push_options") _Pragma("GCC target(\"avx,avx2,fma,f16c,bmi,bmi2,lzcnt,movbe\")")
#define ATTNLAB_TARGET_END _Pragma("GCC pop_options")
#endif
#elif ATTNLAB_TARGET == ATTNLAB_TARGET_ID_AVX512
#define ATTNLAB_TARGET_NS avx512
#define ATTNLAB_TARGET_BYTES 64
#if defined(__clang__)
#define ATTNLAB_TARGET_BEGIN                                                                  \
  _Pragma("clang attribute push(__attribute__((target(\"avx,avx2,fma,f16c,bmi,bmi2,lzcnt,movbe,avx512f,avx512bw,avx512cd,avx512dq,avx512vl\"))), apply_to = function)")
#define ATTNLAB_TARGET_END _Pragma("clang attribute pop")
#else
// 512-bit vectors wherever the code asks for them.
#define ATTNLAB_TARGET_BEGIN                                                                  \
  _Pragma("GCC push_options")                                                                 \
      _Pragma("GCC target(\"avx,avx2,fma,f16c,bmi,bmi2,lzcnt,movbe,avx512f,avx512bw,avx512cd,avx512dq,avx512vl\")") \
          _Pragma("GCC target(\"prefer-vector-width=512\")")
#define ATTNLAB_TARGET_END _Pragma("GCC pop_options")
#endif
#else
#error "unknown ATTNLAB_TARGET"
#endif

// True where the instructions of that width are enabled in this code. Use these, not __AVX2__
// and friends: GCC's target pragma does not define the ISA macros inside the region (the
// intrinsics themselves are declared by <immintrin.h> for every ISA and usable there).
#define ATTNLAB_TARGET_IS_AVX512 (ATTNLAB_TARGET_BYTES == 64)
#define ATTNLAB_TARGET_IS_AVX2 (ATTNLAB_TARGET_BYTES == 32)
// F16C (vcvtph2ps) is part of x86-64-v3 and v4; a baseline build has it when its flags say so.
#if defined(ATTNLAB_TARGET) && ATTNLAB_TARGET != ATTNLAB_TARGET_ID_BASELINE
#define ATTNLAB_TARGET_HAS_F16C 1
#elif defined(__F16C__)
#define ATTNLAB_TARGET_HAS_F16C 1
#else
#define ATTNLAB_TARGET_HAS_F16C 0
#endif

#endif  // ATTNLAB_ENGINE_TARGET_H_
