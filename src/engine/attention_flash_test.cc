// Flash kernels against the reference twin over random configurations (attention_test_util.h
// draws them: every mask and softmax variant, GQA ratios, awkward lengths and head dims, three
// memory layouts, fully masked rows, logits up to ~1e4, sink logits in [-10, 10]).
//
// Tolerance, derived from fp32 precision (see AttentionTruth): every element must satisfy
//   |flash - truth| <= kC * u * kappa * M
// with u = 2^-24, kappa the condition of the case's logits plus the summation depth, and M the
// element's term-wise magnitude. kC = 16 covers the folded scale * log2(e) rounding, exp2's
// 2-ulp polynomial, the final normalisation and lse conversion. A fully masked row has M = 0,
// so it must be exactly zero.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <random>

#include "attnlab/attention.h"
#include "engine/attention_test_util.h"

namespace attnlab {
namespace {

using testing::AttentionCase;
using testing::AttentionTruth;
using testing::BoundRatio;
using testing::Tensor4;

constexpr double kU = 1.0 / (1 << 24);
constexpr double kC = 16.0;

int TrialsFromEnv(int dflt) {
  const char* e = std::getenv("ATTNLAB_TEST_TRIALS");
  return e ? std::atoi(e) : dflt;
}
uint64_t SeedFromEnv(uint64_t dflt) {
  const char* e = std::getenv("ATTNLAB_TEST_SEED");
  return e ? std::strtoull(e, nullptr, 10) : dflt;
}

double LseRatio(const std::vector<float>& got, const std::vector<double>& truth, double c_u_kappa) {
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isinf(truth[i]) || std::isinf(got[i]) || std::isnan(got[i])) {
      if (got[i] != truth[i]) return INFINITY;
      continue;
    }
    worst = std::max(worst, std::abs(got[i] - truth[i]) / (c_u_kappa * (1.0 + std::abs(truth[i]))));
  }
  return worst;
}

TEST(AttentionFlash, ForwardMatchesReferenceOnRandomConfigs) {
  std::mt19937_64 rng(SeedFromEnv(1234));
  double worst = 0;
  const int trials = TrialsFromEnv(250);
  for (int trial = 0; trial < trials; ++trial) {
    AttentionCase c;
    testing::MakeRandomCase(rng, c);
    const AttentionShape& s = c.shape;
    SCOPED_TRACE("trial " + std::to_string(trial) + ": " + c.Describe());
    AttentionTruth t;
    testing::ComputeTruth(c, /*with_backward=*/false, t);
    Tensor4<float> out;
    out.Init(s.batch, s.heads_q, s.len_q, s.head_dim, c.q.layout);
    std::vector<float> lse(s.batch * s.heads_q * s.len_q);
    ASSERT_TRUE(
        AttentionForwardFlash(s, c.params, c.q.cview(), c.k.cview(), c.v.cview(), out.view, lse)
            .ok());
    const double tol = kC * kU * t.kappa;
    const double r = BoundRatio(out, t.out, t.m_out, tol);
    EXPECT_LE(r, 1.0) << "kappa " << t.kappa;
    worst = std::max(worst, r);
    if (c.params.softmax != SoftmaxKind::kSigmoid) {
      const double lr = LseRatio(lse, t.lse, tol);
      EXPECT_LE(lr, 1.0);
      worst = std::max(worst, lr);
    }
  }
  std::printf("%d configurations; worst error / tolerance = %.3f\n", trials, worst);
}

}  // namespace
}  // namespace attnlab
