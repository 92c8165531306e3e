// Flash attention backward: recomputes P from the forward's log-sum-exp instead of storing it
// (FlashAttention-2, arXiv:2307.08691, Algorithm 2), on CPU.
//
// In the forward pass this was:  S = scale Q K^T,  P = softmax(S) (or a variant),  O = P V.
// Backward, with D_i = dO_i . O_i (= sum_j P_ij dP_ij):
//   dV = P^T dO,   dP = dO V^T,   dS = P o (dP - D)   (sigmoid: dS = dP o P o (1 - P)),
//   dQ = scale dS K,   dK = scale dS^T Q,   d sink_h = -sum_i P_sink,i D_i.
//
// One task = (batch b, kv head hk, chunk of keys) for every query head of hk's group, so the
// task owns dK and dV of its keys (no races, no atomics). Its keys are packed once; then for each
// sub-block of kRowsB query rows (packed once) it walks the key blocks, computing the transposed
// tiles S^T = K Q^T and dP^T = V dO^T (keys are rows, so the per-query lse and D are vector
// loads), and accumulates dV, dK for the block and dQ for the sub-block. When batch * heads_kv
// is too small to feed every thread, keys are split into several chunks; their dQ contributions
// go to per-chunk buffers summed in a fixed order, so results are bit-reproducible.
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

using internal::CeilDiv;
using internal::kBlockK;
using internal::kLog2e;
using internal::RoundUp;
using simd::VecF;

constexpr int64_t kRowsB = 32;  // query rows per backward sub-block (multiple of 16)
constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr float kPosInf = std::numeric_limits<float>::infinity();

struct BackwardPlan {
  int64_t group, d_pad;
  int64_t kchunk;    // keys per task (multiple of kBlockK, or all of len_k)
  int64_t n_kchunks;
};

BackwardPlan MakeBackwardPlan(const AttentionShape& s, int threads) {
  BackwardPlan p;
  p.group = s.heads_q / s.heads_kv;
  p.d_pad = RoundUp(s.head_dim, 16);
  const int64_t bh = s.batch * s.heads_kv;
  p.n_kchunks = 1;
  if (bh < threads) {
    p.n_kchunks = std::min(CeilDiv(s.len_k, kBlockK), CeilDiv(2 * threads, bh));
  }
  p.kchunk = p.n_kchunks == 1 ? s.len_k : RoundUp(CeilDiv(s.len_k, p.n_kchunks), kBlockK);
  p.n_kchunks = CeilDiv(s.len_k, p.kchunk);
  return p;
}

struct BackwardScratch {
  AlignedBuffer<float> kp, vp;    // [kchunk_pad][d_pad] packed keys / values of the task
  AlignedBuffer<float> dk, dv;    // [kchunk_pad][d_pad] accumulators
  AlignedBuffer<float> qt, dot;   // [D][kRowsB] Q^T (scaled), dO^T
  AlignedBuffer<float> qp, dop;   // [kRowsB][d_pad] Q, dO
  AlignedBuffer<float> dq;        // [kRowsB][d_pad] accumulator
  AlignedBuffer<float> st, dpt;   // [kBlockK][kRowsB] S^T -> P^T, dP^T -> dS^T
  std::vector<int64_t> row_h, row_i;  // [kRowsB] query head / [len_q] query index of each row
  AlignedBuffer<float> lse2, dd;  // [kRowsB] lse * log2(e) and D per row
};

struct BackwardArgs {
  const AttentionShape* shape;
  const AttentionParams* params;
  const AttentionTensor *q, *k, *v, *out, *dout;
  const float* lse;
  const AttentionTensorMut *dq, *dk, *dv;
  BackwardPlan plan;
  float scale;   // natural scale
  float qscale;  // scale * log2(e) for softmax, scale for sigmoid
  bool sigmoid;
  float* dq_partial;     // [n_kchunks][B][Hq][Lq][D] when n_kchunks > 1
  float* dsink_partial;  // [B * Hkv][group] (kSinkLogit)
};

