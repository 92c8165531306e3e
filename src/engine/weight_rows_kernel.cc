// The few-row weight product's task body (engine/weight_gemm.cc's MatmulWeightT for N up to
// kWeightRowsMaxN, e.g. one decoded token), compiled once per SIMD target (engine/target.h).
// With one to four input rows a product is a matrix-vector product bound by reading the
// weights: each stored row (fp32, bf16, fp16 or Q8_0) is widened in registers and multiplied
// straight away, so a 16-bit or quantized matrix is read once, in its stored size, instead of
// being widened to fp32 in memory and read again by an sgemm.
//
// Rows go 8 at a time: each x vector is loaded once per 8 rows and the 8 dot products finish
// together (simd_load.h's Sum8), as in the decode kernel's scores. Each y element is one row's
// dot product in a fixed order, whatever the task split: results do not depend on the thread
// count.
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ < 13
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // GCC bug 105593: see simd_load.h
#endif
#include <algorithm>
#include <cstdint>
#include <cstring>

#include "attnlab/attention_decode.h"
#include "engine/kernel_table.h"
#include "engine/simd.h"
#include "engine/simd_load.h"
#include "engine/target.h"

ATTNLAB_TARGET_BEGIN
namespace attnlab::ATTNLAB_TARGET_NS {
namespace {

using simd::VecF;
using simd_load::Sum;
using simd_load::Sum8;
constexpr int kL = simd::kLanes;
typedef int8_t VecI8 __attribute__((vector_size(simd::kLanes)));

// kL int8 at p as floats: sign-extend and convert (pmovsxbd + cvtdq2ps; GCC 12 scalarises the
// generic __builtin_convertvector from int8 lanes, so x86 targets say it explicitly).
inline VecF LoadI8(const uint8_t* p) {
#if ATTNLAB_TARGET_IS_AVX512
  return reinterpret_cast<VecF>(_mm512_cvtepi32_ps(
      _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)))));
#elif ATTNLAB_TARGET_IS_AVX2
  return reinterpret_cast<VecF>(_mm256_cvtepi32_ps(
      _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)))));
#elif ATTNLAB_TARGET_BYTES == 16 && defined(__SSE4_1__)
  int32_t four;
  std::memcpy(&four, p, 4);
  return reinterpret_cast<VecF>(_mm_cvtepi32_ps(_mm_cvtepi8_epi32(_mm_cvtsi32_si128(four))));
#else
  VecI8 q;
  std::memcpy(&q, p, sizeof q);
  return __builtin_convertvector(q, VecF);
#endif
}

// Rows of fp32 / bf16 / fp16 elements (simd_load.h's loaders).
template <typename Ld>
void DotRows(const internal::WeightRowsArgs& a, int64_t r0, int64_t r1) {
  using T = typename Ld::T;
  const int64_t K = a.K, Kv = K / kL * kL;
  auto row = [&](int64_t r) { return reinterpret_cast<const T*>(a.w + r * a.row_bytes); };
  for (int64_t i = 0; i < a.N; ++i) {
    const float* x = a.x + i * K;
    float* y = a.y + i * a.ldy;
    int64_t r = r0;
    for (; r + 8 <= r1; r += 8) {
      const T* w[8];
      for (int j = 0; j < 8; ++j) w[j] = row(r + j);
      VecF acc[8];
      for (int j = 0; j < 8; ++j) acc[j] = simd::Zero();
      for (int64_t k = 0; k < Kv; k += kL) {
        const VecF xv = simd::Load(x + k);
#pragma GCC unroll 8
        for (int j = 0; j < 8; ++j) acc[j] += xv * Ld::Vec(w[j] + k);
      }
      Sum8(acc, y + r);
      for (int j = 0; j < 8; ++j) {
        for (int64_t k = Kv; k < K; ++k) y[r + j] += x[k] * Ld::One(w[j] + k);
      }
    }
    for (; r < r1; ++r) {
      const T* w = row(r);
      VecF acc = simd::Zero();
      for (int64_t k = 0; k < Kv; k += kL) acc += simd::Load(x + k) * Ld::Vec(w + k);
      float s = Sum(acc);
      for (int64_t k = Kv; k < K; ++k) s += x[k] * Ld::One(w + k);
      y[r] = s;
    }
  }
}

