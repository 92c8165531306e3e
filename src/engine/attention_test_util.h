// Test-only helpers: random attention problems covering every mask, softmax variant, GQA ratio,
// layout and awkward length, plus the error metrics the kernel tests compare.
#ifndef ATTNLAB_ENGINE_ATTENTION_TEST_UTIL_H_
#define ATTNLAB_ENGINE_ATTENTION_TEST_UTIL_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "attnlab/attention.h"
#include "engine/attention_reference.h"

namespace attnlab::testing {

// A [batch, heads, len, head_dim] tensor stored in one of three layouts, so every kernel is
// exercised with non-trivial strides.
enum class Layout { kContiguous, kTokenMajor, kPadded };

template <typename T>
struct Tensor4 {
  std::vector<T> data;
  int64_t batch = 0, heads = 0, len = 0, dim = 0;
  Layout layout = Layout::kContiguous;
  TensorView4<T> view;

  void Init(int64_t b, int64_t h, int64_t l, int64_t d, Layout lay) {
    batch = b, heads = h, len = l, dim = d, layout = lay;
    TensorView4<T> v;
    switch (lay) {
      case Layout::kContiguous:
        v.stride_token = d, v.stride_head = l * d, v.stride_batch = h * l * d;
        break;
      case Layout::kTokenMajor:
        v.stride_head = d, v.stride_token = h * d, v.stride_batch = l * h * d;
        break;
      case Layout::kPadded:  // slack after every token and head
        v.stride_token = d + 3, v.stride_head = l * (d + 3) + 5, v.stride_batch = h * (l * (d + 3) + 5);
        break;
    }
    data.assign(b * v.stride_batch, T(0));
    v.data = data.data();
    v.size = static_cast<int64_t>(data.size());
    view = v;
  }
  T& at(int64_t b, int64_t h, int64_t t, int64_t d) { return view.at(b, h, t)[d]; }
  T at(int64_t b, int64_t h, int64_t t, int64_t d) const { return view.at(b, h, t)[d]; }
  TensorView4<const T> cview() const {
    TensorView4<const T> v;
    v.data = data.data();
    v.size = view.size;
    v.stride_batch = view.stride_batch, v.stride_head = view.stride_head;
    v.stride_token = view.stride_token;
    return v;
  }
  template <typename U>
  Tensor4<U> Cast() const {
    Tensor4<U> r;
    r.Init(batch, heads, len, dim, layout);
    for (size_t i = 0; i < data.size(); ++i) r.data[i] = static_cast<U>(data[i]);
    return r;
  }
  // Max |x| over the logical elements.
  double MaxAbs() const {
    double m = 0;
    ForEach([&](int64_t b, int64_t h, int64_t t, int64_t d) {
      m = std::max(m, std::abs(static_cast<double>(at(b, h, t, d))));
    });
    return m;
  }
  template <typename F>
  void ForEach(F f) const {
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t h = 0; h < heads; ++h)
        for (int64_t t = 0; t < len; ++t)
          for (int64_t d = 0; d < dim; ++d) f(b, h, t, d);
  }
};

// sum a * b over every element (same shape): the scalar loss L = <out, dout> whose gradient
// the backward kernels compute, for finite-difference checks.
inline double Dot(const Tensor4<double>& a, const Tensor4<double>& b) {
  double s = 0;
  a.ForEach([&](int64_t bb, int64_t h, int64_t t, int64_t d) {
    s += a.at(bb, h, t, d) * b.at(bb, h, t, d);
  });
  return s;
}

template <typename A, typename B>
double MaxAbsDiff(const Tensor4<A>& a, const Tensor4<B>& b) {
  double m = 0;
  a.ForEach([&](int64_t bb, int64_t h, int64_t t, int64_t d) {
    const double x = static_cast<double>(a.at(bb, h, t, d));
    const double y = static_cast<double>(b.at(bb, h, t, d));
    if (std::isnan(x) || std::isnan(y)) {
      m = INFINITY;
    } else {
      m = std::max(m, std::abs(x - y));
    }
  });
  return m;
}

// One random problem. params.sink_logits and the explicit mask point into this struct, so it
// must not be copied after construction (it is returned by unique value through NRVO only).
struct AttentionCase {
  AttentionShape shape;
  AttentionParams params;
  Tensor4<float> q, k, v, dout;
  std::vector<float> sinks;
  std::vector<uint8_t> mask_bytes;
  double logit_scale = 1;  // how much q was scaled up (large logits)

  AttentionCase() = default;
  AttentionCase(const AttentionCase&) = delete;
  AttentionCase& operator=(const AttentionCase&) = delete;