// Packs rows [i0, i0 + nr) of query head h: Q^T scaled, dO^T, Q and dO padded; lse2 and D.
// Padding columns get lse2 = +inf and D = 0 so their P and dS are exactly 0.
void PackQueryBlock(const BackwardArgs& a, int64_t b, int64_t h, int64_t i0, int64_t nr,
                    BackwardScratch& w) {
  const AttentionShape& s = *a.shape;
  const int64_t D = s.head_dim, d_pad = a.plan.d_pad;
  for (int64_t i = 0; i < kRowsB; ++i) {
    float* qrow = w.qp.data() + i * d_pad;
    float* dorow = w.dop.data() + i * d_pad;
    if (i >= nr) {
      std::fill(qrow, qrow + d_pad, 0.0f);
      std::fill(dorow, dorow + d_pad, 0.0f);
      for (int64_t d = 0; d < D; ++d) w.qt[d * kRowsB + i] = w.dot[d * kRowsB + i] = 0.0f;
      w.lse2[i] = kPosInf;
      w.dd[i] = 0.0f;
      continue;
    }
    const float* qs = a.q->at(b, h, i0 + i);
    const float* dos = a.dout->at(b, h, i0 + i);
    const float* os = a.out->at(b, h, i0 + i);
    float dsum = 0;
    for (int64_t d = 0; d < D; ++d) {
      qrow[d] = qs[d];
      dorow[d] = dos[d];
      w.qt[d * kRowsB + i] = qs[d] * a.qscale;
      w.dot[d * kRowsB + i] = dos[d];
      dsum += dos[d] * os[d];
    }
    std::fill(qrow + D, qrow + d_pad, 0.0f);
    std::fill(dorow + D, dorow + d_pad, 0.0f);
    const float lse = a.lse[(b * s.heads_q + h) * s.len_q + i0 + i];
    // No visible key (standard softmax): lse = -inf; use +inf so every P is exactly 0.
    w.lse2[i] = (a.sigmoid || lse == kNegInf) ? kPosInf : lse * kLog2e;
    w.dd[i] = dsum;
  }
  if (a.sigmoid) std::fill(w.lse2.data(), w.lse2.data() + kRowsB, 0.0f);
}

// P^T = 2^(S^T - lse2) and dS^T = P^T (dP^T - D), in place (st -> P^T, dpt -> dS^T).
void SoftmaxGradTile(BackwardScratch& w) {
  for (int64_t j = 0; j < kBlockK; ++j) {
    float* srow = w.st.data() + j * kRowsB;
    float* drow = w.dpt.data() + j * kRowsB;
    for (int64_t i = 0; i < kRowsB; i += 16) {
      const VecF p = simd::Exp2(simd::Load(srow + i) - simd::Load(w.lse2.data() + i));
      simd::Store(srow + i, p);
      simd::Store(drow + i, p * (simd::Load(drow + i) - simd::Load(w.dd.data() + i)));
    }
  }
}

// P^T = sigmoid(S^T + bias) (masked entries 0) and dS^T = dP^T P (1 - P), in place.
void SigmoidGradTile(BackwardScratch& w, float bias) {
  const VecF bv = simd::Set1(bias), nl2e = simd::Set1(-kLog2e), one = simd::Set1(1.0f);
  const VecF ninf = simd::Set1(kNegInf);
  for (int64_t j = 0; j < kBlockK; ++j) {
    float* srow = w.st.data() + j * kRowsB;
    float* drow = w.dpt.data() + j * kRowsB;
    for (int64_t i = 0; i < kRowsB; i += 16) {
      const VecF x = simd::Load(srow + i);
      VecF p = one / (one + simd::Exp2((x + bv) * nl2e));
      p = x == ninf ? simd::Zero() : p;
      simd::Store(srow + i, p);
      simd::Store(drow + i, simd::Load(drow + i) * p * (one - p));
    }
  }
}

