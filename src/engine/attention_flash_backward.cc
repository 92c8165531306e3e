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
// go to per-chunk buffers summed in a fixed order, so results are bit-reproducible. Those buffers
// hold ONE query head per (batch, kv head, chunk): the heads of a group are then processed one
// per pass, dK and dV carrying over between passes (FlashBackwardPlan in
// attention_flash_common.h), so the extra memory stays within attention.h's per-thread bound
// instead of growing with n_kchunks * heads_q * len_q * head_dim.
//
// Precision: D_i (a sum over head_dim) is formed in double and rounded once for the fp32 tiles;
// d sink_h sums one term per row over batch * len_q rows, so it is accumulated in double (a
// float running sum of 131072 same-sign terms was off by 5e-4 relative; tested).
//
// This file validates, plans, allocates and reduces; the task body is in
// attention_flash_backward_kernel.cc, compiled per SIMD target (engine/kernel_table.h).
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
#include "engine/kernel_table.h"

namespace attnlab {
namespace {

// dQ of the pass's heads = the sum of the chunks' partials, in chunk order.
void ReduceDqPartials(const internal::FlashBackwardArgs& a, int64_t pass, ThreadPool& pool) {
  const AttentionShape& s = *a.shape;
  const internal::FlashBackwardPlan& plan = a.plan;
  const int64_t D = s.head_dim, hpp = plan.heads_per_pass;
  const int64_t rows = s.batch * s.heads_kv * hpp * s.len_q;  // one chunk's partial rows
  pool.ParallelFor(rows, [&](int64_t row, int) {
    const int64_t i = row % s.len_q;
    const int64_t slot = (row / s.len_q) % hpp;
    const int64_t bh = row / (s.len_q * hpp);
    const int64_t h = (bh % s.heads_kv) * plan.group + pass * hpp + slot;
    float* dst = a.dq->at(bh / s.heads_kv, h, i);
    for (int64_t d = 0; d < D; ++d) dst[d] = 0.0f;
    for (int64_t c = 0; c < plan.n_kchunks; ++c) {
      const float* src = a.dq_partial + (c * rows + row) * D;
      for (int64_t d = 0; d < D; ++d) dst[d] += src[d];
    }
  });
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
  internal::FlashBackwardArgs a;
  a.shape = &s;
  a.params = &params;
  a.q = &q, a.k = &k, a.v = &v, a.out = &out, a.dout = &dout;
  a.lse = lse.data();
  a.dq = &dq, a.dk = &dk, a.dv = &dv;
  a.plan = internal::MakeFlashBackwardPlan(s, pool.num_threads());
  a.sigmoid = params.softmax == SoftmaxKind::kSigmoid;
  a.softpick = params.softmax == SoftmaxKind::kSoftpick;
  a.scale = internal::DefaultScaleOf(params, s.head_dim);
  a.qscale = a.sigmoid ? a.scale : a.scale * internal::kLog2e;
  const internal::FlashBackwardPlan& plan = a.plan;

  // Exactly the sizes internal::FlashBackwardScratch reports (attention.h's memory contract).
  const internal::FlashBackwardScratchSizes z =
      internal::FlashBackwardScratch(s, plan, params.softmax);
  std::vector<float> dq_partial(z.dq_partial);
  std::vector<double> dsink_partial(z.dsink_partial);
  a.dq_partial = dq_partial.data();
  a.dsink_partial = dsink_partial.empty() ? nullptr : dsink_partial.data();
  std::vector<internal::FlashBackwardBuffers> scratch(pool.num_threads());
  for (internal::FlashBackwardBuffers& w : scratch) {
    w.kp.Resize(z.kp);
    w.vp.Resize(z.vp);
    w.dk.Resize(z.dk);
    w.dv.Resize(z.dv);
    w.qt.Resize(z.qt);
    w.dot.Resize(z.dot);
    w.qp.Resize(z.qp);
    w.dop.Resize(z.dop);
    w.dq.Resize(z.dq);
    w.st.Resize(z.st);
    w.dpt.Resize(z.dpt);
    w.lse2.Resize(z.lse2);
    w.dd.Resize(z.dd);
    w.row_h.resize(internal::kBackwardRows);
    w.row_i.resize(z.row_index - internal::kBackwardRows);
    for (int64_t i = 0; i < s.len_q; ++i) w.row_i[i] = i;
  }
  const int64_t tasks = s.batch * s.heads_kv * plan.n_kchunks;
  const internal::KernelTable& kernels = internal::ActiveKernels();
  for (int64_t pass = 0; pass < plan.passes; ++pass) {
    pool.ParallelFor(tasks, [&](int64_t task, int thread) {
      kernels.flash_backward_task(a, pass, task, scratch[thread]);
    });
    if (plan.n_kchunks > 1) ReduceDqPartials(a, pass, pool);
  }
  if (params.softmax == SoftmaxKind::kSinkLogit) {  // batch order, in double
    const int64_t group = plan.group;
    for (int64_t h = 0; h < s.heads_q; ++h) {
      double sum = 0;
      for (int64_t b = 0; b < s.batch; ++b) {
        sum += dsink_partial[(b * s.heads_kv + h / group) * group + h % group];
      }
      d_sink_logits[h] = static_cast<float>(sum);
    }
  }
  return Status::Ok();
}

}  // namespace attnlab
