// llm.c checkpoints: a tiny file written here in llm.c's order and [out, in] layout maps onto
// attnlab's [in, out] parameters exactly (transposed, padding rows dropped), fp32 and bf16;
// WriteLlmc round-trips; truncated or inconsistent files are clear errors.
#include "formats/llmc.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/atomic_file.h"
#include "formats/load_model.h"
#include "model/gpt.h"
#include "formats/hf_gpt2.h"

namespace attnlab {
namespace {

namespace fs = std::filesystem;

struct Dims {
  int32_t maxT = 6, V = 10, Vp = 16, L = 2, NH = 2, C = 4;
};

// The file's tensors in llm.c's order: name, element count. Value of element i of tensor k:
// exactly representable in bf16 and distinct within a tensor.
struct LlmcFile {
  Dims d;
  std::vector<std::pair<std::string, std::vector<float>>> tensors;
  const std::vector<float>& Get(const std::string& name) const {
    for (const auto& t : tensors) {
      if (t.first == name) return t.second;
    }
    ADD_FAILURE() << name;
    return tensors[0].second;
  }
};

LlmcFile MakeFile(const Dims& d) {
  LlmcFile f;
  f.d = d;
  const int64_t C = d.C, L = d.L;
  const std::vector<std::pair<std::string, int64_t>> sizes = {{"wte", int64_t{d.Vp} * C},
                                                              {"wpe", int64_t{d.maxT} * C},
                                                              {"ln1w", L * C},
                                                              {"ln1b", L * C},
                                                              {"qkvw", L * 3 * C * C},
                                                              {"qkvb", L * 3 * C},
                                                              {"attprojw", L * C * C},
                                                              {"attprojb", L * C},
                                                              {"ln2w", L * C},
                                                              {"ln2b", L * C},
                                                              {"fcw", L * 4 * C * C},
                                                              {"fcb", L * 4 * C},
                                                              {"fcprojw", L * C * 4 * C},
                                                              {"fcprojb", L * C},
                                                              {"lnfw", C},
                                                              {"lnfb", C}};
  for (size_t k = 0; k < sizes.size(); ++k) {
    std::vector<float> v(sizes[k].second);
    // k * 256 + (i % 256), scaled by 2^-4: 12 significant bits at most... keep within bf16's 8:
    // use (i % 128) and a per-tensor power of two.
    for (int64_t i = 0; i < sizes[k].second; ++i) {
      v[i] = std::ldexp(static_cast<float>(i % 128 + 128), static_cast<int>(k) - 10) *
             ((i / 128) % 2 ? -1.0f : 1.0f);
    }
    f.tensors.push_back({sizes[k].first, std::move(v)});
  }
  return f;
}

std::string Encode(const LlmcFile& f, int32_t version = 3, int32_t magic = kLlmcMagic) {
  int32_t header[256] = {};
  header[0] = magic;
  header[1] = version;
  header[2] = f.d.maxT;
  header[3] = f.d.V;
  header[4] = f.d.L;
  header[5] = f.d.NH;
  header[6] = f.d.C;
  header[7] = f.d.Vp;
  std::string out(reinterpret_cast<const char*>(header), sizeof(header));
  for (const auto& [name, v] : f.tensors) {
    if (version == 5) {
      for (float x : v) {
        uint32_t u;
        std::memcpy(&u, &x, 4);
        EXPECT_EQ(u & 0xffffu, 0u) << "not exact in bf16";
        const uint16_t h = static_cast<uint16_t>(u >> 16);
        out.append(reinterpret_cast<const char*>(&h), 2);
      }
    } else {
      out.append(reinterpret_cast<const char*>(v.data()), v.size() * 4);
    }
  }
  return out;
}

class LlmcTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = ::testing::TempDir() + "attnlab_llmc_XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string Put(const std::string& name, const std::string& bytes) {
    const std::string p = dir_ + "/" + name;
    EXPECT_TRUE(WriteFileAtomically(p, bytes).ok());
    return p;
  }
  // Every attnlab tensor against the file, with the transposition written out index by index.
  void ExpectMapped(const LoadedModel& m, const LlmcFile& f) {
    const int64_t C = f.d.C, V = f.d.V, T = f.d.maxT;
    const ModelParams& p = m.params.ptrs();
    for (int64_t i = 0; i < V * C; ++i) ASSERT_EQ(p.wte[i], f.Get("wte")[i]) << "wte " << i;
    EXPECT_EQ(m.params.Find("wte")->shape, (std::vector<int64_t>{V, C}));  // padding dropped
    for (int64_t i = 0; i < T * C; ++i) ASSERT_EQ(p.wpe[i], f.Get("wpe")[i]);
    for (int64_t c = 0; c < C; ++c) {
      EXPECT_EQ(p.lnf_w[c], f.Get("lnfw")[c]);
      EXPECT_EQ(p.lnf_b[c], f.Get("lnfb")[c]);
    }
    auto vec = [&](const float* got, const std::string& name, int64_t l, int64_t n) {
      for (int64_t i = 0; i < n; ++i)
        ASSERT_EQ(got[i], f.Get(name)[l * n + i]) << name << " " << l << " " << i;
    };
    // llm.c W[l][o][i] (out, in) -> attnlab W[i][o] (in, out).
    auto mat = [&](const float* got, const std::string& name, int64_t l, int64_t out, int64_t in) {
      for (int64_t o = 0; o < out; ++o) {
        for (int64_t i = 0; i < in; ++i) {
          ASSERT_EQ(got[i * out + o], f.Get(name)[(l * out + o) * in + i])
              << name << " layer " << l << " out " << o << " in " << i;
        }
      }
    };
    for (int64_t l = 0; l < f.d.L; ++l) {
      const LayerParams& lp = p.layers[l];
      vec(lp.ln1_w, "ln1w", l, C);
      vec(lp.ln1_b, "ln1b", l, C);
      mat(lp.qkv_w, "qkvw", l, 3 * C, C);
      vec(lp.qkv_b, "qkvb", l, 3 * C);
      mat(lp.proj_w, "attprojw", l, C, C);
      vec(lp.proj_b, "attprojb", l, C);
      vec(lp.ln2_w, "ln2w", l, C);
      vec(lp.ln2_b, "ln2b", l, C);
      mat(lp.fc_w, "fcw", l, 4 * C, C);
      vec(lp.fc_b, "fcb", l, 4 * C);
      mat(lp.fcproj_w, "fcprojw", l, C, 4 * C);
      vec(lp.fcproj_b, "fcprojb", l, C);
    }
  }
  std::string dir_;
};