  std::string Describe() const {
    std::ostringstream os;
    const AttentionShape& s = shape;
    const AttentionMask& m = params.mask;
    os << "B=" << s.batch << " Hq=" << s.heads_q << " Hkv=" << s.heads_kv << " Lq=" << s.len_q
       << " Lk=" << s.len_k << " D=" << s.head_dim << " causal=" << m.causal << " window=("
       << m.window_left << "," << m.window_right << ") n_sink=" << m.n_sink
       << " n_global=" << m.n_global
       << " mask_first=" << m.mask_first_key << " explicit=" << m.explicit_mask.has_value()
       << " softmax=" << static_cast<int>(params.softmax) << " logit_scale=" << logit_scale
       << " layout=" << static_cast<int>(q.layout);
    return os.str();
  }
};

inline int64_t Pick(std::mt19937_64& rng, std::initializer_list<int64_t> xs) {
  std::uniform_int_distribution<size_t> d(0, xs.size() - 1);
  return *(xs.begin() + d(rng));
}

// Allocates and fills q, k, v, dout (N(0,1), q times logit_scale), the sink logits (uniform in
// [-10, 10]) and the sigmoid bias (-log len_k) for the shape and softmax already set in c.
inline void FillCase(std::mt19937_64& rng, AttentionCase& c, Layout lay) {
  const AttentionShape& s = c.shape;
  if (c.params.softmax == SoftmaxKind::kSinkLogit) {
    std::uniform_real_distribution<float> sd(-10, 10);
    c.sinks.resize(s.heads_q);
    for (auto& x : c.sinks) x = sd(rng);
    c.params.sink_logits = c.sinks;
  }
  if (c.params.softmax == SoftmaxKind::kSigmoid) {
    c.params.sigmoid_bias = -std::log(static_cast<float>(s.len_k));
  }
  c.q.Init(s.batch, s.heads_q, s.len_q, s.head_dim, lay);
  c.k.Init(s.batch, s.heads_kv, s.len_k, s.head_dim, lay);
  c.v.Init(s.batch, s.heads_kv, s.len_k, s.head_dim, lay);
  c.dout.Init(s.batch, s.heads_q, s.len_q, s.head_dim, lay);
  std::normal_distribution<float> nd(0, 1);
  const float qs = static_cast<float>(c.logit_scale);
  c.q.ForEach([&](int64_t b, int64_t h, int64_t t, int64_t d) { c.q.at(b, h, t, d) = nd(rng) * qs; });
  c.k.ForEach([&](int64_t b, int64_t h, int64_t t, int64_t d) { c.k.at(b, h, t, d) = nd(rng); });
  c.v.ForEach([&](int64_t b, int64_t h, int64_t t, int64_t d) { c.v.at(b, h, t, d) = nd(rng); });
  c.dout.ForEach([&](int64_t b, int64_t h, int64_t t, int64_t d) { c.dout.at(b, h, t, d) = nd(rng); });
}

// A random explicit mask (one per batch and head, ~30% invisible, ~10% fully masked rows).
inline void AddRandomExplicitMask(std::mt19937_64& rng, AttentionCase& c) {
  std::uniform_real_distribution<double> u01(0, 1);
  const AttentionShape& s = c.shape;
  const int64_t per_head = s.len_q * s.len_k;
  c.mask_bytes.resize(s.batch * s.heads_q * per_head);
  for (auto& x : c.mask_bytes) x = u01(rng) < 0.7;
  for (int64_t r = 0; r < s.batch * s.heads_q * s.len_q; ++r) {
    if (u01(rng) < 0.1) std::fill_n(c.mask_bytes.begin() + r * s.len_k, s.len_k, 0);
  }
  ExplicitMask e;
  e.data = c.mask_bytes.data();
  e.size = static_cast<int64_t>(c.mask_bytes.size());
  e.stride_row = s.len_k;
  e.stride_head = per_head;
  e.stride_batch = s.heads_q * per_head;
  c.params.mask.explicit_mask = e;
}

