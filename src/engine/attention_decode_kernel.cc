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
#include <vector>

#include "attnlab/attention_decode.h"
#include "engine/kernel_table.h"
#include "engine/simd.h"
#include "engine/simd_load.h"
#include "engine/target.h"

ATTNLAB_TARGET_BEGIN
namespace attnlab::ATTNLAB_TARGET_NS {
namespace {

using simd::VecF;
using simd_load::LoadBF16;
using simd_load::LoadF16;
using simd_load::LoadF32;
using simd_load::Sum;
using simd_load::Sum8;
constexpr int kL = simd::kLanes;
constexpr int64_t kBlock = 64;  // keys per online-softmax block
// Software prefetch distance in keys: 2 blocks ahead, 32 KiB of f32 K and V rows each at D = 64.
constexpr int64_t kAhead = 2 * kBlock;

// Rows to ask for while scoring: K and V rows [j + kAhead, j + kAhead + 8) of the keys at k and
// v (row strides ks, vs) for the 8-key step at j, while j + kAhead + i < end. The requests go to
// L2 (prefetcht1) and are spread over the score loop, 8 rows per step (a burst of a whole
// block's requests into L1, what this kernel did first, stalled on the L1 miss buffers).
// Until 2026-12-07 no build had these instructions (see Step): the Zen 4 gains of 2026-12-02
// credited to them (docs/PERFORMANCE.md) came from dropping the burst. With them, on Sapphire
// Rapids, 2 threads, KV 32k x 12 heads x D 64 from DRAM: bf16 and fp16 steps 10-20% faster
// (1.7-1.9x the f32 step, was 1.3-1.6x), f32 unchanged within the noise; LLC-resident steps pay
// for the extra instructions (f32 up to 25% slower warm). 128 keys ahead measured no worse than
// 256 or 384 for the 16-bit rows.
template <typename T>
struct RowPrefetch {
  const T* k = nullptr;
  const T* v = nullptr;
  int64_t ks = 0, vs = 0, end = 0;  // end: rows available from k and v

