// GateStatsAccumulator on hand-computed values, and `analyze`'s gate statistics on a model whose
// gates are known exactly (W_g = 0, so g = sigmoid(b_g) on every token).
#include "diagnostics/gate_stats.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "diagnostics/analysis.h"

namespace attnlab {
namespace {

TEST(GateStats, HeadwiseAndElementwiseByHand) {
  // Headwise: 2 heads, 3 rows.
  auto hw = GateStatsAccumulator::Create(2, 2);
  ASSERT_TRUE(hw.ok());
  const std::vector<float> g1 = {0.5f, 0.05f, 0.7f, 0.2f, 0.9f, 0.08f};
  ASSERT_TRUE(hw.value().Add(g1.data(), 3).ok());
  std::vector<GateHeadStats> s = hw.value().Finish();
  ASSERT_EQ(s.size(), 2u);
  EXPECT_NEAR(s[0].mean, 0.7, 1e-7);
  EXPECT_NEAR(s[0].std, std::sqrt((0.04 + 0.0 + 0.04) / 3), 1e-7);
  EXPECT_EQ(s[0].share_closed, 0.0);
  EXPECT_NEAR(s[1].mean, (0.05 + 0.2 + 0.08) / 3, 1e-7);
  EXPECT_NEAR(s[1].share_closed, 2.0 / 3, 1e-12);
  EXPECT_EQ(s[1].values, 3);
  // Elementwise: 2 heads of 2 channels; a head's values pool its channels and rows, in two calls.
  auto ew = GateStatsAccumulator::Create(2, 4);
  ASSERT_TRUE(ew.ok());
  const std::vector<float> r0 = {0.0f, 1.0f, 0.25f, 0.25f}, r1 = {1.0f, 0.0f, 0.75f, 0.75f};
  ASSERT_TRUE(ew.value().Add(r0.data(), 1).ok());
  ASSERT_TRUE(ew.value().Add(r1.data(), 1).ok());
  s = ew.value().Finish();
  EXPECT_DOUBLE_EQ(s[0].mean, 0.5);
  EXPECT_DOUBLE_EQ(s[0].std, 0.5);
  EXPECT_DOUBLE_EQ(s[0].share_closed, 0.5);
  EXPECT_DOUBLE_EQ(s[1].mean, 0.5);
  EXPECT_DOUBLE_EQ(s[1].std, 0.25);
  EXPECT_EQ(s[1].values, 4);
}

TEST(GateStats, EmptyIsNaNAndBadShapesAreErrors) {
  auto a = GateStatsAccumulator::Create(3, 3);
  ASSERT_TRUE(a.ok());
  for (const GateHeadStats& s : a.value().Finish()) {
    EXPECT_TRUE(std::isnan(s.mean) && std::isnan(s.std) && std::isnan(s.share_closed));
  }
  EXPECT_FALSE(a.value().Add(nullptr, 2).ok());
  EXPECT_FALSE(a.value().Add(nullptr, -1).ok());
  EXPECT_FALSE(GateStatsAccumulator::Create(0, 4).ok());
  EXPECT_FALSE(GateStatsAccumulator::Create(4, 6).ok());
  EXPECT_FALSE(GateStatsAccumulator::Create(4, 2).ok());
}

// analyze on a gated model with W_g = 0: every token's gate is sigmoid(b_g), so each head's mean
// and spread are those of sigmoid over its channels' biases, whatever the text.
TEST(GateStats, AnalyzeReportsTheModelsGates) {
  for (const bool elementwise : {false, true}) {
    ModelConfig c;
    c.vocab_size = 40, c.context = 64, c.d_model = 16, c.n_layer = 2, c.n_head = 4;
    c.output_gate = true, c.gate_elementwise = elementwise, c.init_std = 0.2f;
    auto g = Gpt::Create(c);
    ASSERT_TRUE(g.ok());
    g.value()->params().Initialize(c, 3);
    const int64_t G = c.gate_dim(), per_head = G / c.n_head;
    std::vector<std::vector<float>> bias(c.n_layer, std::vector<float>(G));
    std::mt19937 rng(4);
    std::uniform_real_distribution<float> u(-3, 3);
    for (int64_t l = 0; l < c.n_layer; ++l) {
      const LayerParams& lp = g.value()->params().ptrs().layers[l];
      std::fill(lp.gate_w, lp.gate_w + c.d_model * G, 0.0f);
      for (int64_t e = 0; e < G; ++e) lp.gate_b[e] = bias[l][e] = u(rng);
    }
    std::vector<int32_t> tokens(100);
    for (auto& x : tokens) x = rng() % 40;
    AnalysisOptions ao;
    ao.window = 50;
    ao.pattern_sequences = 0;
    auto r = AnalyzeModel(*g.value(), tokens, ao);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    for (int64_t l = 0; l < c.n_layer; ++l) {
      ASSERT_EQ(r.value().layers[l].gate.size(), static_cast<size_t>(c.n_head));
      for (int64_t h = 0; h < c.n_head; ++h) {
        double sum = 0, sum_sq = 0;
        for (int64_t e = h * per_head; e < (h + 1) * per_head; ++e) {
          const double s = 1.0 / (1.0 + std::exp(-double(bias[l][e])));
          sum += s, sum_sq += s * s;
        }
        const double mean = sum / per_head;
        const double std = std::sqrt(std::max(0.0, sum_sq / per_head - mean * mean));
        const GateHeadStats& got = r.value().layers[l].gate[h];
        EXPECT_NEAR(got.mean, mean, 1e-6) << "layer " << l << " head " << h;
        EXPECT_NEAR(got.std, std, 1e-5) << "layer " << l << " head " << h;
        EXPECT_EQ(got.values, 100 * per_head);
        // A constant gate scales the first-token mass by itself: mean_i g P[i, 0] = g alpha_1.
        const double a1 = r.value().layers[l].attention.heads[h].alpha[0];
        EXPECT_NEAR(r.value().layers[l].extreme.heads[h].gated_first_mass, mean * a1,
                    1e-6 * std::max(1e-3, a1))
            << "layer " << l << " head " << h;
      }
    }
    const nlohmann::json j = AnalysisToJson(r.value(), ao);
    EXPECT_TRUE(j["layers"][0]["heads"][0].contains("gate"));
    EXPECT_TRUE(j["layers"][0]["heads"][0]["gate"]["first_mass"].is_number());
  }
}

}  // namespace
}  // namespace attnlab
