// A regulariser against the attention sink (the mission's sinks document proposes "L1 or L2
// regularisation to limit the model's over-attention to the first token"): a penalty on each
// head's share of attention on key 0.
//
// For layer l and head h, alpha_1^{l,h} is the attention on key 0 averaged over the batch's
// sequences and their query positions t = 0 .. T-1 (Gu et al. 2024, "When Attention Sink Emerges
// in Language Models", arXiv:2410.10781, eq. 1; what diagnostics/first_token_probe.h measures),
// and the penalty is
//   R = 1/(L H) sum_{l,h} (alpha_1^{l,h})^p,   p = 1 (L1; alpha >= 0) or 2 (L2: a strong sink
//                                               pays more than many weak first-token shares)
// With causal softmax attention P_{t,j} = softmax_{j <= t}(scale q_t . k_j) in one sequence
// and head, alpha = 1/T sum_t P_{t,0} and (dP_{t,0}/ds_{t,j} = P_{t,0} (delta_{j0} - P_{t,j}))
//   d alpha / d q_t = scale/T  P_{t,0} (k_0 - sum_{j <= t} P_{t,j} k_j)
//   d alpha / d k_j = scale/T  sum_{t >= j} P_{t,0} (delta_{j0} - P_{t,j}) q_t
// The gradients reach the model as dR/d q|k|v (after RoPE; AuxiliaryGradients::qkv).
// Cost: O(T^2 hd) per sequence and head, twice (alpha first, then the gradient scaled by
// dR/d alpha), in scalar double loops: cheap for the small models of the experiments (sinks:
// T 64, hd 4), but 3x a whole training step of the default model's shape (4 layers, 16 heads of
// 16, T 256, batch 16: 12 steps in 4.7 s without, 14.2 s with, 2 threads, Sapphire Rapids).
// One pass and vectorised float loops are the obvious next step.
#ifndef ATTNLAB_TRAIN_FIRST_TOKEN_PENALTY_H_
#define ATTNLAB_TRAIN_FIRST_TOKEN_PENALTY_H_

#include <cstdint>
#include <string>

#include "attnlab/model_config.h"
#include "attnlab/status.h"

namespace attnlab {

// The share of attention on key c, averaged over the queries that see it, for one sequence and
// head: m_c = 1/(len - c) sum_{t >= c} P_{t,c}, with q row t at q + t * q_stride, k row j at
// k + j * k_stride (hd values each) and P the causal softmax of scale q_t . k_j. The gradients
// are those above with key 0 replaced by c:
//   d m_c / d q_t = scale/(len-c) P_{t,c} (k_c - sum_{j <= t} P_{t,j} k_j)            (t >= c)
//   d m_c / d k_j = scale/(len-c) sum_{t >= max(j,c)} P_{t,c} (delta_{jc} - P_{t,j}) q_t
// If gq / gk are non-null, ADDS coef * d m_c / d q_t (resp. / d k_j) at the same layout.
// experiments/manipulation.h moves a head's attention onto key c with it. REQUIRES:
// 0 <= c < len, hd >= 1.
template <typename T>
double KeyShare(const T* q, int64_t q_stride, const T* k, int64_t k_stride, int64_t len,
                int64_t hd, double scale, int64_t c, T* gq, T* gk, double coef);

// alpha = m_0 = 1/len sum_t P_{t,0} (KeyShare with c = 0).
template <typename T>
double FirstKeyShare(const T* q, int64_t q_stride, const T* k, int64_t k_stride, int64_t len,
                     int64_t hd, double scale, T* gq, T* gk, double coef) {
  return KeyShare<T>(q, q_stride, k, k_stride, len, hd, scale, 0, gq, gk, coef);
}

// Ok when the penalty's formula is the attention of model `c`: causal standard softmax over
// every earlier key (no window, sparse or linear attention, no first-key mask, key bias, extra
// softmax entry or dedicated sink token); otherwise InvalidArgument saying which option.
Status CheckFirstTokenPenaltySupported(const ModelConfig& c);
// The same check for any user of KeyShare on a model's attention: "<user> is defined for ...".
Status CheckKeyShareSupported(const ModelConfig& c, const std::string& user);

}  // namespace attnlab

#endif  // ATTNLAB_TRAIN_FIRST_TOKEN_PENALTY_H_
