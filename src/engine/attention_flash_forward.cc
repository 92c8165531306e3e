// Flash attention forward: FlashAttention-2's tiled online softmax (Dao 2023,
// arXiv:2307.08691, Algorithm 1) on CPU, computed on TRANSPOSED score tiles.
//
// One task = (batch b, kv head hk, a chunk of query rows) for all query heads of hk's group
// (their "flat" rows share K and V). Per sub-block of up to kSubRows flat rows:
//   QT = (Q[rows] * scale * log2 e)^T packed [D][kSubRows]   (softmax in the exp2 domain)
//   for each key block Kb (kBlockK keys) some row can see:
//     S^T = Kb QT                 [keys x rows]: K is the broadcast operand, read in place
//     mask; per row r (a vector lane): m' = max(m, max_j S^T[j, r]); P^T = 2^(S^T - m');
//     l = l 2^(m - m') + sum_j P^T[j, r];  Oacc[r] *= 2^(m - m')
//     Oacc += P Vb                (P^T read column-major: no transpose)
//   O = Oacc / l (with the extra logit of softmax1 / sink variants), lse = (m + log2 l) ln 2.
// With keys as rows, the per-row max and sum are element-wise vector ops (no horizontal
// reductions), and neither K nor (when head_dim % 16 == 0) V is copied.
// Extra memory per thread: O(group * chunk * head_dim + kBlockK * head_dim).
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "attnlab/attention.h"
#include "attnlab/thread_pool.h"
#include "core/aligned_buffer.h"
#include "engine/attention_flash_common.h"
#include "engine/attention_mask.h"
#include "engine/attention_validate.h"
#include "engine/micro_gemm.h"
#include "engine/simd.h"

namespace attnlab {
namespace {

using internal::BlockClass;
using internal::CeilDiv;
using internal::ClassifyBlock;
using internal::RoundUp;
using internal::FlashPlan;
using internal::kBlockK;
using internal::kLn2;
using internal::kLog2e;
using internal::kSubRows;
using simd::VecF;

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

struct ForwardScratch {
  AlignedBuffer<float> qt;     // [n_sub][D][kSubRows] Q^T per sub-block (scaled)
  AlignedBuffer<float> oacc;   // [n_sub * kSubRows][d_pad]
  AlignedBuffer<float> m, l;   // [n_sub * kSubRows]
  AlignedBuffer<float> alpha;  // [kSubRows]
  AlignedBuffer<float> vp;     // [kBlockK][d_pad] (only when head_dim % 16 != 0)
  AlignedBuffer<float> st;     // [kBlockK][kSubRows] S^T, then P^T
  std::vector<int64_t> row_h, row_i;  // [n_sub * kSubRows] query head and index of flat rows
};

struct ForwardArgs {
  const AttentionShape* shape;
  const AttentionParams* params;
  const AttentionTensor* q;
  const AttentionTensor* k;
  const AttentionTensor* v;
  const AttentionTensorMut* out;
  float* lse;  // may be null
  FlashPlan plan;
  float qscale;  // scale * log2(e) for softmax, scale for sigmoid
  bool sigmoid;
};

// Online softmax on a transposed tile st[j * kSubRows + r], j < nk keys, lanes r < width.
// Updates m, l, writes P^T into st and the per-row rescale factors into alpha.
void OnlineSoftmaxTile(int64_t nk, int64_t width, float* st, float* m, float* l, float* alpha) {
  const VecF ninf = simd::Set1(kNegInf);
  for (int64_t r = 0; r < width; r += 16) {
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

// Sigmoid step: P^T = sigmoid(S^T + bias), masked (-inf) entries exactly 0.
void SigmoidTile(int64_t nk, int64_t width, float* st, float bias) {
  const VecF b = simd::Set1(bias), nl2e = simd::Set1(-kLog2e), one = simd::Set1(1.0f);
  const VecF ninf = simd::Set1(kNegInf);
  for (int64_t j = 0; j < nk; ++j) {
    for (int64_t r = 0; r < width; r += 16) {
      float* p = st + j * kSubRows + r;
      const VecF x = simd::Load(p);
      const VecF y = one / (one + simd::Exp2((x + b) * nl2e));
      simd::Store(p, x == ninf ? simd::Zero() : y);
    }
  }
}

void RunTask(const ForwardArgs& a, int64_t task, ForwardScratch& w) {
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
      internal::SmallGemm(nk, width, D, kb, a.k->stride_token,
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
        OnlineSoftmaxTile(nk, width, w.st.data(), w.m.data() + f0, w.l.data() + f0,
                          w.alpha.data());
        for (int64_t r = 0; r < nr; ++r) {
          const float al = w.alpha[r];
          if (al == 1.0f) continue;
          const VecF av = simd::Set1(al);
          float* o = oacc + r * d_pad;
          for (int64_t c = 0; c < d_pad; c += 16) simd::Store(o + c, simd::Load(o + c) * av);
        }
      }
      // Oacc[rows x d_pad] += P [rows x keys] V [keys x d_pad]; P^T is column-major P.
      internal::SmallGemm</*kAColMajor=*/true>(nr, d_pad, nk, w.st.data(), kSubRows, vb, ldv,
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

}  // namespace

Status AttentionForwardFlash(const AttentionShape& s, const AttentionParams& params,
                             const AttentionTensor& q, const AttentionTensor& k,
                             const AttentionTensor& v, const AttentionTensorMut& out,
                             std::span<float> lse) {
  ATTNLAB_RETURN_IF_ERROR(ValidateAttention(s, params, q, k, v, out));
  ATTNLAB_RETURN_IF_ERROR(internal::CheckLseSize(s, lse, /*required=*/false));
  ThreadPool& pool = params.pool ? *params.pool : DefaultThreadPool();
  ForwardArgs a;
  a.shape = &s;
  a.params = &params;
  a.q = &q;
  a.k = &k;
  a.v = &v;
  a.out = &out;
  a.lse = lse.empty() ? nullptr : lse.data();
  a.plan = internal::MakeFlashPlan(s, pool.num_threads());
  a.sigmoid = params.softmax == SoftmaxKind::kSigmoid;
  const float scale = internal::DefaultScaleOf(params, s.head_dim);
  a.qscale = a.sigmoid ? scale : scale * kLog2e;

  const FlashPlan& plan = a.plan;
  const internal::FlashForwardScratchSizes z = internal::FlashForwardScratch(s, plan);
  std::vector<ForwardScratch> scratch(pool.num_threads());
  for (ForwardScratch& w : scratch) {
    w.qt.Resize(z.qt);
    w.oacc.Resize(z.oacc);
    w.m.Resize(z.m);
    w.l.Resize(z.l);
    w.alpha.Resize(z.alpha);
    w.vp.Resize(z.vp);
    w.st.Resize(z.st);
    w.row_h.resize(z.row_index / 2);
    w.row_i.resize(z.row_index / 2);
  }
  const int64_t tasks = s.batch * s.heads_kv * plan.n_chunks;
  pool.ParallelFor(tasks, [&](int64_t task, int thread) { RunTask(a, task, scratch[thread]); });
  return Status::Ok();
}

}  // namespace attnlab
