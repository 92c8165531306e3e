// The GPT's hand-written backward against central differences of its own fp32 forward, for every
// configuration option: a directional derivative per tensor (coarse) and per-element derivatives
// on a few elements of every tensor, each held to that tensor's own gradient scale (the
// tolerances are derived at the tests). The independent check is the PyTorch oracle in tests/.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "cache/kv_cache.h"
#include "model/gpt.h"
#include "model/test_models.h"

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
      {"learned_positions_every_layer",
       [](ModelConfig& c) { c.position = PositionEncoding::kLearned, c.position_every_layer = true; }},
      {"positions_every_layer_post_ln_sink_token",
       [](ModelConfig& c) {
         c.position = PositionEncoding::kLearned, c.position_every_layer = true;
         c.norm = NormPlacement::kPost, c.sink_token = true;
       }},
      {"gptj_partial_rotary",
       [](ModelConfig& c) { c.rope_layout = RopeLayout::kGptJ, c.rotary_dim = 2; }},
      {"post_ln", [](ModelConfig& c) { c.norm = NormPlacement::kPost; }},
      {"no_norm", [](ModelConfig& c) { c.norm = NormPlacement::kNone; }},
      {"rmsnorm", [](ModelConfig& c) { c.norm_type = NormType::kRmsNorm; }},
      {"inv_sqrt_2l", [](ModelConfig& c) { c.residual_scale = ResidualScale::kInvSqrt2L; }},
      {"rezero", [](ModelConfig& c) { c.residual_scale = ResidualScale::kReZero; }},
      {"deepnorm",
       [](ModelConfig& c) { c.norm = NormPlacement::kPost, c.residual_scale = ResidualScale::kDeepNorm; }},
      {"bidirectional", [](ModelConfig& c) { c.causal = false; }},
      {"bidirectional_no_norm_no_mlp",
       [](ModelConfig& c) { c.causal = false, c.norm = NormPlacement::kNone, c.mlp = false; }},
      {"no_mlp", [](ModelConfig& c) { c.mlp = false; }},
      {"no_residual", [](ModelConfig& c) { c.residual = false; }},
      {"softmax1", [](ModelConfig& c) { c.softmax = SoftmaxKind::kSoftmax1; }},
      {"sink_logit", [](ModelConfig& c) { c.softmax = SoftmaxKind::kSinkLogit; }},
      {"sigmoid", [](ModelConfig& c) { c.softmax = SoftmaxKind::kSigmoid; }},
      // Softpick is in KinkedVariants (below), not here.
      {"output_gate", [](ModelConfig& c) { c.output_gate = true; }},
      {"output_gate_elementwise",
       [](ModelConfig& c) { c.output_gate = true, c.gate_elementwise = true; }},
      {"mask_first_key", [](ModelConfig& c) { c.mask_first_key = true; }},
      // Gu et al.'s key with a zero value: plain, and with GQA, softmax1 and a window.
      {"key_bias", [](ModelConfig& c) { c.key_bias = true; }},
      {"key_bias_gqa_softmax1_window",
       [](ModelConfig& c) {
         c.key_bias = true, c.n_kv_head = 2, c.softmax = SoftmaxKind::kSoftmax1;
         c.attention_window = 2;
       }},
      {"sink_token", [](ModelConfig& c) { c.sink_token = true; }},
      {"sink_token_learned_pos",
       [](ModelConfig& c) { c.sink_token = true, c.position = PositionEncoding::kLearned; }},
      {"gqa", [](ModelConfig& c) { c.n_kv_head = 2; }},
      {"window", [](ModelConfig& c) { c.attention_window = 3; }},
      // Linear attention (phi = elu + 1): chunked forward/backward, recurrent decode.
      {"linear", [](ModelConfig& c) { c.attention_type = AttentionType::kLinear; }},
      {"linear_gqa_learned_gate",
       [](ModelConfig& c) {
         c.attention_type = AttentionType::kLinear, c.n_kv_head = 2;
         c.position = PositionEncoding::kLearned, c.output_gate = true;
       }},
      // Local + global (Longformer): window 2 plus 2 global tokens; and with GQA, a sink token
      // (position 0, also global) and softmax1.
      {"sparse",
       [](ModelConfig& c) {
         c.attention_type = AttentionType::kSparse, c.attention_window = 2;
         c.attention_global = 2;
       }},
      {"sparse_gqa_sink_token_softmax1",
       [](ModelConfig& c) {
         c.attention_type = AttentionType::kSparse, c.attention_window = 1;
         c.attention_global = 3, c.n_kv_head = 1, c.sink_token = true;
         c.softmax = SoftmaxKind::kSoftmax1;
       }},
      {"untied_no_bias", [](ModelConfig& c) { c.tie_embeddings = false, c.bias = false; }},
      // Released decoder families' options (hf_decoder.h maps config.json onto them).
      {"swiglu_qkv_bias_llama_like",
       [](ModelConfig& c) {
         c.mlp_activation = MlpActivation::kSwiGlu, c.bias = false, c.qkv_bias = true;
         c.norm_type = NormType::kRmsNorm, c.n_kv_head = 2, c.tie_embeddings = false;
       }},
      {"attention_and_mlp_bias_llama_like",
       [](ModelConfig& c) {
         c.mlp_activation = MlpActivation::kSwiGlu, c.bias = false, c.qkv_bias = true;
         c.proj_bias = true, c.mlp_bias = true, c.norm_type = NormType::kRmsNorm;
       }},
      {"gelu_erf_parallel_residual_neox_like",
       [](ModelConfig& c) {
         c.mlp_activation = MlpActivation::kGeluErf, c.parallel_residual = true;
         c.rotary_dim = 2;
       }},
      {"qk_norm_head_size_qwen3_like",
       [](ModelConfig& c) {
         c.qk_norm = true, c.head_size = 6, c.n_kv_head = 2, c.norm_type = NormType::kRmsNorm;
         c.mlp_activation = MlpActivation::kSwiGlu, c.bias = false;
       }},
      {"window_layers_sink_logit_gptoss_like",
       [](ModelConfig& c) {
         c.attention_window = 2, c.window_layers = "wf", c.softmax = SoftmaxKind::kSinkLogit;
         c.rope_scaling = RopeScaling::kYarnHf, c.rope_factor = 2.0, c.rope_original_context = 8;
       }},
      {"llama3_rope",
       [](ModelConfig& c) {
         c.rope_scaling = RopeScaling::kLlama3, c.rope_factor = 4.0, c.rope_original_context = 8;
         c.rope_base = 100.0;
       }},
  };
}

