// Per-target helpers shared by the kernels that read stored fp32 / bf16 / fp16 rows (the decode
// kernel's keys and values, the weight products' matrix rows): vector loads that widen each
// format to fp32, and horizontal sums. Like simd.h, a per-target header (engine/target.h):
// include it only from *_kernel.cc files, after simd.h.
//
// GCC 12's AVX-512 headers start some intrinsics (_mm512_cvtph_ps, _mm512_cvtepu16_epi32, ...)
// from _mm512_undefined_*(), which its middle end then reports as -Wmaybe-uninitialized once
// inlined: a kernel file that includes this header disables that warning before its includes
// (GCC bug 105593, fixed in GCC 13).
#ifndef ATTNLAB_ENGINE_SIMD_LOAD_H_
#define ATTNLAB_ENGINE_SIMD_LOAD_H_

#include <bit>
#include <cstdint>
#include <cstring>

#include "attnlab/attention_decode.h"  // Bf16ToFloat, F16ToFloat
#include "engine/simd.h"
#include "engine/target.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

ATTNLAB_TARGET_BEGIN
namespace attnlab::ATTNLAB_TARGET_NS::simd_load {

using simd::VecF;
constexpr int kL = simd::kLanes;

// Loads of kL consecutive elements (or one) as fp32. The 16-bit formats convert with vector
// instructions on every x86 target: bf16 is the top half of an fp32 (zero-extend to 32 bits,
// shift left 16: SSE4.1 pmovzxwd, AVX2 vpmovzxwd, AVX-512 vpmovzxwd zmm); fp16 uses F16C's
// vcvtph2ps (x86-64-v3 and up), or, without F16C, integer vector arithmetic.
typedef uint16_t VecU16 __attribute__((vector_size(ATTNLAB_TARGET_BYTES / 2)));

struct LoadF32 {
  using T = float;
  static constexpr bool kPairs = false;
  static VecF Vec(const float* p) { return simd::Load(p); }
  static float One(const float* p) { return *p; }
};
struct LoadBF16 {
  using T = uint16_t;
  static VecF Vec(const uint16_t* p) {
#if ATTNLAB_TARGET_IS_AVX512
    const __m512i i = _mm512_slli_epi32(
        _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))), 16);
    return reinterpret_cast<VecF>(_mm512_castsi512_ps(i));
#elif ATTNLAB_TARGET_IS_AVX2
    const __m256i i = _mm256_slli_epi32(
        _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))), 16);
    return reinterpret_cast<VecF>(_mm256_castsi256_ps(i));
#else
    VecU16 h;
    std::memcpy(&h, p, sizeof h);
    const simd::VecI i = __builtin_convertvector(h, simd::VecI) << 16;
    VecF f;
    std::memcpy(&f, &i, sizeof f);
    return f;
#endif
  }
  static float One(const uint16_t* p) { return Bf16ToFloat(*p); }
  // 2 kL consecutive values in a permuted order, one integer operation per kL values: read as
  // kL 32-bit lanes, each lane's top half is the odd element (a float once the bottom half is
  // cleared) and its bottom half the even one (shifted up). even[i] = p[2i], odd[i] = p[2i + 1].
  // A dot product or an accumulation whose other operand is kept in the same (even | odd) order
  // needs no shuffle: Vec's widening (vpmovzxwd) and shift become a mask or a shift per vector.
  static constexpr bool kPairs = true;
  static void Pair(const uint16_t* p, VecF* even, VecF* odd) {
    static_assert(std::endian::native == std::endian::little, "Pair reads lanes little-endian");
    simd::VecI x;
    std::memcpy(&x, p, sizeof x);
    const simd::VecI e = x << 16, o = x & static_cast<int32_t>(0xffff0000u);
    std::memcpy(even, &e, sizeof e);
    std::memcpy(odd, &o, sizeof o);
  }
};
struct LoadF16 {
  using T = uint16_t;
  static constexpr bool kPairs = false;
  static VecF Vec(const uint16_t* p) {
#if ATTNLAB_TARGET_IS_AVX512
    return reinterpret_cast<VecF>(
        _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))));
