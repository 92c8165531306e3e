// The auxiliary losses' values against their definitions, their hand-written gradients against
// central differences in double precision, and the whole path through Gpt::Backward (the
// gradient of LM loss + auxiliary loss w.r.t. every parameter tensor) against directional
// differences of the model, as gpt_test.cc does for the LM loss alone.
#include "train/auxiliary_losses.h"

#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <random>
#include <vector>

#include "model/test_models.h"

namespace attnlab {
namespace {

double Cos(const double* a, const double* b, int64_t n) {
  double ab = 0, aa = 0, bb = 0;
  for (int64_t i = 0; i < n; ++i) ab += a[i] * b[i], aa += a[i] * a[i], bb += b[i] * b[i];
  return aa > 0 && bb > 0 ? ab / std::sqrt(aa * bb) : 0.0;
}

// The definition, literally.
double HeadCosineNaive(const std::vector<double>& att, int64_t rows, int64_t H, int64_t hd) {
  double s = 0;
  for (int64_t n = 0; n < rows; ++n) {
    for (int64_t a = 0; a < H; ++a) {
      for (int64_t b = a + 1; b < H; ++b) {
        s += Cos(&att[n * H * hd + a * hd], &att[n * H * hd + b * hd], hd);
      }
    }
  }
  return s / (rows * 0.5 * H * (H - 1));
}

double InfoNceNaive(const std::vector<double>& x, const std::vector<double>& y, int64_t T,
                    int64_t C, double tau) {
  double loss = 0;
  for (int64_t i = 0; i < T; ++i) {
    double den = 0;
    for (int64_t j = 0; j < T; ++j) den += std::exp(Cos(&x[i * C], &y[j * C], C) / tau);
    loss -= std::log(std::exp(Cos(&x[i * C], &y[i * C], C) / tau) / den);
  }
  return loss / T;
}

std::vector<double> Random(int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> nd(0.0, 1.0);
  std::vector<double> v(n);
  for (double& x : v) x = nd(rng);
  return v;
}

// Central differences of f at every element of x; compared with grad (double: truncation error
// O(h^2) ~ 1e-10 with h = 1e-5, rounding ~ 1e-16 / h ~ 1e-11).
template <typename F>
void ExpectGradientMatches(std::vector<double>& x, const std::vector<double>& grad, F f) {
  const double h = 1e-5;
  for (size_t i = 0; i < x.size(); ++i) {
    const double saved = x[i];
    x[i] = saved + h;
    const double up = f();
    x[i] = saved - h;
    const double down = f();
    x[i] = saved;
    EXPECT_NEAR(grad[i], (up - down) / (2 * h), 1e-7) << "element " << i;
  }
}

TEST(AuxiliaryLosses, HeadCosineMatchesDefinitionAndFiniteDifferences) {
  const int64_t rows = 5, H = 4, hd = 3;
  std::vector<double> att = Random(rows * H * hd, 1);
  std::vector<double> grad(att.size(), 0.0);
  const double d = HeadCosineLoss(att.data(), rows, H, hd, H * hd, grad.data(), 1.0);
  EXPECT_NEAR(d, HeadCosineNaive(att, rows, H, hd), 1e-14);
  ExpectGradientMatches(att, grad, [&] {
    return HeadCosineLoss<double>(att.data(), rows, H, hd, H * hd, nullptr, 1.0);
  });
  // scale multiplies the gradient, and gradients are added.
  std::vector<double> g2(att.size(), 1.0);
  HeadCosineLoss(att.data(), rows, H, hd, H * hd, g2.data(), -2.0);
  for (size_t i = 0; i < att.size(); ++i) EXPECT_NEAR(g2[i], 1.0 - 2.0 * grad[i], 1e-14);
}

TEST(AuxiliaryLosses, HeadCosineExtremes) {
  const int64_t H = 3, hd = 4;
  // Identical heads: D = 1, gradient 0 (the maximum).
  std::vector<double> same(H * hd);
  for (int64_t h = 0; h < H; ++h) {
    for (int64_t d = 0; d < hd; ++d) same[h * hd + d] = 1.0 + d;
  }
  std::vector<double> g(same.size(), 0.0);
  EXPECT_NEAR(HeadCosineLoss(same.data(), 1, H, hd, H * hd, g.data(), 1.0), 1.0, 1e-15);
  for (double x : g) EXPECT_NEAR(x, 0.0, 1e-15);
  // A zero head: cosine 0 with the others, no NaN, no gradient for it.
  std::vector<double> z = Random(H * hd, 3);
  for (int64_t d = 0; d < hd; ++d) z[hd + d] = 0.0;
  std::fill(g.begin(), g.end(), 0.0);
  const double v = HeadCosineLoss(z.data(), 1, H, hd, H * hd, g.data(), 1.0);
  EXPECT_NEAR(v, Cos(&z[0], &z[2 * hd], hd) / 3.0, 1e-15);
  for (int64_t d = 0; d < hd; ++d) EXPECT_EQ(g[hd + d], 0.0);
  for (double x : g) EXPECT_TRUE(std::isfinite(x));
  // One head: no pairs.
  EXPECT_EQ(HeadCosineLoss(z.data(), 1, 1, hd, hd, g.data(), 1.0), 0.0);
}

TEST(AuxiliaryLosses, InfoNceMatchesDefinitionAndFiniteDifferences) {
  const int64_t T = 6, C = 5;
  const double tau = 0.3;
  std::vector<double> x = Random(T * C, 4), y = Random(T * C, 5);
  std::vector<double> gx(x.size(), 0.0), gy(y.size(), 0.0);
  const double l = InfoNceLoss(x.data(), y.data(), T, C, C, tau, gx.data(), gy.data(), 1.0);
  EXPECT_NEAR(l, InfoNceNaive(x, y, T, C, tau), 1e-12);
  auto f = [&] { return InfoNceLoss<double>(x.data(), y.data(), T, C, C, tau, nullptr, nullptr, 1.0); };
  ExpectGradientMatches(x, gx, f);
  ExpectGradientMatches(y, gy, f);
  // The same matrix in both layers (x = y) is a legal input too (gradients add up).
  std::vector<double> g1(x.size(), 0.0), g2(x.size(), 0.0);
  InfoNceLoss(x.data(), x.data(), T, C, C, tau, g1.data(), g2.data(), 1.0);
  std::vector<double> sum(x.size());
  for (size_t i = 0; i < x.size(); ++i) sum[i] = g1[i] + g2[i];
  ExpectGradientMatches(x, sum, [&] {
    return InfoNceLoss<double>(x.data(), x.data(), T, C, C, tau, nullptr, nullptr, 1.0);
  });
}

TEST(AuxiliaryLosses, InfoNceOnCollapsedTokensIsLogT) {
  const int64_t T = 8, C = 4;
  std::vector<double> x = Random(T * C, 6), y(T * C);
  for (int64_t i = 0; i < T; ++i) {
    for (int64_t c = 0; c < C; ++c) y[i * C + c] = 2.0 + c;  // every token the same
  }
  EXPECT_NEAR(InfoNceLoss<double>(x.data(), y.data(), T, C, C, 0.1, nullptr, nullptr, 1.0),
              std::log(double(T)), 1e-12);
  // Distinct, well-separated tokens that keep their identity: loss near 0.
  std::vector<double> e(T * T, 0.0);
  for (int64_t i = 0; i < T; ++i) e[i * T + i] = 1.0;
  EXPECT_LT(InfoNceLoss<double>(e.data(), e.data(), T, T, T, 0.05, nullptr, nullptr, 1.0), 1e-6);
  // Zero rows: no NaN.
  std::vector<double> zero(T * C, 0.0), g(T * C, 0.0);
  const double v = InfoNceLoss<double>(zero.data(), y.data(), T, C, C, 0.1, g.data(), nullptr, 1.0);
  EXPECT_NEAR(v, std::log(double(T)), 1e-12);
  for (double d : g) EXPECT_EQ(d, 0.0);
}

// Through the model: d(LM loss + A)/d(parameters) against directional central differences (fp32
// forward; the tolerance of gpt_test.cc).
TEST(AuxiliaryLosses, ModelGradientIncludesAuxiliaryLosses) {
  struct Variant {
    const char* name;
    NormPlacement norm;
    bool gate;
    ResidualScale scale;
  };
  for (const Variant& var : {Variant{"pre_ln", NormPlacement::kPre, false, ResidualScale::kOne},
                             Variant{"post_ln_gate", NormPlacement::kPost, true, ResidualScale::kOne},
                             Variant{"deepnorm", NormPlacement::kPost, false, ResidualScale::kDeepNorm},
                             Variant{"no_norm", NormPlacement::kNone, false, ResidualScale::kOne}}) {
    SCOPED_TRACE(var.name);
    ModelConfig c = test_models::TinyConfig({.vocab_size = 29, .context = 8, .n_layer = 3});
    c.norm = var.norm;
    c.output_gate = var.gate;
    c.residual_scale = var.scale;
    std::unique_ptr<Gpt> model = test_models::TinyModel(c, 21);
    ASSERT_NE(model, nullptr);
    Gpt& g = *model;
    std::mt19937_64 rng(9);
    test_models::PerturbConstantInitTensors(g.params(), rng, 0.3f);
    const int64_t B = 2, T = 7;
    const std::vector<int32_t> tokens = test_models::RandomTokens(B * T, c.vocab_size, rng);
    const std::vector<int32_t> targets = test_models::RandomTokens(B * T, c.vocab_size, rng);
    AuxiliaryLossOptions ao;
    ao.diversity_weight = 0.7;
    ao.contrastive_weight = 0.4;
    ao.temperature = 0.5;
    AuxiliaryLosses aux(ao);
    auto total_loss = [&]() {
      double l = 0;
      EXPECT_TRUE(g.Forward(tokens.data(), targets.data(), B, T, &l).ok());
      EXPECT_TRUE(aux.Compute(g).ok());
      return l + aux.loss();
    };
    g.grads().Zero();
    const double base = total_loss();
    ASSERT_TRUE(std::isfinite(base));
    EXPECT_GT(aux.diversity(), -1.0);
    EXPECT_GT(aux.contrastive(), 0.0);
    ASSERT_TRUE(g.Backward(1.0f, &aux.gradients()).ok());
    test_models::ExpectDirectionalGradients(g, rng, total_loss);
  }
}

// The auxiliary gradients alone (no counted target) still reach the parameters.
TEST(AuxiliaryLosses, BackwardWithoutTargetsButWithAuxiliaryLoss) {
  const ModelConfig c = test_models::TinyConfig(
      {.vocab_size = 17, .context = 6, .d_model = 8, .n_head = 2, .mlp_hidden = 8,
       .init_std = ModelConfig{}.init_std});
  std::unique_ptr<Gpt> g = test_models::TinyModel(c, 3);
  ASSERT_NE(g, nullptr);
  std::vector<int32_t> tokens = {1, 2, 3, 4, 5, 6}, targets(6, -1);
  double loss = 0;
  ASSERT_TRUE(g->Forward(tokens.data(), targets.data(), 1, 6, &loss).ok());
  AuxiliaryLossOptions ao;
  ao.diversity_weight = 1.0;
  AuxiliaryLosses aux(ao);
  ASSERT_TRUE(aux.Compute(*g).ok());
  g->grads().Zero();
  ASSERT_TRUE(g->Backward(1.0f, &aux.gradients()).ok());
  const ParamInfo* qkv = g->grads().Find("h.0.attn.qkv.weight");
  const float* gq = g->grads().Slice(*qkv);
  double norm = 0;
  for (int64_t i = 0; i < qkv->size; ++i) norm += std::abs(gq[i]);
  EXPECT_GT(norm, 0.0);
  const ParamInfo* wte = g->grads().Find("wte");
  for (int64_t i = 0; i < wte->size; ++i) EXPECT_TRUE(std::isfinite(g->grads().Slice(*wte)[i]));
}

}  // namespace
}  // namespace attnlab