// Variants whose attention weights have kinks (softpick: ReLU and |.| at s = 0). fp32 differences
// with step 1e-2 cross the kink on a few scores and come out 2-4% off, so the two
// finite-difference tests below skip them; their gradients are checked by double differences in
// the kernel (AttentionReference.GradientsPassFiniteDifferencesInDouble) and, through the model,
// against torch autograd (tests/model_torch_oracle_test.py, "softpick*"). Every other test runs
// them.
std::vector<Variant> KinkedVariants() {
  return {{"softpick", [](ModelConfig& c) { c.softmax = SoftmaxKind::kSoftpick; }}};
}

std::vector<Variant> AllVariants() {
  std::vector<Variant> all = Variants();
  for (Variant& v : KinkedVariants()) all.push_back(std::move(v));
  return all;
}

ModelConfig SmallConfig() { return test_models::TinyConfig(); }

// A model of `c` with every tensor non-trivial (constant-initialised ones perturbed), a batch of
// B = 2 random sequences of T = 9 tokens with one ignored target, and the gradients of its loss
// (Forward + Backward into zeroed grads()); rng continues from here.
struct GradientCase {
  std::unique_ptr<Gpt> model;
  std::vector<int32_t> tokens, targets;
  double loss = 0;
  static constexpr int64_t B = 2, T = 9;
  double Loss() {
    double l = 0;
    EXPECT_TRUE(model->Forward(tokens.data(), targets.data(), B, T, &l).ok());
    return l;
  }
};
// Null model (after a test failure) when `c` is refused or the backward fails.
GradientCase MakeGradientCase(const ModelConfig& c, std::mt19937_64& rng) {
  GradientCase gc;
  gc.model = test_models::TinyModel(c, 11);
  if (!gc.model) return gc;
  test_models::PerturbConstantInitTensors(gc.model->params(), rng, 0.3f);
  gc.tokens = test_models::RandomTokens(GradientCase::B * GradientCase::T, c.vocab_size, rng);
  gc.targets = test_models::RandomTokens(GradientCase::B * GradientCase::T, c.vocab_size, rng);
  gc.targets[3] = -1;  // an ignored position
  gc.model->grads().Zero();
  gc.loss = gc.Loss();
  const Status st = gc.model->Backward();
  if (!std::isfinite(gc.loss) || !st.ok()) {
    ADD_FAILURE() << "loss " << gc.loss << ", backward: " << st.ToString();
    gc.model.reset();
  }
  return gc;
}

