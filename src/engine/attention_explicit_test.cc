// The explicit steps (scores -> probabilities -> product with V) and the streamed row statistics
// against the double-precision reference, over the random cases of the kernel tests (every
// mask, softmax variant, GQA ratio, layout and awkward length, all-masked rows).
#include "engine/attention_explicit.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "engine/attention_reference.h"
#include "engine/attention_test_util.h"

namespace attnlab {
namespace {

using testing::AttentionCase;
using testing::AttentionTruth;
using testing::Tensor4;

constexpr double kU = 1.0 / (1 << 24);
constexpr double kC = 16.0;  // as the flash kernels' tests: fp32 scores and products

TEST(AttentionExplicit, ComposedStepsAreTheReferenceForward) {
  std::mt19937_64 rng(20261202);
  for (int trial = 0; trial < 120; ++trial) {
    AttentionCase c;
    testing::MakeRandomCase(rng, c, 1.5e6);
    SCOPED_TRACE(c.Describe());
    AttentionTruth t;
    testing::ComputeTruth(c, /*with_backward=*/false, t);
    const AttentionShape& s = c.shape;
    const int64_t rows = s.batch * s.heads_q * s.len_q;
    std::vector<float> scores(rows * s.len_k), lse(rows);
    ASSERT_TRUE(AttentionScores(s, c.params, c.q.cview(), c.k.cview(), scores).ok());
    // Visibility is exactly the reference's: -inf where its probability is structurally 0.
    ASSERT_TRUE(AttentionProbsFromScores(s, c.params, scores, scores, lse).ok());  // in place
    Tensor4<float> out;
    out.Init(s.batch, s.heads_q, s.len_q, s.head_dim, c.q.layout);
    ASSERT_TRUE(AttentionApplyProbs(s, scores, c.v.cview(), out.view).ok());
    const double tol = kC * kU * t.kappa;
    EXPECT_LE(testing::BoundRatio(out, t.out, t.m_out, tol), 1.0);
    if (c.params.softmax == SoftmaxKind::kSigmoid) continue;
    for (int64_t r = 0; r < rows; ++r) {
      if (std::isinf(t.lse[r])) {
        EXPECT_TRUE(std::isinf(lse[r]) && lse[r] < 0) << "row " << r;
      } else {
        EXPECT_NEAR(lse[r], t.lse[r], tol * t.m_lse[r]) << "row " << r;
      }
    }
  }
}

TEST(AttentionExplicit, EditedScoresMaskAKey) {
  // Setting column 0 to -inf is mask_first_key, as the mission's documents mask the first token.
  std::mt19937_64 rng(7);
  AttentionCase c;
  c.shape = AttentionShape{1, 4, 2, 59, 59, 16};
  c.params.mask.causal = true;
  testing::FillCase(rng, c, testing::Layout::kContiguous);
  const AttentionShape& s = c.shape;
  std::vector<float> scores(s.heads_q * s.len_q * s.len_k);
  ASSERT_TRUE(AttentionScores(s, c.params, c.q.cview(), c.k.cview(), scores).ok());
  for (int64_t r = 0; r < s.heads_q * s.len_q; ++r) {
    scores[r * s.len_k] = -std::numeric_limits<float>::infinity();
  }
  ASSERT_TRUE(AttentionProbsFromScores(s, c.params, scores, scores).ok());
  Tensor4<float> got;
  got.Init(1, s.heads_q, s.len_q, s.head_dim, testing::Layout::kContiguous);
  ASSERT_TRUE(AttentionApplyProbs(s, scores, c.v.cview(), got.view).ok());
  AttentionParams masked = c.params;
  masked.mask.mask_first_key = true;
  Tensor4<float> want;
  want.Init(1, s.heads_q, s.len_q, s.head_dim, testing::Layout::kContiguous);
  ASSERT_TRUE(AttentionForwardReference(s, masked, c.q.cview(), c.k.cview(), c.v.cview(),
                                        want.view).ok());
  EXPECT_LE(testing::MaxAbsDiff(got, want), 1e-5);
  for (int64_t d = 0; d < s.head_dim; ++d) EXPECT_EQ(got.at(0, 0, 0, d), 0.0f);  // row 0: nothing
}

TEST(AttentionExplicit, RowStatsMatchTheReferenceRows) {
  std::mt19937_64 rng(99);
  for (int trial = 0; trial < 120; ++trial) {
    AttentionCase c;
    testing::MakeRandomCase(rng, c, 1.5e6);
    SCOPED_TRACE(c.Describe());
    AttentionTruth t;
    testing::ComputeTruth(c, false, t);
    const AttentionShape& s = c.shape;
    const int64_t rows = s.batch * s.heads_q * s.len_q;
    std::vector<float> lse(rows), first(rows), ent(rows);
    ASSERT_TRUE(AttentionRowStats(s, c.params, c.q.cview(), c.k.cview(), lse, first, ent).ok());
    const Tensor4<double> qd = c.q.Cast<double>(), kd = c.k.Cast<double>();
    const std::vector<double> sinks(c.sinks.begin(), c.sinks.end());
    const double scale = 1.0 / std::sqrt(double(s.head_dim));
    std::vector<double> p(s.len_k), sc(s.len_k);
    // A logit is off by ~u kappa in fp32, which moves log p by ~2 u kappa; the entropy sums
    // p |log p| terms, bounded by (1 + max |log p|) over the row.
    const double tol = kC * kU * t.kappa;
    for (int64_t b = 0, r = 0; b < s.batch; ++b) {
      for (int64_t h = 0; h < s.heads_q; ++h) {
        for (int64_t i = 0; i < s.len_q; ++i, ++r) {
          double row_lse = 0;
          internal::ReferenceRowProbs<double, double>(s, c.params, scale, sinks.data(),
                                                      qd.cview(), kd.cview(), b, h, i, p,
                                                      &row_lse, &sc);
          // Softpick's P_0 moves by about u kappa E_0, E_0 = e^s_0 / Z (attention_test_util.h).
          const double mag = c.params.softmax == SoftmaxKind::kSoftpick && std::isfinite(sc[0])
                                 ? p[0] + std::exp(sc[0] - row_lse)
                                 : p[0];
          EXPECT_NEAR(first[r], p[0], tol * (mag + 1e-30) + 1e-7) << "row " << r;
          if (IsUnnormalisedWeights(c.params.softmax)) {
            EXPECT_TRUE(std::isnan(ent[r]));
            continue;
          }
          if (std::isinf(row_lse)) {
            EXPECT_TRUE(std::isinf(lse[r]) && lse[r] < 0);
          } else {
            EXPECT_NEAR(lse[r], row_lse, tol * (1 + std::abs(row_lse)));
          }
          double h_true = 0, max_log = 0;
          for (double x : p) {
            if (x > 0) h_true -= x * std::log(x), max_log = std::max(max_log, -std::log(x));
          }
          EXPECT_NEAR(ent[r], h_true, 2 * tol * (1 + max_log) + 1e-6) << "row " << r;
        }
      }
    }
  }
}

TEST(AttentionExplicit, RefusesWrongSizes) {
  AttentionShape s{1, 2, 1, 3, 4, 8};
  std::vector<float> q(2 * 3 * 8), k(4 * 8), map(2 * 3 * 4 - 1);
  const auto qv = ContiguousView<const float>(q.data(), 1, 2, 3, 8);
  const auto kv = ContiguousView<const float>(k.data(), 1, 1, 4, 8);
  EXPECT_FALSE(AttentionScores(s, AttentionParams{}, qv, kv, map).ok());
  std::vector<float> ok_map(2 * 3 * 4), small(5);
  EXPECT_FALSE(AttentionProbsFromScores(s, AttentionParams{}, ok_map, ok_map, small).ok());
  s.heads_kv = 3;  // 2 query heads cannot share 3 kv heads
  EXPECT_FALSE(AttentionRowStats(s, AttentionParams{}, qv, kv, {}, {}, {}).ok());
}

}  // namespace
}  // namespace attnlab
