#include "train/first_token_penalty.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

namespace attnlab {

template <typename T>
double FirstKeyShare(const T* q, int64_t q_stride, const T* k, int64_t k_stride, int64_t len,
                     int64_t hd, double scale, T* gq, T* gk, double coef) {
  std::vector<double> p(static_cast<size_t>(len));  // row t's P_{t,j}, j <= t
  std::vector<double> kbar(static_cast<size_t>(hd));
  double alpha = 0;
  const double w = coef * scale / static_cast<double>(len);
  for (int64_t t = 0; t < len; ++t) {
    const T* qt = q + t * q_stride;
    double mx = -INFINITY;
    for (int64_t j = 0; j <= t; ++j) {
      const T* kj = k + j * k_stride;
      double s = 0;
      for (int64_t d = 0; d < hd; ++d) s += static_cast<double>(qt[d]) * static_cast<double>(kj[d]);
      p[j] = s * scale;
      mx = std::max(mx, p[j]);
    }
    double sum = 0;
    for (int64_t j = 0; j <= t; ++j) sum += (p[j] = std::exp(p[j] - mx));
    for (int64_t j = 0; j <= t; ++j) p[j] /= sum;
    const double p0 = p[0];
    alpha += p0;
    if (!gq && !gk) continue;
    // dq_t = w P_{t0} (k_0 - sum_j P_{tj} k_j);  dk_j += w P_{t0} (delta_{j0} - P_{tj}) q_t.
    if (gq) {
      std::fill(kbar.begin(), kbar.end(), 0.0);
      for (int64_t j = 0; j <= t; ++j) {
        const T* kj = k + j * k_stride;
        for (int64_t d = 0; d < hd; ++d) kbar[d] += p[j] * static_cast<double>(kj[d]);
      }
      T* g = gq + t * q_stride;
      for (int64_t d = 0; d < hd; ++d) {
        g[d] += static_cast<T>(w * p0 * (static_cast<double>(k[d]) - kbar[d]));
      }
    }
    if (gk) {
      for (int64_t j = 0; j <= t; ++j) {
        const double f = w * p0 * ((j == 0 ? 1.0 : 0.0) - p[j]);
        T* g = gk + j * k_stride;
        for (int64_t d = 0; d < hd; ++d) g[d] += static_cast<T>(f * static_cast<double>(qt[d]));
      }
    }
  }
  return alpha / static_cast<double>(len);
}

template double FirstKeyShare<float>(const float*, int64_t, const float*, int64_t, int64_t,
                                     int64_t, double, float*, float*, double);
template double FirstKeyShare<double>(const double*, int64_t, const double*, int64_t, int64_t,
                                      int64_t, double, double*, double*, double);

Status CheckFirstTokenPenaltySupported(const ModelConfig& c) {
  auto refuse = [](const std::string& what) {
    return Status::InvalidArgument("the first-token penalty is defined for causal standard "
                                   "softmax attention over every earlier key; this model has " +
                                   what);
  };
  if (!c.causal) return refuse("bidirectional attention");
  if (c.attention_type != AttentionType::kSoftmax) return refuse("sparse or linear attention");
  if (c.softmax != SoftmaxKind::kStandard) {
    return refuse("another softmax (softmax1, a sink logit, sigmoid or softpick)");
  }
  if (c.mask_first_key) return refuse("the first key masked (its alpha_1 is 0)");
  if (c.key_bias) return refuse("a key bias (an extra softmax entry)");
  if (c.attention_window >= 0) return refuse("a sliding window");
  return Status::Ok();
}

}  // namespace attnlab