void RunTask(const BackwardArgs& a, int64_t task, BackwardScratch& w) {
  const AttentionShape& s = *a.shape;
  const AttentionParams& params = *a.params;
  const AttentionMask& mask = params.mask;
  const BackwardPlan& plan = a.plan;
  const int64_t D = s.head_dim, d_pad = plan.d_pad, group = plan.group;
  const int64_t kc = task % plan.n_kchunks;
  const int64_t bh = task / plan.n_kchunks;
  const int64_t b = bh / s.heads_kv, hk = bh % s.heads_kv;
  const int64_t kc0 = kc * plan.kchunk;
  const int64_t nkeys = std::min(plan.kchunk, s.len_k - kc0);
  const int64_t nkeys_pad = RoundUp(nkeys, kBlockK);

  internal::PackRowsPadded(*a.k, b, hk, kc0, nkeys, D, d_pad, nkeys_pad, w.kp.data());
  internal::PackRowsPadded(*a.v, b, hk, kc0, nkeys, D, d_pad, nkeys_pad, w.vp.data());
  std::fill(w.dk.data(), w.dk.data() + nkeys_pad * d_pad, 0.0f);
  std::fill(w.dv.data(), w.dv.data() + nkeys_pad * d_pad, 0.0f);

  for (int64_t g = 0; g < group; ++g) {
    const int64_t h = hk * group + g;
    std::fill(w.row_h.begin(), w.row_h.end(), h);
    float dsink = 0;
    for (int64_t i0 = 0; i0 < s.len_q; i0 += kRowsB) {
      const int64_t nr = std::min(kRowsB, s.len_q - i0);
      const internal::KeySpan span = internal::ChunkKeySpan(mask, s.len_q, s.len_k, i0, nr);
      const bool touches = span.Intersects(kc0, nkeys);
      const bool sink_rows = params.softmax == SoftmaxKind::kSinkLogit && kc == 0;
      // Rows that see none of this chunk's keys: dQ is zero (partial buffers start zeroed).
      if (!touches && !sink_rows && plan.n_kchunks > 1) continue;
      PackQueryBlock(a, b, h, i0, nr, w);
      if (sink_rows) {  // d sink_h = -sum_i exp(b_h - lse_i) D_i, once per row (chunk 0)
        for (int64_t i = 0; i < nr; ++i) {
          const float lse = a.lse[(b * s.heads_q + h) * s.len_q + i0 + i];
          dsink -= std::exp(params.sink_logits[h] - lse) * w.dd[i];
        }
      }
      std::fill(w.dq.data(), w.dq.data() + kRowsB * d_pad, 0.0f);
      for (int64_t k0 = kc0; touches && k0 < kc0 + nkeys; k0 += kBlockK) {
        const int64_t nk = std::min(kBlockK, kc0 + nkeys - k0);
        const internal::BlockClass cls =
            internal::ClassifyBlock(mask, s.len_q, s.len_k, i0, nr, k0, nk);
        if (cls == internal::BlockClass::kEmpty) continue;
        const float* kb = w.kp.data() + (k0 - kc0) * d_pad;
        const float* vb = w.vp.data() + (k0 - kc0) * d_pad;
        // S^T = K Q^T (log2 domain), dP^T = V dO^T: [kBlockK x kRowsB], reduction over D.
        internal::SmallGemm(kBlockK, kRowsB, D, kb, d_pad, w.qt.data(), kRowsB, w.st.data(),
                            kRowsB, false);
        internal::SmallGemm(kBlockK, kRowsB, D, vb, d_pad, w.dot.data(), kRowsB, w.dpt.data(),
                            kRowsB, false);
        if (cls == internal::BlockClass::kPartial) {
          internal::MaskTileTransposed(mask, s, b, w.row_h.data(), w.row_i.data() + i0, nr, k0,
                                       nk, w.st.data(), kRowsB);
          for (int64_t j = nk; j < kBlockK; ++j) {  // keys past len_k (zero-padded rows of Kp)
            std::fill(w.st.data() + j * kRowsB, w.st.data() + (j + 1) * kRowsB, kNegInf);
          }
        }
        if (a.sigmoid) {
          SigmoidGradTile(w, params.sigmoid_bias);
        } else {
          SoftmaxGradTile(w);
        }
        float* dkb = w.dk.data() + (k0 - kc0) * d_pad;
        float* dvb = w.dv.data() + (k0 - kc0) * d_pad;
        // dV += P^T dO, dK += dS^T Q (scale applied at the end).
        internal::SmallGemm(kBlockK, d_pad, kRowsB, w.st.data(), kRowsB, w.dop.data(), d_pad, dvb,
                            d_pad, true);
        internal::SmallGemm(kBlockK, d_pad, kRowsB, w.dpt.data(), kRowsB, w.qp.data(), d_pad, dkb,
                            d_pad, true);
        // dQ += dS K; dS^T is dS in column-major order.
        internal::SmallGemm</*kAColMajor=*/true>(nr, d_pad, kBlockK, w.dpt.data(), kRowsB, kb,
                                                 d_pad, w.dq.data(), d_pad, true);
      }
      // Store this sub-block's dQ (complete for this key chunk).
      for (int64_t i = 0; i < nr; ++i) {
        const float* src = w.dq.data() + i * d_pad;
        float* dst;
        if (plan.n_kchunks == 1) {
          dst = a.dq->at(b, h, i0 + i);
        } else {
          dst = a.dq_partial + (((kc * s.batch + b) * s.heads_q + h) * s.len_q + i0 + i) * D;
        }
        for (int64_t d = 0; d < D; ++d) dst[d] = src[d] * a.scale;
      }
    }
    if (a.dsink_partial && kc == 0) a.dsink_partial[bh * group + g] = dsink;
  }
  for (int64_t j = 0; j < nkeys; ++j) {
    float* dkd = a.dk->at(b, hk, kc0 + j);
    float* dvd = a.dv->at(b, hk, kc0 + j);
    const float* dks = w.dk.data() + j * d_pad;
    const float* dvs = w.dv.data() + j * d_pad;
    for (int64_t d = 0; d < D; ++d) {
      dkd[d] = dks[d] * a.scale;
      dvd[d] = dvs[d];
    }
  }
}

}  // namespace

