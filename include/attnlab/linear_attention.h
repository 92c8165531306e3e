// attnlab/linear_attention.h: causal linear attention (Katharopoulos et al. 2020, "Transformers
// are RNNs", arXiv:2006.16236), forward and backward, in two twins: the RECURRENT form (token by
// token, O(len * head_dim^2) with a running state: the reference, and what a decode step uses)
// and the CHUNKED form (chunks of C tokens: a masked C x C product inside a chunk, the running
// state across chunks; the efficient kernel, O(len * head_dim * (C + head_dim))).
//
// ----------------------------------------------------------------------------------------------
// Semantics.
//
// Shapes as attention.h's, with one length: Q [batch, heads_q, len, head_dim]; K and V [batch,
// heads_kv, len, head_dim]; O shaped like Q. GQA as the engine: query head h reads key/value head
// h / (heads_q / heads_kv). AttentionShape is reused and len_q must equal len_k (self-attention
// over one stretch of a sequence; earlier tokens enter through the state below).
//
// Feature map, element-wise and positive: phi(x) = elu(x) + 1 = x + 1 (x > 0), exp(x) (x <= 0).
// There is no 1/sqrt(head_dim) scale (the paper has none; phi's +1 keeps weights positive).
//
// With an initial state (S_0, z_0) (zero unless state_in is given), for every row i:
//   S_i = S_0 + sum_{j <= i} phi(k_j) v_j^T      [head_dim x head_dim]
//   z_i = z_0 + sum_{j <= i} phi(k_j)            [head_dim]
//   O_i = S_i^T phi(q_i) / (phi(q_i) . z_i + eps)
// i.e. O_i = sum_{j <= i} w_ij v_j / (sum_{j <= i} w_ij + eps) with w_ij = phi(q_i) . phi(k_j) > 0:
// a causal average of the values with positive weights and no softmax. eps (default 1e-6, as the
// authors' fast-transformers library) only guards the division: every w_ij > 0 unless exp
// underflows, and sum_j w_ij ~ head_dim per visible key, so eps moves O by ~1e-6 / head_dim
// relative. Keys and queries of length 0 have no meaning here: every dimension must be >= 1.
//
// State layout (state_in / state_out): [batch, heads_kv, head_dim, head_dim + 1] contiguous
// floats; entry [b, h, d, e] is S[d, e] for e < head_dim and z[d] for e = head_dim (z is S's
// extra value column: the kernels treat each value as [v | 1]). state_out receives S_len, z_len;
// it may be the same buffer as state_in (an in-place decode step) but must not partly overlap
// it. A decode step is a forward of len = 1 from the state of the tokens before it.
//
// den ([batch, heads_q, len] contiguous, optional in the forward): the denominators
// phi(q_i) . z_i + eps. The chunked backward needs them (as the flash backward needs lse).
//
// Backward (from a zero initial state: whole sequences, as in training): given dO, writes dQ,
// dK, dV (overwritten; dK and dV of a kv head sum over its query heads). With n_i and d_i the
// numerator and denominator of O_i and [v | 1], [dn | dd] the augmented value and its gradient:
//   dn_i = dO_i / d_i,  dd_i = -(dO_i . O_i) / d_i
//   d phi(q_i) = sum_{j <= i} phi(k_j) ([v_j | 1] . [dn_i | dd_i])
//   d phi(k_j) = sum_{i >= j} phi(q_i) ([v_j | 1] . [dn_i | dd_i])
//   dv_j       = sum_{i >= j} w_ij dn_i
//   dq = d phi(q) * phi'(q), dk = d phi(k) * phi'(k), phi'(x) = 1 (x > 0), exp(x) (x <= 0).
// ----------------------------------------------------------------------------------------------
#ifndef ATTNLAB_LINEAR_ATTENTION_H_
#define ATTNLAB_LINEAR_ATTENTION_H_

#include <cstdint>
#include <span>

#include "attnlab/attention.h"
#include "attnlab/status.h"

