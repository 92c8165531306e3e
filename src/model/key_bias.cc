#include "model/key_bias.h"

#include <cmath>
#include <limits>
#include <vector>

namespace attnlab::internal {

namespace {

double Dot(const float* a, const float* b, int64_t n) {
  double s = 0;
  for (int64_t d = 0; d < n; ++d) s += static_cast<double>(a[d]) * b[d];
  return s;
}

}  // namespace

void KeyBiasForward(const KeyBiasShape& s, const float* q, const float* k_star, float* att,
                    float* lse, float* logits, ThreadPool& pool) {
  const int64_t H = s.heads_q, hd = s.head_dim, Tm = s.len, group = s.heads_q / s.heads_kv;
  pool.ParallelFor(s.batch * Tm, [&](int64_t n, int) {
    const int64_t b = n / Tm, t = n % Tm;
    for (int64_t h = 0; h < H; ++h) {
      const double sk = s.scale * Dot(q + n * s.q_stride + h * hd, k_star + (h / group) * hd, hd);
      float& l = lse[(b * H + h) * Tm + t];
      const double l0 = l;
      // lse' = log(e^l0 + e^sk), stable; l0 = -inf (no visible key) gives sk and factor 0.
      double full, factor;
      if (std::isinf(l0) && l0 < 0) {
        full = sk, factor = 0.0;
      } else {
        const double hi = std::max(l0, sk), lo = std::min(l0, sk);
        full = hi + std::log1p(std::exp(lo - hi));
        factor = std::exp(l0 - full);
      }
      if (std::isnan(sk) || std::isnan(l0)) full = factor = std::numeric_limits<double>::quiet_NaN();
      float* y = att + n * H * hd + h * hd;
      for (int64_t d = 0; d < hd; ++d) y[d] = static_cast<float>(y[d] * factor);
      l = static_cast<float>(full);
      logits[(b * H + h) * Tm + t] = static_cast<float>(sk);
    }
  });
}

void KeyBiasBackward(const KeyBiasShape& s, const float* q, const float* k_star, const float* att,
                     const float* d_att, const float* lse, const float* logits, float* dq,
                     float* dk_star, ThreadPool& pool) {
  const int64_t H = s.heads_q, hd = s.head_dim, Tm = s.len, group = s.heads_q / s.heads_kv;
  const int64_t N = s.batch * Tm;
  // ds*[n, h] = -P* (dY . Y) scale; the q rows' share first (rows are independent).
  std::vector<double> ds(N * H);
  pool.ParallelFor(N, [&](int64_t n, int) {
    const int64_t b = n / Tm, t = n % Tm;
    for (int64_t h = 0; h < H; ++h) {
      const int64_t r = (b * H + h) * Tm + t;
      const double p_star = std::exp(static_cast<double>(logits[r]) - lse[r]);
      const double D = Dot(d_att + n * H * hd + h * hd, att + n * H * hd + h * hd, hd);
      const double g = -p_star * D * s.scale;
      ds[n * H + h] = g;
      const float* k = k_star + (h / group) * hd;
      float* dqr = dq + n * s.q_stride + h * hd;
      for (int64_t d = 0; d < hd; ++d) dqr[d] += static_cast<float>(g * k[d]);
    }
  });
  // dk*[hk] = sum over rows and the group's heads of ds* q, in a fixed order per kv head.
  pool.ParallelFor(s.heads_kv, [&](int64_t hk, int) {
    std::vector<double> acc(hd, 0.0);
    for (int64_t n = 0; n < N; ++n) {
      for (int64_t h = hk * group; h < (hk + 1) * group; ++h) {
        const double g = ds[n * H + h];
        const float* qr = q + n * s.q_stride + h * hd;
        for (int64_t d = 0; d < hd; ++d) acc[d] += g * qr[d];
      }
    }
    for (int64_t d = 0; d < hd; ++d) dk_star[hk * hd + d] += static_cast<float>(acc[d]);
  });
}

}  // namespace attnlab::internal
