// LoadOptions::keep_stored on GGUF files whose matrices are quantized (Q8_0, Q4_0, Q4_K, Q6_K,
// mixed as llama.cpp's K-quant files mix them): the matrices stay quantized in memory, in place
// in the mapped file or (Q/K rows llama.cpp permuted) as an owned copy of the stored rows, and
// the model computes what the fp32-widened model (every weight dequantized at load) computes,
// for a full forward and for incremental decode.
//
// Tolerance: both models hold exactly the same weight values (the same dequantization of the
// same blocks); only the order of the fp32 sums differs (panels vs tiles), each output a
// K <= 512 term dot product: ~K u (u = 2^-24, ~3e-5) per layer at worst, amplified by 2 layers
// and the norms: 1e-4 of the largest logit. A single row read from the wrong place (a wrong
// permutation or row offset) moves the logits by O(1) of their scale.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "cache/kv_cache.h"
#include "engine/weight_gemm.h"
#include "formats/gguf.h"
#include "formats/gguf_test_util.h"
#include "formats/load_model.h"
#include "model/gpt.h"

namespace attnlab {
namespace {

namespace fs = std::filesystem;
using gguf_test::FloatToHalf;
using gguf_test::GgufBuilder;

constexpr int64_t kV = 7, kC = 256, kH = 4, kKv = 2, kD = 64, kF = 512, kL = 2;

// Random blocks of `type` for n elements: random quants, with the fp16 scales set to values
// that keep the weights' spread near 0.05 (so activations stay O(1)).
std::string RandomBlocks(GgmlType type, int64_t n, std::mt19937_64& rng) {
  const int64_t block = GgmlBlockSize(type), size = GgmlTypeSize(type);
  std::string s(static_cast<size_t>(n / block * size), '\0');
  for (char& c : s) c = static_cast<char>(rng() & 0xff);
  std::uniform_real_distribution<float> jitter(0.5f, 1.5f);
  auto put_half = [&](size_t at, float v) {
    const uint16_t h = FloatToHalf(v);
    std::memcpy(&s[at], &h, 2);
  };
  for (int64_t b = 0; b < n / block; ++b) {
    const size_t o = static_cast<size_t>(b * size);
    switch (type) {
      case GgmlType::kQ8_0: put_half(o, 7e-4f * jitter(rng)); break;          // d * int8
      case GgmlType::kQ4_0: put_half(o, 1e-2f * jitter(rng)); break;          // d * (q - 8)
      case GgmlType::kQ4_K:                                                   // d*sc*q - dmin*m
        put_half(o, 3e-4f * jitter(rng));
        put_half(o + 2, 3e-4f * jitter(rng));
        break;
      case GgmlType::kQ6_K: put_half(o + 208, 4e-5f * jitter(rng)); break;    // d * sc * (q-32)
      default: ADD_FAILURE() << "no random blocks for " << GgmlTypeName(type);
    }
  }
  return s;
}

struct Spec {
  GgmlType embed, q, k, v, o, gate, up, down, head;
};

// A llama GGUF (Q/K rows permuted as the converter stores them: here random stored blocks, so
// the HF view is whatever unpermuting them gives; both load paths see the same).
std::string LlamaGguf(const Spec& t, uint64_t seed) {
  std::mt19937_64 rng(seed);
  GgufBuilder b;
  b.Str("general.architecture", "llama").U32("llama.context_length", 256);
  b.U32("llama.embedding_length", kC).U32("llama.block_count", kL);
  b.U32("llama.feed_forward_length", kF).U32("llama.attention.head_count", kH);
  b.U32("llama.attention.head_count_kv", kKv).F32("llama.rope.freq_base", 10000.0f);
  b.F32("llama.attention.layer_norm_rms_epsilon", 1e-5f);
  auto mat = [&](const std::string& name, GgmlType type, int64_t out, int64_t in) {
    b.Tensor(name, type, {static_cast<uint64_t>(in), static_cast<uint64_t>(out)},
             RandomBlocks(type, out * in, rng));
  };
  auto gain = [&](const std::string& name) {
    std::normal_distribution<float> nd(1.0f, 0.1f);
    std::vector<float> g(kC);
    for (float& x : g) x = nd(rng);
    b.F32Tensor(name, {static_cast<uint64_t>(kC)}, g);
  };
  mat("token_embd.weight", t.embed, kV, kC);
  for (int64_t l = 0; l < kL; ++l) {
    const std::string g = "blk." + std::to_string(l) + ".";
    gain(g + "attn_norm.weight");
    mat(g + "attn_q.weight", t.q, kH * kD, kC);
    mat(g + "attn_k.weight", t.k, kKv * kD, kC);
    mat(g + "attn_v.weight", t.v, kKv * kD, kC);
    mat(g + "attn_output.weight", t.o, kC, kH * kD);
    gain(g + "ffn_norm.weight");
    mat(g + "ffn_gate.weight", t.gate, kF, kC);
    mat(g + "ffn_up.weight", t.up, kF, kC);
    mat(g + "ffn_down.weight", t.down, kC, kF);
  }
  gain("output_norm.weight");
  mat("output.weight", t.head, kV, kC);
  return b.Build();
}

std::string WriteTemp(const std::string& bytes, const std::string& name) {
  const fs::path p = fs::temp_directory_path() /
                     ("attnlab_gguf_quantized_" + std::to_string(::getpid()) + "_" + name);
  std::ofstream(p, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  return p.string();
}

std::vector<float> Logits(Gpt& g, const std::vector<int32_t>& tokens) {
  EXPECT_TRUE(
      g.Forward(tokens.data(), nullptr, 1, static_cast<int64_t>(tokens.size()), nullptr).ok());
  return std::vector<float>(g.logits(), g.logits() + tokens.size() * kV);
}

void ExpectClose(const std::vector<float>& a, const std::vector<float>& b, const char* what) {
  ASSERT_EQ(a.size(), b.size());
  float scale = 0, err = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_TRUE(std::isfinite(a[i])) << what << " " << i;
    scale = std::max(scale, std::fabs(b[i]));
    err = std::max(err, std::fabs(a[i] - b[i]));
  }
  EXPECT_GT(scale, 0.0f);
  EXPECT_LE(err, 1e-4f * scale) << what << ": max |diff| " << err << " of scale " << scale;
}

int64_t Bytes(GgmlType t, int64_t out, int64_t in) {
  return out * in / GgmlBlockSize(t) * GgmlTypeSize(t);
}

void CheckSpec(const Spec& t, uint64_t seed) {
  const std::string path = WriteTemp(LlamaGguf(t, seed), std::to_string(seed) + ".gguf");
  auto mq = LoadAnyModel(path, LoadOptions{.keep_stored = true});
  auto m32 = LoadAnyModel(path, LoadOptions{.keep_stored = false});
  ASSERT_TRUE(mq.ok()) << mq.status().ToString();
  ASSERT_TRUE(m32.ok()) << m32.status().ToString();
  ASSERT_NE(mq->matrices, nullptr);
  EXPECT_EQ(m32->matrices, nullptr);
  const MatrixWeights& mw = *mq->matrices;
  // Each matrix keeps its stored type; q and k are owned copies (rows unpermuted), the rest
  // are read in place from the mapping.
  const LayerMatrices& lm = mw.layers[1];
  ASSERT_EQ(lm.qkv.blocks.size(), 3u);
  auto type = [](const internal::WeightBlock& b) { return std::string(internal::WeightTypeName(b)); };
  EXPECT_EQ(type(lm.qkv.blocks[0]), GgmlTypeName(t.q));
  EXPECT_EQ(type(lm.qkv.blocks[1]), GgmlTypeName(t.k));
  EXPECT_EQ(type(lm.qkv.blocks[2]), GgmlTypeName(t.v));
  EXPECT_EQ(type(lm.fcproj.blocks[0]), GgmlTypeName(t.down));
  EXPECT_EQ(type(mw.embed.blocks[0]), GgmlTypeName(t.embed));
  EXPECT_EQ(type(mw.head.blocks[0]), GgmlTypeName(t.head));
  int64_t permuted = 0, total = Bytes(t.embed, kV, kC) + Bytes(t.head, kV, kC);
  permuted = kL * (Bytes(t.q, kH * kD, kC) + Bytes(t.k, kKv * kD, kC));
  total += permuted + kL * (Bytes(t.v, kKv * kD, kC) + Bytes(t.o, kC, kH * kD) +
                            Bytes(t.gate, kF, kC) + Bytes(t.up, kF, kC) + Bytes(t.down, kC, kF));
  EXPECT_EQ(mw.bytes(), total);
  EXPECT_EQ(mw.mapped_bytes, total - permuted);
  EXPECT_EQ(mq->meta["weights"]["linear_bytes"], total);

  auto gq = MakeGpt(std::move(mq).value());
  auto g32 = MakeGpt(std::move(m32).value());
  ASSERT_TRUE(gq.ok()) << gq.status().ToString();
  ASSERT_TRUE(g32.ok()) << g32.status().ToString();
  std::vector<int32_t> tokens(29);
  std::mt19937_64 rng(seed + 1);
  for (int32_t& x : tokens) x = static_cast<int32_t>(rng() % kV);
  const std::vector<float> full = Logits(**gq, tokens);
  ExpectClose(full, Logits(**g32, tokens), "quantized vs fp32-widened");

  std::unique_ptr<KvCache> cache = MakeKvCache((*gq)->config());
  std::vector<float> inc;
  for (size_t pos = 0; pos < tokens.size();) {
    const int64_t n = pos == 0 ? 11 : 1;
    ASSERT_TRUE((*gq)->Forward(tokens.data() + pos, nullptr, 1, n, nullptr, cache.get()).ok());
    inc.insert(inc.end(), (*gq)->logits(), (*gq)->logits() + n * kV);
    pos += static_cast<size_t>(n);
  }
  ExpectClose(inc, full, "decode vs full forward");
  EXPECT_FALSE((*gq)->Backward().ok());
  fs::remove(path);
}

TEST(GgufQuantized, Q8_0MatricesStayQuantizedAndMatchTheWidenedModel) {
  using enum GgmlType;
  CheckSpec({kQ8_0, kQ8_0, kQ8_0, kQ8_0, kQ8_0, kQ8_0, kQ8_0, kQ8_0, kQ8_0}, 1);
}

TEST(GgufQuantized, MixedKQuantsAsInAQ4_K_MFileMatchTheWidenedModel) {
  using enum GgmlType;
  // Q4_K_M's pattern: Q4_K for most matrices, Q6_K for v / down / the head; plus Q4_0 and Q8_0
  // and a permuted Q6_K k so every codec meets the row permutation or the in-place path.
  CheckSpec({kQ4_0, kQ4_K, kQ6_K, kQ6_K, kQ4_K, kQ4_K, kQ8_0, kQ6_K, kQ6_K}, 2);
}

TEST(GgufQuantized, CodecsWidenExactlyAsTheDequantizer) {
  std::mt19937_64 rng(3);
  for (GgmlType t : {GgmlType::kQ8_0, GgmlType::kQ4_0, GgmlType::kQ4_K, GgmlType::kQ6_K}) {
    const internal::QuantCodec* c = GgmlRowCodec(t);
    ASSERT_NE(c, nullptr) << GgmlTypeName(t);
    EXPECT_EQ(std::string(c->name), GgmlTypeName(t));
    EXPECT_EQ(c->block_elems, GgmlBlockSize(t));
    EXPECT_EQ(c->block_bytes, GgmlTypeSize(t));
    const int64_t n = 3 * c->block_elems;
    const std::string blocks = RandomBlocks(t, n, rng);
    std::vector<float> a(static_cast<size_t>(n)), b(static_cast<size_t>(n));
    const auto* src = reinterpret_cast<const uint8_t*>(blocks.data());
    ASSERT_TRUE(DequantizeGgml(t, src, n, a.data(), "x").ok());
    c->widen(src, n, b.data());
    EXPECT_EQ(a, b) << GgmlTypeName(t);
  }
  EXPECT_EQ(GgmlRowCodec(GgmlType::kF16), nullptr);
  EXPECT_EQ(GgmlRowCodec(GgmlType::kQ5_K), nullptr);
}

TEST(GgufQuantized, NonFiniteQuantizedWeightsAreRefusedLikeOnTheFp32Path) {
  using enum GgmlType;
  std::string bytes = LlamaGguf({kQ8_0, kQ8_0, kQ8_0, kQ8_0, kQ8_0, kQ8_0, kQ8_0, kQ8_0, kQ8_0}, 4);
  // Find blk.1.ffn_up.weight's data and make its third block's scale NaN.
  Result<GgufFile> f = ParseGguf(bytes, "nan.gguf");
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  const GgufTensorInfo* up = f->FindTensor("blk.1.ffn_up.weight");
  ASSERT_NE(up, nullptr);
  const size_t at = static_cast<size_t>(f->data_offset() + up->offset + 2 * 34);
  bytes[at] = '\x00';
  bytes[at + 1] = '\x7e';  // f16 0x7e00: NaN
  const std::string path = WriteTemp(bytes, "nan.gguf");
  for (bool keep : {true, false}) {
    auto m = LoadAnyModel(path, LoadOptions{.keep_stored = keep});
    ASSERT_FALSE(m.ok());
    EXPECT_NE(m.status().message().find(
                  "tensor 'model.layers.1.mlp.up_proj.weight' has NaN at index 64 (of 131072 "
                  "values)"),
              std::string::npos)
        << keep << ": " << m.status().message();
  }
  fs::remove(path);
}

}  // namespace
}  // namespace attnlab
