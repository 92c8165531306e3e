// The extrapolation experiment's helpers on a tiny random RoPE model: ScoreWindows agrees with the
// model's own cross-entropy, scores the same tokens at every window length, and rejects bad
// arguments; WithRopeScaling keeps the weights, is exact with factor 1 for every scaling, and
// changes the logits with factor 2.
#include "experiments/extrapolation_eval.h"

#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <random>
#include <vector>

#include "model/test_models.h"

namespace attnlab::experiments {
namespace {

// Two heads of head_dim 16 (NTK needs rotary_dim >= 4) and init std 0.2, large enough that
// positions change the logits visibly.
ModelConfig Tiny() {
  return test_models::TinyConfig(
      {.vocab_size = 29, .context = 8, .d_model = 32, .n_head = 2, .mlp_hidden = 0,
       .init_std = 0.2f});
}

std::unique_ptr<Gpt> MakeTiny() { return test_models::TinyModel(Tiny(), 5); }

std::vector<int32_t> Tokens(int64_t n, int32_t vocab) {
  std::mt19937_64 rng(11);
  std::uniform_int_distribution<int32_t> d(0, vocab - 1);
  std::vector<int32_t> t(n);
  for (auto& x : t) x = d(rng);
  return t;
}

TEST(ExtrapolationEval, ScoreWindowsMatchesTheModelLoss) {
  std::unique_ptr<Gpt> g = MakeTiny();
  ASSERT_NE(g, nullptr);
  const std::vector<int32_t> tok = Tokens(100, 29);
  const int64_t len = 8, predicted = 48;
  auto r = ScoreWindows(*g, tok, len, predicted, /*batch_tokens=*/20);  // batches of 2 windows
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->windows, 6);
  ASSERT_EQ(r->by_position.size(), 8u);
  // The model's own mean cross-entropy over the same windows, in one batch.
  std::vector<int32_t> x(tok.begin(), tok.begin() + predicted), y(tok.begin() + 1, tok.begin() + predicted + 1);
  double loss = 0;
  ASSERT_TRUE(g->Forward(x.data(), y.data(), 6, len, &loss).ok());
  EXPECT_NEAR(r->loss, loss, 1e-5);
  double mean = 0;
  for (double v : r->by_position) mean += v / 8;
  EXPECT_NEAR(mean, r->loss, 1e-12);
}

TEST(ExtrapolationEval, SameTokensAtEveryLength) {
  // A model whose logits do not depend on the input (zero weights but the final norm's bias)
  // gives the same loss for every window length: only the context differs between lengths.
  std::unique_ptr<Gpt> g = MakeTiny();
  ASSERT_NE(g, nullptr);
  g->params().Zero();
  std::mt19937_64 rng(2);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const ParamInfo* wte = g->params().Find("wte");
  ASSERT_NE(wte, nullptr);
  float* w = g->params().Slice(*wte);
  for (int64_t i = 0; i < wte->size; ++i) w[i] = nd(rng);  // tied head: logits = lnf(x) wte^T
  for (const ParamInfo& p : g->params().infos()) {
    if (p.name == "ln_f.bias") {
      float* b = g->params().Slice(p);
      for (int64_t i = 0; i < p.size; ++i) b[i] = nd(rng);
    }
  }
  const std::vector<int32_t> tok = Tokens(70, 29);
  auto a = ScoreWindows(*g, tok, 2, 64, 64);
  auto b = ScoreWindows(*g, tok, 8, 64, 64);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NEAR(a->loss, b->loss, 1e-9);
}

TEST(ExtrapolationEval, FactorOneIsExactAndFactorTwoIsNot) {
  std::unique_ptr<Gpt> g = MakeTiny();
  ASSERT_NE(g, nullptr);
  const std::vector<int32_t> tok = Tokens(40, 29);
  auto base = WithRopeScaling(*g, 16, RopeScaling::kNone, 1.0, 8);
  ASSERT_TRUE(base.ok());
  auto ref = ScoreWindows(**base, tok, 16, 32, 64);
  ASSERT_TRUE(ref.ok());
  for (RopeScaling s : {RopeScaling::kLinear, RopeScaling::kNtk, RopeScaling::kYarn}) {
    auto one = WithRopeScaling(*g, 16, s, 1.0, 8);
    auto two = WithRopeScaling(*g, 16, s, 2.0, 8);
    ASSERT_TRUE(one.ok() && two.ok()) << static_cast<int>(s);
    EXPECT_EQ((*one)->config().context, 16);
    auto r1 = ScoreWindows(**one, tok, 16, 32, 64);
    auto r2 = ScoreWindows(**two, tok, 16, 32, 64);
    ASSERT_TRUE(r1.ok() && r2.ok());
    // PI and NTK compute exactly theta with s = 1; YaRN's (1 - gamma) theta / s + gamma theta
    // may round differently in the last bit of a double, below float resolution.
    for (size_t t = 0; t < ref->by_position.size(); ++t) {
      if (s == RopeScaling::kYarn) {
        EXPECT_NEAR(r1->by_position[t], ref->by_position[t], 1e-6);
      } else {
        EXPECT_EQ(r1->by_position[t], ref->by_position[t]) << static_cast<int>(s) << " " << t;
      }
    }
    EXPECT_NE(r2->loss, ref->loss) << static_cast<int>(s);
    // Position 0 is rotated by angle 0 under every scaling; YaRN's attention factor still
    // scales q.k, so only PI and NTK leave position 0 exactly unchanged.
    if (s != RopeScaling::kYarn) {
      EXPECT_EQ(r2->by_position[0], ref->by_position[0]);
    }
  }
}

TEST(ExtrapolationEval, RejectsBadArguments) {
  std::unique_ptr<Gpt> g = MakeTiny();
  ASSERT_NE(g, nullptr);
  const std::vector<int32_t> tok = Tokens(40, 29);
  EXPECT_FALSE(ScoreWindows(*g, tok, 8, 12, 64).ok());   // not a multiple
  EXPECT_FALSE(ScoreWindows(*g, tok, 8, 40, 64).ok());   // needs 41 tokens
  EXPECT_FALSE(ScoreWindows(*g, tok, 16, 32, 64).ok());  // longer than the context
  std::vector<int32_t> bad = tok;
  bad[9] = 29;  // a target outside the vocabulary
  EXPECT_FALSE(ScoreWindows(*g, bad, 8, 16, 64).ok());
  ModelConfig c = Tiny();
  c.position = PositionEncoding::kLearned;
  auto learned = Gpt::Create(c);
  ASSERT_TRUE(learned.ok());
  EXPECT_FALSE(WithRopeScaling(**learned, 16, RopeScaling::kLinear, 2.0, 8).ok());
}

TEST(ExtrapolationEval, BinMeans) {
  EXPECT_EQ(BinMeans({1, 3, 5, 7, 9}, 2), (std::vector<double>{2, 6, 9}));
  EXPECT_EQ(BinMeans({1, 3}, 1), (std::vector<double>{1, 3}));
}

}  // namespace
}  // namespace attnlab::experiments