// Coarse whole-tensor net: the directional derivative along one random direction per tensor,
// 2% relative error accepted. It sees every element at once but not a small error in a tensor
// whose gradient is small (the absolute floor hides it); the elementwise test below does.
TEST(Gpt, BackwardMatchesDirectionalFiniteDifferencesForEveryOption) {
  for (const Variant& var : Variants()) {
    SCOPED_TRACE(var.name);
    ModelConfig c = SmallConfig();
    var.apply(c);
    std::mt19937_64 rng(5);
    GradientCase gc = MakeGradientCase(c, rng);
    ASSERT_NE(gc.model, nullptr);
    Gpt& g = *gc.model;
    test_models::ExpectDirectionalGradients(g, rng, [&] { return gc.Loss(); });
  }
}

// Elementwise: d loss / d x_i by central differences for a few elements of EVERY parameter
// tensor (all elements of tensors up to 8 long: sink logits, ReZero alphas, gate biases; else
// the element with the largest |gradient| and two random ones), each against a tolerance of
// that tensor's own gradient scale G = max_i |dL/dx_i|, so a tensor with small gradients is
// held to its own size, not to the size of a projection's.
//   Step h = 3e-2 on parameters of size O(0.3 .. 1): Richardson's O(h^4) truncation stays below
//   1e-3 G on every tensor here (measured), and we allow 1% of G.
//   Rounding: the fp32 forward rounds the loss by about u |L| (u = 2^-24; measured ~1 u |L|),
//   which the difference quotient of four losses amplifies by about 2 / h; we allow 8 u |L| / h
//   (~6e-5 here).
// A 5% error in any tensor's gradient (5e-2 G at the largest element) is far outside.
// A batch of one-token sequences: their q, k and v rows interleave with the batch stride (the
// engine's overlap check once refused it), and the gradient of the mean loss is the mean of the
// two sequences' gradients.
TEST(Gpt, BackwardOfABatchOfOneTokenSequences) {
  ModelConfig c = SmallConfig();
  auto created = Gpt::Create(c);
  ASSERT_TRUE(created.ok());
  Gpt& g = *created.value();
  g.params().Initialize(c, 3);
  const int32_t x[2] = {1, 5}, y[2] = {2, 7};
  double loss = 0;
  ASSERT_TRUE(g.Forward(x, y, 2, 1, &loss).ok());
  g.grads().Zero();
  ASSERT_TRUE(g.Backward().ok());
  const std::vector<float> both(g.grads().data(), g.grads().data() + g.grads().size());
  std::vector<float> halves(both.size(), 0.0f);
  for (int b = 0; b < 2; ++b) {
    ASSERT_TRUE(g.Forward(x + b, y + b, 1, 1, &loss).ok());
    g.grads().Zero();
    ASSERT_TRUE(g.Backward(0.5f).ok());
    for (size_t i = 0; i < halves.size(); ++i) halves[i] += g.grads().data()[i];
  }
  for (size_t i = 0; i < both.size(); ++i) {
    ASSERT_NEAR(both[i], halves[i], 1e-6 + 1e-5 * std::abs(halves[i])) << "gradient " << i;
  }
}