namespace attnlab {

class ThreadPool;

struct LinearAttentionParams {
  float eps = 1e-6f;    // added to every denominator; finite and > 0
  int64_t chunk = 64;   // tokens per chunk of the chunked form, in [1, 1024]
  ThreadPool* pool = nullptr;  // nullptr: DefaultThreadPool()
};

// Floats in one state: batch * heads_kv * head_dim * (head_dim + 1).
int64_t LinearAttentionStateSize(const AttentionShape& shape);

// Checks shapes (len_q == len_k, GQA), strides against buffer sizes, outputs that alias
// themselves or overlap inputs, eps and chunk, and the sizes of den (empty or batch * heads_q *
// len), state_in and state_out (empty or LinearAttentionStateSize). Every kernel calls it first.
Status ValidateLinearAttention(const AttentionShape& shape, const LinearAttentionParams& params,
                               const AttentionTensor& q, const AttentionTensor& k,
                               const AttentionTensor& v, const AttentionTensorMut& out,
                               std::span<const float> den, std::span<const float> state_in,
                               std::span<const float> state_out);

// Recurrent form: for each (batch, kv head) one pass over the tokens, S += phi(k) [v | 1]^T then
// O = S^T phi(q) / (...) for every query head of the group; fp32 state. Threaded over batch x kv
// heads. den, state_in, state_out may be empty.
Status LinearAttentionForwardRecurrent(const AttentionShape& shape,
                                       const LinearAttentionParams& params,
                                       const AttentionTensor& q, const AttentionTensor& k,
                                       const AttentionTensor& v, const AttentionTensorMut& out,
                                       std::span<float> den = {},
                                       std::span<const float> state_in = {},
                                       std::span<float> state_out = {});

// Token by token, in reverse for dK and dV (a running sum of phi(q_i) [dn_i | dd_i]^T), after a
// forward sweep that recomputes O and the denominators and accumulates dQ.
Status LinearAttentionBackwardRecurrent(const AttentionShape& shape,
                                        const LinearAttentionParams& params,
                                        const AttentionTensor& q, const AttentionTensor& k,
                                        const AttentionTensor& v, const AttentionTensor& dout,
                                        const AttentionTensorMut& dq, const AttentionTensorMut& dk,
                                        const AttentionTensorMut& dv);

// Chunked form (arXiv:2006.16236 section 3.2's causal masking, computed chunk-parallel): per
// chunk of C tokens, with Qf = phi(Q_c), Kf = phi(K_c), V' = [V_c | 1]:
//   A = mask_{j <= i}(Qf Kf^T)  [C x C];  N' = A V' + Qf S';  O = N'[:, :D] / (N'[:, D] + eps)
//   S' += Kf^T V'
// Threaded over batch x kv heads (chunks run in order within one). Extra memory per thread:
// O(C * (C + head_dim) + head_dim^2).
Status LinearAttentionForwardChunked(const AttentionShape& shape,
                                     const LinearAttentionParams& params,
                                     const AttentionTensor& q, const AttentionTensor& k,
                                     const AttentionTensor& v, const AttentionTensorMut& out,
                                     std::span<float> den = {},
                                     std::span<const float> state_in = {},
                                     std::span<float> state_out = {});

// Recomputes what it needs from q, k, v, the forward's out and den (required): a forward sweep
// over the chunks rebuilds the states for dQ, a reverse sweep accumulates the future's
// sum phi(q) [dn | dd]^T for dK and dV. Never stores a state per chunk.
Status LinearAttentionBackwardChunked(const AttentionShape& shape,
                                      const LinearAttentionParams& params,
                                      const AttentionTensor& q, const AttentionTensor& k,
                                      const AttentionTensor& v, const AttentionTensor& out,
                                      std::span<const float> den, const AttentionTensor& dout,
                                      const AttentionTensorMut& dq, const AttentionTensorMut& dk,
                                      const AttentionTensorMut& dv);

}  // namespace attnlab

#endif  // ATTNLAB_LINEAR_ATTENTION_H_
