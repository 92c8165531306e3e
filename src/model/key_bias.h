// A learnable key with a zero value (Gu et al. 2024, "When Attention Sink Emerges in Language
// Models", arXiv:2410.10781: the attention bias k*, v* = 0), applied around the engine's exact
// attention instead of inside it.
//
// With one extra entry of logit s*_i = scale q_i . k* and value 0 in row i's softmax, the row's
// output and log-sum-exp become
//   lse'_i = log(e^lse_i + e^s*_i),   Y_i = O_i e^(lse_i - lse'_i),
// where O_i and lse_i are the engine's over the real keys (any softmax-family variant: softmax1's
// +1 and a sink logit are already in lse_i). The engine's backward, given Y as the output and
// lse' as the row statistics, is then exactly the extended softmax's backward for the real keys
// (its D_i = dY_i . Y_i is the extended row's sum over P dP, the zero value adding nothing), and
// the extra entry's own score gets ds*_i = -P*_i D_i with P*_i = e^(s*_i - lse'_i).
//
// Layouts (one attention call of the model): q rows n = b Tm + t of stride q_stride, query head h
// at h * hd (after RoPE); k* [Hkv, hd] unrotated, query head h uses kv head h / (H / Hkv);
// att [N, H * hd] (token-major); lse and s* [B, H, Tm].
#ifndef ATTNLAB_MODEL_KEY_BIAS_H_
#define ATTNLAB_MODEL_KEY_BIAS_H_

#include <cstdint>

#include "attnlab/thread_pool.h"

namespace attnlab::internal {

struct KeyBiasShape {
  int64_t batch, len, heads_q, heads_kv, head_dim;
  int64_t q_stride;  // floats between consecutive q rows (>= heads_q * head_dim)
  float scale;       // the attention's score scale
};

// s* into logits [B, H, Tm]; att and lse updated in place to Y and lse' (a row with no visible
// key, lse = -inf, gets Y = 0 and lse' = s*).
void KeyBiasForward(const KeyBiasShape& s, const float* q, const float* k_star, float* att,
                    float* lse, float* logits, ThreadPool& pool);

// From dY (d_att), Y (att), lse' and s* of the forward: dq += ds* scale k* (into rows of stride
// q_stride, before RoPE's backward) and dk_star += sum over rows of ds* scale q, accumulated in
// double in row order (deterministic).
void KeyBiasBackward(const KeyBiasShape& s, const float* q, const float* k_star, const float* att,
                     const float* d_att, const float* lse, const float* logits, float* dq,
                     float* dk_star, ThreadPool& pool);

}  // namespace attnlab::internal

#endif  // ATTNLAB_MODEL_KEY_BIAS_H_