TEST(Gpt, BackwardMatchesElementwiseFiniteDifferencesOnEveryTensor) {
  constexpr double kStep = 3e-2, kRelative = 1e-2, kUnitRoundoff = 0x1p-24;
  for (const Variant& var : Variants()) {
    SCOPED_TRACE(var.name);
    ModelConfig c = SmallConfig();
    var.apply(c);
    std::mt19937_64 rng(5);
    GradientCase gc = MakeGradientCase(c, rng);
    ASSERT_NE(gc.model, nullptr);
    Gpt& g = *gc.model;
    const double noise = 8 * kUnitRoundoff * std::max(1.0, std::abs(gc.loss)) / kStep;
    for (const ParamInfo& p : g.params().infos()) {
      SCOPED_TRACE(p.name);
      float* x = g.params().Slice(p);
      const float* gx = g.grads().Slice(p);
      double gscale = 0;
      int64_t largest = 0;
      for (int64_t i = 0; i < p.size; ++i) {
        if (std::abs(gx[i]) > gscale) gscale = std::abs(gx[i]), largest = i;
      }
      std::vector<int64_t> probe;
      if (p.size <= 8) {
        for (int64_t i = 0; i < p.size; ++i) probe.push_back(i);
      } else {
        std::uniform_int_distribution<int64_t> pick(0, p.size - 1);
        probe = {largest, pick(rng), pick(rng)};
      }
      for (int64_t i : probe) {
        const float saved = x[i];
        const double fd = test_models::RichardsonDerivative(
            [&](double t) {
              x[i] = static_cast<float>(saved + t);
              return gc.Loss();
            },
            kStep);
        x[i] = saved;
        EXPECT_NEAR(gx[i], fd, kRelative * gscale + noise)
            << "element " << i << ": analytic " << gx[i] << " vs numeric " << fd
            << " (tensor's largest |gradient| " << gscale << ")";
      }
    }
  }
}

// Prefill + token-by-token decode against a KV cache reproduces the full forward's logits.
TEST(Gpt, KvCacheDecodeMatchesFullForward) {
  for (const Variant& var : AllVariants()) {
    SCOPED_TRACE(var.name);
    ModelConfig c = SmallConfig();
    c.init_std = 0.1f;
    var.apply(c);
    if (!c.causal) continue;  // a bidirectional model has no KV cache (next test)
    std::unique_ptr<Gpt> model = test_models::TinyModel(c, 3);
    ASSERT_NE(model, nullptr);
    Gpt& g = *model;
    std::mt19937_64 rng(8);
    std::uniform_int_distribution<int32_t> tok(0, static_cast<int32_t>(c.vocab_size - 1));
    const int64_t T = c.context;
    std::vector<int32_t> tokens(T);
    for (auto& t : tokens) t = tok(rng);
    ASSERT_TRUE(g.Forward(tokens.data(), nullptr, 1, T, nullptr).ok());
    const int64_t V = c.vocab_size, off = c.sink_token ? 1 : 0;
    std::vector<float> full(g.logits() + off * V, g.logits() + (T + off) * V);
    // DenseKvCache, or linear attention's running state (LinearAttentionCache).
    std::unique_ptr<KvCache> cache = MakeKvCache(c);
    std::vector<float> inc;
    const int64_t prefill = 4;
    ASSERT_TRUE(g.Forward(tokens.data(), nullptr, 1, prefill, nullptr, cache.get()).ok());
    inc.insert(inc.end(), g.logits() + off * V, g.logits() + (prefill + off) * V);
    for (int64_t t = prefill; t < T; ++t) {
      ASSERT_TRUE(g.Forward(tokens.data() + t, nullptr, 1, 1, nullptr, cache.get()).ok());
      inc.insert(inc.end(), g.logits(), g.logits() + V);
    }
    ASSERT_EQ(inc.size(), full.size());
    double max_abs = 0, max_err = 0;
    for (size_t i = 0; i < full.size(); ++i) {
      max_abs = std::max(max_abs, double(std::abs(full[i])));
      max_err = std::max(max_err, double(std::abs(full[i] - inc[i])));
    }
    EXPECT_LE(max_err, 1e-5 * max_abs) << "max |logit| " << max_abs;
    // The cached forwards kept one layer's activations at a time: no per-layer streams now.
    EXPECT_EQ(g.residual(0), nullptr);
    EXPECT_EQ(g.attention_output(0), nullptr);
    // A full forward after them gets every layer's buffers back: same logits, and Backward runs.
    ASSERT_TRUE(g.Forward(tokens.data(), nullptr, 1, T, nullptr).ok());
    EXPECT_EQ(std::vector<float>(g.logits() + off * V, g.logits() + (T + off) * V), full);
    ASSERT_NE(g.residual(c.n_layer), nullptr);
    std::vector<int32_t> targets(tokens.begin() + 1, tokens.end());
    targets.push_back(-1);
    double loss = 0;
    ASSERT_TRUE(g.Forward(tokens.data(), targets.data(), 1, T, &loss).ok());
    EXPECT_TRUE(g.Backward().ok());
  }
}

