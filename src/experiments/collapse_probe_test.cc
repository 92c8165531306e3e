// The collapse probe on models whose answer is known: uniform bidirectional attention without a
// skip makes every token the same vector in one layer; ReZero at init is the identity; a stream
// shrunk below fp32's range is reported as unmeasurable (NaN / JSON null), not as collapsed.
#include "experiments/collapse_probe.h"

#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <vector>

#include "model/test_models.h"

namespace attnlab::experiments {
namespace {

// Three layers of two heads with GPT-2's MLP width (4 C) and init std 0.02, unscaled residual
// projections.
ModelConfig Small() {
  ModelConfig c = test_models::TinyConfig({.vocab_size = 16, .context = 8, .n_layer = 3,
                                           .n_head = 2, .mlp_hidden = 0,
                                           .init_std = ModelConfig{}.init_std});
  c.scale_residual_init = false;
  return c;
}

std::vector<DepthMetrics> Measure(const ModelConfig& c, int64_t B = 2) {
  std::unique_ptr<Gpt> g = test_models::TinyModel(c, 5);
  if (!g) return {};
  std::vector<int32_t> tokens(B * c.context);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>((i * 7 + 3) % 16);
  auto m = MeasureCollapse(*g, tokens, B, c.context);
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  return m.ok() ? m.value() : std::vector<DepthMetrics>();
}

// Dong et al. 2021's pure attention (no skip, no MLP, no norm), bidirectional, std 0.02: the
// logits are ~1e-5, so each layer replaces every token by (nearly) the same mean.
TEST(CollapseProbe, UniformBidirectionalAttentionIsRankOneAfterOneLayer) {
  ModelConfig c = Small();
  c.residual = false, c.mlp = false, c.norm = NormPlacement::kNone, c.causal = false;
  const std::vector<DepthMetrics> m = Measure(c);
  ASSERT_EQ(m.size(), 4u);  // embedding + 3 layers
  EXPECT_GT(m[0].relative_residual, 0.5);
  EXPECT_LT(m[1].relative_residual, 1e-3);
  EXPECT_GT(m[1].mean_cosine, 0.999);
  EXPECT_GT(m[1].entropy, 0.999);  // uniform attention
  EXPECT_TRUE(std::isnan(m[0].entropy));  // no attention at the embedding
  EXPECT_TRUE(std::isnan(m[0].head_cosine));
}

// ReZero (alpha = 0 at init): every layer is the identity, so every depth equals the embedding.
TEST(CollapseProbe, ReZeroAtInitIsTheIdentity) {
  ModelConfig c = Small();
  c.norm = NormPlacement::kNone, c.residual_scale = ResidualScale::kReZero;
  const std::vector<DepthMetrics> m = Measure(c);
  ASSERT_EQ(m.size(), 4u);
  for (const DepthMetrics& d : m) {
    EXPECT_EQ(d.relative_residual, m[0].relative_residual);
    EXPECT_EQ(d.mean_cosine, m[0].mean_cosine);
    EXPECT_EQ(d.norm, m[0].norm);
  }
}

// std 1e-4 without skips shrinks the stream ~1e7 per layer: by layer 6 every |x| < 1e-33, so
// direction metrics are NaN (null in JSON) while the norm is still a finite number.
TEST(CollapseProbe, VanishedStreamIsUnmeasurableNotCollapsed) {
  ModelConfig c = Small();
  c.n_layer = 6;
  c.residual = false, c.mlp = false, c.norm = NormPlacement::kNone, c.init_std = 1e-4f;
  const std::vector<DepthMetrics> m = Measure(c);
  ASSERT_EQ(m.size(), 7u);
  EXPECT_TRUE(std::isfinite(m[1].relative_residual));
  EXPECT_TRUE(std::isnan(m[6].relative_residual));
  EXPECT_TRUE(std::isnan(m[6].mean_cosine));
  EXPECT_TRUE(std::isfinite(m[6].norm));
  const nlohmann::json j = DepthMetricsToJson(m);
  EXPECT_TRUE(j["relative_residual"][6].is_null());
  EXPECT_TRUE(j["relative_residual"][1].is_number());
  EXPECT_EQ(j["norm"].size(), 7u);
}

}  // namespace
}  // namespace attnlab::experiments
