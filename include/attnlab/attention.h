// attnlab/attention.h: exact scaled-dot-product attention, every mask and softmax variant,
// forward and backward, in two twins: a Reference kernel that materialises the scores and a
// tiled Flash kernel (online softmax, FlashAttention-2) that never holds a len_q x len_k matrix.
//
// ----------------------------------------------------------------------------------------------
// Semantics (the one place they are defined; every kernel, test and CLI flag follows this).
//
// Shapes. Q is [batch, heads_q, len_q, head_dim]; K and V are [batch, heads_kv, len_k, head_dim];
// O is shaped like Q. heads_q must be a multiple of heads_kv: query head h reads key/value head
// h / (heads_q / heads_kv) (GQA; heads_kv == 1 is MQA, heads_kv == heads_q is MHA).
//
// Scores. s[i, j] = scale * dot(Q[i], K[j]), scale defaults to 1/sqrt(head_dim).
//
// Visibility. Queries are aligned to the END of the keys (bottom-right), as in FlashAttention:
// query i sits at key position p(i) = i + (len_k - len_q). Key j is visible to query i iff
//   (a) explicit mask (if given) says 1 at [i, j], and
//   (b) not (mask_first_key and j == 0), and
//   (c) causal => j <= p(i), and
//   (d) j < n_sink, or j < n_global, or p(i) < n_global, or j lies in the window
//       [p(i) - window_left, p(i) + window_right] (window_left / window_right = -1 mean
//       unbounded on that side; bounds are inclusive).
// So sink keys (the first n_sink) bypass the window but never causality. Global tokens (the
// first n_global POSITIONS, Longformer's local + global attention, Beltagy et al. 2020,
// arXiv:2004.05150) are global both ways: their keys bypass the window like sinks, and a query
// at a global position bypasses the window (it sees every key that (a)-(c) allow). Globality of
// a query follows its position p(i), not its row index, so a KV-cache decode step (len_q = 1)
// sees what the same row of a full forward sees. With n_global = 0, (d) is the rule above it.
//
// Drawn for len_q = 5, len_k = 8 (p(i) = i + 3), 'x' = visible:
//
//   causal               causal, window_left=2     causal, window_left=2,   causal,
//                                                  n_sink=1 (StreamingLLM)  mask_first_key
//   key 01234567         key 01234567              key 01234567             key 01234567
//   q0  xxxx....         q0  .xxx....              q0  xxxx....             q0  .xxx....
//   q1  xxxxx...         q1  ..xxx...              q1  x.xxx...             q1  .xxxx...
//   q2  xxxxxx..         q2  ...xxx..              q2  x..xxx..             q2  .xxxxx..
//   q3  xxxxxxx.         q3  ....xxx.              q3  x...xxx.             q3  .xxxxxx.
//   q4  xxxxxxxx         q4  .....xxx              q4  x....xxx             q4  .xxxxxxx
//
// Local + global (Longformer), drawn for len_q = len_k = 8; 'g' marks global rows and keys:
//
//   causal, window_left=1,       window_left=1, window_right=1,
//   n_global=2                   n_global=1 (not causal)
//         gg                           g
//   key   01234567               key   01234567
//   q0 g  x.......               q0 g  xxxxxxxx
//   q1 g  xx......               q1    xxx.....
//   q2    xxx.....               q2    xxxx....
//   q3    xxxx....               q3    x.xxx...
//   q4    xx.xx...               q4    x..xxx..
//   q5    xx..xx..               q5    x...xxx.
//   q6    xx...xx.               q6    x....xxx
//   q7    xx....xx               q7    x.....xx
//
// Cost: a row sees at most window + n_global keys unless it is global, so the flash kernels,
// which skip every (query block, key block) pair no row of the block sees, do
// O(len_q * (window + n_global) + n_global * len_k) work instead of O(len_q * len_k).
//
// With len_q = len_k and causal + mask_first_key, row 0 sees nothing: that is exactly the
// proposed "MaskedSelfAttention" mitigation (mask[:, 0] = mask[0, :] = True), and unlike
// masked_fill(-inf) + softmax it yields zeros, not NaN.
//
// Softmax variants, over the visible keys V(i) of row i:
//   kStandard:  P[i, j] = exp(s[i, j]) / sum_{k in V(i)} exp(s[i, k])
//   kSoftmax1:  P[i, j] = exp(s[i, j]) / (1 + sum_k exp(s[i, k]))     ("off by one": an implicit
//               extra logit 0 whose value vector is 0; Miller 2023)
//   kSinkLogit: P[i, j] = exp(s[i, j]) / (exp(b_h) + sum_k exp(s[i, k])), b_h = sink_logits[h],
//               one learned logit per query head (gpt-oss; softmax1 is b_h = 0)
//   kSigmoid:   P[i, j] = sigmoid(s[i, j] + sigmoid_bias), no normalisation (Ramapuram et al.
//               2024 recommend bias = -log(len_k))
//   kSoftpick:  P[i, j] = max(e^s[i, j] - 1, 0) / (sum_{k in V(i)} |e^s[i, k] - 1| + softpick_eps)
//               (Zuhri et al. 2025, arXiv:2504.20966: rectified, not sum-to-one). A row sums to
//               less than 1 and is all zero when no score is positive; masked keys add nothing to
//               the denominator. Kernels compute it shifted by M = max(0, max_k s[i, k]):
//               r_k = e^(s_k - M) - e^-M, P = max(r, 0) / (sum |r| + eps e^-M), so nothing
//               overflows; fp32 loses relative accuracy only in rows whose every |s| is tiny
//               (e^s - 1 is formed by a subtraction, as in the paper's implementation).
//   O[i] = sum_{j in V(i)} P[i, j] V[j]
//
// A row with no visible key has O[i] = 0 in every variant, and its gradients are 0 (never NaN).
// NaN inputs propagate as in IEEE arithmetic (and PyTorch): a NaN in q[i] makes row i's O and
// lse NaN, a NaN in k[j] every row that sees key j, a NaN in v[j] every row that sees j (the
// flash kernels may also spread a NaN value to rows of the same key block that mask it,
// 0 x NaN); rows that use no NaN are exactly those of the NaN-free input.
//
// Log-sum-exp (the `lse` output, [batch, heads_q, len_q] contiguous, natural log):
//   kStandard: log sum_{k in V(i)} exp(s[i, k])   (-inf for a row with no visible key)
//   kSoftmax1 / kSinkLogit: the same sum including the extra term (1 or exp(b_h))
//   kSigmoid:  not defined; written as 0.
//   kSoftpick: log(sum_{k in V(i)} |e^s[i, k] - 1| + softpick_eps), the log of the denominator
//              (-inf for a row with no visible key)
//
// Backward: given dO (shaped like O), the kernels write dQ, dK, dV (overwritten, same shapes
// and strides contracts as Q, K, V) and, for kSinkLogit, d sink_logits[h] summed over batch and
// rows (overwritten). dK and dV of a kv head sum over the query heads of its group.
// Softpick's score gradient, with E_j = e^(s_j - lse) = e^s_j / denominator and
// D = sum_j P_j dP_j = dO . O: dS_j = E_j (dP_j - D) for s_j > 0, E_j D for s_j < 0, 0 at s_j = 0
// (the kink; its subgradient 0).
// ----------------------------------------------------------------------------------------------
#ifndef ATTNLAB_ATTENTION_H_
#define ATTNLAB_ATTENTION_H_

