// Flash attention forward: FlashAttention-2's tiled online softmax (Dao 2023,
// arXiv:2307.08691, Algorithm 1) on CPU.
//
// One task = (batch b, kv head hk, a chunk of query rows) for all query heads of hk's group, so
// each packed K/V block is reused by group * chunk rows. Per task:
//   Qs  = Q[rows] * scale * log2(e)                 (softmax in the exp2 domain)
//   for each key block Kb (kBlockK keys) that some row of the chunk can see:
//     KT = Kb^T packed [d][kBlockK], Vp = Vb packed [kBlockK][d_pad]   (zero padded)
//     for each sub-block of kSubRows rows:
//       S = Qs KT; mask; m' = max(m, rowmax S); P = 2^(S - m'); l = l 2^(m - m') + rowsum P
//       Oacc = Oacc 2^(m - m') + P Vp
//   O = Oacc / l (with the extra logit of softmax1 / sink variants), lse = (m + log2 l) ln 2.
// Extra memory per thread: O(chunk * group * d + kBlockK * d), independent of len_k.
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
using internal::ClassifyBlock;
using internal::FlashPlan;
using internal::kBlockK;
using internal::kLn2;
using internal::kLog2e;
using internal::kSubRows;
using internal::RowRange;
using internal::RowVisibleRange;
using simd::VecF;

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

