#include "train/first_token_penalty.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

namespace attnlab {

template <typename T>
double KeyShare(const T* q, int64_t q_stride, const T* k, int64_t k_stride, int64_t len,
                int64_t hd, double scale, int64_t key, T* gq, T* gk, double coef) {
  std::vector<double> p(static_cast<size_t>(len));  // row t's P_{t,j}, j <= t
  std::vector<double> kbar(static_cast<size_t>(hd));
  double alpha = 0;
  const double rows = static_cast<double>(len - key);  // the queries t >= key that see it
  const double w = coef * scale / rows;
  const T* kk = k + key * k_stride;
  for (int64_t t = key; t < len; ++t) {
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
    const double p0 = p[key];  // P_{t,key}
    alpha += p0;
    if (!gq && !gk) continue;
    // dq_t = w P_{tc} (k_c - sum_j P_{tj} k_j);  dk_j += w P_{tc} (delta_{jc} - P_{tj}) q_t.
    if (gq) {
      std::fill(kbar.begin(), kbar.end(), 0.0);
      for (int64_t j = 0; j <= t; ++j) {
        const T* kj = k + j * k_stride;
        for (int64_t d = 0; d < hd; ++d) kbar[d] += p[j] * static_cast<double>(kj[d]);
      }
      T* g = gq + t * q_stride;
      for (int64_t d = 0; d < hd; ++d) {
        g[d] += static_cast<T>(w * p0 * (static_cast<double>(kk[d]) - kbar[d]));
      }
    }
    if (gk) {
      for (int64_t j = 0; j <= t; ++j) {
        const double f = w * p0 * ((j == key ? 1.0 : 0.0) - p[j]);
        T* g = gk + j * k_stride;
        for (int64_t d = 0; d < hd; ++d) g[d] += static_cast<T>(f * static_cast<double>(qt[d]));
      }
    }
  }
  return alpha / rows;
}

template double KeyShare<float>(const float*, int64_t, const float*, int64_t, int64_t, int64_t,
                                double, int64_t, float*, float*, double);
template double KeyShare<double>(const double*, int64_t, const double*, int64_t, int64_t, int64_t,
                                 double, int64_t, double*, double*, double);

Status CheckFirstTokenPenaltySupported(const ModelConfig& c) {
  return CheckKeyShareSupported(c, "the first-token penalty");
}

Status CheckKeyShareSupported(const ModelConfig& c, const std::string& user) {
  auto refuse = [&](const std::string& what) {
    return Status::InvalidArgument(user + " is defined for causal standard softmax attention "
                                   "over every earlier key; this model has " + what);
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