#include <cstdint>
#include <optional>
#include <span>

#include "attnlab/status.h"
#include "attnlab/tensor_view.h"

namespace attnlab {

class ThreadPool;

struct AttentionShape {
  int64_t batch = 1;
  int64_t heads_q = 1;
  int64_t heads_kv = 1;
  int64_t len_q = 1;
  int64_t len_k = 1;
  int64_t head_dim = 1;
};

// An explicit boolean mask, 1 = visible, addressed as data[b * stride_batch + h * stride_head +
// i * stride_row + j] for query head h. Strides of 0 broadcast (e.g. one [len_q, len_k] mask for
// every batch and head: stride_batch = stride_head = 0, stride_row = len_k).
struct ExplicitMask {
  const uint8_t* data = nullptr;
  int64_t size = 0;  // bytes addressable from data
  int64_t stride_batch = 0;
  int64_t stride_head = 0;
  int64_t stride_row = 0;
};

struct AttentionMask {
  bool causal = false;
  int64_t window_left = -1;   // -1: unbounded
  int64_t window_right = -1;  // -1: unbounded
  int64_t n_sink = 0;         // keys [0, n_sink) bypass the window (not causality)
  int64_t n_global = 0;       // positions [0, n_global) are global: as keys they bypass the
                              // window (like sinks), as queries they see every causal key
  bool mask_first_key = false;
  std::optional<ExplicitMask> explicit_mask;
};

enum class SoftmaxKind { kStandard, kSoftmax1, kSinkLogit, kSigmoid, kSoftpick };

// True for the variants whose row weights are not a softmax over an exp sum (kSigmoid,
// kSoftpick): an entropy of the row is not defined for them.
inline bool IsUnnormalisedWeights(SoftmaxKind k) {
  return k == SoftmaxKind::kSigmoid || k == SoftmaxKind::kSoftpick;
}

struct AttentionParams {
  std::optional<float> scale;  // default 1/sqrt(head_dim)
  AttentionMask mask;
  SoftmaxKind softmax = SoftmaxKind::kStandard;
  std::span<const float> sink_logits;  // [heads_q], kSinkLogit only
  float sigmoid_bias = 0.0f;           // kSigmoid only
  float softpick_eps = 1e-6f;          // kSoftpick only: finite, > 0
  ThreadPool* pool = nullptr;          // nullptr: DefaultThreadPool()
};

using AttentionTensor = TensorView4<const float>;
using AttentionTensorMut = TensorView4<float>;

// Checks shapes, strides against buffer sizes, output aliasing and parameters. Every kernel
// below calls it first; exposed so callers can validate once up front.
Status ValidateAttention(const AttentionShape& shape, const AttentionParams& params,
                         const AttentionTensor& q, const AttentionTensor& k,
                         const AttentionTensor& v, const AttentionTensorMut& out);

// Reference: materialises s and P per (batch, head) in double precision. Slow, obviously
// correct, the twin every optimised kernel is tested against.
// lse: [batch * heads_q * len_q] or empty; probs: [batch * heads_q * len_q * len_k] or empty
// (masked entries 0).
Status AttentionForwardReference(const AttentionShape& shape, const AttentionParams& params,
                                 const AttentionTensor& q, const AttentionTensor& k,
                                 const AttentionTensor& v, const AttentionTensorMut& out,
                                 std::span<float> lse = {}, std::span<float> probs = {});

// d_sink_logits: [heads_q], required (non-empty) iff softmax == kSinkLogit, else ignored.
Status AttentionBackwardReference(const AttentionShape& shape, const AttentionParams& params,
                                  const AttentionTensor& q, const AttentionTensor& k,
                                  const AttentionTensor& v, const AttentionTensor& dout,
                                  const AttentionTensorMut& dq, const AttentionTensorMut& dk,
                                  const AttentionTensorMut& dv,
                                  std::span<float> d_sink_logits = {});

// Flash: tiled online softmax (Dao 2023, FlashAttention-2, arXiv:2307.08691), fp32 with
// exp2-domain softmax. Extra memory per worker thread is O((len_q + len_k) * head_dim) at most;
// never allocates len_q x len_k. Threaded over batch x kv-heads x query blocks.
// lse: [batch * heads_q * len_q] or empty. The backward needs it.
Status AttentionForwardFlash(const AttentionShape& shape, const AttentionParams& params,
                             const AttentionTensor& q, const AttentionTensor& k,
                             const AttentionTensor& v, const AttentionTensorMut& out,
                             std::span<float> lse = {});

// Recomputes P from `lse` (the forward's) instead of storing it. `out` is the forward's output.
// Extra memory, exactly: at most 16 * (len_q + len_k + 256) * (head_dim + 16) bytes per worker
// thread, plus 8 bytes per (batch, query head) for kSinkLogit; never len_q x len_k. That covers
// one key chunk's packed K, V, dK, dV per thread and, when batch * heads_kv < threads splits the
// keys into chunks, the dQ partials: one query head per (batch, kv head, chunk) at a time
// (the heads of a group take turns), fewer than 3 * len_q * head_dim floats per thread, never a
// dQ copy per chunk. (internal::FlashBackwardScratch gives the buffer sizes.)
Status AttentionBackwardFlash(const AttentionShape& shape, const AttentionParams& params,
                              const AttentionTensor& q, const AttentionTensor& k,
                              const AttentionTensor& v, const AttentionTensor& out,
                              std::span<const float> lse, const AttentionTensor& dout,
                              const AttentionTensorMut& dq, const AttentionTensorMut& dk,
                              const AttentionTensorMut& dv, std::span<float> d_sink_logits = {});

// FLOPs by the standard convention (FlashAttention, ggml): 4 * batch * heads_q * len_q * len_k *
// head_dim for the forward, halved when causal with len_q == len_k; the backward counts 2.5x.
double AttentionForwardFlops(const AttentionShape& shape, bool causal);

}  // namespace attnlab

#endif  // ATTNLAB_ATTENTION_H_
