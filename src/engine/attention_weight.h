// One key's attention weight in scalar double, written once for every scalar user (the
// reference kernel, the explicit probabilities, the streamed statistics and the probes):
// softpick's shifted terms (attnlab/attention.h defines the variant; Zuhri et al. 2025,
// arXiv:2504.20966) and the weight of a key from its score and its row's lse.
//
// For a row with visible scores x_k and base M = max(0, max_k x_k):
//   r(x) = e^(x - M) - e^-M = e^-M (e^x - 1),  |r| <= 1 (no overflow for any finite x)
//   P(x) = max(r(x), 0) / Z,  Z = sum_k |r(x_k)| + eps e^-M
//   lse  = M + log Z = log(sum_k |e^x_k - 1| + eps)
#ifndef ATTNLAB_ENGINE_ATTENTION_WEIGHT_H_
#define ATTNLAB_ENGINE_ATTENTION_WEIGHT_H_

#include <algorithm>
#include <cmath>
#include <limits>

#include "attnlab/attention.h"

namespace attnlab::internal {

// r(x) for base m >= 0. Uses expm1 where e^-m is representable, so scores near 0 keep their
// relative accuracy (e^x - 1 by subtraction would lose it); else the difference, where every
// term near x = 0 is below the smallest normal and rounds to 0 relative to the row.
template <typename Acc>
Acc SoftpickShifted(Acc x, Acc m) {
  constexpr Acc kMaxExp = static_cast<Acc>(0.9) * std::log(std::numeric_limits<Acc>::max());
  if (m < kMaxExp && x < kMaxExp) return std::expm1(x) * std::exp(-m);
  return std::exp(x - m) - std::exp(-m);
}

// The base M of a row from its largest visible score (-inf when none): max(0, max).
template <typename Acc>
Acc SoftpickBase(Acc row_max) {
  return std::isnan(row_max) ? row_max : std::max(row_max, Acc(0));
}

// P[i, j] of a visible key from its scaled score s and its row's lse (attention.h's lse output):
// exp(s - lse) for the softmax variants, sigmoid(s + sigmoid_bias), or softpick's
// max(e^s - 1, 0) / e^lse. 0 for a row with no visible key (lse = -inf).
inline double KeyWeightFromLse(SoftmaxKind kind, double s, double lse, double sigmoid_bias) {
  if (kind == SoftmaxKind::kSigmoid) return 1.0 / (1.0 + std::exp(-(s + sigmoid_bias)));
  if (std::isinf(lse) && lse < 0) return 0.0;
  if (kind == SoftmaxKind::kSoftpick) return std::max(SoftpickShifted(s, lse), 0.0);
  return std::exp(s - lse);
}

}  // namespace attnlab::internal

#endif  // ATTNLAB_ENGINE_ATTENTION_WEIGHT_H_
