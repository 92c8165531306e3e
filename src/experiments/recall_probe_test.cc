// The dilution probe: the engine's kernels agree with the plain loops, linear attention's mass on
// the matching key follows r / (r + N - 1) (slope -1 in log-log), softmax keeps its mass far
// longer, and the helpers (r(beta) in closed form at beta = 1, the log-log slope) are exact.
#include "experiments/recall_probe.h"

#include <gtest/gtest.h>

#include <cmath>

namespace attnlab::experiments {
namespace {

TEST(RecallProbeTest, LinearRatioClosedForm) {
  // x ~ N(0, 1), phi = elu + 1: E[phi] = pdf(0) + 1/2 + e^(1/2) Phi(-1),
  // E[phi^2] = 1 + 2 pdf(0) + e^2 Phi(-2) (Phi the normal cdf).
  const double pdf0 = 1 / std::sqrt(2 * 3.141592653589793);
  auto cdf = [](double x) { return 0.5 * std::erfc(-x / std::sqrt(2.0)); };
  const double m1 = pdf0 + 0.5 + std::exp(0.5) * cdf(-1), m2 = 1 + 2 * pdf0 + std::exp(2.0) * cdf(-2);
  EXPECT_NEAR(LinearTargetRatio(1.0), m2 / (m1 * m1), 1e-9);
  EXPECT_NEAR(LinearTargetRatio(1.0), 1.459, 1e-3);
  EXPECT_GT(LinearTargetRatio(2.0), LinearTargetRatio(1.0));  // a sharper query helps a little
  EXPECT_LT(LinearTargetRatio(2.0), 3.0);                     // but only by a constant
}

TEST(RecallProbeTest, PredictedSoftmaxMass) {
  // Few keys: the target dominates; many: 1 / (1 + (N - 1) exp(-margin)) with the margin
  // sqrt(d) - 1/2 at |k|^2 = d, lowered on average by the spread of |k|^2.
  EXPECT_GT(PredictedSoftmaxMass(2, 1.0, 64), 0.99);
  const double typical = 1 / (1 + 4095 * std::exp(0.5 - 8.0));  // 0.31
  EXPECT_NEAR(PredictedSoftmaxMass(4096, 1.0, 64), typical, 0.1);
  EXPECT_GT(PredictedSoftmaxMass(4096, 2.0, 64), 0.9);  // sharper: the margin doubles
  for (int64_t n : {16, 256, 4096}) {  // decreasing in N
    EXPECT_GT(PredictedSoftmaxMass(n, 1.0, 64), PredictedSoftmaxMass(4 * n, 1.0, 64));
  }
}

TEST(RecallProbeTest, LogLogSlope) {
  EXPECT_NEAR(LogLogSlope({1, 2, 4, 8}, {3, 1.5, 0.75, 0.375}), -1.0, 1e-12);
  EXPECT_NEAR(LogLogSlope({10, 100}, {5, 500}), 2.0, 1e-12);
  EXPECT_TRUE(std::isnan(LogLogSlope({1, 2}, {1, 0})));  // one usable point
}

TEST(RecallProbeTest, LinearDilutesAsOneOverN) {
  DilutionOptions o;
  o.lengths = {16, 64, 256, 1024};
  o.betas = {1.0, 2.0};
  o.seeds = 8;
  auto r = RunDilutionProbe(o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->points.size(), 8u);
  EXPECT_LT(r->max_rel_diff, 1e-3) << "the engine's kernels disagree with the plain loops";
  std::vector<double> n, lin;
  for (const DilutionPoint& p : r->points) {
    EXPECT_NEAR(p.softmax, p.softmax_plain, 1e-4 * p.softmax_plain + 1e-9);
    EXPECT_NEAR(p.linear, p.linear_plain, 1e-4 * p.linear_plain);
    // The prediction is an expectation of a ratio taken as a ratio of expectations: within 15%.
    EXPECT_NEAR(p.linear / p.predicted_linear, 1.0, 0.15) << "N " << p.n << " beta " << p.beta;
    // Softmax's mass on one seed swings with |k_t|^2; 8 seeds leave ~0.1 of noise at N = 1024.
    EXPECT_NEAR(p.softmax, p.predicted_softmax, 0.2) << "N " << p.n << " beta " << p.beta;
    if (p.n >= 64) {
      EXPECT_GT(p.softmax, 10 * p.linear) << "N " << p.n;
    }
    if (p.beta == 1.0) n.push_back(double(p.n)), lin.push_back(p.linear);
  }
  EXPECT_NEAR(LogLogSlope(n, lin), -1.0, 0.05);
  EXPECT_GT(r->points[3].softmax, 0.4);  // beta 1, N 1024: below exp(sqrt(64)) ~ 3000
  EXPECT_GT(r->points[7].softmax, 0.99);  // beta 2: the margin doubles in the exponent
}

TEST(RecallProbeTest, DeterministicAndValidated) {
  DilutionOptions o;
  o.lengths = {8, 32};
  o.seeds = 3;
  auto a = RunDilutionProbe(o), b = RunDilutionProbe(o);
  ASSERT_TRUE(a.ok() && b.ok());
  for (size_t i = 0; i < a->points.size(); ++i) {
    EXPECT_EQ(a->points[i].softmax, b->points[i].softmax);
    EXPECT_EQ(a->points[i].linear, b->points[i].linear);
  }
  o.lengths = {0};
  EXPECT_FALSE(RunDilutionProbe(o).ok());
  o.lengths = {4};
  o.head_dim = 2;  // the softmax prediction needs d >= 3
  EXPECT_FALSE(RunDilutionProbe(o).ok());
  o.head_dim = 64;
  o.lengths = {4};
  o.betas = {0.0};
  EXPECT_FALSE(RunDilutionProbe(o).ok());
}

}  // namespace
}  // namespace attnlab::experiments