// A cached forward started at layer k from the stream that left layer k - 1 (set_forward_start,
// with a cache holding only layers k..L-1) gives the logits of the full cached forward, chunk by
// chunk; a wrong start is refused.
class LayerOutputs : public ForwardObserver {
 public:
  explicit LayerOutputs(int64_t layer, int64_t C) : layer_(layer), C_(C) {}
  void OnLayer(const LayerTensors& t) override {
    if (t.layer != layer_) return;
    rows.insert(rows.end(), t.residual_out, t.residual_out + t.batch * t.len * C_);
  }
  std::vector<float> rows;

 private:
  int64_t layer_, C_;
};

TEST(Gpt, ForwardFromALayerMatchesTheFullCachedForward) {
  for (const Variant& var : AllVariants()) {
    SCOPED_TRACE(var.name);
    ModelConfig c = SmallConfig();
    c.init_std = 0.1f;
    var.apply(c);
    if (!c.causal || c.n_layer < 2) continue;
    std::unique_ptr<Gpt> model = test_models::TinyModel(c, 5);
    ASSERT_NE(model, nullptr);
    Gpt& g = *model;
    if (dynamic_cast<DenseKvCache*>(MakeKvCache(c).get()) == nullptr) continue;  // linear state
    std::mt19937_64 rng(11);
    std::uniform_int_distribution<int32_t> tok(0, static_cast<int32_t>(c.vocab_size - 1));
    const int64_t T = c.context, V = c.vocab_size, chunk = 3;
    std::vector<int32_t> tokens(T);
    for (auto& t : tokens) t = tok(rng);
    const int64_t first = c.n_layer - 1;
    auto run = [&](int64_t from, const std::vector<float>& stream, LayerOutputs* obs,
                   std::vector<float>* logits) {
      DenseKvCache cache(c.n_layer, c.kv_heads(), c.head_dim());
      ASSERT_TRUE(cache.HoldLayers(from, c.n_layer).ok());
      g.set_observer(obs);
      g.set_forward_start(from, stream.data(), static_cast<int64_t>(stream.size()) / c.d_model);
      for (int64_t s = 0; s < T; s += chunk) {
        const int64_t n = std::min(chunk, T - s);
        ASSERT_TRUE(g.Forward(tokens.data() + s, nullptr, 1, n, nullptr, &cache).ok());
        const int64_t rows = n + (s == 0 && c.sink_token ? 1 : 0);
        logits->insert(logits->end(), g.logits(), g.logits() + rows * V);
      }
      g.set_observer(nullptr);
      g.set_forward_start(0, nullptr, 0);
    };
    LayerOutputs before(first - 1, c.d_model);
    std::vector<float> full, from_layer;
    run(0, {}, &before, &full);
    run(first, before.rows, nullptr, &from_layer);
    EXPECT_EQ(full, from_layer);
    // Too few rows, a layer out of range, a batch, and a layer the cache does not hold.
    DenseKvCache cache(c.n_layer, c.kv_heads(), c.head_dim());
    std::vector<float> short_stream(before.rows.begin(), before.rows.begin() + c.d_model);
    g.set_forward_start(first, short_stream.data(), 1);
    EXPECT_FALSE(g.Forward(tokens.data(), nullptr, 1, 4, nullptr, &cache).ok());
    g.set_forward_start(c.n_layer, before.rows.data(), T);
    EXPECT_FALSE(g.Forward(tokens.data(), nullptr, 1, 4, nullptr, &cache).ok());
    g.set_forward_start(first, before.rows.data(), T);
    EXPECT_FALSE(g.Forward(tokens.data(), nullptr, 2, 4, nullptr, &cache).ok());
    g.set_forward_start(0, nullptr, 0);
    DenseKvCache upper(c.n_layer, c.kv_heads(), c.head_dim());
    ASSERT_TRUE(upper.HoldLayers(first, c.n_layer).ok());
    EXPECT_FALSE(g.Forward(tokens.data(), nullptr, 1, 4, nullptr, &upper).ok());
    EXPECT_FALSE(upper.HoldLayers(0, c.n_layer + 1).ok());
    EXPECT_FALSE(upper.HoldLayers(1, 1).ok());
  }
}