TEST_F(LlmcTest, Fp32FileMapsExactlyWithTransposition) {
  const LlmcFile f = MakeFile(Dims{});
  const std::string path = Put("gpt2_tiny.bin", Encode(f));
  auto m = LoadLlmc(path);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  const ModelConfig& c = m->config;
  EXPECT_EQ(c.vocab_size, 10);
  EXPECT_EQ(c.context, 6);
  EXPECT_EQ(c.d_model, 4);
  EXPECT_EQ(c.n_layer, 2);
  EXPECT_EQ(c.n_head, 2);
  EXPECT_EQ(c.hidden(), 16);
  EXPECT_EQ(c.position, PositionEncoding::kLearned);
  EXPECT_EQ(c.norm, NormPlacement::kPre);
  EXPECT_TRUE(c.tie_embeddings);
  EXPECT_TRUE(c.bias);
  EXPECT_EQ(c.norm_eps, 1e-5f);
  EXPECT_EQ(m->format, "llm.c");
  EXPECT_EQ(m->meta.at("padded_vocab_size"), 16);
  ExpectMapped(*m, f);
  auto any = LoadAnyModel(path);
  ASSERT_TRUE(any.ok()) << any.status().ToString();
  EXPECT_EQ(any->format, "llm.c");
  auto g = MakeGpt(*m);
  ASSERT_TRUE(g.ok());
  const std::vector<int32_t> tokens = {0, 9, 3};
  EXPECT_TRUE((*g)->Forward(tokens.data(), nullptr, 1, 3, nullptr).ok());
}

TEST_F(LlmcTest, Bf16FileConvertsExactly) {
  Dims d;
  d.Vp = d.V;  // no padding
  const LlmcFile f = MakeFile(d);
  auto m = LoadLlmc(Put("bf16.bin", Encode(f, 5)));
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  ExpectMapped(*m, f);
  ASSERT_EQ(m->notes.size(), 1u);
}

