// Attention made explicit, for inspection and intervention (TransformerLens-style hooks in the
// model, docs/PYTHON.md): the masked score map, probabilities from a (possibly edited) score
// map, and the product with V, as three separate steps; plus per-row statistics (lse, the first
// key's probability, the row entropy) streamed over row blocks without a len_q x len_k map.
//
// The composition Scores -> ProbsFromScores -> ApplyProbs is attnlab/attention.h's forward for
// every mask and softmax variant (tested against AttentionForwardReference); its point is that a
// caller can read or change the scores and the probabilities in between. Scores and
// probabilities are [batch, heads_q, len_q, len_k] contiguous floats (the caller's memory).
#ifndef ATTNLAB_ENGINE_ATTENTION_EXPLICIT_H_
#define ATTNLAB_ENGINE_ATTENTION_EXPLICIT_H_

#include <span>

#include "attnlab/attention.h"
#include "attnlab/status.h"

namespace attnlab {

// scores[b, h, i, j] = scale * dot(q[b, h, i], k[b, h / group, j]) where key j is visible to
// row i (attention.h's visibility), -inf where it is not (TransformerLens' hook_attn_scores).
// scores: batch * heads_q * len_q * len_k values. fp32 products (Sgemm), as the flash kernels.
Status AttentionScores(const AttentionShape& shape, const AttentionParams& params,
                       const AttentionTensor& q, const AttentionTensor& k,
                       std::span<float> scores);

// probs from scores by params.softmax, reading visibility from the scores alone (-inf =
// invisible; a caller who sets an entry to -inf masks that key, one who makes a masked entry
// finite unmasks it):
//   kStandard  softmax over the row (a row of -inf gives zeros and lse -inf)
//   kSoftmax1 / kSinkLogit  exp(s) / (exp(b_h) + sum exp(s)), b_h = 0 or sink_logits[h]
//   kSigmoid   sigmoid(s + sigmoid_bias), -inf -> 0; lse written as 0
//   kSoftpick  max(e^s - 1, 0) / (sum_visible |e^s - 1| + softpick_eps); lse its log denominator
// Rows are normalised in double. probs may alias scores (in place). lse: [batch * heads_q *
// len_q] or empty. NaN scores propagate to their row.
Status AttentionProbsFromScores(const AttentionShape& shape, const AttentionParams& params,
                                std::span<const float> scores, std::span<float> probs,
                                std::span<float> lse = {});

// out[b, h, i] = sum_j probs[b, h, i, j] v[b, h / group, j] (fp32, Sgemm per head).
Status AttentionApplyProbs(const AttentionShape& shape, std::span<const float> probs,
                           const AttentionTensor& v, const AttentionTensorMut& out,
                           ThreadPool* pool = nullptr);

// Per-row statistics, each [batch * heads_q * len_q] (any may be empty: not computed):
//   lse         attention.h's log-sum-exp (with the extra term of softmax1 / sink; -inf for a
//               row with no visible key; 0 for kSigmoid; softpick's log denominator)
//   first_mass  P[i, 0], the probability of key 0 (0 where key 0 is invisible)
//   entropy     -sum_{j visible} P[i, j] ln P[i, j] in nats, over the real keys (for softmax1 /
//               sink the sub-probability vector, the implicit sink is not a key; 0 for a row
//               with no visible key; NaN for kSigmoid and kSoftpick, whose weights are not a
//               distribution)
// Memory: one block of 32 rows x len_k scores per worker thread, never len_q x len_k.
// Cost: the score GEMMs of a forward plus one exp and log per visible score, in double.
Status AttentionRowStats(const AttentionShape& shape, const AttentionParams& params,
                         const AttentionTensor& q, const AttentionTensor& k, std::span<float> lse,
                         std::span<float> first_mass, std::span<float> entropy);

}  // namespace attnlab

#endif  // ATTNLAB_ENGINE_ATTENTION_EXPLICIT_H_
