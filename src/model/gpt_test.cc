// The GPT's hand-written backward against central differences of its own forward, one parameter
// tensor at a time, for every configuration option. (The exact, independent check is the
// PyTorch oracle in tests/; this one runs in fp32 and is a fast, coarse net: a directional
// derivative along a random direction with step 1e-2 relative to the tensor's scale, which
// leaves fp32 rounding noise near 1e-4 of the loss, so we accept 2% relative error.)
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <string>

#include "model/gpt.h"

namespace attnlab {
namespace {

struct Variant {
  std::string name;
  std::function<void(ModelConfig&)> apply;
};

std::vector<Variant> Variants() {
  return {
      {"pre_ln_rope", [](ModelConfig&) {}},
      {"learned_positions", [](ModelConfig& c) { c.position = PositionEncoding::kLearned; }},
      {"no_positions", [](ModelConfig& c) { c.position = PositionEncoding::kNone; }},
      {"gptj_partial_rotary",
       [](ModelConfig& c) { c.rope_layout = RopeLayout::kGptJ, c.rotary_dim = 2; }},
      {"post_ln", [](ModelConfig& c) { c.norm = NormPlacement::kPost; }},
      {"no_norm", [](ModelConfig& c) { c.norm = NormPlacement::kNone; }},
      {"rmsnorm", [](ModelConfig& c) { c.norm_type = NormType::kRmsNorm; }},
      {"inv_sqrt_2l", [](ModelConfig& c) { c.residual_scale = ResidualScale::kInvSqrt2L; }},
      {"rezero", [](ModelConfig& c) { c.residual_scale = ResidualScale::kReZero; }},
      {"no_mlp", [](ModelConfig& c) { c.mlp = false; }},
      {"no_residual", [](ModelConfig& c) { c.residual = false; }},
      {"softmax1", [](ModelConfig& c) { c.softmax = SoftmaxKind::kSoftmax1; }},
      {"sink_logit", [](ModelConfig& c) { c.softmax = SoftmaxKind::kSinkLogit; }},
      {"sigmoid", [](ModelConfig& c) { c.softmax = SoftmaxKind::kSigmoid; }},
      {"output_gate", [](ModelConfig& c) { c.output_gate = true; }},
      {"mask_first_key", [](ModelConfig& c) { c.mask_first_key = true; }},
      {"sink_token", [](ModelConfig& c) { c.sink_token = true; }},
      {"sink_token_learned_pos",
       [](ModelConfig& c) { c.sink_token = true, c.position = PositionEncoding::kLearned; }},
      {"gqa", [](ModelConfig& c) { c.n_kv_head = 2; }},
      {"window", [](ModelConfig& c) { c.attention_window = 3; }},
      {"untied_no_bias", [](ModelConfig& c) { c.tie_embeddings = false, c.bias = false; }},
  };
}

ModelConfig SmallConfig() {
  ModelConfig c;
  c.vocab_size = 37;
  c.context = 11;
  c.d_model = 16;
  c.n_layer = 2;
  c.n_head = 4;
  c.mlp_hidden = 24;
  c.init_std = 0.3f;
  return c;
}

TEST(Gpt, BackwardMatchesDirectionalFiniteDifferencesForEveryOption) {
  for (const Variant& var : Variants()) {
    SCOPED_TRACE(var.name);
    ModelConfig c = SmallConfig();
    var.apply(c);
    auto created = Gpt::Create(c);
    ASSERT_TRUE(created.ok()) << created.status().ToString();
    Gpt& g = *created.value();
    g.params().Initialize(c, 11);
    std::mt19937_64 rng(5);
    // Make zero-initialised tensors (biases, ReZero alphas, sink logits) non-trivial too.
    std::normal_distribution<float> nd(0.0f, 0.3f);
    for (const ParamInfo& p : g.params().infos()) {
      if (p.init == ParamInit::kZeros || p.init == ParamInit::kOnes) {
        float* x = g.params().Slice(p);
        for (int64_t i = 0; i < p.size; ++i) x[i] += nd(rng);
      }
    }
    const int64_t B = 2, T = 9;
    std::uniform_int_distribution<int32_t> tok(0, static_cast<int32_t>(c.vocab_size - 1));
    std::vector<int32_t> tokens(B * T), targets(B * T);
    for (auto& t : tokens) t = tok(rng);
    for (auto& t : targets) t = tok(rng);
    targets[3] = -1;  // an ignored position
    double loss = 0;
    g.grads().Zero();
    ASSERT_TRUE(g.Forward(tokens.data(), targets.data(), B, T, &loss).ok());
    ASSERT_TRUE(std::isfinite(loss));
    ASSERT_TRUE(g.Backward().ok());
    for (const ParamInfo& p : g.params().infos()) {
      SCOPED_TRACE(p.name);
      float* x = g.params().Slice(p);
      const float* gx = g.grads().Slice(p);
      std::vector<float> u(p.size), saved(x, x + p.size);
      double scale = 0, gu = 0;
      for (int64_t i = 0; i < p.size; ++i) scale = std::max(scale, double(std::abs(x[i])));
      for (int64_t i = 0; i < p.size; ++i) {
        u[i] = nd(rng);
        gu += double(gx[i]) * u[i];
      }
      const double eps = 1e-2 * std::max(scale, 0.1);
      auto loss_at = [&](double t) {
        for (int64_t i = 0; i < p.size; ++i) x[i] = saved[i] + static_cast<float>(t * u[i]);
        double l = 0;
        EXPECT_TRUE(g.Forward(tokens.data(), targets.data(), B, T, &l).ok());
        return l;
      };
      // Richardson-extrapolated central difference: O(eps^4) truncation error.
      const double d1 = (loss_at(eps) - loss_at(-eps)) / (2 * eps);
      const double d2 = (loss_at(eps / 2) - loss_at(-eps / 2)) / eps;
      const double fd = (4 * d2 - d1) / 3;
      std::copy(saved.begin(), saved.end(), x);
      EXPECT_NEAR(gu, fd, 0.02 * std::abs(fd) + 2e-4) << "analytic " << gu << " vs numeric " << fd;
    }
  }
}

// Prefill + token-by-token decode against a KV cache reproduces the full forward's logits.
TEST(Gpt, KvCacheDecodeMatchesFullForward) {
  for (const Variant& var : Variants()) {
    SCOPED_TRACE(var.name);
    ModelConfig c = SmallConfig();
    c.init_std = 0.1f;
    var.apply(c);
    auto full_or = Gpt::Create(c);
    ASSERT_TRUE(full_or.ok());
    Gpt& g = *full_or.value();
    g.params().Initialize(c, 3);
    std::mt19937_64 rng(8);
    std::uniform_int_distribution<int32_t> tok(0, static_cast<int32_t>(c.vocab_size - 1));
    const int64_t T = c.context;
    std::vector<int32_t> tokens(T);
    for (auto& t : tokens) t = tok(rng);
    ASSERT_TRUE(g.Forward(tokens.data(), nullptr, 1, T, nullptr).ok());
    const int64_t V = c.vocab_size, off = c.sink_token ? 1 : 0;
    std::vector<float> full(g.logits() + off * V, g.logits() + (T + off) * V);
    DenseKvCache cache(c.n_layer, c.kv_heads(), c.head_dim());
    std::vector<float> inc;
    const int64_t prefill = 4;
    ASSERT_TRUE(g.Forward(tokens.data(), nullptr, 1, prefill, nullptr, &cache).ok());
    inc.insert(inc.end(), g.logits() + off * V, g.logits() + (prefill + off) * V);
    for (int64_t t = prefill; t < T; ++t) {
      ASSERT_TRUE(g.Forward(tokens.data() + t, nullptr, 1, 1, nullptr, &cache).ok());
      inc.insert(inc.end(), g.logits(), g.logits() + V);
    }
    ASSERT_EQ(inc.size(), full.size());
    double max_abs = 0, max_err = 0;
    for (size_t i = 0; i < full.size(); ++i) {
      max_abs = std::max(max_abs, double(std::abs(full[i])));
      max_err = std::max(max_err, double(std::abs(full[i] - inc[i])));
    }
    EXPECT_LE(max_err, 1e-5 * max_abs) << "max |logit| " << max_abs;
  }
}

TEST(Gpt, RejectsBadInput) {
  ModelConfig c = SmallConfig();
  auto g = Gpt::Create(c);
  ASSERT_TRUE(g.ok());
  std::vector<int32_t> tokens(12, 1), targets(12, 1);
  double loss;
  EXPECT_FALSE(g.value()->Forward(tokens.data(), targets.data(), 1, 12, &loss).ok());  // > context
  tokens[0] = 37;
  EXPECT_FALSE(g.value()->Forward(tokens.data(), targets.data(), 1, 5, &loss).ok());  // vocab
  ModelConfig bad = c;
  bad.n_head = 5;
  EXPECT_FALSE(Gpt::Create(bad).ok());
}

}  // namespace
}  // namespace attnlab
