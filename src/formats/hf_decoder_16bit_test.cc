// LoadOptions::keep_stored: a BF16/F16 checkpoint's linear layers stay 16-bit, read in place from
// the (here in-memory) mapped tensors where the layout allows; the model then computes what the
// fp32-widened model computes, decodes like its full forward, and refuses to train.
//
// Tolerance: both models hold exactly the same weight values (16-bit widened exactly); only the
// order of the fp32 sums differs (panels vs tiles), each output a K <= 64 term dot product, so
// per layer ~K u relative (u = 2^-24, ~4e-6), amplified by 2 layers and the norms: 1e-4 of the
// largest logit, 25x below what a single wrong weight row moves.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "attnlab/matmul_precision.h"
#include "cache/kv_cache.h"
#include "formats/hf_decoder.h"
#include "model/gpt.h"

namespace attnlab {
namespace {

using nlohmann::json;

// Tensors held in memory in a chosen dtype; StoredRows exposes them as a mapped file would.
class MemorySource final : public TensorSource {
 public:
  struct T {
    SourceTensorInfo info;
    std::vector<uint16_t> h;  // F16 / BF16
    std::vector<float> f;     // F32
  };
  std::map<std::string, T> t;

  void Add(const std::string& name, std::vector<int64_t> shape, KvDtype dtype,
           std::mt19937_64& rng, float mean, float std) {
    T x;
    x.info.shape = std::move(shape);
    x.info.dtype = dtype == KvDtype::kF32 ? "F32" : (dtype == KvDtype::kBF16 ? "BF16" : "F16");
    x.info.file = "mem/" + name;
    std::normal_distribution<float> nd(mean, std);
    x.f.resize(static_cast<size_t>(x.info.numel()));
    for (float& v : x.f) v = nd(rng);
    if (dtype != KvDtype::kF32) {
      x.h.resize(x.f.size());
      ConvertToKvDtype(x.f.data(), x.info.numel(), dtype, x.h.data());
      x.f.clear();
    }
    t[name] = std::move(x);
  }
  std::vector<std::string> Names() const override {
    std::vector<std::string> n;
    for (const auto& [k, v] : t) n.push_back(k);
    return n;
  }
  const SourceTensorInfo* Find(const std::string& name) const override {
    auto it = t.find(name);
    return it == t.end() ? nullptr : &it->second.info;
  }
  Status ReadFloat(const std::string& name, std::span<float> out) const override {
    const T& x = t.at(name);
    if (static_cast<int64_t>(out.size()) != x.info.numel()) return Status::InvalidArgument("size");
    if (x.h.empty()) {
      std::copy(x.f.begin(), x.f.end(), out.begin());
    } else {
      ConvertFromKvDtype(x.h.data(), x.info.numel(),
                         x.info.dtype == "BF16" ? KvDtype::kBF16 : KvDtype::kF16, out.data());
    }
    return Status::Ok();
  }
  Mapped StoredRows(const std::string& name) const override {
    const T& x = t.at(name);
    Mapped m;
    const auto* p = x.h.empty() ? reinterpret_cast<const uint8_t*>(x.f.data())
                                : reinterpret_cast<const uint8_t*>(x.h.data());
    const size_t n = x.h.empty() ? x.f.size() * 4 : x.h.size() * 2;
    m.bytes = {p, n};
    m.dtype = x.h.empty() ? KvDtype::kF32
                          : (x.info.dtype == "BF16" ? KvDtype::kBF16 : KvDtype::kF16);
    return m;
  }
  const void* Data(const std::string& name) const {
    const T& x = t.at(name);
    return x.h.empty() ? static_cast<const void*>(x.f.data()) : x.h.data();
  }
};

constexpr int64_t kC = 32, kH = 4, kHkv = 2, kHd = 8, kF = 48, kV = 50, kL = 2;

json Qwen2Config() {
  return json{{"model_type", "qwen2"},        {"hidden_size", kC},
              {"num_hidden_layers", kL},      {"num_attention_heads", kH},
              {"num_key_value_heads", kHkv},  {"intermediate_size", kF},
              {"vocab_size", kV},             {"max_position_embeddings", 64},
              {"rms_norm_eps", 1e-6},         {"rope_theta", 10000.0},
              {"tie_word_embeddings", false}, {"hidden_act", "silu"}};
}

MemorySource Qwen2Tensors(KvDtype dtype, uint64_t seed) {
  std::mt19937_64 rng(seed);
  MemorySource s;
  const int64_t A = kH * kHd, KV = kHkv * kHd;
  s.Add("model.embed_tokens.weight", {kV, kC}, dtype, rng, 0, 1);
  for (int64_t l = 0; l < kL; ++l) {
    const std::string h = "model.layers." + std::to_string(l) + ".";
    s.Add(h + "input_layernorm.weight", {kC}, dtype, rng, 1, 0.1f);
    s.Add(h + "self_attn.q_proj.weight", {A, kC}, dtype, rng, 0, 0.3f);
    s.Add(h + "self_attn.k_proj.weight", {KV, kC}, dtype, rng, 0, 0.3f);
    s.Add(h + "self_attn.v_proj.weight", {KV, kC}, dtype, rng, 0, 0.3f);
    s.Add(h + "self_attn.q_proj.bias", {A}, dtype, rng, 0, 0.1f);
    s.Add(h + "self_attn.k_proj.bias", {KV}, dtype, rng, 0, 0.1f);
    s.Add(h + "self_attn.v_proj.bias", {KV}, dtype, rng, 0, 0.1f);
    s.Add(h + "self_attn.o_proj.weight", {kC, A}, dtype, rng, 0, 0.2f);
    s.Add(h + "post_attention_layernorm.weight", {kC}, dtype, rng, 1, 0.1f);
    s.Add(h + "mlp.gate_proj.weight", {kF, kC}, dtype, rng, 0, 0.2f);
    s.Add(h + "mlp.up_proj.weight", {kF, kC}, dtype, rng, 0, 0.2f);
    s.Add(h + "mlp.down_proj.weight", {kC, kF}, dtype, rng, 0, 0.2f);
  }
  s.Add("model.norm.weight", {kC}, dtype, rng, 1, 0.1f);
  s.Add("lm_head.weight", {kV, kC}, dtype, rng, 0, 0.3f);
  return s;
}

json NeoxConfig() {
  return json{{"model_type", "gpt_neox"},     {"hidden_size", kC},
              {"num_hidden_layers", kL},      {"num_attention_heads", kH},
              {"intermediate_size", kF},      {"vocab_size", kV},
              {"max_position_embeddings", 64}, {"layer_norm_eps", 1e-5},
              {"rotary_pct", 0.5},            {"rotary_emb_base", 10000.0},
              {"use_parallel_residual", true}, {"tie_word_embeddings", false},
              {"hidden_act", "gelu"}};
}

MemorySource NeoxTensors(KvDtype dtype, uint64_t seed) {
  std::mt19937_64 rng(seed);
  MemorySource s;
  s.Add("gpt_neox.embed_in.weight", {kV, kC}, dtype, rng, 0, 1);
  for (int64_t l = 0; l < kL; ++l) {
    const std::string h = "gpt_neox.layers." + std::to_string(l) + ".";
    for (const char* n : {"input_layernorm.", "post_attention_layernorm."}) {
      s.Add(h + n + "weight", {kC}, dtype, rng, 1, 0.1f);
      s.Add(h + n + "bias", {kC}, dtype, rng, 0, 0.1f);
    }
    s.Add(h + "attention.query_key_value.weight", {3 * kC, kC}, dtype, rng, 0, 0.3f);
    s.Add(h + "attention.query_key_value.bias", {3 * kC}, dtype, rng, 0, 0.1f);
    s.Add(h + "attention.dense.weight", {kC, kC}, dtype, rng, 0, 0.2f);
    s.Add(h + "attention.dense.bias", {kC}, dtype, rng, 0, 0.1f);
    s.Add(h + "mlp.dense_h_to_4h.weight", {kF, kC}, dtype, rng, 0, 0.2f);
    s.Add(h + "mlp.dense_h_to_4h.bias", {kF}, dtype, rng, 0, 0.1f);
    s.Add(h + "mlp.dense_4h_to_h.weight", {kC, kF}, dtype, rng, 0, 0.2f);
    s.Add(h + "mlp.dense_4h_to_h.bias", {kC}, dtype, rng, 0, 0.1f);
  }
  s.Add("gpt_neox.final_layer_norm.weight", {kC}, dtype, rng, 1, 0.1f);
  s.Add("gpt_neox.final_layer_norm.bias", {kC}, dtype, rng, 0, 0.1f);
  s.Add("embed_out.weight", {kV, kC}, dtype, rng, 0, 0.3f);
  return s;
}

std::vector<float> Logits(Gpt& g, const std::vector<int32_t>& tokens) {
  EXPECT_TRUE(g.Forward(tokens.data(), nullptr, 1, static_cast<int64_t>(tokens.size()), nullptr).ok());
  return std::vector<float>(g.logits(), g.logits() + tokens.size() * kV);
}

void ExpectClose(const std::vector<float>& a, const std::vector<float>& b, const char* what) {
  ASSERT_EQ(a.size(), b.size());
  float scale = 0, err = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    scale = std::max(scale, std::fabs(b[i]));
    err = std::max(err, std::fabs(a[i] - b[i]));
  }
  EXPECT_LE(err, 1e-4f * scale) << what << ": max |diff| " << err << " of scale " << scale;
}

void CheckFamily(const json& cfg, const MemorySource& src, KvDtype dtype, bool neox) {
  // fp32 activations: the bound above is for equal arithmetic (the bf16 products: below).
  ScopedWeightMatmul fp32(WeightMatmul::kF32);
  auto m16 = LoadHfDecoder(cfg, "config.json", src, "mem", LoadOptions{.keep_stored = true});
  auto m32 = LoadHfDecoder(cfg, "config.json", src, "mem", LoadOptions{.keep_stored = false});
  ASSERT_TRUE(m16.ok()) << m16.status().ToString();
  ASSERT_TRUE(m32.ok()) << m32.status().ToString();
  ASSERT_NE(m16->matrices, nullptr);
  EXPECT_EQ(m32->matrices, nullptr);
  const MatrixWeights& mw = *m16->matrices;
  // In place, not copied: the blocks are the source's bytes (except NeoX's regrouped q|k|v).
  const std::string emb = neox ? "gpt_neox.embed_in.weight" : "model.embed_tokens.weight";
  EXPECT_EQ(mw.embed.blocks[0].data, src.Data(emb));
  EXPECT_EQ(mw.embed.blocks[0].dtype, dtype);
  if (!neox) {
    EXPECT_EQ(mw.layers[1].qkv.blocks.size(), 3u);
    EXPECT_EQ(mw.layers[1].qkv.blocks[2].data,
              src.Data("model.layers.1.self_attn.v_proj.weight"));
  } else {
    EXPECT_NE(mw.layers[0].qkv.blocks[0].data,
              src.Data("gpt_neox.layers.0.attention.query_key_value.weight"));
  }
  // Every matrix 2 bytes per weight: the 16-bit model's store holds only the vectors.
  const ModelConfig& c = m16->config;
  const int64_t matrix_weights = ModelParameterCount(c) - [&] {
    int64_t n = 0;
    for (const ParamInfo& p : MatrixFreeLayout(c)) n += p.size;
    return n;
  }();
  EXPECT_EQ(mw.bytes(), 2 * matrix_weights);

  auto g16 = MakeGpt(std::move(m16).value());
  auto g32 = MakeGpt(std::move(m32).value());
  ASSERT_TRUE(g16.ok()) << g16.status().ToString();
  ASSERT_TRUE(g32.ok());
  std::vector<int32_t> tokens(23);
  std::mt19937_64 rng(5);
  for (int32_t& t : tokens) t = static_cast<int32_t>(rng() % kV);
  const std::vector<float> full = Logits(**g16, tokens);
  ExpectClose(full, Logits(**g32, tokens), "16-bit vs fp32-widened");

  // Incremental decode (prefill 9, then one token at a time) equals the full forward.
  std::unique_ptr<KvCache> cache = MakeKvCache(c);
  std::vector<float> inc;
  for (size_t pos = 0; pos < tokens.size();) {
    const int64_t n = pos == 0 ? 9 : 1;
    ASSERT_TRUE((*g16)->Forward(tokens.data() + pos, nullptr, 1, n, nullptr, cache.get()).ok());
    inc.insert(inc.end(), (*g16)->logits(), (*g16)->logits() + n * kV);
    pos += static_cast<size_t>(n);
  }
  ExpectClose(inc, full, "decode vs full forward");

  // A loss is fine (eval); training is refused with a message that says why.
  std::vector<int32_t> targets(tokens.begin() + 1, tokens.end());
  targets.push_back(-1);
  double loss = 0;
  ASSERT_TRUE((*g16)->Forward(tokens.data(), targets.data(), 1, 23, &loss).ok());
  EXPECT_TRUE(std::isfinite(loss));
  const Status b = (*g16)->Backward();
  EXPECT_FALSE(b.ok());
  EXPECT_NE(b.message().find("as stored (16-bit or quantized)"), std::string::npos) << b.message();
}

TEST(HfDecoder16Bit, Qwen2Bf16MatchesTheWidenedModelFromTheFileInPlace) {
  CheckFamily(Qwen2Config(), Qwen2Tensors(KvDtype::kBF16, 1), KvDtype::kBF16, false);
}

TEST(HfDecoder16Bit, Qwen2F16MatchesTheWidenedModelFromTheFileInPlace) {
  CheckFamily(Qwen2Config(), Qwen2Tensors(KvDtype::kF16, 2), KvDtype::kF16, false);
}

TEST(HfDecoder16Bit, GptNeoxBf16RegroupsItsFusedQkvIntoAnOwned16BitCopy) {
  CheckFamily(NeoxConfig(), NeoxTensors(KvDtype::kBF16, 3), KvDtype::kBF16, true);
}

// The bf16 products (attnlab/matmul_precision.h) against the fp32 path on the same stored
// weights: the logits' max |difference| relative to the largest logit, printed as a test
// property. Bound: each product rounds its input to bf16 (unit roundoff 2^-8 per element, 8
// significant bits); with errors of random sign a product's output moves by ~2^-8 of its size.
// The logits sit behind ~9 such products (2 layers of q|k|v, o, gate|up, down, and the head):
// sqrt(9) x 2^-8 = 1.2% typical, and we allow 3% for the norms' amplification; one wrong weight
// row moves the logits by ~30%. Measured here: qwen2 1.4e-2, gpt_neox 4.8e-3.
// Decode (1-4 rows) keeps fp32 arithmetic, so the prefill/decode split changes nothing else.
void CheckBf16Products(const json& cfg, const MemorySource& src, const char* name) {
  ScopedWeightMatmul bf16(WeightMatmul::kBf16);
  if (!bf16.status().ok()) GTEST_SKIP() << bf16.status().message();
  auto m = LoadHfDecoder(cfg, "config.json", src, "mem", LoadOptions{.keep_stored = true});
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  auto g = MakeGpt(std::move(m).value());
  ASSERT_TRUE(g.ok());
  std::vector<int32_t> tokens(41);
  std::mt19937_64 rng(9);
  for (int32_t& t : tokens) t = static_cast<int32_t>(rng() % kV);
  const std::vector<float> lb = Logits(**g, tokens);
  std::vector<float> lf;
  {
    ScopedWeightMatmul fp32(WeightMatmul::kF32);
    lf = Logits(**g, tokens);
  }
  float scale = 0, err = 0;
  for (size_t i = 0; i < lb.size(); ++i) {
    ASSERT_TRUE(std::isfinite(lb[i]));
    scale = std::max(scale, std::fabs(lf[i]));
    err = std::max(err, std::fabs(lb[i] - lf[i]));
  }
  ::testing::Test::RecordProperty(std::string(name) + "_bf16_vs_fp32_rel", std::to_string(err / scale));
  std::printf("%s: bf16 products vs fp32, logits' max |diff| / max |logit| = %.2e\n", name, err / scale);
  EXPECT_LE(err, 3e-2f * scale);
  EXPECT_GT(err, 0.0f);  // the bf16 path did run (rounding x changes something)
}

TEST(HfDecoder16Bit, Qwen2Bf16ProductsStayWithinBf16PrecisionOfTheFp32Path) {
  CheckBf16Products(Qwen2Config(), Qwen2Tensors(KvDtype::kBF16, 7), "qwen2");
}

TEST(HfDecoder16Bit, GptNeoxBf16ProductsStayWithinBf16PrecisionOfTheFp32Path) {
  CheckBf16Products(NeoxConfig(), NeoxTensors(KvDtype::kBF16, 8), "gpt_neox");
}

TEST(HfDecoder16Bit, Fp32FilesAndTheDefaultOptionsKeepFp32Weights) {
  const MemorySource f32 = Qwen2Tensors(KvDtype::kF32, 4);
  auto m = LoadHfDecoder(Qwen2Config(), "config.json", f32, "mem", LoadOptions{.keep_stored = true});
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->matrices, nullptr);
  const MemorySource b16 = Qwen2Tensors(KvDtype::kBF16, 4);
  auto d = LoadHfDecoder(Qwen2Config(), "config.json", b16, "mem");
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->matrices, nullptr);  // training's default: widened
}

TEST(HfDecoder16Bit, NonFiniteStoredWeightsAreRefusedLikeOnTheFp32Path) {
  MemorySource s = Qwen2Tensors(KvDtype::kBF16, 6);
  s.t["model.layers.1.mlp.up_proj.weight"].h[17] = 0x7fc0;  // bf16 NaN
  auto m = LoadHfDecoder(Qwen2Config(), "config.json", s, "mem", LoadOptions{.keep_stored = true});
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().message(),
            "mem/model.layers.1.mlp.up_proj.weight: tensor 'model.layers.1.mlp.up_proj.weight' "
            "has NaN at index 17 (of 1536 values)");
  MemorySource f = Qwen2Tensors(KvDtype::kF16, 6);
  f.t["model.layers.0.self_attn.o_proj.weight"].h[3] = 0xfc00;  // f16 -Inf
  auto n = LoadHfDecoder(Qwen2Config(), "config.json", f, "mem", LoadOptions{.keep_stored = true});
  ASSERT_FALSE(n.ok());
  EXPECT_NE(n.status().message().find("has -Inf at index 3"), std::string::npos);
}

}  // namespace
}  // namespace attnlab
