// Extreme-token metrics on hand-built inputs, and `analyze` on a one-layer model built so that
// head 1 is dormant (it parks on a BOS whose value is 0) and head 0 is not (uniform attention),
// where every number is known in closed form.
#include "diagnostics/extreme_tokens.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "diagnostics/analysis.h"

namespace attnlab {
namespace {

TEST(ExtremeTokens, TokenZeroNormByHand) {
  // Rows: (3, 4) norm 5, (1, 0) norm 1, (0, 3) norm 3; stride 3 (a padding column).
  const std::vector<float> x = {3, 4, 99, 1, 0, 99, 0, 3, 99};
  auto r = ComputeTokenZeroNorm(TokenMatrix{x.data(), 3, 2, 3});
  ASSERT_TRUE(r.ok());
  EXPECT_DOUBLE_EQ(r.value().norm0, 5.0);
  EXPECT_DOUBLE_EQ(r.value().mean_other, 2.0);
  EXPECT_DOUBLE_EQ(r.value().ratio, 2.5);
  const std::vector<float> zeros = {1, 1, 0, 0};
  auto z = ComputeTokenZeroNorm(TokenMatrix{zeros.data(), 2, 2, 2});
  ASSERT_TRUE(z.ok());
  EXPECT_TRUE(std::isnan(z.value().ratio));
  EXPECT_FALSE(ComputeTokenZeroNorm(TokenMatrix{x.data(), 1, 2, 3}).ok());  // one token
  const std::vector<float> nan = {1, NAN, 0, 0};
  EXPECT_FALSE(ComputeTokenZeroNorm(TokenMatrix{nan.data(), 2, 2, 2}).ok());
}

TEST(ExtremeTokens, HeadActivityByHand) {
  // 2 rows, 3 heads of 2 channels. Head 0: norm 2 per row, alpha 0.9 -> ratio 2/mean; head 1:
  // norm 0.1, alpha 0.8 -> dormant; head 2: norm 0.1 but alpha 0.2 -> active (not on a sink).
  const std::vector<float> att = {2, 0, 0.1f, 0, 0, 0.1f,  //
                                  0, 2, 0, 0.1f, 0.1f, 0};
  const std::vector<float> first = {0.9f, 0.9f, 0.8f, 0.8f, 0.2f, 0.2f};
  auto r = ClassifyHeadActivity(MakeTokenMatrix(att.data(), 2, 6), 3, first, 0.3);
  ASSERT_TRUE(r.ok());
  const double mean = (2.0 + 0.1 + 0.1) / 3;
  EXPECT_NEAR(r.value()[0].output_norm_ratio, 2.0 / mean, 1e-6);
  EXPECT_NEAR(r.value()[1].output_norm_ratio, 0.1 / mean, 1e-6);
  EXPECT_NEAR(r.value()[1].alpha_1, 0.8, 1e-7);
  EXPECT_FALSE(r.value()[0].dormant);
  EXPECT_TRUE(r.value()[1].dormant);
  EXPECT_FALSE(r.value()[2].dormant);
  EXPECT_FALSE(ClassifyHeadActivity(MakeTokenMatrix(att.data(), 2, 6), 4, first, 0.3).ok());
  EXPECT_FALSE(ClassifyHeadActivity(MakeTokenMatrix(att.data(), 2, 6), 3,
                                    std::span<const float>(first).first(5), 0.3)
                   .ok());
}

// From sums (what analyze accumulates chunk by chunk): the same classification as from rows.
TEST(ExtremeTokens, HeadActivityFromSumsMatchesRows) {
  const std::vector<float> att = {2, 0, 0.1f, 0, 0, 0.1f,  //
                                  0, 2, 0, 0.1f, 0.1f, 0};
  const std::vector<float> first = {0.9f, 0.9f, 0.8f, 0.8f, 0.2f, 0.2f};
  auto rows = ClassifyHeadActivity(MakeTokenMatrix(att.data(), 2, 6), 3, first, 0.3);
  const std::vector<double> first_sum = {0.9f + 0.9f, 0.8f + 0.8f, 0.2f + 0.2f};
  const std::vector<double> norm_sum = {4.0, 0.1f + 0.1f, 0.1f + 0.1f};  // per row: 2, 0.1, 0.1
  auto sums = ClassifyHeadActivityFromSums(first_sum, norm_sum, 2, 0.3);
  ASSERT_TRUE(rows.ok() && sums.ok());
  for (int h = 0; h < 3; ++h) {
    EXPECT_NEAR(sums.value()[h].alpha_1, rows.value()[h].alpha_1, 1e-12);
    EXPECT_NEAR(sums.value()[h].output_norm_ratio, rows.value()[h].output_norm_ratio, 1e-7);
    EXPECT_EQ(sums.value()[h].dormant, rows.value()[h].dormant);
  }
  EXPECT_FALSE(ClassifyHeadActivityFromSums(first_sum, std::span<const double>(norm_sum).first(2), 2, 0.3).ok());
  EXPECT_FALSE(ClassifyHeadActivityFromSums(first_sum, norm_sum, 0, 0.3).ok());
  EXPECT_FALSE(ClassifyHeadActivityFromSums({}, {}, 2, 0.3).ok());
}

// One layer, no norms, no MLP, no positions, C = 8 = 2 heads of 4. Token 9 is the BOS, embedded
// as 10 e_0; every other token has channel 0 = 0. Head 1: q = (5, 0, 0, 0) (a bias), k = x_0 e_0,
// so the BOS scores 25 and every other key 0: all its attention on the BOS (P_other ~ e^-25).
// Head 0: q = 0, uniform attention. Both heads' values copy channels 1..4, which are 0 for the
// BOS: value drain 0 for both kv heads; head 1 outputs ~0 (dormant), head 0 the mean of the
// values seen (active). The output projection is 0, so the layer's output is its input: the
// residual peak is |e_BOS| / mean |e_t| over the window's other tokens.
TEST(ExtremeTokens, AnalyzeFindsTheDormantHeadOfAConstructedModel) {
  ModelConfig c;
  c.vocab_size = 10, c.context = 40, c.d_model = 8, c.n_layer = 1, c.n_head = 2;
  c.mlp = false, c.norm = NormPlacement::kNone, c.position = PositionEncoding::kNone;
  auto created = Gpt::Create(c);
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  Gpt& g = *created.value();
  std::fill(g.params().data(), g.params().data() + g.params().size(), 0.0f);
  const int64_t C = 8, Q = c.qkv_dim(), hd = 4;
  float* wte = g.params().Slice(*g.params().Find("wte"));
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0, 1);
  for (int64_t t = 0; t < 9; ++t) {
    for (int64_t ch = 1; ch < C; ++ch) wte[t * C + ch] = nd(rng);
  }
  wte[9 * C + 0] = 10.0f;
  const LayerParams& lp = g.params().ptrs().layers[0];
  lp.qkv_b[1 * hd + 0] = 5.0f;                          // head 1's query
  lp.qkv_w[0 * Q + (2 + 1) * hd + 0] = 1.0f;            // head 1's key: x_0
  for (int64_t h = 0; h < 2; ++h) {
    for (int64_t d = 0; d < hd; ++d) lp.qkv_w[(1 + d) * Q + (4 + h) * hd + d] = 1.0f;  // v = x_1..4
  }
  std::vector<int32_t> tokens(78);
  for (auto& x : tokens) x = static_cast<int32_t>(rng() % 9);
  AnalysisOptions ao;
  ao.window = 40;  // 39 text tokens after the BOS, 2 windows
  ao.bos = 9;
  ao.pattern_sequences = 0;
  auto r = AnalyzeModel(g, tokens, ao);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const ExtremeTokens& x = r.value().layers[0].extreme;
  ASSERT_EQ(x.windows, 2);
  EXPECT_EQ(x.heads[1].dormant_share, 1.0);
  EXPECT_EQ(x.heads[0].dormant_share, 0.0);
  EXPECT_LT(x.heads[1].output_norm_ratio, 1e-6);
  EXPECT_NEAR(x.heads[0].output_norm_ratio, 2.0, 1e-5);  // head 1 adds ~0 to the mean
  ASSERT_EQ(x.value_drain.size(), 2u);
  EXPECT_EQ(x.value_drain[0], 0.0);
  EXPECT_EQ(x.value_drain[1], 0.0);
  double peak = 0;
  for (int w = 0; w < 2; ++w) {
    double sum = 0;
    for (int i = 0; i < 39; ++i) {
      const float* e = wte + tokens[w * 39 + i] * C;
      double n = 0;
      for (int64_t ch = 0; ch < C; ++ch) n += double(e[ch]) * e[ch];
      sum += std::sqrt(n);
    }
    peak += 10.0 / (sum / 39) / 2;
  }
  EXPECT_NEAR(x.residual_peak.ratio, peak, 1e-5 * peak);
  EXPECT_NEAR(x.residual_peak.norm0, 10.0, 1e-5);
}

}  // namespace
}  // namespace attnlab
