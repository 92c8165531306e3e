// Test-only fixtures: the tiny GPT configurations and models that unit tests across the tree
// build (gpt, checkpoint, trainer, auxiliary losses, experiments, caches). One place for the
// block "ModelConfig c; c.vocab_size = ...; ...; Gpt::Create; Initialize(seed)", with each test
// naming only what it depends on:
//
//   ModelConfig c = TinyConfig({.vocab_size = 23, .context = 9});
//   std::unique_ptr<Gpt> g = TinyModel(c, /*seed=*/5);      // null (and a test failure) if c is bad
//
// Not for library code: it reports failures through gtest.
#ifndef ATTNLAB_MODEL_TEST_MODELS_H_
#define ATTNLAB_MODEL_TEST_MODELS_H_

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <vector>

#include "attnlab/model_config.h"
#include "model/gpt.h"
#include "model/parameters.h"

namespace attnlab::test_models {

// The shape of a tiny model. Designated initialisers name the fields a test sets, in this order;
// the rest keep these defaults (gpt_test's model: head_dim 4, two layers, a 24-wide MLP, and an
// init large enough that every path carries visible signal).
struct TinyShape {
  int64_t vocab_size = 37;
  int64_t context = 11;
  int64_t d_model = 16;
  int64_t n_layer = 2;
  int64_t n_head = 4;
  int64_t mlp_hidden = 24;  // 0: ModelConfig's 4 * d_model
  float init_std = 0.3f;    // ModelConfig{}.init_std for GPT-2's 0.02
};

// A ModelConfig with the shape `s` and ModelConfig's defaults for every other option.
inline ModelConfig TinyConfig(const TinyShape& s = {}) {
  ModelConfig c;
  c.vocab_size = s.vocab_size;
  c.context = s.context;
  c.d_model = s.d_model;
  c.n_layer = s.n_layer;
  c.n_head = s.n_head;
  c.mlp_hidden = s.mlp_hidden;
  c.init_std = s.init_std;
  return c;
}

// A model for `c` initialised by ParameterStore::Initialize(c, seed); null after recording a
// test failure when `c` is refused.
inline std::unique_ptr<Gpt> TinyModel(const ModelConfig& c, uint64_t seed) {
  auto created = Gpt::Create(c);
  if (!created.ok()) {
    ADD_FAILURE() << "TinyModel: " << created.status().ToString();
    return nullptr;
  }
  std::unique_ptr<Gpt> g = std::move(created).value();
  g->params().Initialize(c, seed);
  return g;
}
inline std::unique_ptr<Gpt> TinyModel(uint64_t seed, const TinyShape& s = {}) {
  return TinyModel(TinyConfig(s), seed);
}

// Adds N(0, stddev) noise to every tensor initialised to a constant (biases, ReZero alphas and
// sink logits at 0, norm gains at 1), so gradient checks exercise them away from the special
// point where some terms vanish. Draws from `rng` tensor by tensor in layout order.
inline void PerturbConstantInitTensors(ParameterStore& params, std::mt19937_64& rng,
                                       float stddev) {
  std::normal_distribution<float> nd(0.0f, stddev);
  for (const ParamInfo& p : params.infos()) {
    if (p.init == ParamInit::kZeros || p.init == ParamInit::kOnes) {
      float* x = params.Slice(p);
      for (int64_t i = 0; i < p.size; ++i) x[i] += nd(rng);
    }
  }
}

// n tokens uniform over [0, vocab_size).
inline std::vector<int32_t> RandomTokens(int64_t n, int64_t vocab_size, std::mt19937_64& rng) {
  std::uniform_int_distribution<int32_t> tok(0, static_cast<int32_t>(vocab_size - 1));
  std::vector<int32_t> t(n);
  for (auto& x : t) x = tok(rng);
  return t;
}

// Richardson-extrapolated central difference of f at 0 over steps h and h / 2: O(h^4)
// truncation error.
inline double RichardsonDerivative(const std::function<double(double)>& f, double h) {
  const double d1 = (f(h) - f(-h)) / (2 * h);
  const double d2 = (f(h / 2) - f(-h / 2)) / h;
  return (4 * d2 - d1) / 3;
}

// The derivative of `loss` along a random direction u ~ N(0, 0.3^2) in tensor p of `params`:
// analytic = <dL/dx, u> from `grads` (the same layout), numeric = RichardsonDerivative with step
// 1e-2 * max(max_i |x_i|, 0.1). Leaves the tensor as it was.
struct DirectionalDerivative {
  double analytic = 0, numeric = 0;
};
inline DirectionalDerivative AlongRandomDirection(ParameterStore& params,
                                                  const ParameterStore& grads,
                                                  const ParamInfo& p, std::mt19937_64& rng,
                                                  const std::function<double()>& loss) {
  std::normal_distribution<float> nd(0.0f, 0.3f);
  float* x = params.Slice(p);
  const float* gx = grads.Slice(p);
  std::vector<float> u(p.size), saved(x, x + p.size);
  double scale = 0;
  DirectionalDerivative d;
  for (int64_t i = 0; i < p.size; ++i) scale = std::max(scale, double(std::abs(x[i])));
  for (int64_t i = 0; i < p.size; ++i) {
    u[i] = nd(rng);
    d.analytic += double(gx[i]) * u[i];
  }
  d.numeric = RichardsonDerivative(
      [&](double t) {
        for (int64_t i = 0; i < p.size; ++i) x[i] = saved[i] + static_cast<float>(t * u[i]);
        return loss();
      },
      1e-2 * std::max(scale, 0.1));
  std::copy(saved.begin(), saved.end(), x);
  return d;
}

// Every parameter tensor of g: its analytic gradient (already in g.grads(), of `loss`) against
// a directional central difference along a random direction (fp32 forward: the tolerance is
// 2% of the derivative + 2e-4, gpt_test.cc's).
inline void ExpectDirectionalGradients(Gpt& g, std::mt19937_64& rng,
                                       const std::function<double()>& loss) {
  for (const ParamInfo& p : g.params().infos()) {
    SCOPED_TRACE(p.name);
    const DirectionalDerivative d = AlongRandomDirection(g.params(), g.grads(), p, rng, loss);
    EXPECT_NEAR(d.analytic, d.numeric, 0.02 * std::abs(d.numeric) + 2e-4)
        << "analytic " << d.analytic << " vs numeric " << d.numeric;
  }
}

}  // namespace attnlab::test_models

#endif  // ATTNLAB_MODEL_TEST_MODELS_H_
