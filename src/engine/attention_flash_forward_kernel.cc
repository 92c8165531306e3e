// The flash forward's task body (attention_flash_forward.cc states the algorithm and owns the
// entry point), compiled once per SIMD target (engine/target.h, engine/kernel_table.h).
// Loops over tile lanes step by simd::kLanes; every tile width and d_pad is a multiple of 16.
#include <algorithm>
#include <cmath>
#include <limits>

#include "attnlab/attention.h"
#include "engine/attention_flash_common.h"
#include "engine/attention_mask.h"
#include "engine/kernel_table.h"
#include "engine/micro_gemm.h"
#include "engine/simd.h"
#include "engine/target.h"

ATTNLAB_TARGET_BEGIN
namespace attnlab::ATTNLAB_TARGET_NS {
namespace {

using internal::BlockClass;
using internal::CeilDiv;
using internal::ClassifyBlock;
using internal::FlashPlan;
using internal::kBlockK;
using internal::kLn2;
using internal::kLog2e;
using internal::kSubRows;
using internal::RoundUp;
using simd::VecF;

constexpr int kL = simd::kLanes;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Online softmax on a transposed tile st[j * kSubRows + r], j < nk keys, lanes r < width.
// Updates m, l, writes P^T into st and the per-row rescale factors into alpha.
inline void OnlineSoftmaxTile(int64_t nk, int64_t width, float* st, float* m, float* l, float* alpha) {
  const VecF ninf = simd::Set1(kNegInf);
  for (int64_t r = 0; r < width; r += kL) {
    const VecF m_old = simd::Load(m + r);
    VecF mx = m_old;
    for (int64_t j = 0; j < nk; ++j) mx = simd::Max(mx, simd::Load(st + j * kSubRows + r));
    // Rows with every key masked so far keep m = -inf; use 0 there so P = 2^-inf = 0.
    const VecF m_use = mx == ninf ? simd::Zero() : mx;
    VecF sum = simd::Zero();
    for (int64_t j = 0; j < nk; ++j) {
      float* p = st + j * kSubRows + r;
      const VecF e = simd::Exp2(simd::Load(p) - m_use);
      simd::Store(p, e);
      sum += e;
    }
    const VecF a = simd::Exp2(m_old - m_use);  // m_old = -inf gives 0
    simd::Store(alpha + r, a);
    simd::Store(l + r, simd::Load(l + r) * a + sum);
    simd::Store(m + r, mx);
  }
}

// Softpick's online step (attention.h), the analogue of OnlineSoftmaxTile: m holds the running
// max of the visible scores (log2 domain, -inf while none), the base is M = max(m, 0) and
// r = 2^(x - M) - 2^-M; P^T = max(r, 0) into st, l accumulates |r|, and a new base rescales l
// and Oacc by 2^(M_old - M) exactly as softmax's max does (e^-M (e^x - 1) scales the same way).
// Masked (-inf) entries add nothing.
inline void SoftpickTile(int64_t nk, int64_t width, float* st, float* m, float* l, float* alpha) {
  const VecF ninf = simd::Set1(kNegInf), zero = simd::Zero(), half = simd::Set1(0.5f);
  for (int64_t r = 0; r < width; r += kL) {
    const VecF m_old = simd::Load(m + r);
    VecF mx = m_old;
    for (int64_t j = 0; j < nk; ++j) mx = simd::Max(mx, simd::Load(st + j * kSubRows + r));
    const VecF base_old = simd::Max(m_old, zero), base = simd::Max(mx, zero);
    const VecF off = simd::Exp2(zero - base);
    VecF sum = zero;
    for (int64_t j = 0; j < nk; ++j) {
      float* p = st + j * kSubRows + r;
      const VecF x = simd::Load(p);
      // r = 2^-M (2^x - 1) near x = 0 (no cancellation), 2^(x - M) - 2^-M elsewhere.
      const VecF ax = simd::Max(x, zero - x);
      VecF t = ax <= half ? off * simd::Exp2m1Small(x) : simd::Exp2(x - base) - off;
      t = x == ninf ? zero : t;
      t = x == x ? t : x;  // a NaN score reaches l (the max and the engine's Exp2 drop NaN)
      simd::Store(p, simd::Max(t, zero));
      sum += simd::Max(t, zero - t);
    }
    const VecF a = simd::Exp2(base_old - base);
    simd::Store(alpha + r, a);
    simd::Store(l + r, simd::Load(l + r) * a + sum);
    simd::Store(m + r, mx);
  }
}

// Sigmoid step: P^T = sigmoid(S^T + bias), masked (-inf) entries exactly 0.
inline void SigmoidTile(int64_t nk, int64_t width, float* st, float bias) {
  const VecF b = simd::Set1(bias), nl2e = simd::Set1(-kLog2e), one = simd::Set1(1.0f);
  const VecF ninf = simd::Set1(kNegInf);
  for (int64_t j = 0; j < nk; ++j) {
    for (int64_t r = 0; r < width; r += kL) {
      float* p = st + j * kSubRows + r;
      const VecF x = simd::Load(p);
      const VecF y = one / (one + simd::Exp2((x + b) * nl2e));
      simd::Store(p, x == ninf ? simd::Zero() : y);
    }
  }
}

}  // namespace

void FlashForwardTask(const internal::FlashForwardArgs& a, int64_t task,
                      internal::FlashForwardBuffers& w) {
  const AttentionShape& s = *a.shape;
  const AttentionParams& params = *a.params;
  const AttentionMask& mask = params.mask;
  const FlashPlan& plan = a.plan;
  const int64_t D = s.head_dim, d_pad = plan.d_pad, group = plan.group;
  const int64_t chunk_idx = task % plan.n_chunks;
  const int64_t bh = task / plan.n_chunks;
  const int64_t b = bh / s.heads_kv, hk = bh % s.heads_kv;
  const int64_t i0 = chunk_idx * plan.chunk;
  const int64_t rows = std::min(plan.chunk, s.len_q - i0);
  const int64_t flat = group * rows;  // flat row f: head hk * group + f / rows, index i0 + f % rows
  const int64_t n_sub = CeilDiv(flat, kSubRows);

  // Pack Q^T (scaled) per sub-block, zero-padded; reset the running state.
  std::fill(w.qt.data(), w.qt.data() + n_sub * D * kSubRows, 0.0f);
  for (int64_t f = 0; f < flat; ++f) {
    const int64_t h = hk * group + f / rows, i = i0 + f % rows;
    w.row_h[f] = h;
    w.row_i[f] = i;
    const float* src = a.q->at(b, h, i);
    float* dst = w.qt.data() + (f / kSubRows) * D * kSubRows + f % kSubRows;
    for (int64_t d = 0; d < D; ++d) dst[d * kSubRows] = src[d] * a.qscale;
  }
  std::fill(w.oacc.data(), w.oacc.data() + n_sub * kSubRows * d_pad, 0.0f);
  std::fill(w.m.data(), w.m.data() + n_sub * kSubRows, kNegInf);
  std::fill(w.l.data(), w.l.data() + n_sub * kSubRows, 0.0f);

  const bool pack_v = D % 16 != 0;
  const internal::KeySpan span = internal::ChunkKeySpan(mask, s.len_q, s.len_k, i0, rows);
  for (int64_t k0 = 0; k0 < s.len_k; k0 += kBlockK) {
    const int64_t nk = std::min(kBlockK, s.len_k - k0);
    if (!span.Intersects(k0, nk)) continue;
    const float* kb = a.k->at(b, hk, k0);
    const float* vb = a.v->at(b, hk, k0);
    int64_t ldv = a.v->stride_token;
    if (pack_v) {
      internal::PackRowsPadded(*a.v, b, hk, k0, nk, D, d_pad, nk, w.vp.data());
      vb = w.vp.data();
      ldv = d_pad;
    }
    for (int64_t sb = 0; sb < n_sub; ++sb) {
      const int64_t f0 = sb * kSubRows, nr = std::min(kSubRows, flat - f0);
      const int64_t width = RoundUp(nr, 16);
      // Query indices covered: one head's [i_lo, i_hi] or, across heads, the whole chunk.
      const int64_t i_lo = f0 / rows == (f0 + nr - 1) / rows ? w.row_i[f0] : i0;
      const int64_t i_hi = f0 / rows == (f0 + nr - 1) / rows ? w.row_i[f0 + nr - 1] : i0 + rows - 1;
      const BlockClass cls =
          ClassifyBlock(mask, s.len_q, s.len_k, i_lo, i_hi - i_lo + 1, k0, nk);
      if (cls == BlockClass::kEmpty) continue;
      SmallGemm(nk, width, D, kb, a.k->stride_token,
                          w.qt.data() + sb * D * kSubRows, kSubRows, w.st.data(), kSubRows,
                          /*accumulate=*/false);
      if (cls == BlockClass::kPartial) {
        internal::MaskTileTransposed(mask, s, b, w.row_h.data() + f0, w.row_i.data() + f0, nr,
                                     k0, nk, w.st.data(), kSubRows);
      }
      float* oacc = w.oacc.data() + f0 * d_pad;
      if (a.sigmoid) {
        SigmoidTile(nk, width, w.st.data(), params.sigmoid_bias);
      } else {
        const auto tile = a.softpick ? SoftpickTile : OnlineSoftmaxTile;
        tile(nk, width, w.st.data(), w.m.data() + f0, w.l.data() + f0, w.alpha.data());
        for (int64_t r = 0; r < nr; ++r) {
          const float al = w.alpha[r];
          if (al == 1.0f) continue;
          const VecF av = simd::Set1(al);
          float* o = oacc + r * d_pad;
          for (int64_t c = 0; c < d_pad; c += kL) simd::Store(o + c, simd::Load(o + c) * av);
        }
      }
      // Oacc[rows x d_pad] += P [rows x keys] V [keys x d_pad]; P^T is column-major P.
      SmallGemm</*kAColMajor=*/true>(nr, d_pad, nk, w.st.data(), kSubRows, vb, ldv,
                                               oacc, d_pad, /*accumulate=*/true);
    }
  }

  // Normalise and store.
  for (int64_t f = 0; f < flat; ++f) {
    const int64_t h = w.row_h[f], i = w.row_i[f];
    float extra2 = kNegInf;  // the extra logit in the log2 domain, if the variant has one
    if (params.softmax == SoftmaxKind::kSoftmax1) extra2 = 0.0f;
    if (params.softmax == SoftmaxKind::kSinkLogit) extra2 = params.sink_logits[h] * kLog2e;
    const float m = w.m[f], l = w.l[f];
    float factor, lse;
    if (a.sigmoid) {
      factor = 1.0f;
      lse = 0.0f;
    } else if (a.softpick) {
      // Z = l + eps 2^-M (the shifted denominator); no visible key: m = -inf, zeros, lse -inf.
      // A NaN score makes l NaN (the max may have dropped it): that must reach the output.
      const float base = std::max(m, 0.0f);
      const float z = l + params.softpick_eps * std::exp2(-base);
      const bool none = m == kNegInf && !std::isnan(l);
      factor = none ? 0.0f : 1.0f / z;
      lse = none ? kNegInf : (base + std::log2(z)) * kLn2;
    } else if (extra2 == kNegInf) {
      // l = 0: every key masked (zeros, lse -inf). l NaN: a NaN score; it must reach the output.
      factor = l <= 0 ? 0.0f : 1.0f / l;
      lse = l <= 0 ? kNegInf : (m + std::log2(l)) * kLn2;
    } else {
      const float M = std::max(m, extra2);
      const float wm = m == kNegInf ? 0.0f : std::exp2(m - M);
      const float denom = l * wm + std::exp2(extra2 - M);
      factor = wm / denom;
      lse = (M + std::log2(denom)) * kLn2;
    }
    const float* o = w.oacc.data() + f * d_pad;
    float* dst = a.out->at(b, h, i);
    for (int64_t d = 0; d < D; ++d) dst[d] = o[d] * factor;
    if (a.lse) a.lse[(b * s.heads_q + h) * s.len_q + i] = lse;
  }
}


void DescribeTarget(int* lanes, int* tile_rows, int* tile_cols) {
  *lanes = simd::kLanes;
  *tile_rows = kTileRows;
  *tile_cols = kTileVecs * simd::kLanes;
}

}  // namespace attnlab::ATTNLAB_TARGET_NS
ATTNLAB_TARGET_END