#elif ATTNLAB_TARGET_IS_AVX2 && ATTNLAB_TARGET_HAS_F16C
    return reinterpret_cast<VecF>(
        _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
#elif ATTNLAB_TARGET_BYTES == 16 && ATTNLAB_TARGET_HAS_F16C
    return reinterpret_cast<VecF>(_mm_cvtph_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
#else
    // No F16C (the x86-64-v2 baseline, other architectures): widen in integer vector arithmetic
    // (F. Giesen's branch-free half -> float). Exponent and mantissa move into place and the
    // exponent is rebiased (+112); Inf/NaN get the rest of the way to 255 (+112 more); zero and
    // subnormal halves become 2^-14 (1 + m/1024) and lose 2^-14 in one exact float subtraction.
    using simd::VecI;
    VecU16 h;
    std::memcpy(&h, p, sizeof h);
    const VecI x = __builtin_convertvector(h, VecI);
    constexpr int32_t kExpMask = 0x7c00 << 13;
    VecI o = (x & 0x7fff) << 13;
    const VecI e = o & kExpMask;
    const VecI sub = e == 0;  // -1 where zero or subnormal
    o += (127 - 15) << 23;
    o += (e == kExpMask) & ((128 - 16) << 23);
    o += sub & (1 << 23);
    VecF f;
    std::memcpy(&f, &o, sizeof f);
    f = sub ? f - simd::Set1(6.103515625e-05f) : f;  // 2^-14
    VecI bits;
    std::memcpy(&bits, &f, sizeof bits);
    bits |= (x & 0x8000) << 16;
    std::memcpy(&f, &bits, sizeof f);
    return f;
#endif
  }
  static float One(const uint16_t* p) { return F16ToFloat(*p); }
};

// Horizontal sum as a shuffle tree (the generic ReduceSum is a serial chain of kL - 1 adds).
inline float Sum(VecF v) {
#if ATTNLAB_TARGET_IS_AVX512
  return _mm512_reduce_add_ps(reinterpret_cast<__m512>(v));
#elif ATTNLAB_TARGET_IS_AVX2
  const __m256 x = reinterpret_cast<__m256>(v);
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
#else
  return simd::ReduceSum(v);
#endif
}

// out[i] = the sum of the lanes of a[i], i < 8: a transpose-and-add tree (8 keys' dot products
// finished in 9 instructions on AVX2, instead of a horizontal sum per key).
inline void Sum8(const VecF* a, float* out) {
#if ATTNLAB_TARGET_IS_AVX512 || ATTNLAB_TARGET_IS_AVX2
  __m256 h[8];
  for (int i = 0; i < 8; ++i) {
#if ATTNLAB_TARGET_IS_AVX512
    const __m512 x = reinterpret_cast<__m512>(a[i]);
    h[i] = _mm256_add_ps(_mm512_castps512_ps256(x),
                         _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1)));
#else
    h[i] = reinterpret_cast<__m256>(a[i]);
#endif
  }
  // hadd pairs within 128-bit halves: u0 = [sums of h0..h3 over lanes 0-3 | over lanes 4-7].
  const __m256 t0 = _mm256_hadd_ps(h[0], h[1]), t1 = _mm256_hadd_ps(h[2], h[3]);
  const __m256 t2 = _mm256_hadd_ps(h[4], h[5]), t3 = _mm256_hadd_ps(h[6], h[7]);
  const __m256 u0 = _mm256_hadd_ps(t0, t1), u1 = _mm256_hadd_ps(t2, t3);
  const __m256 r = _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20),
                                 _mm256_permute2f128_ps(u0, u1, 0x31));
  _mm256_storeu_ps(out, r);
#elif ATTNLAB_TARGET_BYTES == 16 && defined(__SSE3__)
  for (int g = 0; g < 8; g += 4) {
    const __m128 t0 = _mm_hadd_ps(reinterpret_cast<__m128>(a[g]), reinterpret_cast<__m128>(a[g + 1]));
    const __m128 t1 =
        _mm_hadd_ps(reinterpret_cast<__m128>(a[g + 2]), reinterpret_cast<__m128>(a[g + 3]));
    _mm_storeu_ps(out + g, _mm_hadd_ps(t0, t1));
  }
#else
  for (int i = 0; i < 8; ++i) out[i] = simd::ReduceSum(a[i]);
#endif
}

}  // namespace attnlab::ATTNLAB_TARGET_NS::simd_load
ATTNLAB_TARGET_END

#endif  // ATTNLAB_ENGINE_SIMD_LOAD_H_