TEST(Gpt, BidirectionalAndDeepNormConstraints) {
  ModelConfig c = SmallConfig();
  c.causal = false;
  auto g = Gpt::Create(c);
  ASSERT_TRUE(g.ok());
  std::vector<int32_t> tokens(4, 1);
  DenseKvCache cache(c.n_layer, c.kv_heads(), c.head_dim());
  EXPECT_FALSE(g.value()->Forward(tokens.data(), nullptr, 1, 4, nullptr, &cache).ok());
  // Bidirectional: the first position sees the last token, so changing it changes row 0.
  g.value()->params().Initialize(c, 2);
  ASSERT_TRUE(g.value()->Forward(tokens.data(), nullptr, 1, 4, nullptr).ok());
  const float before = g.value()->logits()[0];
  tokens[3] = 5;
  ASSERT_TRUE(g.value()->Forward(tokens.data(), nullptr, 1, 4, nullptr).ok());
  EXPECT_NE(before, g.value()->logits()[0]);
  c.attention_window = 2;
  EXPECT_FALSE(Gpt::Create(c).ok());
  ModelConfig d = SmallConfig();
  d.residual_scale = ResidualScale::kDeepNorm;  // pre-LN: rejected
  EXPECT_FALSE(Gpt::Create(d).ok());
  d.norm = NormPlacement::kPost;
  EXPECT_TRUE(Gpt::Create(d).ok());
  EXPECT_FLOAT_EQ(d.deepnorm_alpha(), std::pow(4.0f, 0.25f));   // (2 L)^(1/4), L = 2
  EXPECT_FLOAT_EQ(d.deepnorm_beta(), std::pow(16.0f, -0.25f));  // (8 L)^(-1/4)
}

// DeepNorm's init: q, k columns at init_std, v columns and the output / MLP projections at
// init_std * beta (and not also scaled by GPT-2's 1 / sqrt(2 L)).
TEST(Gpt, DeepNormInitialisation) {
  ModelConfig c = SmallConfig();
  c.d_model = 64, c.n_head = 4, c.mlp_hidden = 128, c.n_layer = 8, c.init_std = 0.1f;
  c.norm = NormPlacement::kPost;
  c.residual_scale = ResidualScale::kDeepNorm;
  ParameterStore p(c);
  p.Initialize(c, 7);
  auto std_of = [](const float* x, int64_t n, int64_t stride, int64_t cols, int64_t col0) {
    double s = 0;
    int64_t k = 0;
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t j = col0; j < col0 + cols; ++j, ++k) s += double(x[i * stride + j]) * x[i * stride + j];
    }
    return std::sqrt(s / k);
  };
  const double beta = c.deepnorm_beta();
  const float* qkv = p.Slice(*p.Find("h.3.attn.qkv.weight"));
  EXPECT_NEAR(std_of(qkv, 64, 192, 128, 0), 0.1, 0.005);         // q | k
  EXPECT_NEAR(std_of(qkv, 64, 192, 64, 128), 0.1 * beta, 0.005 * beta);  // v
  const float* proj = p.Slice(*p.Find("h.3.attn.proj.weight"));
  EXPECT_NEAR(std_of(proj, 64, 64, 64, 0), 0.1 * beta, 0.005 * beta);
  const float* fc = p.Slice(*p.Find("h.3.mlp.fc.weight"));
  EXPECT_NEAR(std_of(fc, 64, 128, 128, 0), 0.1 * beta, 0.005 * beta);
  const float* fcp = p.Slice(*p.Find("h.3.mlp.proj.weight"));
  EXPECT_NEAR(std_of(fcp, 128, 64, 64, 0), 0.1 * beta, 0.005 * beta);
}