// Fills `c` with a random problem whose reference cost (Lq * Lk * D * B * Hq) stays below
// max_work, so the double-precision reference keeps the test fast.
inline void MakeRandomCase(std::mt19937_64& rng, AttentionCase& c, double max_work = 4e6) {
  std::uniform_real_distribution<double> u01(0, 1);
  AttentionShape& s = c.shape;
  for (;;) {
    s.len_q = Pick(rng, {1, 2, 7, 59, 97, 113, 256, 1025});
    s.len_k = u01(rng) < 0.5 ? s.len_q : Pick(rng, {1, 2, 7, 59, 97, 113, 256, 1025});
    s.head_dim = Pick(rng, {1, 8, 59, 64, 80, 128, 256});
    const int64_t ratio = Pick(rng, {1, 2, 4, 8});
    s.heads_kv = Pick(rng, {1, 1, 2});
    s.heads_q = s.heads_kv * ratio;
    s.batch = Pick(rng, {1, 1, 2});
    const double work = double(s.len_q) * s.len_k * s.head_dim * s.heads_q * s.batch;
    if (work <= max_work) break;
  }
  AttentionMask& m = c.params.mask;
  m.causal = u01(rng) < 0.5;
  if (u01(rng) < 0.35) {
    m.window_left = Pick(rng, {0, 1, 3, 16, 23, 24, 25, 63, 64, 65, 70, 128, 300});
    m.window_right = m.causal ? -1 : Pick(rng, {-1, 0, 2, 40, 63, 64});
  } else if (!m.causal && u01(rng) < 0.15) {
    m.window_right = Pick(rng, {0, 5});
  }
  if (u01(rng) < 0.3) m.n_sink = Pick(rng, {1, 4, 64});
  // Global tokens (Longformer): mostly with a window, where they matter; counts around the
  // 64-key block and the query chunk boundaries.
  if (u01(rng) < (m.window_left >= 0 || m.window_right >= 0 ? 0.5 : 0.15)) {
    m.n_global = Pick(rng, {1, 2, 7, 63, 64, 65, 100});
  }
  m.mask_first_key = u01(rng) < 0.2;
  if (u01(rng) < 0.15) AddRandomExplicitMask(rng, c);
  const double v = u01(rng);
  c.params.softmax = v < 0.35   ? SoftmaxKind::kStandard
                     : v < 0.5  ? SoftmaxKind::kSoftmax1
                     : v < 0.65 ? SoftmaxKind::kSinkLogit
                     : v < 0.8  ? SoftmaxKind::kSigmoid
                                : SoftmaxKind::kSoftpick;
  // Occasionally huge logits to stress the running max: s ~ logit_scale * N(0, 1), so |s| ~ 1e4.
  const double r = u01(rng);
  c.logit_scale = r < 0.07 ? 1e4 : r < 0.15 ? 100.0 : r < 0.3 ? 5.0 : 1.0;
  FillCase(rng, c, static_cast<Layout>(Pick(rng, {0, 1, 2})));
}

}  // namespace attnlab::testing

#endif  // ATTNLAB_ENGINE_ATTENTION_TEST_UTIL_H_

