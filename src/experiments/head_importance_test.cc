// Head masks (Michel et al. 2019) on a tiny model: the mask gradient read from the projection's
// weight gradient equals a finite difference of the loss in the mask; a zero mask removes the
// head exactly; an all-ones mask changes nothing.
#include "experiments/head_importance.h"

#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "formats/loaded_model.h"
#include "model/test_models.h"

namespace attnlab::experiments {
namespace {

struct Fixture {
  std::unique_ptr<Gpt> g;
  ParameterStore base;
  std::vector<int32_t> tokens, targets;
  int64_t B = 2, T = 12;
};

Fixture Make(bool gate) {
  Fixture f;
  ModelConfig c = test_models::TinyConfig({.vocab_size = 32, .context = 16});
  c.output_gate = gate;
  f.g = test_models::TinyModel(c, 7);
  if (!f.g) return f;
  std::mt19937_64 rng(3);
  test_models::PerturbConstantInitTensors(f.g->params(), rng, 0.3f);  // non-trivial biases, gains
  f.base = ParameterStore(c);
  EXPECT_TRUE(CopyParameters(f.g->params(), &f.base).ok());
  f.tokens = test_models::RandomTokens(f.B * f.T, c.vocab_size, rng);
  f.targets = test_models::RandomTokens(f.B * f.T, c.vocab_size, rng);
  return f;
}

double LossWithMask(Fixture& f, const std::vector<float>& mask) {
  EXPECT_TRUE(ApplyHeadMask(f.base, mask, f.g.get()).ok());
  double loss = 0;
  EXPECT_TRUE(f.g->Forward(f.tokens.data(), f.targets.data(), f.B, f.T, &loss).ok());
  return loss;
}

// Tolerance: the loss is computed in fp32 (|L| ~ ln 32 ~ 3.5), so L(xi) carries a rounding error
// of a few ulp of |L| accumulated over the O(10) sums of this tiny model, |dL| <~ 1e-6 |L| = 4e-6.
// The Richardson-extrapolated central difference (eps = 1e-2 in xi, xi = O(1)) divides it by
// about 2 eps / 1.5, i.e. ~3e-4 absolute; its truncation error is O(eps^4) ~ 1e-8 (negligible).
// The analytic side sums hd * C = 64 fp32 products of gradients in double: ~1e-6 relative. Hence
// |analytic - numeric| <= 5e-4 + 2% |numeric| (the 2% covers fp32 backward accumulation, as in
// gpt_test.cc's finite-difference test).
TEST(HeadImportance, MaskGradientMatchesFiniteDifference) {
  for (bool gate : {false, true}) {
    SCOPED_TRACE(gate ? "output gate" : "plain");
    Fixture f = Make(gate);
    ASSERT_NE(f.g, nullptr);
    const int64_t n = f.g->config().n_layer * f.g->config().n_head;
    std::vector<float> ones(n, 1.0f);
    LossWithMask(f, ones);
    f.g->grads().Zero();
    ASSERT_TRUE(f.g->Backward().ok());
    const std::vector<double> grad = HeadMaskGradient(*f.g);
    ASSERT_EQ(static_cast<int64_t>(grad.size()), n);
    double total = 0;
    for (int64_t k = 0; k < n; ++k) {
      SCOPED_TRACE(k);
      auto loss_at = [&](double xi) {
        std::vector<float> m = ones;
        m[k] = static_cast<float>(xi);
        return LossWithMask(f, m);
      };
      const double eps = 1e-2;
      const double d1 = (loss_at(1 + eps) - loss_at(1 - eps)) / (2 * eps);
      const double d2 = (loss_at(1 + eps / 2) - loss_at(1 - eps / 2)) / eps;
      const double fd = (4 * d2 - d1) / 3;
      EXPECT_NEAR(grad[k], fd, 0.02 * std::abs(fd) + 5e-4) << "analytic " << grad[k] << " vs " << fd;
      total += std::abs(fd);
    }
    EXPECT_GT(total, 1e-2) << "the test model's heads barely matter; the comparison is vacuous";
  }
}

// mask = 0 for head (l, h) is a model whose output-projection rows for that head are zero, and
// then nothing of that head's queries, keys or values reaches the loss (bit for bit: the zero
// rows add exact zeros). An all-ones mask reproduces the model bit for bit.
TEST(HeadImportance, ZeroMaskRemovesTheHeadExactly) {
  Fixture f = Make(false);
  ASSERT_NE(f.g, nullptr);
  const ModelConfig& c = f.g->config();
  const int64_t L = c.n_layer, H = c.n_head, hd = c.head_dim(), C = c.d_model, Q = c.qkv_dim();
  double plain = 0;
  ASSERT_TRUE(CopyParameters(f.base, &f.g->params()).ok());
  ASSERT_TRUE(f.g->Forward(f.tokens.data(), f.targets.data(), f.B, f.T, &plain).ok());
  std::vector<float> mask(L * H, 1.0f);
  EXPECT_EQ(LossWithMask(f, mask), plain);

  const int64_t l = 1, h = 2;
  mask[l * H + h] = 0.0f;
  const double pruned = LossWithMask(f, mask);
  EXPECT_NE(pruned, plain);
  // The same model built by hand: zero the rows by name.
  ASSERT_TRUE(CopyParameters(f.base, &f.g->params()).ok());
  const ParamInfo* proj = f.g->params().Find("h." + std::to_string(l) + ".attn.proj.weight");
  ASSERT_NE(proj, nullptr);
  float* w = f.g->params().Slice(*proj);
  for (int64_t i = h * hd * C; i < (h + 1) * hd * C; ++i) w[i] = 0.0f;
  double by_hand = 0;
  ASSERT_TRUE(f.g->Forward(f.tokens.data(), f.targets.data(), f.B, f.T, &by_hand).ok());
  EXPECT_EQ(by_hand, pruned);
  // Scramble the pruned head's q, k, v columns: the loss does not move.
  float* qkv = f.g->params().ptrs().layers[l].qkv_w;
  for (int64_t r = 0; r < C; ++r) {
    for (int64_t part = 0; part < 3; ++part) {
      for (int64_t d = 0; d < hd; ++d) qkv[r * Q + (part * H + h) * hd + d] *= -1.7f;
    }
  }
  double scrambled = 0;
  ASSERT_TRUE(f.g->Forward(f.tokens.data(), f.targets.data(), f.B, f.T, &scrambled).ok());
  EXPECT_EQ(scrambled, pruned);
  EXPECT_FALSE(ApplyHeadMask(f.base, std::vector<float>(3, 1.0f), f.g.get()).ok());
}

TEST(HeadImportance, PerLayerNormalisation) {
  const std::vector<double> v = {3, 4, 0, 0, 1, 0};
  const std::vector<double> n = NormalizeImportancePerLayer(v, 3, 2);
  EXPECT_DOUBLE_EQ(n[0], 0.6);
  EXPECT_DOUBLE_EQ(n[1], 0.8);
  EXPECT_EQ(n[2], 0.0);
  EXPECT_EQ(n[3], 0.0);
  EXPECT_DOUBLE_EQ(n[4], 1.0);
}

}  // namespace
}  // namespace attnlab::experiments