TEST_F(LlmcTest, WriteLlmcRoundTrips) {
  const ModelConfig c = MakeGpt2Config(13, 5, 8, 3, 2, 32);
  ParameterStore p(c);
  p.Initialize(c, 3);
  const std::string path = dir_ + "/out.bin";
  ASSERT_TRUE(WriteLlmc(path, c, p).ok());
  LlmcHeader h;
  h.version = 3, h.max_t = 5, h.vocab = 13, h.layers = 3, h.heads = 2, h.channels = 8;
  h.padded_vocab = 128;
  EXPECT_EQ(static_cast<int64_t>(fs::file_size(path)), h.ExpectedFileSize());
  auto m = LoadLlmc(path);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(ModelConfigToJson(m->config), ModelConfigToJson(c));
  ASSERT_EQ(m->params.size(), p.size());
  EXPECT_EQ(std::memcmp(m->params.data(), p.data(), sizeof(float) * p.size()), 0);
  // Padding rows are zeros.
  std::ifstream in(path, std::ios::binary);
  in.seekg(1024 + 13 * 8 * 4);
  std::vector<float> pad((128 - 13) * 8, 1.0f);
  in.read(reinterpret_cast<char*>(pad.data()), pad.size() * 4);
  for (float x : pad) ASSERT_EQ(x, 0.0f);
  // Only GPT-2 shaped configs.
  ModelConfig rope = c;
  rope.position = PositionEncoding::kRope;
  ParameterStore q(rope);
  EXPECT_EQ(WriteLlmc(path, rope, q).code(), StatusCode::kInvalidArgument);
  ModelConfig untied = c;
  untied.tie_embeddings = false;
  ParameterStore u(untied);
  EXPECT_EQ(WriteLlmc(path, untied, u).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(WriteLlmc(path, c, p, 12).code(), StatusCode::kInvalidArgument);
}

TEST_F(LlmcTest, BadFilesAreClearErrors) {
  const LlmcFile f = MakeFile(Dims{});
  const std::string good = Encode(f);
  struct Case {
    const char* name;
    std::string bytes;
    const char* want;
  };
  auto with_header = [&](int index, int32_t value) {
    std::string b = good;
    std::memcpy(b.data() + 4 * index, &value, 4);
    return b;
  };
  std::vector<Case> cases = {
      {"empty", "", "shorter than llm.c's 1024-byte header"},
      {"short_header", good.substr(0, 1023), "shorter than llm.c's 1024-byte header"},
      {"header_only", good.substr(0, 1024), "(truncated)"},
      {"one_byte_short", good.substr(0, good.size() - 1), "(truncated)"},
      {"one_byte_long", good + "x", "(extra bytes at the end)"},
      {"bad_magic", with_header(0, 12345), "bad magic number: expected 20240326, found 12345"},
      {"tokenizer_magic", with_header(0, 20240328), "tokenizer"},
      {"version_4", with_header(1, 4), "version 4 is not supported"},
      {"bf16_size", with_header(1, 5), "(extra bytes at the end)"},
      {"zero_layers", with_header(4, 0), "num_layers = 0"},
      {"negative_C", with_header(6, -4), "channels = -4"},
      {"heads_not_dividing", with_header(5, 3), "not a multiple of num_heads (3)"},
      {"heads_more_than_C", with_header(5, 8), "num_heads = 8"},
      {"padded_smaller", with_header(7, 9), "padded_vocab_size = 9"},
      {"huge", with_header(6, 65536), "implies"},
      {"huge_vocab", with_header(3, 1 << 30), "vocab_size"},
  };
  {
    LlmcFile nan = f;
    nan.tensors[10].second[3] = NAN;  // fcw, layer 0
    cases.push_back({"nan", Encode(nan), "has NaN"});
  }
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string path = Put(std::string(c.name) + ".bin", c.bytes);
    auto m = LoadLlmc(path);
    ASSERT_FALSE(m.ok());
    EXPECT_NE(m.status().message().find(c.want), std::string::npos) << m.status().ToString();
    EXPECT_EQ(m.status().message().rfind(path, 0), 0u) << m.status().ToString();
  }
  // Every truncation.
  for (size_t len = 0; len < good.size(); len += 7) {
    EXPECT_FALSE(LoadLlmc(Put("cut.bin", good.substr(0, len))).ok()) << len;
  }
  EXPECT_EQ(LoadLlmc(dir_ + "/none.bin").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(LoadLlmc(dir_).status().code(), StatusCode::kInvalidArgument);
}

TEST(LlmcHeader, Sizes) {
  // GPT-2 124M: 124,475,904 parameters with the vocab padded to 50304 (llm.c's README).
  LlmcHeader h;
  h.version = 3, h.max_t = 1024, h.vocab = 50257, h.layers = 12, h.heads = 12, h.channels = 768;
  h.padded_vocab = 50304;
  EXPECT_EQ(h.NumParameters(), 124475904);
  EXPECT_EQ(h.ExpectedFileSize(), 1024 + 4 * int64_t{124475904});
  h.version = 5;
  EXPECT_EQ(h.ExpectedFileSize(), 1024 + 2 * int64_t{124475904});
}

}  // namespace
}  // namespace attnlab
