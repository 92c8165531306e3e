// The reference kernel: its gradients against central finite differences in double precision,
// and its public fp32 entry points (probabilities, validation of bad input).
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "attnlab/attention.h"
#include "engine/attention_reference.h"
#include "engine/attention_test_util.h"

namespace attnlab {
namespace {

using testing::AttentionCase;
using testing::Tensor4;

// loss = sum(dout * O) in double; its gradients are the backward's outputs for that dout.
double Loss(const AttentionCase& c, const Tensor4<double>& q, const Tensor4<double>& k,
            const Tensor4<double>& v, const std::vector<double>& sinks) {
  const AttentionShape& s = c.shape;
  Tensor4<double> out;
  out.Init(s.batch, s.heads_q, s.len_q, s.head_dim, c.q.layout);
  const double scale = 1.0 / std::sqrt(double(s.head_dim));
  internal::AttentionForwardReferenceImpl<double, double>(s, c.params, scale, sinks.data(),
                                                          q.cview(), k.cview(), v.cview(),
                                                          out.view, nullptr, nullptr);
  return testing::Dot(out, c.dout.Cast<double>());
}

// Central differences with step 1e-6: truncation error O(h^2) ~ 1e-12 and rounding error
// O(u_double / h) ~ 1e-10 relative to the loss, so agreement to 1e-6 (relative to the
// gradient's scale) leaves four orders of magnitude of margin while catching any wrong term.
TEST(AttentionReference, GradientsPassFiniteDifferencesInDouble) {
  std::mt19937_64 rng(2024);
  constexpr double kStep = 1e-6, kTol = 1e-6;
  for (int trial = 0; trial < 60; ++trial) {
    AttentionCase c;
    testing::MakeRandomCase(rng, c, /*max_work=*/3000);
    c.params.scale.reset();
    if (trial % 4 == 3) c.params.softmax = SoftmaxKind::kSoftpick;  // at least 15 softpick cases
    if (c.logit_scale > 5) continue;  // huge logits saturate softmax: FD says nothing useful
    const AttentionShape& s = c.shape;
    SCOPED_TRACE("trial " + std::to_string(trial) + ": " + c.Describe());
    Tensor4<double> q = c.q.Cast<double>(), k = c.k.Cast<double>(), v = c.v.Cast<double>();
    std::vector<double> sinks(c.sinks.begin(), c.sinks.end());
    Tensor4<double> dq, dk, dv;
    dq.Init(s.batch, s.heads_q, s.len_q, s.head_dim, c.q.layout);
    dk.Init(s.batch, s.heads_kv, s.len_k, s.head_dim, c.q.layout);
    dv.Init(s.batch, s.heads_kv, s.len_k, s.head_dim, c.q.layout);
    std::vector<double> dsink(s.heads_q, 0);
    const Tensor4<double> dout = c.dout.Cast<double>();
    internal::AttentionBackwardReferenceImpl<double, double>(
        s, c.params, 1.0 / std::sqrt(double(s.head_dim)), sinks.data(), q.cview(), k.cview(),
        v.cview(), dout.cview(), dq.view, dk.view, dv.view, dsink.data());
    double gscale = 1e-3;
    for (auto* g : {&dq, &dk, &dv}) gscale = std::max(gscale, g->MaxAbs());
    auto check = [&](Tensor4<double>& x, const Tensor4<double>& grad, const char* name) {
      x.ForEach([&](int64_t b, int64_t h, int64_t t, int64_t d) {
        double& xi = x.at(b, h, t, d);
        const double saved = xi;
        xi = saved + kStep;
        const double lp = Loss(c, q, k, v, sinks);
        xi = saved - kStep;
        const double lm = Loss(c, q, k, v, sinks);
        xi = saved;
        const double fd = (lp - lm) / (2 * kStep);
        EXPECT_NEAR(fd, grad.at(b, h, t, d), kTol * gscale)
            << name << "[" << b << "," << h << "," << t << "," << d << "]";
      });
    };
    check(q, dq, "dq");
    check(k, dk, "dk");
    check(v, dv, "dv");
    for (int64_t h = 0; h < static_cast<int64_t>(sinks.size()); ++h) {
      const double saved = sinks[h];
      sinks[h] = saved + kStep;
      const double lp = Loss(c, q, k, v, sinks);
      sinks[h] = saved - kStep;
      const double lm = Loss(c, q, k, v, sinks);
      sinks[h] = saved;
      EXPECT_NEAR((lp - lm) / (2 * kStep), dsink[h], kTol * std::max(1.0, std::abs(dsink[h])))
          << "d_sink[" << h << "]";
    }
  }
}

TEST(AttentionReference, ProbabilitiesSumToOneAndMaskedRowsAreZero) {
  // Causal + mask_first_key on 3 tokens: the documents' MaskedSelfAttention; row 0 sees nothing.
  const AttentionShape s{1, 1, 1, 3, 3, 4};
  std::vector<float> q(12), k(12), v(12), out(12, NAN), lse(3), probs(9, NAN);
  for (int i = 0; i < 12; ++i) q[i] = 0.1f * i, k[i] = -0.05f * i, v[i] = 1.0f + i;
  AttentionParams p;
  p.mask.causal = true;
  p.mask.mask_first_key = true;
  ASSERT_TRUE(AttentionForwardReference(s, p, ContiguousView<const float>(q.data(), 1, 1, 3, 4),
                                        ContiguousView<const float>(k.data(), 1, 1, 3, 4),
                                        ContiguousView<const float>(v.data(), 1, 1, 3, 4),
                                        ContiguousView<float>(out.data(), 1, 1, 3, 4), lse, probs)
                  .ok());
  for (int d = 0; d < 4; ++d) EXPECT_EQ(out[d], 0.0f);  // row 0: zeros, not NaN
  EXPECT_TRUE(std::isinf(lse[0]) && lse[0] < 0);
  EXPECT_FLOAT_EQ(probs[3 + 1], 1.0f);  // row 1 sees only key 1
  EXPECT_NEAR(probs[6 + 1] + probs[6 + 2], 1.0, 1e-6);
  EXPECT_EQ(probs[6 + 0], 0.0f);
  for (int d = 0; d < 4; ++d) EXPECT_FLOAT_EQ(out[4 + d], v[4 + d]);
}

}  // namespace
}  // namespace attnlab