// Rows of Q8_0 blocks: per block, acc += (d q) x, the scale folded into the widened quants.
constexpr int64_t kQ8Block = 32, kQ8Bytes = 34;

inline float Q8Scale(const uint8_t* b) {
  uint16_t h;
  std::memcpy(&h, b, 2);
#if ATTNLAB_TARGET_HAS_F16C
  return _cvtsh_ss(h);
#else
  return F16ToFloat(h);
#endif
}

void DotRowsQ8_0(const internal::WeightRowsArgs& a, int64_t r0, int64_t r1) {
  const int64_t nb = a.K / kQ8Block;
  for (int64_t i = 0; i < a.N; ++i) {
    const float* x = a.x + i * a.K;
    float* y = a.y + i * a.ldy;
    int64_t r = r0;
    for (; r + 8 <= r1; r += 8) {
      VecF acc[8];
      for (int j = 0; j < 8; ++j) acc[j] = simd::Zero();
      for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* blk[8];
        VecF d[8];
        for (int j = 0; j < 8; ++j) {
          blk[j] = a.w + (r + j) * a.row_bytes + b * kQ8Bytes;
          d[j] = simd::Set1(Q8Scale(blk[j]));
        }
        for (int64_t v = 0; v < kQ8Block; v += kL) {
          const VecF xv = simd::Load(x + b * kQ8Block + v);
#pragma GCC unroll 8
          for (int j = 0; j < 8; ++j) acc[j] += (d[j] * LoadI8(blk[j] + 2 + v)) * xv;
        }
      }
      Sum8(acc, y + r);
    }
    for (; r < r1; ++r) {
      VecF acc = simd::Zero();
      for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* blk = a.w + r * a.row_bytes + b * kQ8Bytes;
        const VecF d = simd::Set1(Q8Scale(blk));
        for (int64_t v = 0; v < kQ8Block; v += kL) {
          acc += (d * LoadI8(blk + 2 + v)) * simd::Load(x + b * kQ8Block + v);
        }
      }
      y[r] = Sum(acc);
    }
  }
}

template <typename Ld>
void WidenT(const internal::WeightRowsArgs& a, int64_t rows, float* out) {
  using T = typename Ld::T;
  const int64_t K = a.K, Kv = K / kL * kL;
  for (int64_t r = 0; r < rows; ++r) {
    const T* w = reinterpret_cast<const T*>(a.w + r * a.row_bytes);
    float* o = out + r * K;
    for (int64_t k = 0; k < Kv; k += kL) simd::Store(o + k, Ld::Vec(w + k));
    for (int64_t k = Kv; k < K; ++k) o[k] = Ld::One(w + k);
  }
}

void WidenQ8_0(const internal::WeightRowsArgs& a, int64_t rows, float* out) {
  const int64_t nb = a.K / kQ8Block;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* blk = a.w + r * a.row_bytes + b * kQ8Bytes;
      const VecF d = simd::Set1(Q8Scale(blk));
      float* o = out + r * a.K + b * kQ8Block;
      for (int64_t v = 0; v < kQ8Block; v += kL) simd::Store(o + v, d * LoadI8(blk + 2 + v));
    }
  }
}

}  // namespace

void WidenRows(const internal::WeightRowsArgs& a, int64_t rows, float* out) {
  if (a.q8_0) return WidenQ8_0(a, rows, out);
  switch (a.dtype) {
    case KvDtype::kF32: return WidenT<simd_load::LoadF32>(a, rows, out);
    case KvDtype::kBF16: return WidenT<simd_load::LoadBF16>(a, rows, out);
    case KvDtype::kF16: return WidenT<simd_load::LoadF16>(a, rows, out);
  }
}

void WeightRowsTask(const internal::WeightRowsArgs& a, int64_t r0, int64_t r1) {
  if (a.q8_0) return DotRowsQ8_0(a, r0, r1);
  switch (a.dtype) {
    case KvDtype::kF32: return DotRows<simd_load::LoadF32>(a, r0, r1);
    case KvDtype::kBF16: return DotRows<simd_load::LoadBF16>(a, r0, r1);
    case KvDtype::kF16: return DotRows<simd_load::LoadF16>(a, r0, r1);
  }
}

}  // namespace attnlab::ATTNLAB_TARGET_NS
ATTNLAB_TARGET_END