  // always_inline: GCC 12's interprocedural analysis treats a function whose only effects are
  // prefetches as having none, and deletes the call when it is not inlined: every build of this
  // kernel before 2026-12-07 (attnlab's own binary at -O2 and -O3) had no prefetch instruction
  // (objdump -d | grep prefetcht1). Inlined, the prefetches stay.
  __attribute__((always_inline)) inline void Step(int64_t j, int64_t D) const {
    if (!k) return;
    const int64_t r1 = std::min(end, j + kAhead + 8);
    for (int64_t r = j + kAhead; r < r1; ++r) {
      const char* kr = reinterpret_cast<const char*>(k + r * ks);
      const char* vr = reinterpret_cast<const char*>(v + r * vs);
      for (int64_t off = 0; off < D * static_cast<int64_t>(sizeof(T)); off += 64) {
        __builtin_prefetch(kr + off, 0, 2);
        __builtin_prefetch(vr + off, 0, 2);
      }
    }
  }
};

// The leading columns [0, PairEnd) that Ld reads in (even | odd) pairs (LoadBF16::Pair): q
// and the accumulators are kept permuted there, in groups of 2 kL; the rest in column order.
template <typename Ld>
constexpr int64_t PairEnd(int64_t D) {
  return Ld::kPairs ? D / (2 * kL) * (2 * kL) : 0;
}

// dst = src with each group of 2 kL columns below PairEnd split into its even and odd columns
// (dst[g + i] = src[g + 2i], dst[g + kL + i] = src[g + 2i + 1]); Unpermute is the inverse.
inline void PermutePairs(const float* src, int64_t D, int64_t pair_end, float* dst) {
  for (int64_t g = 0; g < pair_end; g += 2 * kL) {
    for (int i = 0; i < kL; ++i) {
      dst[g + i] = src[g + 2 * i];
      dst[g + kL + i] = src[g + 2 * i + 1];
    }
  }
  std::copy(src + pair_end, src + D, dst + pair_end);
}
inline void UnpermutePairs(float* x, int64_t pair_end) {
  float t[2 * kL];
  for (int64_t g = 0; g < pair_end; g += 2 * kL) {
    for (int i = 0; i < kL; ++i) {
      t[2 * i] = x[g + i];
      t[2 * i + 1] = x[g + kL + i];
    }
    std::copy(t, t + 2 * kL, x + g);
  }
}

// acc += q . row over the vector columns [0, Dv) (pairs below PairEnd, q permuted there).
template <typename Ld>
inline VecF DotVec(const float* q, const typename Ld::T* row, int64_t Dp, int64_t Dv, VecF acc) {
  int64_t d = 0;
  if constexpr (Ld::kPairs) {
    for (; d < Dp; d += 2 * kL) {
      VecF e, o;
      Ld::Pair(row + d, &e, &o);
      acc += simd::Load(q + d) * e;
      acc += simd::Load(q + d + kL) * o;
    }
  }
  for (; d < Dv; d += kL) acc += simd::Load(q + d) * Ld::Vec(row + d);
  return acc;
}

// out[j] = q . k_j for the nb keys at kb (row stride ks), 8 keys at a time: each q vector is
// loaded once per 8 keys, and the 8 dot products finish together (Sum8). pf (rows relative to
// kb) is asked for along the way. q is permuted below PairEnd<Ld>(D).
template <typename Ld>
inline void ScoreRow(const float* q, const typename Ld::T* kb, int64_t ks, int64_t nb, int64_t D,
                     float* out, const RowPrefetch<typename Ld::T>& pf) {
  const int64_t Dv = D / kL * kL, Dp = PairEnd<Ld>(D);
  int64_t j = 0;
  for (; j + 8 <= nb; j += 8) {
    pf.Step(j, D);
    VecF acc[8];
    for (int i = 0; i < 8; ++i) acc[i] = simd::Zero();
    int64_t d = 0;
    if constexpr (Ld::kPairs) {
      for (; d < Dp; d += 2 * kL) {
        const VecF qe = simd::Load(q + d), qo = simd::Load(q + d + kL);
#pragma GCC unroll 8
        for (int i = 0; i < 8; ++i) {
          VecF e, o;
          Ld::Pair(kb + (j + i) * ks + d, &e, &o);
          acc[i] += qe * e;
          acc[i] += qo * o;
        }
      }
    }
    for (; d < Dv; d += kL) {
      const VecF qv = simd::Load(q + d);
#pragma GCC unroll 8
      for (int i = 0; i < 8; ++i) acc[i] += qv * Ld::Vec(kb + (j + i) * ks + d);
    }
    Sum8(acc, out + j);
    for (int i = 0; i < 8; ++i) {
      for (int64_t d = Dv; d < D; ++d) out[j + i] += q[d] * Ld::One(kb + (j + i) * ks + d);
    }
  }
  if (j < nb) pf.Step(j, D);
  for (; j < nb; ++j) {
    float dot = Sum(DotVec<Ld>(q, kb + j * ks, Dp, Dv, simd::Zero()));
    for (int64_t d = Dv; d < D; ++d) dot += q[d] * Ld::One(kb + j * ks + d);
    out[j] = dot;
  }
}

// acc[0, NV * kL) = alpha acc + sum_j p[j] v_j[0, NV * kL) over the nb value rows at vb (row
// stride vs): the accumulators stay in registers across the keys. With kPairs the NV vectors
// are NV / 2 (even | odd) pairs (Ld::Pair) and acc is in that order.
template <typename Ld, int NV, bool kPairs>
inline void AccumulateColumns(const typename Ld::T* vb, int64_t vs, int64_t nb, const float* p,
                              float alpha, float* acc) {
  static_assert(!kPairs || (Ld::kPairs && NV % 2 == 0));
  VecF r[NV];
  const VecF av = simd::Set1(alpha);
#pragma GCC unroll 4
  for (int i = 0; i < NV; ++i) r[i] = simd::Load(acc + i * kL) * av;
  for (int64_t j = 0; j < nb; ++j) {
    const VecF pj = simd::Set1(p[j]);
    if constexpr (kPairs) {
#pragma GCC unroll 2
      for (int i = 0; i < NV; i += 2) {
        VecF e, o;
        Ld::Pair(vb + j * vs + i * kL, &e, &o);
        r[i] += pj * e;
        r[i + 1] += pj * o;
      }
    } else {
#pragma GCC unroll 4
      for (int i = 0; i < NV; ++i) r[i] += pj * Ld::Vec(vb + j * vs + i * kL);
    }
  }
#pragma GCC unroll 4
  for (int i = 0; i < NV; ++i) simd::Store(acc + i * kL, r[i]);
}

// acc[0, D) = alpha acc + sum_j p[j] v_j, in column blocks of up to 4 vectors (acc permuted
// below PairEnd<Ld>(D)).
template <typename Ld>
inline void AccumulateRow(const typename Ld::T* vb, int64_t vs, int64_t nb, int64_t D,
                          const float* p, float alpha, float* acc) {
  const int64_t Dv = D / kL * kL, Dp = PairEnd<Ld>(D);
  if constexpr (Ld::kPairs) {
    for (int64_t d0 = 0; d0 < Dp; d0 += 4 * kL) {
      if (Dp - d0 >= 4 * kL) {
        AccumulateColumns<Ld, 4, true>(vb + d0, vs, nb, p, alpha, acc + d0);
      } else {
        AccumulateColumns<Ld, 2, true>(vb + d0, vs, nb, p, alpha, acc + d0);
      }
    }
  }
  for (int64_t d0 = Dp; d0 < Dv; d0 += 4 * kL) {
    switch (std::min<int64_t>(4, (Dv - d0) / kL)) {
      case 4: AccumulateColumns<Ld, 4, false>(vb + d0, vs, nb, p, alpha, acc + d0); break;
      case 3: AccumulateColumns<Ld, 3, false>(vb + d0, vs, nb, p, alpha, acc + d0); break;
      case 2: AccumulateColumns<Ld, 2, false>(vb + d0, vs, nb, p, alpha, acc + d0); break;
      default: AccumulateColumns<Ld, 1, false>(vb + d0, vs, nb, p, alpha, acc + d0); break;
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
  // q rows in the order the keys are read (permuted below Dp; a.q itself when Dp = 0).
  const int64_t Dp = PairEnd<Ld>(D);
  std::vector<float> q_perm(Dp > 0 ? G * D : 0);
  for (int64_t g = 0; Dp > 0 && g < G; ++g) {
    PermutePairs(a.q + (hk * G + g) * D, D, Dp, q_perm.data() + g * D);
  }
  const float* q = Dp > 0 ? q_perm.data() : a.q + hk * G * D;
  for (int64_t b0 = t0; b0 < t1; b0 += kBlock) {
    const int64_t nb = std::min(kBlock, t1 - b0);
    // Scores (each head against the block's keys; the block stays in L1 across heads). The
    // first head's pass asks for the rows kAhead keys on.
    const T* kb = kbase + b0 * a.k->stride_token;
    const T* vb = vbase + b0 * a.v->stride_token;
    const RowPrefetch<T> pf{kb, vb, a.k->stride_token, a.v->stride_token, t1 - b0};
    for (int64_t g = 0; g < G; ++g) {
      ScoreRow<Ld>(q + g * D, kb, a.k->stride_token, nb, D, sc + g * kBlock,
                   g == 0 ? pf : RowPrefetch<T>{});
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
      AccumulateRow<Ld>(vb, a.v->stride_token, nb, D,
                        sc + g * kBlock, alpha[g], part + g * P + 2);
    }
  }
  for (int64_t g = 0; g < G; ++g) {
    part[g * P] = m[g];
    part[g * P + 1] = l[g];
    UnpermutePairs(part + g * P + 2, Dp);
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
