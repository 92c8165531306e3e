// The first-token penalty: alpha against a softmax written out, its hand-written gradients
// against central differences in double, alpha on a model against the first-token probe, the
// whole path through Gpt::Backward against directional differences (as gpt_test.cc), and the
// configurations it refuses.
#include "train/first_token_penalty.h"

#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <random>
#include <vector>

#include "diagnostics/first_token_probe.h"
#include "model/test_models.h"
#include "train/auxiliary_losses.h"

namespace attnlab {
namespace {

std::vector<double> Random(int64_t n, uint64_t seed, double sd) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> nd(0.0, sd);
  std::vector<double> v(n);
  for (double& x : v) x = nd(rng);
  return v;
}

// m_c written out: every row's softmax over keys 0..t, then the mean of column c over the rows
// t >= c (c = 0: alpha).
double AlphaNaive(const std::vector<double>& q, const std::vector<double>& k, int64_t T,
                  int64_t hd, int64_t stride, double scale, int64_t c = 0) {
  double a = 0;
  for (int64_t t = c; t < T; ++t) {
    std::vector<double> e(t + 1);
    double z = 0;
    for (int64_t j = 0; j <= t; ++j) {
      double s = 0;
      for (int64_t d = 0; d < hd; ++d) s += q[t * stride + d] * k[j * stride + d];
      z += (e[j] = std::exp(s * scale));
    }
    a += e[c] / z;
  }
  return a / double(T - c);
}

// Key 0 (alpha) and, through KeyShare, any key c (the first, a middle one, the last).
TEST(FirstTokenPenalty, AlphaAndGradientsMatchDefinitionAndFiniteDifferences) {
  for (int64_t T : {1, 2, 7, 13}) {
    for (int64_t hd : {1, 3, 8}) {
      for (int64_t c : {int64_t{0}, T / 2, T - 1}) {
        SCOPED_TRACE("T " + std::to_string(T) + " hd " + std::to_string(hd) + " key " +
                     std::to_string(c));
        const int64_t stride = hd + 2;  // rows padded: the strides are honoured
        std::vector<double> q = Random(T * stride, 11 + T, 1.3);
        std::vector<double> k = Random(T * stride, 7 + hd, 1.3);
        const double scale = 1.0 / std::sqrt(double(hd)), coef = 0.7;
        std::vector<double> gq(q.size(), 0.0), gk(k.size(), 0.0);
        const double a = KeyShare<double>(q.data(), stride, k.data(), stride, T, hd, scale, c,
                                          gq.data(), gk.data(), coef);
        EXPECT_NEAR(a, AlphaNaive(q, k, T, hd, stride, scale, c), 1e-14);
        if (c == 0) {
          EXPECT_EQ(a, FirstKeyShare<double>(q.data(), stride, k.data(), stride, T, hd, scale,
                                             nullptr, nullptr, 0.0));
        }
        if (T == 1) {
          EXPECT_EQ(a, 1.0);  // the only key
        }
        auto f = [&] {
          return coef * KeyShare<double>(q.data(), stride, k.data(), stride, T, hd, scale, c,
                                         nullptr, nullptr, 0.0);
        };
        const double h = 1e-5;
        for (auto* x : {&q, &k}) {
          const std::vector<double>& g = x == &q ? gq : gk;
          for (size_t i = 0; i < x->size(); ++i) {
            const double saved = (*x)[i];
            (*x)[i] = saved + h;
            const double up = f();
            (*x)[i] = saved - h;
            const double down = f();
            (*x)[i] = saved;
            // Padding columns carry no gradient; the others match to truncation O(h^2) ~ 1e-10.
            EXPECT_NEAR(g[i], (up - down) / (2 * h), 1e-8) << (x == &q ? "q " : "k ") << i;
          }
        }
      }
    }
  }
}

// A key 0 that every query prefers by far: alpha -> 1 and the gradient vanishes (saturation).
TEST(FirstTokenPenalty, SaturatedSinkHasSmallGradient) {
  const int64_t T = 6, hd = 2;
  std::vector<double> q(T * hd, 0.0), k(T * hd, 0.0);
  for (int64_t t = 0; t < T; ++t) q[t * hd] = 10.0;
  k[0] = 10.0;  // s_{t0} = 100 / sqrt(2), the others 0
  std::vector<double> gq(q.size(), 0.0), gk(k.size(), 0.0);
  const double a = FirstKeyShare<double>(q.data(), hd, k.data(), hd, T, hd, 1 / std::sqrt(2.0),
                                         gq.data(), gk.data(), 1.0);
  EXPECT_GT(a, 1.0 - 1e-12);
  for (double g : gq) EXPECT_LT(std::abs(g), 1e-12);
  for (double g : gk) EXPECT_LT(std::abs(g), 1e-12);
}

ModelConfig PenaltyModel() {
  ModelConfig c = test_models::TinyConfig({.vocab_size = 29, .context = 8, .n_layer = 2});
  c.n_head = 4;
  c.n_kv_head = 2;  // GQA: a key's gradient gathers its group's heads
  return c;
}

// R on a model equals the mean of the first-token probe's alpha_1 (squared for p = 2).
TEST(FirstTokenPenalty, ValueAgreesWithTheFirstTokenProbe) {
  const ModelConfig c = PenaltyModel();
  std::unique_ptr<Gpt> g = test_models::TinyModel(c, 4);
  ASSERT_NE(g, nullptr);
  std::mt19937_64 rng(3);
  test_models::PerturbConstantInitTensors(g->params(), rng, 0.5f);
  const int64_t B = 3, T = 8;
  const std::vector<int32_t> tokens = test_models::RandomTokens(B * T, c.vocab_size, rng);
  const std::vector<int32_t> targets = test_models::RandomTokens(B * T, c.vocab_size, rng);
  FirstTokenProbe probe(c);
  g->set_observer(&probe);
  double loss = 0;
  ASSERT_TRUE(g->Forward(tokens.data(), targets.data(), B, T, &loss).ok());
  g->set_observer(nullptr);
  for (int power : {1, 2}) {
    AuxiliaryLossOptions ao;
    ao.first_token_weight = 1.5;
    ao.first_token_power = power;
    AuxiliaryLosses aux(ao);
    ASSERT_TRUE(aux.Compute(*g).ok());
    double want = 0;
    for (const auto& layer : probe.alpha1()) {
      for (double a : layer) want += (power == 1 ? a : a * a) / (c.n_layer * c.n_head);
    }
    EXPECT_NEAR(aux.first_token(), want, 1e-5 * want) << "power " << power;
    EXPECT_NEAR(aux.loss(), 1.5 * want, 2e-5 * want);
    ASSERT_NE(aux.gradients().qkv, nullptr);
  }
}

// Through the model: d(LM loss + w R)/d(parameters) against directional central differences.
TEST(FirstTokenPenalty, ModelGradientIncludesThePenalty) {
  for (int power : {1, 2}) {
    for (bool sink_token : {false, true}) {
      SCOPED_TRACE("power " + std::to_string(power) + (sink_token ? " sink token" : ""));
      ModelConfig c = PenaltyModel();
      c.sink_token = sink_token;
      std::unique_ptr<Gpt> model = test_models::TinyModel(c, 21);
      ASSERT_NE(model, nullptr);
      Gpt& g = *model;
      std::mt19937_64 rng(9);
      test_models::PerturbConstantInitTensors(g.params(), rng, 0.3f);
      const int64_t B = 2, T = 7;
      const std::vector<int32_t> tokens = test_models::RandomTokens(B * T, c.vocab_size, rng);
      const std::vector<int32_t> targets = test_models::RandomTokens(B * T, c.vocab_size, rng);
      AuxiliaryLossOptions ao;
      ao.first_token_weight = 3.0;  // large enough that a missing term shows
      ao.first_token_power = power;
      AuxiliaryLosses aux(ao);
      auto total_loss = [&]() {
        double l = 0;
        EXPECT_TRUE(g.Forward(tokens.data(), targets.data(), B, T, &l).ok());
        EXPECT_TRUE(aux.Compute(g).ok());
        return l + aux.loss();
      };
      g.grads().Zero();
      ASSERT_TRUE(std::isfinite(total_loss()));
      EXPECT_GT(aux.first_token(), 0.0);
      ASSERT_TRUE(g.Backward(1.0f, &aux.gradients()).ok());
      test_models::ExpectDirectionalGradients(g, rng, total_loss);
    }
  }
}

// The penalty alone moves q/k weights; without it they get only the LM loss's gradient.
TEST(FirstTokenPenalty, PenaltyAloneReachesTheQueryKeyWeights) {
  const ModelConfig c = PenaltyModel();
  std::unique_ptr<Gpt> g = test_models::TinyModel(c, 5);
  ASSERT_NE(g, nullptr);
  std::mt19937_64 rng(1);
  test_models::PerturbConstantInitTensors(g->params(), rng, 0.3f);
  std::vector<int32_t> tokens = {1, 2, 3, 4, 5, 6}, targets(6, -1);  // no LM loss
  double loss = 0;
  ASSERT_TRUE(g->Forward(tokens.data(), targets.data(), 1, 6, &loss).ok());
  AuxiliaryLossOptions ao;
  ao.first_token_weight = 1.0;
  AuxiliaryLosses aux(ao);
  ASSERT_TRUE(aux.Compute(*g).ok());
  g->grads().Zero();
  ASSERT_TRUE(g->Backward(1.0f, &aux.gradients()).ok());
  const ParamInfo* qkv = g->grads().Find("h.1.attn.qkv.weight");
  ASSERT_NE(qkv, nullptr);
  double norm = 0;
  for (int64_t i = 0; i < qkv->size; ++i) norm += std::abs(g->grads().Slice(*qkv)[i]);
  EXPECT_GT(norm, 0.0);
}

TEST(FirstTokenPenalty, RefusesAttentionItDoesNotDescribe) {
  ModelConfig c = PenaltyModel();
  EXPECT_TRUE(CheckFirstTokenPenaltySupported(c).ok());
  auto refused = [](ModelConfig m, const char* what) {
    const Status s = CheckFirstTokenPenaltySupported(m);
    EXPECT_FALSE(s.ok()) << what;
    EXPECT_NE(s.message().find("first-token penalty"), std::string::npos) << s.message();
  };
  ModelConfig m = c;
  m.mask_first_key = true;
  refused(m, "mask_first_key");
  m = c;
  m.softmax = SoftmaxKind::kSoftmax1;
  refused(m, "softmax1");
  m = c;
  m.key_bias = true;
  refused(m, "key_bias");
  m = c;
  m.attention_window = 3;
  refused(m, "window");
  m = c;
  m.causal = false;
  refused(m, "bidirectional");
  // Through AuxiliaryLosses: a clear status, and a bad power too.
  std::unique_ptr<Gpt> g = test_models::TinyModel(c, 2);
  ASSERT_NE(g, nullptr);
  std::vector<int32_t> tokens = {1, 2, 3}, targets = {2, 3, 4};
  double loss = 0;
  ASSERT_TRUE(g->Forward(tokens.data(), targets.data(), 1, 3, &loss).ok());
  AuxiliaryLossOptions ao;
  ao.first_token_weight = 1.0;
  ao.first_token_power = 3;
  AuxiliaryLosses aux(ao);
  EXPECT_FALSE(aux.Compute(*g).ok());
}

}  // namespace
}  // namespace attnlab
