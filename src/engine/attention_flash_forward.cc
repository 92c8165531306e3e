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
//
// This file validates, plans and allocates; the task body is in
// attention_flash_forward_kernel.cc, compiled per SIMD target (engine/kernel_table.h).
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

Status AttentionForwardFlash(const AttentionShape& s, const AttentionParams& params,
                             const AttentionTensor& q, const AttentionTensor& k,
                             const AttentionTensor& v, const AttentionTensorMut& out,
                             std::span<float> lse) {
  ATTNLAB_RETURN_IF_ERROR(ValidateAttention(s, params, q, k, v, out));
  ATTNLAB_RETURN_IF_ERROR(internal::CheckLseSize(s, lse, /*required=*/false));
  ThreadPool& pool = params.pool ? *params.pool : DefaultThreadPool();
  internal::FlashForwardArgs a;
  a.shape = &s;
  a.params = &params;
  a.q = &q;
  a.k = &k;
  a.v = &v;
  a.out = &out;
  a.lse = lse.empty() ? nullptr : lse.data();
  a.plan = internal::MakeFlashPlan(s, pool.num_threads());
  a.sigmoid = params.softmax == SoftmaxKind::kSigmoid;
  a.softpick = params.softmax == SoftmaxKind::kSoftpick;
  const float scale = internal::DefaultScaleOf(params, s.head_dim);
  a.qscale = a.sigmoid ? scale : scale * internal::kLog2e;

  const internal::FlashPlan& plan = a.plan;
  const internal::FlashForwardScratchSizes z = internal::FlashForwardScratch(s, plan);
  std::vector<internal::FlashForwardBuffers> scratch(pool.num_threads());
  for (internal::FlashForwardBuffers& w : scratch) {
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
  const internal::KernelTable& kernels = internal::ActiveKernels();
  pool.ParallelFor(tasks, [&](int64_t task, int thread) {
    kernels.flash_forward_task(a, task, scratch[thread]);
  });
  return Status::Ok();
}

}  // namespace attnlab