namespace attnlab::testing {

// The truth (double-precision reference on the same fp32 inputs) plus, for every output element,
// a magnitude M: the same computation with every term replaced by its absolute value (Higham's
// running error bound). An fp32 kernel's error on an element is then bounded by
//   C * u * kappa * M,   u = 2^-24,
// where kappa = scale * max_ij sum_d |q_id k_jd| + log2(len_k + 1) + 1 is the condition of the
// logits (a logit computed in fp32 is off by about u times its term-wise magnitude, and that
// error moves every probability by the same relative amount) plus the summation depth.
struct AttentionTruth {
  Tensor4<double> out, dq, dk, dv;
  std::vector<double> lse, d_sink;
  // lse's magnitude per row: 1 + |lse|, plus for softpick sum_j E_j (d lse / d s_j = +-E_j).
  std::vector<double> m_lse;
  Tensor4<double> m_out, m_dq, m_dk, m_dv;  // magnitudes
  std::vector<double> m_sink;
  double kappa = 1;
};

inline void ComputeTruth(const AttentionCase& c, bool with_backward, AttentionTruth& t) {
  const AttentionShape& s = c.shape;
  const Tensor4<double> qd = c.q.Cast<double>(), kd = c.k.Cast<double>(), vd = c.v.Cast<double>();
  const Tensor4<double> dod = c.dout.Cast<double>();
  std::vector<double> sinks(c.sinks.begin(), c.sinks.end());
  const double scale = c.params.scale ? *c.params.scale : 1.0 / std::sqrt(double(s.head_dim));
  const Layout lay = c.q.layout;
  t.out.Init(s.batch, s.heads_q, s.len_q, s.head_dim, lay);
  t.lse.assign(s.batch * s.heads_q * s.len_q, 0);
  internal::AttentionForwardReferenceImpl<double, double>(s, c.params, scale, sinks.data(),
                                                          qd.cview(), kd.cview(), vd.cview(),
                                                          t.out.view, t.lse.data(), nullptr);
  if (with_backward) {
    t.dq.Init(s.batch, s.heads_q, s.len_q, s.head_dim, lay);
    t.dk.Init(s.batch, s.heads_kv, s.len_k, s.head_dim, lay);
    t.dv.Init(s.batch, s.heads_kv, s.len_k, s.head_dim, lay);
    t.d_sink.assign(s.heads_q, 0);
    internal::AttentionBackwardReferenceImpl<double, double>(
        s, c.params, scale, sinks.data(), qd.cview(), kd.cview(), vd.cview(), dod.cview(), t.dq.view,
        t.dk.view, t.dv.view, t.d_sink.data());
  }
  // Magnitudes, row by row.
  t.m_out.Init(s.batch, s.heads_q, s.len_q, s.head_dim, lay);
  t.m_dq.Init(s.batch, s.heads_q, s.len_q, s.head_dim, lay);
  t.m_dk.Init(s.batch, s.heads_kv, s.len_k, s.head_dim, lay);
  t.m_dv.Init(s.batch, s.heads_kv, s.len_k, s.head_dim, lay);
  t.m_sink.assign(s.heads_q, 0);
  t.m_lse.assign(t.lse.size(), 0);
  const int64_t group = s.heads_q / s.heads_kv;
  const bool sigmoid = c.params.softmax == SoftmaxKind::kSigmoid;
  const bool softpick = c.params.softmax == SoftmaxKind::kSoftpick;
  double max_cond = 0;
  std::vector<double> p(s.len_k), dp(s.len_k), sc(s.len_k), e(s.len_k);
  for (int64_t b = 0; b < s.batch; ++b) {
    for (int64_t h = 0; h < s.heads_q; ++h) {
      const int64_t hk = h / group;
      for (int64_t i = 0; i < s.len_q; ++i) {
        double row_lse;
        internal::ReferenceRowProbs<double, double>(s, c.params, scale, sinks.data(), qd.cview(),
                                                    kd.cview(), b, h, i, p, &row_lse, &sc);
        // Softpick: a score's fp32 error moves its term by about u kappa E_j (E_j = e^s_j / Z,
        // which bounds P_j) and, through Z, every weight of the row by u kappa sum_j E_j. So its
        // magnitudes use (E_j + P_j sum E) for P_j, and for the backward E_j (1 + sum E).
        double e_sum = 0;
        if (softpick) {
          for (int64_t j = 0; j < s.len_k; ++j) {
            e[j] = std::isinf(sc[j]) && sc[j] < 0 ? 0.0 : std::exp(sc[j] - row_lse);
            e_sum += e[j];
          }
          for (int64_t j = 0; j < s.len_k; ++j) {
            e[j] = e[j] + p[j] * e_sum;
          }
        }
        const auto& pm = softpick ? e : p;  // the weight magnitudes
        const int64_t row = (b * s.heads_q + h) * s.len_q + i;
        t.m_lse[row] = 1 + std::abs(t.lse[row]) + e_sum;
        double dsum = 0, dsum_abs = 0;
        for (int64_t j = 0; j < s.len_k; ++j) {
          dp[j] = 0;
          if (pm[j] == 0) continue;
          double cond = 0, dpa = 0;
          for (int64_t d = 0; d < s.head_dim; ++d) {
            cond += std::abs(qd.at(b, h, i, d) * kd.at(b, hk, j, d));
            dpa += std::abs(dod.at(b, h, i, d) * vd.at(b, hk, j, d));
          }
          max_cond = std::max(max_cond, scale * cond);
          dp[j] = dpa;
          dsum += pm[j] * dpa;
        }
        dsum_abs = dsum;
        if (c.params.softmax == SoftmaxKind::kSinkLogit && !std::isinf(row_lse)) {
          t.m_sink[h] += std::exp(sinks[h] - row_lse) * dsum_abs;
        }
        for (int64_t j = 0; j < s.len_k; ++j) {
          if (pm[j] == 0) continue;
          const double ds = sigmoid    ? dp[j] * p[j]
                            : softpick ? pm[j] * (dp[j] + dsum_abs) * (1 + e_sum)
                                       : p[j] * (dp[j] + dsum_abs);
          for (int64_t d = 0; d < s.head_dim; ++d) {
            t.m_out.at(b, h, i, d) += pm[j] * std::abs(vd.at(b, hk, j, d));
            t.m_dq.at(b, h, i, d) += scale * ds * std::abs(kd.at(b, hk, j, d));
            t.m_dk.at(b, hk, j, d) += scale * ds * std::abs(qd.at(b, h, i, d));
            t.m_dv.at(b, hk, j, d) += pm[j] * std::abs(dod.at(b, h, i, d));
          }
        }
      }
    }
  }
  t.kappa = max_cond + std::log2(double(s.len_k) + 1) + 1;
}

// Largest ratio |got - truth| / (C u kappa M + tiny) over the elements; <= 1 passes.
template <typename A>
double BoundRatio(const Tensor4<A>& got, const Tensor4<double>& truth, const Tensor4<double>& mag,
                  double c_u_kappa) {
  double worst = 0;
  got.ForEach([&](int64_t b, int64_t h, int64_t t, int64_t d) {
    const double g = static_cast<double>(got.at(b, h, t, d));
    if (!std::isfinite(g)) {
      worst = INFINITY;
      return;
    }
    const double err = std::abs(g - truth.at(b, h, t, d));
    const double tol = c_u_kappa * mag.at(b, h, t, d) + 1e-30;
    worst = std::max(worst, err / tol);
  });
  return worst;
}

}  // namespace attnlab::testing
