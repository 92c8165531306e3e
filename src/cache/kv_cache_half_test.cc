// HalfKvCache (kv_cache.h): a bf16 / fp16 KV cache for decoding.
//
// (1) Consistency: decoding token by token through a HalfKvCache (AttentionDecode over the
//     16-bit storage) against one prefill of the same tokens through a fresh HalfKvCache (flash
//     attention over the values converted back to fp32). Both round the same K and V, but the
//     two paths compute them with different GEMM shapes (M = 1 vs M = T), so their fp32 values
//     may differ in the last bit and, rarely, round to neighbouring 16-bit values (seen in -O1
//     sanitizer builds from layer 2 on). So the bound is the fp32 test's 1e-5 of the logit
//     scale plus half the difference that rounding EVERY element makes (the distance to the
//     fp32 cache, (2)): a few flipped elements move the logits far less than all of them.
// (2) Accuracy cost against the fp32 cache: bounded by the dtype's rounding (relative 2^-8 bf16,
//     2^-11 fp16 on every K, V element) propagated through two layers; checked loosely (the
//     measured numbers are printed; the bench reports them at scale).
// (3) Unsupported configurations are refused with a reason; bytes() is half the fp32 cache's.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <memory>
#include <random>
#include <vector>

#include "model/gpt.h"
#include "model/test_models.h"
#include "cache/kv_cache.h"

namespace attnlab {
namespace {

ModelConfig Config(int64_t kv_heads) {
  ModelConfig c =
      test_models::TinyConfig({.vocab_size = 41, .context = 40, .d_model = 32, .mlp_hidden = 48});
  c.n_kv_head = kv_heads;
  return c;
}

// Logits of every position: a prefill of `prefill` tokens, then one token at a time.
std::vector<float> Decode(Gpt& g, KvCache* cache, const std::vector<int32_t>& tokens,
                          int64_t prefill) {
  const int64_t V = g.config().vocab_size, T = static_cast<int64_t>(tokens.size());
  std::vector<float> out;
  EXPECT_TRUE(g.Forward(tokens.data(), nullptr, 1, prefill, nullptr, cache).ok());
  out.insert(out.end(), g.logits(), g.logits() + prefill * V);
  for (int64_t t = prefill; t < T; ++t) {
    EXPECT_TRUE(g.Forward(tokens.data() + t, nullptr, 1, 1, nullptr, cache).ok());
    out.insert(out.end(), g.logits(), g.logits() + V);
  }
  return out;
}

double MaxAbs(const std::vector<float>& x) {
  double m = 0;
  for (float v : x) m = std::max(m, double(std::abs(v)));
  return m;
}
double MaxDiff(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, double(std::abs(a[i] - b[i])));
  return m;
}

TEST(HalfKvCache, DecodeMatchesPrefillOverTheSameRoundedValues) {
  for (int64_t kv_heads : {4, 2, 1}) {
    for (KvDtype dtype : {KvDtype::kBF16, KvDtype::kF16}) {
      SCOPED_TRACE(std::string(KvDtypeName(dtype)) + " kv_heads " + std::to_string(kv_heads));
      const ModelConfig c = Config(kv_heads);
      std::unique_ptr<Gpt> g = test_models::TinyModel(c, 5);
      ASSERT_NE(g, nullptr);
      std::mt19937_64 rng(3);
      const std::vector<int32_t> tokens = test_models::RandomTokens(c.context, c.vocab_size, rng);
      auto a = MakeKvCache(c, dtype);
      auto b = MakeKvCache(c, dtype);
      ASSERT_TRUE(a.ok() && b.ok());
      const std::vector<float> stepwise = Decode(*g, a->get(), tokens, 1);
      const std::vector<float> prefill = Decode(*g, b->get(), tokens, c.context);
      // (2) against the fp32 cache.
      std::unique_ptr<KvCache> f32 = MakeKvCache(c);
      const std::vector<float> exact = Decode(*g, f32.get(), tokens, 1);
      EXPECT_LE(MaxDiff(stepwise, prefill),
                1e-5 * MaxAbs(prefill) + 0.5 * MaxDiff(stepwise, exact));
      const double rel = MaxDiff(stepwise, exact) / MaxAbs(exact);
      std::printf("%s, %lld kv heads: max |logit - fp32 cache's| / max |logit| = %.2e\n",
                  std::string(KvDtypeName(dtype)).c_str(), static_cast<long long>(kv_heads), rel);
      EXPECT_GT(rel, 0.0);  // the rounding is real
      EXPECT_LE(rel, dtype == KvDtype::kBF16 ? 5e-2 : 1e-2);
    }
  }
}

TEST(HalfKvCache, HoldsHalfTheBytesAndRefusesWhatItCannotServe) {
  const ModelConfig c = Config(2);
  auto g = Gpt::Create(c);
  ASSERT_TRUE(g.ok());
  auto half = MakeKvCache(c, KvDtype::kBF16);
  ASSERT_TRUE(half.ok());
  std::unique_ptr<KvCache> full = MakeKvCache(c);
  std::vector<int32_t> tokens(10, 3);
  ASSERT_TRUE((*g)->Forward(tokens.data(), nullptr, 1, 10, nullptr, half->get()).ok());
  ASSERT_TRUE((*g)->Forward(tokens.data(), nullptr, 1, 10, nullptr, full.get()).ok());
  EXPECT_EQ(2 * (*half)->bytes(), full->bytes());
  EXPECT_TRUE(MakeKvCache(c, KvDtype::kF32).ok());
  for (auto tweak : std::vector<void (*)(ModelConfig&)>{
           [](ModelConfig& m) { m.attention_window = 4; },
           [](ModelConfig& m) { m.sink_token = true; },
           [](ModelConfig& m) { m.mask_first_key = true; },
           [](ModelConfig& m) { m.softmax = SoftmaxKind::kSoftmax1; },
           [](ModelConfig& m) { m.attention_type = AttentionType::kLinear; }}) {
    ModelConfig bad = c;
    tweak(bad);
    const auto r = MakeKvCache(bad, KvDtype::kF16);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("--kv-dtype f32"), std::string::npos);
  }
}

}  // namespace
}  // namespace attnlab