Status AttentionBackwardFlash(const AttentionShape& s, const AttentionParams& params,
                              const AttentionTensor& q, const AttentionTensor& k,
                              const AttentionTensor& v, const AttentionTensor& out,
                              std::span<const float> lse, const AttentionTensor& dout,
                              const AttentionTensorMut& dq, const AttentionTensorMut& dk,
                              const AttentionTensorMut& dv, std::span<float> d_sink_logits) {
  ATTNLAB_RETURN_IF_ERROR(internal::ValidateAttentionBackward(
      s, params, q, k, v, &out, lse, /*lse_required=*/true, dout, dq, dk, dv, d_sink_logits));
  ThreadPool& pool = params.pool ? *params.pool : DefaultThreadPool();
  BackwardArgs a;
  a.shape = &s;
  a.params = &params;
  a.q = &q, a.k = &k, a.v = &v, a.out = &out, a.dout = &dout;
  a.lse = lse.data();
  a.dq = &dq, a.dk = &dk, a.dv = &dv;
  a.plan = MakeBackwardPlan(s, pool.num_threads());
  a.sigmoid = params.softmax == SoftmaxKind::kSigmoid;
  a.scale = internal::DefaultScaleOf(params, s.head_dim);
  a.qscale = a.sigmoid ? a.scale : a.scale * kLog2e;
  const BackwardPlan& plan = a.plan;

  std::vector<float> dq_partial;
  if (plan.n_kchunks > 1) {
    dq_partial.assign(plan.n_kchunks * s.batch * s.heads_q * s.len_q * s.head_dim, 0.0f);
  }
  a.dq_partial = dq_partial.data();
  std::vector<float> dsink_partial;
  if (params.softmax == SoftmaxKind::kSinkLogit) {
    dsink_partial.assign(s.batch * s.heads_q, 0.0f);
  }
  a.dsink_partial = dsink_partial.empty() ? nullptr : dsink_partial.data();

  const int64_t kchunk_pad = RoundUp(plan.kchunk, kBlockK);
  std::vector<BackwardScratch> scratch(pool.num_threads());
  for (BackwardScratch& w : scratch) {
    for (auto* buf : {&w.kp, &w.vp, &w.dk, &w.dv}) buf->Resize(kchunk_pad * plan.d_pad);
    w.qt.Resize(s.head_dim * kRowsB);
    w.dot.Resize(s.head_dim * kRowsB);
    w.qp.Resize(kRowsB * plan.d_pad);
    w.dop.Resize(kRowsB * plan.d_pad);
    w.dq.Resize(kRowsB * plan.d_pad);
    w.st.Resize(kBlockK * kRowsB);
    w.dpt.Resize(kBlockK * kRowsB);
    w.row_h.resize(kRowsB);
    w.row_i.resize(s.len_q);
    for (int64_t i = 0; i < s.len_q; ++i) w.row_i[i] = i;
    w.lse2.Resize(kRowsB);
    w.dd.Resize(kRowsB);
  }
  const int64_t tasks = s.batch * s.heads_kv * plan.n_kchunks;
  pool.ParallelFor(tasks, [&](int64_t task, int thread) { RunTask(a, task, scratch[thread]); });

  if (plan.n_kchunks > 1) {  // dQ = sum over key chunks, in chunk order
    const int64_t rows = s.batch * s.heads_q * s.len_q;
    const int64_t D = s.head_dim;
    pool.ParallelFor(rows, [&](int64_t row, int) {
      const int64_t b = row / (s.heads_q * s.len_q);
      const int64_t h = (row / s.len_q) % s.heads_q;
      const int64_t i = row % s.len_q;
      float* dst = dq.at(b, h, i);
      for (int64_t d = 0; d < D; ++d) dst[d] = 0.0f;
      for (int64_t c = 0; c < plan.n_kchunks; ++c) {
        const float* src = dq_partial.data() + (c * rows + row) * D;
        for (int64_t d = 0; d < D; ++d) dst[d] += src[d];
      }
    });
  }
  if (params.softmax == SoftmaxKind::kSinkLogit) {
    const int64_t group = plan.group;
    for (int64_t h = 0; h < s.heads_q; ++h) {
      float sum = 0;
      for (int64_t b = 0; b < s.batch; ++b) {
        sum += dsink_partial[(b * s.heads_kv + h / group) * group + h % group];
      }
      d_sink_logits[h] = sum;
    }
  }
  return Status::Ok();
}

}  // namespace attnlab