// attention_type: combinations without a meaning are refused with a message naming the option;
// each model refuses the other kind of cache; linear attention's cache does not grow.
TEST(Gpt, AttentionTypesRejectMeaninglessCombinationsAndPickTheirCache) {
  auto rejects = [](const std::function<void(ModelConfig&)>& f, const std::string& needle) {
    ModelConfig c = SmallConfig();
    f(c);
    const Status st = ValidateModelConfig(c);
    EXPECT_FALSE(st.ok()) << needle;
    EXPECT_NE(st.message().find(needle), std::string::npos) << st.message();
  };
  const auto linear = [](ModelConfig& c) { c.attention_type = AttentionType::kLinear; };
  rejects([&](ModelConfig& c) { linear(c), c.softmax = SoftmaxKind::kSinkLogit; }, "softmax");
  rejects([&](ModelConfig& c) { linear(c), c.softmax = SoftmaxKind::kSigmoid; }, "softmax");
  rejects([&](ModelConfig& c) { linear(c), c.mask_first_key = true; }, "mask_first_key");
  rejects([&](ModelConfig& c) { c.gate_elementwise = true; }, "gate_elementwise");
  rejects([&](ModelConfig& c) { c.key_bias = true, c.softmax = SoftmaxKind::kSoftpick; }, "key_bias");
  rejects([&](ModelConfig& c) { c.key_bias = true, c.softmax = SoftmaxKind::kSigmoid; }, "key_bias");
  rejects([&](ModelConfig& c) { linear(c), c.key_bias = true; }, "key_bias");
  rejects([&](ModelConfig& c) { linear(c), c.softmax = SoftmaxKind::kSoftpick; }, "softmax");
  rejects([&](ModelConfig& c) { linear(c), c.sink_token = true; }, "sink_token");
  rejects([&](ModelConfig& c) { linear(c), c.attention_window = 4; }, "attention_window");
  rejects([&](ModelConfig& c) { linear(c), c.causal = false; }, "causal");
  rejects([](ModelConfig& c) { c.attention_global = 2; }, "attention_type = sparse");
  rejects([](ModelConfig& c) { c.attention_type = AttentionType::kSparse; }, "attention_window");
  rejects([](ModelConfig& c) {
    c.attention_type = AttentionType::kSparse, c.attention_window = 2, c.attention_global = -1;
  }, "attention_global");
  // JSON round trip of the new keys.
  ModelConfig sparse = SmallConfig();
  sparse.attention_type = AttentionType::kSparse, sparse.attention_window = 3;
  sparse.attention_global = 2;
  auto parsed = ModelConfigFromJson(ModelConfigToJson(sparse));
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ(parsed.value().attention_type, AttentionType::kSparse);
  EXPECT_EQ(parsed.value().attention_global, 2);
  EXPECT_FALSE(ModelConfigFromJson(R"({"attention_type": "performer"})").ok());

  // Caches: a linear model gets (and needs) its state; a softmax model refuses the state.
  ModelConfig lc = SmallConfig();
  linear(lc);
  auto lin = Gpt::Create(lc);
  ASSERT_TRUE(lin.ok());
  lin.value()->params().Initialize(lc, 4);
  std::vector<int32_t> tokens(40, 3);
  DenseKvCache dense(lc.n_layer, lc.kv_heads(), lc.head_dim());
  const Status wrong = lin.value()->Forward(tokens.data(), nullptr, 1, 4, nullptr, &dense);
  EXPECT_FALSE(wrong.ok());
  EXPECT_NE(wrong.message().find("LinearAttentionCache"), std::string::npos) << wrong.message();
  std::unique_ptr<KvCache> state = MakeKvCache(lc);
  ASSERT_NE(dynamic_cast<LinearAttentionCache*>(state.get()), nullptr);
  const int64_t bytes = state->bytes();
  // Decoding past the training context: linear attention has no window to run out of.
  for (int64_t t = 0; t < 40; ++t) {
    ASSERT_TRUE(lin.value()->Forward(tokens.data() + t, nullptr, 1, 1, nullptr, state.get()).ok());
  }
  EXPECT_EQ(state->size(), 40);
  EXPECT_EQ(state->bytes(), bytes);
  EXPECT_EQ(bytes, lc.n_layer * lc.kv_heads() * lc.head_dim() * (lc.head_dim() + 1) * 4);
  auto soft = Gpt::Create(SmallConfig());
  ASSERT_TRUE(soft.ok());
  LinearAttentionCache not_keys(lc.n_layer, lc.kv_heads(), lc.head_dim());
  EXPECT_FALSE(soft.value()->Forward(tokens.data(), nullptr, 1, 4, nullptr, &not_keys).ok());
  EXPECT_NE(dynamic_cast<DenseKvCache*>(MakeKvCache(SmallConfig()).get()), nullptr);
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
