// The manipulation objective: its gradient with respect to the input perturbation (KeyShare
// through AuxiliaryGradients::qkv, the KL through AuxiliaryGradients::logits, back to
// Gpt::input_gradient) against directional central differences on GPT-2-style, Llama-style (GQA,
// RMSNorm, SwiGLU, RoPE) and sink-token models; the imposed patterns by construction; the
// optimiser's budget; and the refusals.
#include "experiments/manipulation.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <utility>
#include <vector>

#include "model/test_models.h"

namespace attnlab::experiments {
namespace {

ModelConfig Gpt2Style() {
  ModelConfig c = test_models::TinyConfig({.vocab_size = 29, .context = 12});
  c.position = PositionEncoding::kLearned;
  return c;
}

ModelConfig LlamaStyle() {
  ModelConfig c = test_models::TinyConfig({.vocab_size = 31, .context = 12, .d_model = 32});
  c.n_head = 8, c.n_kv_head = 2;  // 4 query heads per KV head
  c.norm_type = NormType::kRmsNorm, c.mlp_activation = MlpActivation::kSwiGlu;
  c.bias = false, c.rope_layout = RopeLayout::kGptJ;
  return c;
}

ModelConfig SinkTokenStyle() {
  ModelConfig c = Gpt2Style();
  c.sink_token = true;  // positions Tm = T + 1: key c counts the sink token as position 0
  return c;
}

std::vector<float> Gaussian(size_t n, double sd, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.0f, static_cast<float>(sd));
  std::vector<float> v(n);
  for (float& x : v) x = nd(rng);
  return v;
}

double Dot(const std::vector<float>& a, const std::vector<float>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += static_cast<double>(a[i]) * b[i];
  return s;
}

TEST(Manipulation, GradientMatchesDirectionalDifferences) {
  int which = 0;
  for (const ModelConfig& c : {Gpt2Style(), LlamaStyle(), SinkTokenStyle()}) {
    SCOPED_TRACE("model " + std::to_string(which++));
    std::unique_ptr<Gpt> g = test_models::TinyModel(c, 7);
    ASSERT_TRUE(g);
    std::mt19937_64 rng(3);
    const int64_t B = 2, T = 9;
    for (const ManipulationTarget t : {ManipulationTarget{1, 3, 4}, ManipulationTarget{0, 1, 0},
                                       ManipulationTarget{1, 2, T - 1}}) {
      // A plain penalty, none, and an allowance the KL exceeds (delta below: KL ~ 0.1-1).
      for (const auto& [w, free] : {std::pair{0.0, 0.0}, {5.0, 0.0}, {5.0, 1e-3}}) {
        SCOPED_TRACE("layer " + std::to_string(t.layer) + " key " + std::to_string(t.key) +
                     " w " + std::to_string(w) + " free " + std::to_string(free));
        auto obj = ManipulationObjective::Create(
            *g, test_models::RandomTokens(B * T, c.vocab_size, rng), B, T, t, w, free);
        ASSERT_TRUE(obj.ok()) << obj.status().ToString();
        const int64_t n = obj->batch() * obj->positions() * obj->width();
        // Away from delta = 0, where the KL's gradient vanishes.
        const std::vector<float> delta = Gaussian(n, 0.2, 11), u = Gaussian(n, 1.0, 13);
        std::vector<float> grad;
        auto v = obj->Evaluate(delta, &grad);
        ASSERT_TRUE(v.ok()) << v.status().ToString();
        ASSERT_EQ(static_cast<int64_t>(grad.size()), n);
        auto f = [&](double h) {
          std::vector<float> d = delta;
          for (int64_t i = 0; i < n; ++i) d[i] += static_cast<float>(h) * u[i];
          return obj->Evaluate(d, nullptr).value().objective;
        };
        // Step 3e-3 along u (|u| ~ 24 here): the RMSNorm models curve visibly at 1e-2.
        const double numeric = test_models::RichardsonDerivative(f, 3e-3);
        const double analytic = Dot(grad, u);
        // fp32 forward: gpt_test.cc's tolerance for directional checks.
        EXPECT_NEAR(analytic, numeric, 0.02 * std::abs(numeric) + 2e-4);
        EXPECT_NEAR(v->objective, -v->mass + w * std::max(0.0, v->kl - free), 1e-12);
        if (free > 0) {
          EXPECT_GT(v->kl, free);  // the allowance's kink is not between the steps
        }
      }
    }
  }
}

// Inside the allowance the predictions are free: J = -m_c and its gradient the mass's alone.
TEST(Manipulation, KlAllowanceFreesThePredictions) {
  const ModelConfig c = Gpt2Style();
  std::unique_ptr<Gpt> g = test_models::TinyModel(c, 7);
  ASSERT_TRUE(g);
  std::mt19937_64 rng(5);
  const int64_t B = 2, T = 8;
  const std::vector<int32_t> x = test_models::RandomTokens(B * T, c.vocab_size, rng);
  auto free = ManipulationObjective::Create(*g, x, B, T, {1, 0, 3}, 5.0, 1e9);
  auto mass_only = ManipulationObjective::Create(*g, x, B, T, {1, 0, 3}, 0.0, 0.0);
  ASSERT_TRUE(free.ok() && mass_only.ok());
  const std::vector<float> delta = Gaussian(B * T * c.d_model, 0.2, 3);
  std::vector<float> g1, g2;
  auto v1 = free->Evaluate(delta, &g1);
  auto v2 = mass_only->Evaluate(delta, &g2);
  ASSERT_TRUE(v1.ok() && v2.ok());
  EXPECT_GT(v1->kl, 0.0);
  EXPECT_EQ(v1->objective, -v1->mass);
  EXPECT_EQ(g1, g2);
}

TEST(Manipulation, CleanAndImposedPatterns) {
  const ModelConfig c = LlamaStyle();
  std::unique_ptr<Gpt> g = test_models::TinyModel(c, 5);
  ASSERT_TRUE(g);
  std::mt19937_64 rng(9);
  const int64_t B = 3, T = 10, key = 4;
  auto obj = ManipulationObjective::Create(*g, test_models::RandomTokens(B * T, c.vocab_size, rng),
                                           B, T, {1, 5, key}, 1.0);
  ASSERT_TRUE(obj.ok()) << obj.status().ToString();
  const ManipulationValue clean = obj->clean();
  EXPECT_EQ(clean.kl, 0.0);
  EXPECT_EQ(clean.top1, 1.0);
  EXPECT_GT(clean.mass, 0.0);
  EXPECT_LT(clean.mass, 1.0);
  // The explicit path (pattern hook, nothing rewritten) against the flash kernel's clean run.
  auto none = obj->EvaluateImposed(ImposedPattern::kNone, 1);
  ASSERT_TRUE(none.ok());
  EXPECT_NEAR(none->mass, clean.mass, 1e-5);
  // Not 0: the two kernels' logits differ by fp32 rounding, and the KL sums p (log p_clean -
  // log p) over fp32 probabilities (~1e-7 relative each): 1.1e-8 on the AVX2 kernels of a Zen 3.
  // 1e-6 is far below any imposed pattern's KL.
  EXPECT_LT(none->kl, 1e-6);
  EXPECT_EQ(none->top1, 1.0);
  auto on = obj->EvaluateImposed(ImposedPattern::kOnTarget, 1);
  ASSERT_TRUE(on.ok());
  EXPECT_NEAR(on->mass, 1.0, 1e-6);
  EXPECT_GT(on->kl, 0.0);
  auto uni = obj->EvaluateImposed(ImposedPattern::kUniform, 1);
  ASSERT_TRUE(uni.ok());
  double want = 0;  // mean over rows t >= key of 1 / (t + 1)
  for (int64_t t = key; t < T; ++t) want += 1.0 / double(t + 1);
  EXPECT_NEAR(uni->mass, want / double(T - key), 1e-6);
  // A permutation keeps each row's weights: same seed, same result; the mass moves.
  auto p1 = obj->EvaluateImposed(ImposedPattern::kPermuted, 3);
  auto p2 = obj->EvaluateImposed(ImposedPattern::kPermuted, 3);
  ASSERT_TRUE(p1.ok() && p2.ok());
  EXPECT_EQ(p1->kl, p2->kl);
  EXPECT_EQ(p1->mass, p2->mass);
}

TEST(Manipulation, MoveAttentionStaysInBudgetAndMovesTheMass) {
  const ModelConfig c = Gpt2Style();
  std::unique_ptr<Gpt> g = test_models::TinyModel(c, 2);
  ASSERT_TRUE(g);
  std::mt19937_64 rng(4);
  const int64_t B = 2, T = 12;
  auto obj = ManipulationObjective::Create(*g, test_models::RandomTokens(B * T, c.vocab_size, rng),
                                           B, T, {1, 2, 6}, 0.1);
  ASSERT_TRUE(obj.ok());
  auto zero = MoveAttention(*obj, 0.0, 3);
  ASSERT_TRUE(zero.ok());
  for (float x : zero->delta) EXPECT_EQ(x, 0.0f);
  EXPECT_EQ(zero->value.mass, obj->clean().mass);
  const std::vector<double> x0 = WindowNorms(obj->clean_stream(), B);
  double last = obj->clean().objective;
  for (double budget : {0.05, 0.3}) {
    auto moved = MoveAttention(*obj, budget, 20);
    ASSERT_TRUE(moved.ok());
    EXPECT_EQ(moved->evaluations, 21);
    const std::vector<double> d = WindowNorms(moved->delta, B);
    for (int64_t b = 0; b < B; ++b) EXPECT_LE(d[b], budget * x0[b] * (1 + 1e-5));
    EXPECT_LT(moved->value.objective, last);  // a larger ball reaches lower
    EXPECT_GT(moved->value.mass, obj->clean().mass);
    last = moved->value.objective;
    const std::vector<float> r = RandomLike(moved->delta, B, 8);
    const std::vector<double> rn = WindowNorms(r, B);
    for (int64_t b = 0; b < B; ++b) EXPECT_NEAR(rn[b], d[b], 1e-4 * (1 + d[b]));
  }
  // A warm start from a larger ball's result is projected into the smaller one, and a larger
  // ball started from a smaller one's result never ends worse.
  auto big = MoveAttention(*obj, 0.3, 10);
  ASSERT_TRUE(big.ok());
  auto small = MoveAttention(*obj, 0.02, 5, &big->delta);
  ASSERT_TRUE(small.ok());
  const std::vector<double> sn = WindowNorms(small->delta, B);
  for (int64_t b = 0; b < B; ++b) EXPECT_LE(sn[b], 0.02 * x0[b] * (1 + 1e-5));
  auto again = MoveAttention(*obj, 0.5, 5, &big->delta);
  ASSERT_TRUE(again.ok());
  EXPECT_LE(again->value.objective, big->value.objective);
  const std::vector<float> wrong(3, 0.0f);
  EXPECT_FALSE(MoveAttention(*obj, 0.1, 3, &wrong).ok());
  EXPECT_FALSE(MoveAttention(*obj, -1.0, 3).ok());
  EXPECT_FALSE(MoveAttention(*obj, 0.1, 0).ok());
}

TEST(Manipulation, RefusesWhatItDoesNotDescribe) {
  std::mt19937_64 rng(1);
  const int64_t B = 1, T = 6;
  {
    ModelConfig c = Gpt2Style();
    c.attention_window = 3;
    std::unique_ptr<Gpt> g = test_models::TinyModel(c, 1);
    ASSERT_TRUE(g);
    auto obj = ManipulationObjective::Create(*g, test_models::RandomTokens(B * T, 29, rng), B, T,
                                             {0, 0, 1}, 1.0);
    ASSERT_FALSE(obj.ok());
    EXPECT_NE(obj.status().message().find("sliding window"), std::string::npos);
  }
  const ModelConfig c = Gpt2Style();
  std::unique_ptr<Gpt> g = test_models::TinyModel(c, 1);
  ASSERT_TRUE(g);
  const std::vector<int32_t> x = test_models::RandomTokens(B * T, c.vocab_size, rng);
  for (const ManipulationTarget t : {ManipulationTarget{2, 0, 0}, ManipulationTarget{0, 4, 0},
                                     ManipulationTarget{0, 0, T}, ManipulationTarget{-1, 0, 0}}) {
    EXPECT_FALSE(ManipulationObjective::Create(*g, x, B, T, t, 1.0).ok());
  }
  EXPECT_FALSE(ManipulationObjective::Create(*g, x, B, T, {0, 0, 0}, -1.0).ok());
  EXPECT_FALSE(ManipulationObjective::Create(*g, x, B + 1, T, {0, 0, 0}, 1.0).ok());
  std::vector<int32_t> bad = x;
  bad[2] = static_cast<int32_t>(c.vocab_size);
  EXPECT_FALSE(ManipulationObjective::Create(*g, bad, B, T, {0, 0, 0}, 1.0).ok());
  auto obj = ManipulationObjective::Create(*g, x, B, T, {0, 0, 0}, 1.0);
  ASSERT_TRUE(obj.ok());
  EXPECT_FALSE(obj->Evaluate(std::vector<float>(5, 0.0f), nullptr).ok());
}

}  // namespace
}  // namespace attnlab::experiments