struct ForwardScratch {
  AlignedBuffer<float> qs;    // [group][chunk][d]
  AlignedBuffer<float> oacc;  // [group][chunk][d_pad]
  AlignedBuffer<float> m, l;  // [group][chunk]
  AlignedBuffer<float> kt;    // [d][kBlockK]
  AlignedBuffer<float> vp;    // [kBlockK][d_pad]
  AlignedBuffer<float> s;     // [kSubRows][kBlockK]
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

// Softmax step for one S tile: updates m and l, writes P into s, rescales Oacc rows.
void OnlineSoftmaxTile(int64_t rows, float* s, float* m, float* l, float* oacc, int64_t d_pad) {
  for (int64_t r = 0; r < rows; ++r) {
    float* sr = s + r * kBlockK;
    VecF mx = simd::Load(sr);
    for (int64_t j = 16; j < kBlockK; j += 16) mx = simd::Max(mx, simd::Load(sr + j));
    const float m_old = m[r];
    const float m_new = std::max(m_old, simd::ReduceMax(mx));
    // All keys seen so far are masked: P = 0 and nothing changes (avoid -inf - -inf).
    const float m_use = m_new == kNegInf ? 0.0f : m_new;
    const VecF mv = simd::Set1(m_use);
    VecF sum = simd::Zero();
    for (int64_t j = 0; j < kBlockK; j += 16) {
      const VecF p = simd::Exp2(simd::Load(sr + j) - mv);
      simd::Store(sr + j, p);
      sum += p;
    }
    const float alpha = m_old == kNegInf ? 0.0f : simd::Exp2Scalar(m_old - m_use);
    l[r] = l[r] * alpha + simd::ReduceSum(sum);
    m[r] = m_new;
    if (alpha != 1.0f) {
      float* o = oacc + r * d_pad;
      const VecF av = simd::Set1(alpha);
      for (int64_t c = 0; c < d_pad; c += 16) simd::Store(o + c, simd::Load(o + c) * av);
    }
  }
}

// Sigmoid step: P = sigmoid(S + bias), masked (-inf) entries exactly 0.
void SigmoidTile(int64_t rows, float* s, float bias) {
  const VecF b = simd::Set1(bias);
  const VecF nl2e = simd::Set1(-kLog2e);
  const VecF one = simd::Set1(1.0f);
  const VecF ninf = simd::Set1(kNegInf);
  for (int64_t r = 0; r < rows; ++r) {
    float* sr = s + r * kBlockK;
    for (int64_t j = 0; j < kBlockK; j += 16) {
      const VecF x = simd::Load(sr + j);
      const VecF p = one / (one + simd::Exp2((x + b) * nl2e));
      simd::Store(sr + j, x == ninf ? simd::Zero() : p);
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

  // Pack Q (scaled) and reset the running state.
  for (int64_t g = 0; g < group; ++g) {
    const int64_t h = hk * group + g;
    for (int64_t r = 0; r < rows; ++r) {
      const float* src = a.q->at(b, h, i0 + r);
      float* dst = w.qs.data() + (g * plan.chunk + r) * D;
      for (int64_t d = 0; d < D; ++d) dst[d] = src[d] * a.qscale;
    }
  }
  std::fill(w.oacc.data(), w.oacc.data() + group * plan.chunk * d_pad, 0.0f);
  std::fill(w.m.data(), w.m.data() + group * plan.chunk, kNegInf);
  std::fill(w.l.data(), w.l.data() + group * plan.chunk, 0.0f);

  const internal::KeySpan span = internal::ChunkKeySpan(mask, s.len_q, s.len_k, i0, rows);
  for (int64_t k0 = 0; k0 < s.len_k; k0 += kBlockK) {
    const int64_t nk = std::min(kBlockK, s.len_k - k0);
    if (!span.Intersects(k0, nk)) continue;
    internal::PackKeysTransposed(*a.k, b, hk, k0, nk, D, w.kt.data());
    internal::PackRowsPadded(*a.v, b, hk, k0, nk, D, d_pad, kBlockK, w.vp.data());
    for (int64_t g = 0; g < group; ++g) {
      const int64_t h = hk * group + g;
      for (int64_t r0 = 0; r0 < rows; r0 += kSubRows) {
        const int64_t nr = std::min(kSubRows, rows - r0);
        const BlockClass cls = ClassifyBlock(mask, s.len_q, s.len_k, i0 + r0, nr, k0, nk);
        if (cls == BlockClass::kEmpty) continue;
        const int64_t row = g * plan.chunk + r0;
        internal::SmallGemm(nr, kBlockK, D, w.qs.data() + row * D, D, w.kt.data(), kBlockK,
                            w.s.data(), kBlockK, /*accumulate=*/false);
        if (cls == BlockClass::kPartial) {
          internal::MaskTile(mask, s, b, h, i0 + r0, nr, k0, nk, w.s.data(), kBlockK);
        }
        if (a.sigmoid) {
          SigmoidTile(nr, w.s.data(), params.sigmoid_bias);
        } else {
          OnlineSoftmaxTile(nr, w.s.data(), w.m.data() + row, w.l.data() + row,
                            w.oacc.data() + row * d_pad, d_pad);
        }
        internal::SmallGemm(nr, d_pad, kBlockK, w.s.data(), kBlockK, w.vp.data(), d_pad,
                            w.oacc.data() + row * d_pad, d_pad, /*accumulate=*/true);
      }
    }
  }

  // Normalise and store.
  for (int64_t g = 0; g < group; ++g) {
    const int64_t h = hk * group + g;
    float extra2 = kNegInf;  // the extra logit in the log2 domain, if the variant has one
    if (params.softmax == SoftmaxKind::kSoftmax1) extra2 = 0.0f;
    if (params.softmax == SoftmaxKind::kSinkLogit) extra2 = params.sink_logits[h] * kLog2e;
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t row = g * plan.chunk + r;
      const float m = w.m[row], l = w.l[row];
      float factor, lse;
      if (a.sigmoid) {
        factor = 1.0f;
        lse = 0.0f;
      } else if (extra2 == kNegInf) {
        factor = l > 0 ? 1.0f / l : 0.0f;
        lse = l > 0 ? (m + std::log2(l)) * kLn2 : kNegInf;
      } else {
        const float M = std::max(m, extra2);
        const float wm = m == kNegInf ? 0.0f : std::exp2(m - M);
        const float denom = l * wm + std::exp2(extra2 - M);
        factor = wm / denom;
        lse = (M + std::log2(denom)) * kLn2;
      }
      const float* o = w.oacc.data() + row * d_pad;
      float* dst = a.out->at(b, h, i0 + r);
      for (int64_t d = 0; d < D; ++d) dst[d] = o[d] * factor;
      if (a.lse) a.lse[(b * s.heads_q + h) * s.len_q + i0 + r] = lse;
    }
  }
}

}  // namespace

Status AttentionForwardFlash(const AttentionShape& s, const AttentionParams& params,
                             const AttentionTensor& q, const AttentionTensor& k,
                             const AttentionTensor& v, const AttentionTensorMut& out,
                             std::span<float> lse) {
  ATTNLAB_RETURN_IF_ERROR(ValidateAttention(s, params, q, k, v, out));
  const int64_t rows = s.batch * s.heads_q * s.len_q;
  if (!lse.empty() && static_cast<int64_t>(lse.size()) != rows) {
    return Status::InvalidArgument("lse: expected batch * heads_q * len_q = " +
                                   std::to_string(rows) + " values, got " +
                                   std::to_string(lse.size()));
  }
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
  std::vector<ForwardScratch> scratch(pool.num_threads());
  for (ForwardScratch& w : scratch) {
    w.qs.Resize(plan.group * plan.chunk * s.head_dim);
    w.oacc.Resize(plan.group * plan.chunk * plan.d_pad);
    w.m.Resize(plan.group * plan.chunk);
    w.l.Resize(plan.group * plan.chunk);
    w.kt.Resize(s.head_dim * kBlockK);
    w.vp.Resize(kBlockK * plan.d_pad);
    w.s.Resize(kSubRows * kBlockK);
  }
  const int64_t tasks = s.batch * s.heads_kv * plan.n_chunks;
  pool.ParallelFor(tasks, [&](int64_t task, int thread) { RunTask(a, task, scratch[thread]); });
  return Status::Ok();
}

}  // namespace attnlab
