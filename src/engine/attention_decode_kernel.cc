// The decode kernel's task body (attention_decode.cc states the algorithm and owns the entry
// point), compiled once per SIMD target (engine/target.h, engine/kernel_table.h).
//
// GCC 12's AVX-512 headers start some intrinsics (_mm512_cvtph_ps, _mm512_cvtepu16_epi32, ...)
// from _mm512_undefined_*(), which its middle end then reports as -Wmaybe-uninitialized once
// inlined here (GCC bug 105593, fixed in GCC 13). The pragma must precede the includes: the
// warning's location is inside the header.
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ < 13
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "attnlab/attention_decode.h"
#include "engine/kernel_table.h"
#include "engine/simd.h"
#include "engine/target.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

ATTNLAB_TARGET_BEGIN
namespace attnlab::ATTNLAB_TARGET_NS {
namespace {

using simd::VecF;
constexpr int kL = simd::kLanes;
constexpr int64_t kBlock = 64;  // keys per online-softmax block
// Prefetch distance in blocks: 2 blocks = 16 KiB of 16-bit K and V rows (D = 64) in flight.
constexpr int64_t kAhead = 2;

// Loads of kL consecutive elements (or one) as fp32. The 16-bit formats convert with vector
// instructions on every x86 target: bf16 is the top half of an fp32 (zero-extend to 32 bits,
// shift left 16: SSE4.1 pmovzxwd, AVX2 vpmovzxwd, AVX-512 vpmovzxwd zmm); fp16 uses F16C's
// vcvtph2ps (x86-64-v3 and up), or, without F16C, integer vector arithmetic.
typedef uint16_t VecU16 __attribute__((vector_size(ATTNLAB_TARGET_BYTES / 2)));

struct LoadF32 {
  using T = float;
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
};
struct LoadF16 {
  using T = uint16_t;
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

// out[j] = q . k_j for the nb keys at kb (row stride ks), 8 keys at a time: each q vector is
// loaded once per 8 keys, and the 8 dot products finish together (Sum8).
template <typename Ld>
inline void ScoreRow(const float* q, const typename Ld::T* kb, int64_t ks, int64_t nb, int64_t D,
                     float* out) {
  const int64_t Dv = D / kL * kL;
  int64_t j = 0;
  for (; j + 8 <= nb; j += 8) {
    VecF acc[8];
    for (int i = 0; i < 8; ++i) acc[i] = simd::Zero();
    for (int64_t d = 0; d < Dv; d += kL) {
      const VecF qv = simd::Load(q + d);
#pragma GCC unroll 8
      for (int i = 0; i < 8; ++i) acc[i] += qv * Ld::Vec(kb + (j + i) * ks + d);
    }
    Sum8(acc, out + j);
    for (int i = 0; i < 8; ++i) {
      for (int64_t d = Dv; d < D; ++d) out[j + i] += q[d] * Ld::One(kb + (j + i) * ks + d);
    }
  }
  for (; j < nb; ++j) {
    VecF acc = simd::Zero();
    for (int64_t d = 0; d < Dv; d += kL) acc += simd::Load(q + d) * Ld::Vec(kb + j * ks + d);
    float dot = Sum(acc);
    for (int64_t d = Dv; d < D; ++d) dot += q[d] * Ld::One(kb + j * ks + d);
    out[j] = dot;
  }
}

// acc[0, NV * kL) = alpha acc + sum_j p[j] v_j[0, NV * kL) over the nb value rows at vb (row
// stride vs): the accumulators stay in registers across the keys.
template <typename Ld, int NV>
inline void AccumulateColumns(const typename Ld::T* vb, int64_t vs, int64_t nb, const float* p,
                              float alpha, float* acc) {
  VecF r[NV];
  const VecF av = simd::Set1(alpha);
#pragma GCC unroll 4
  for (int i = 0; i < NV; ++i) r[i] = simd::Load(acc + i * kL) * av;
  for (int64_t j = 0; j < nb; ++j) {
    const VecF pj = simd::Set1(p[j]);
#pragma GCC unroll 4
    for (int i = 0; i < NV; ++i) r[i] += pj * Ld::Vec(vb + j * vs + i * kL);
  }
#pragma GCC unroll 4
  for (int i = 0; i < NV; ++i) simd::Store(acc + i * kL, r[i]);
}

// acc[0, D) = alpha acc + sum_j p[j] v_j, in column blocks of up to 4 vectors.
template <typename Ld>
inline void AccumulateRow(const typename Ld::T* vb, int64_t vs, int64_t nb, int64_t D,
                          const float* p, float alpha, float* acc) {
  const int64_t Dv = D / kL * kL;
  for (int64_t d0 = 0; d0 < Dv; d0 += 4 * kL) {
    switch (std::min<int64_t>(4, (Dv - d0) / kL)) {
      case 4: AccumulateColumns<Ld, 4>(vb + d0, vs, nb, p, alpha, acc + d0); break;
      case 3: AccumulateColumns<Ld, 3>(vb + d0, vs, nb, p, alpha, acc + d0); break;
      case 2: AccumulateColumns<Ld, 2>(vb + d0, vs, nb, p, alpha, acc + d0); break;
      default: AccumulateColumns<Ld, 1>(vb + d0, vs, nb, p, alpha, acc + d0); break;
    }
  }
  for (int64_t d = Dv; d < D; ++d) {
    float x = acc[d] * alpha;
    for (int64_t j = 0; j < nb; ++j) x += p[j] * Ld::One(vb + j * vs + d);
    acc[d] = x;
  }
}

template <typename Ld>
void RunTask(const internal::DecodeArgs& a, int64_t hk, int64_t c) {
  using T = typename Ld::T;
  const DecodeShape& s = *a.s;
  const int64_t D = s.head_dim, G = s.heads_q / s.heads_kv;
  const int64_t t0 = c * a.chunk, t1 = std::min(s.len_k, t0 + a.chunk);
  const T* kbase = static_cast<const T*>(a.k->data) + hk * a.k->stride_head;
  const T* vbase = static_cast<const T*>(a.v->data) + hk * a.v->stride_head;
  const int64_t P = internal::DecodePartialSize(D);  // floats per query head's record
  float* part = a.partial + (hk * a.n_chunks + c) * G * P;
  // m, l per query head; acc rows in part.
  float m[64], l[64];  // G <= 64 checked by the caller (else it loops over groups of 64)
  for (int64_t g = 0; g < G; ++g) {
    m[g] = -std::numeric_limits<float>::infinity();
    l[g] = 0;
    std::fill(part + g * P + 2, part + (g + 1) * P, 0.0f);
  }
  alignas(64) float sc[64 * kBlock];  // s[g, j]
  for (int64_t b0 = t0; b0 < t1; b0 += kBlock) {
    const int64_t nb = std::min(kBlock, t1 - b0);
    // Ask for the next block's K and V rows now: the hardware prefetcher alone leaves a single
    // core's stream latency-bound, which hid the 16-bit formats' halved traffic.
    for (int64_t j = b0 + kAhead * kBlock; j < std::min(t1, b0 + (kAhead + 1) * kBlock); ++j) {
      const char* kr = reinterpret_cast<const char*>(kbase + j * a.k->stride_token);
      const char* vr = reinterpret_cast<const char*>(vbase + j * a.v->stride_token);
      for (int64_t off = 0; off < D * static_cast<int64_t>(sizeof(T)); off += 64) {
        __builtin_prefetch(kr + off);
        __builtin_prefetch(vr + off);
      }
    }
    // Scores (each head against the block's keys; the block stays in L1 across heads).
    for (int64_t g = 0; g < G; ++g) {
      ScoreRow<Ld>(a.q + (hk * G + g) * D, kbase + b0 * a.k->stride_token, a.k->stride_token, nb,
                   D, sc + g * kBlock);
    }
    // Online softmax update per query head.
    float alpha[64];
    for (int64_t g = 0; g < G; ++g) {
      float* sg = sc + g * kBlock;
      float bm = m[g];
      for (int64_t j = 0; j < nb; ++j) bm = std::max(bm, sg[j]);
      // All -inf (cannot happen with finite inputs): keep weights 0, avoid inf - inf.
      const float mn = std::isinf(bm) && bm < 0 ? 0.0f : bm;
      alpha[g] = simd::Exp2Scalar(m[g] - mn);
      int64_t j = 0;
      VecF sum = simd::Zero();
      for (; j + kL <= nb; j += kL) {
        const VecF p = simd::Exp2(simd::Load(sg + j) - simd::Set1(mn));
        simd::Store(sg + j, p);
        sum += p;
      }
      float tail = 0;
      for (; j < nb; ++j) {
        sg[j] = simd::Exp2Scalar(sg[j] - mn);
        tail += sg[j];
      }
      l[g] = l[g] * alpha[g] + simd::ReduceSum(sum) + tail;
      m[g] = bm;
    }
    // acc_g = alpha_g acc_g + sum_j p[g, j] v_j.
    for (int64_t g = 0; g < G; ++g) {
      AccumulateRow<Ld>(vbase + b0 * a.v->stride_token, a.v->stride_token, nb, D,
                        sc + g * kBlock, alpha[g], part + g * P + 2);
    }
  }
  for (int64_t g = 0; g < G; ++g) {
    part[g * P] = m[g];
    part[g * P + 1] = l[g];
  }
}

}  // namespace

void DecodeTask(const internal::DecodeArgs& a, int64_t hk, int64_t c) {
  switch (a.k->dtype) {
    case KvDtype::kF32: RunTask<LoadF32>(a, hk, c); return;
    case KvDtype::kBF16: RunTask<LoadBF16>(a, hk, c); return;
    case KvDtype::kF16: RunTask<LoadF16>(a, hk, c); return;
  }
}

}  // namespace attnlab::ATTNLAB_TARGET_NS
ATTNLAB_TARGET_END
