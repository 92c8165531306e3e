// Hugging Face GPT-2 safetensors -> attnlab: tiny files written here with HF's names, layout and
// known values map exactly onto attnlab's parameters (Conv1D [in, out] = attnlab [in, out]: no
// transposition), with or without the "transformer." prefix, in F32/F16/BF16, with or without
// config.json; every inconsistency is a clear error.
#include "formats/hf_gpt2.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "core/atomic_file.h"
#include "formats/load_model.h"
#include "model/gpt.h"

namespace attnlab {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

struct Shape {
  int64_t V = 11, P = 7, C = 8, L = 2, F = 32;
};

// HF GPT-2 tensor names (without prefix) and shapes, in GPT2Model's order.
std::vector<std::pair<std::string, std::vector<int64_t>>> Gpt2Specs(const Shape& s) {
  std::vector<std::pair<std::string, std::vector<int64_t>>> out = {{"wte.weight", {s.V, s.C}},
                                                                   {"wpe.weight", {s.P, s.C}}};
  for (int64_t l = 0; l < s.L; ++l) {
    const std::string h = "h." + std::to_string(l) + ".";
    out.push_back({h + "ln_1.weight", {s.C}});
    out.push_back({h + "ln_1.bias", {s.C}});
    out.push_back({h + "attn.c_attn.weight", {s.C, 3 * s.C}});
    out.push_back({h + "attn.c_attn.bias", {3 * s.C}});
    out.push_back({h + "attn.c_proj.weight", {s.C, s.C}});
    out.push_back({h + "attn.c_proj.bias", {s.C}});
    out.push_back({h + "ln_2.weight", {s.C}});
    out.push_back({h + "ln_2.bias", {s.C}});
    out.push_back({h + "mlp.c_fc.weight", {s.C, s.F}});
    out.push_back({h + "mlp.c_fc.bias", {s.F}});
    out.push_back({h + "mlp.c_proj.weight", {s.F, s.C}});
    out.push_back({h + "mlp.c_proj.bias", {s.C}});
  }
  out.push_back({"ln_f.weight", {s.C}});
  out.push_back({"ln_f.bias", {s.C}});
  return out;
}

// Distinct, exactly representable values (also in F16 and BF16: multiples of 1/32 below 8).
float Value(size_t tensor, int64_t i, bool small) {
  if (small)
    return static_cast<float>(static_cast<int64_t>((tensor * 131 + i * 7) % 97) - 48) / 32.0f;
  return static_cast<float>(tensor * 100000 + i);
}

uint16_t ToHalfExact(float x) {
  if (x == 0.0f) return std::signbit(x) ? 0x8000 : 0;
  uint32_t u;
  std::memcpy(&u, &x, 4);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const int32_t e = static_cast<int32_t>((u >> 23) & 0xff) - 127 + 15;
  EXPECT_TRUE(e > 0 && e < 31 && (u & 0x1fffu) == 0) << x;
  return static_cast<uint16_t>(sign | (static_cast<uint32_t>(e) << 10) | ((u & 0x7fffffu) >> 13));
}

class HfGpt2Test : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = ::testing::TempDir() + "attnlab_hf_XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Builds the tensors of a GPT-2 of shape s (values by Value()), lets `edit` change the list,
  // writes them as `dtype` under `prefix` to path.
  struct Built {
    std::map<std::string, std::vector<float>> values;  // by HF name without prefix
  };
  Built Write(
      const std::string& path, const Shape& s, const std::string& prefix = "transformer.",
      SafetensorsDtype dtype = SafetensorsDtype::kF32,
      const std::function<void(std::vector<std::pair<std::string, std::vector<int64_t>>>&,
                               std::map<std::string, std::vector<float>>&)>& edit = nullptr) {
    Built b;
    auto specs = Gpt2Specs(s);
    const bool small = dtype != SafetensorsDtype::kF32;
    for (size_t k = 0; k < specs.size(); ++k) {
      int64_t n = 1;
      for (int64_t d : specs[k].second) n *= d;
      std::vector<float> v(n);
      for (int64_t i = 0; i < n; ++i) v[i] = Value(k, i, small);
      b.values[specs[k].first] = std::move(v);
    }
    if (edit) edit(specs, b.values);
    std::vector<NamedTensor> t;
    std::vector<std::vector<uint16_t>> halves;
    halves.reserve(specs.size());
    for (const auto& [name, shape] : specs) {
      const std::vector<float>& v = b.values.at(name);
      const std::string full = (name == "lm_head.weight" ? "" : prefix) + name;
      if (dtype == SafetensorsDtype::kF32) {
        t.push_back(NamedTensor::F32(full, shape, v.data()));
        continue;
      }
      std::vector<uint16_t> h(v.size());
      for (size_t i = 0; i < v.size(); ++i) {
        if (dtype == SafetensorsDtype::kF16) {
          h[i] = ToHalfExact(v[i]);
        } else {
          uint32_t u;
          std::memcpy(&u, &v[i], 4);
          h[i] = static_cast<uint16_t>(u >> 16);
        }
      }
      halves.push_back(std::move(h));
      t.push_back(NamedTensor{full, shape, halves.back().data(), dtype});
    }
    EXPECT_TRUE(WriteSafetensors(path, t).ok());
    return b;
  }
  void WriteConfig(const std::string& path, const json& j) {
    ASSERT_TRUE(WriteFileAtomically(path, j.dump()).ok());
  }
  json Config(const Shape& s, int64_t n_head) {
    return json{{"model_type", "gpt2"},
                {"n_embd", s.C},
                {"n_layer", s.L},
                {"n_head", n_head},
                {"n_positions", s.P},
                {"vocab_size", s.V},
                {"layer_norm_epsilon", 1e-6},
                {"activation_function", "gelu_new"},
                {"n_inner", nullptr}};
  }
  // Every attnlab tensor equals its HF twin exactly.
  void ExpectMapped(const LoadedModel& m, const Built& b, const Shape& s) {
    const std::map<std::string, std::string> kLayer = {{"ln1.weight", "ln_1.weight"},
                                                       {"ln1.bias", "ln_1.bias"},
                                                       {"attn.qkv.weight", "attn.c_attn.weight"},
                                                       {"attn.qkv.bias", "attn.c_attn.bias"},
                                                       {"attn.proj.weight", "attn.c_proj.weight"},
                                                       {"attn.proj.bias", "attn.c_proj.bias"},
                                                       {"ln2.weight", "ln_2.weight"},
                                                       {"ln2.bias", "ln_2.bias"},
                                                       {"mlp.fc.weight", "mlp.c_fc.weight"},
                                                       {"mlp.fc.bias", "mlp.c_fc.bias"},
                                                       {"mlp.proj.weight", "mlp.c_proj.weight"},
                                                       {"mlp.proj.bias", "mlp.c_proj.bias"}};
    for (const ParamInfo& p : m.params.infos()) {
      std::string hf = p.name;
      if (p.name == "wte" || p.name == "wpe") hf += ".weight";
      if (p.name == "lm_head") hf = "lm_head.weight";
      if (p.name.rfind("h.", 0) == 0) {
        const size_t dot = p.name.find('.', 2);
        hf = p.name.substr(0, dot + 1) + kLayer.at(p.name.substr(dot + 1));
      }
      SCOPED_TRACE(p.name + " <- " + hf);
      const std::vector<float>& want = b.values.at(hf);
      ASSERT_EQ(static_cast<int64_t>(want.size()), p.size);
      const float* got = m.params.Slice(p);
      for (int64_t i = 0; i < p.size; ++i) ASSERT_EQ(got[i], want[i]) << i;
    }
    // One element spelled out: c_attn[row 3][column 2C + 5] (the v part) is qkv [3, 2C + 5].
    const ParamInfo& qkv = *m.params.Find("h.1.attn.qkv.weight");
    EXPECT_EQ(m.params.Slice(qkv)[3 * 3 * s.C + 2 * s.C + 5],
              b.values.at("h.1.attn.c_attn.weight")[3 * (3 * s.C) + 2 * s.C + 5]);
  }
  std::string dir_;
};

TEST_F(HfGpt2Test, DirectoryWithConfigMapsExactly) {
  const Shape s;
  const Built b = Write(dir_ + "/model.safetensors", s, "transformer.", SafetensorsDtype::kF32,
                        [&](auto& specs, auto& values) {
                          // Mask buffers and a tied head, as GPT2LMHeadModel.save_pretrained.
                          specs.push_back({"h.0.attn.bias", {1, 1, s.P, s.P}});
                          values["h.0.attn.bias"] = std::vector<float>(s.P * s.P, 1.0f);
                          specs.push_back({"h.1.attn.masked_bias", {}});
                          values["h.1.attn.masked_bias"] = {-1e4f};
                          specs.push_back({"lm_head.weight", {s.V, s.C}});
                          values["lm_head.weight"] = values["wte.weight"];
                        });
  WriteConfig(dir_ + "/config.json", Config(s, 2));
  auto m = LoadHfGpt2(dir_);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  const ModelConfig& c = m->config;
  EXPECT_EQ(c.vocab_size, s.V);
  EXPECT_EQ(c.context, s.P);
  EXPECT_EQ(c.d_model, s.C);
  EXPECT_EQ(c.n_layer, s.L);
  EXPECT_EQ(c.n_head, 2);
  EXPECT_EQ(c.hidden(), s.F);
  EXPECT_EQ(c.mlp_hidden, 0);
  EXPECT_EQ(c.position, PositionEncoding::kLearned);
  EXPECT_EQ(c.norm, NormPlacement::kPre);
  EXPECT_EQ(c.norm_type, NormType::kLayerNorm);
  EXPECT_TRUE(c.bias);
  EXPECT_TRUE(c.tie_embeddings);
  EXPECT_EQ(c.softmax, SoftmaxKind::kStandard);
  EXPECT_EQ(c.residual_scale, ResidualScale::kOne);
  EXPECT_FALSE(c.sink_token);
  EXPECT_EQ(c.norm_eps, 1e-6f);
  EXPECT_TRUE(m->notes.empty());
  EXPECT_EQ(m->format, "hf-gpt2");
  EXPECT_EQ(m->meta.at("hf_config").at("n_head"), 2);
  ExpectMapped(*m, b, s);
  // Usable as a model.
  auto g = MakeGpt(*m);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  const std::vector<int32_t> tokens = {3, 1, 4, 1, 5};
  ASSERT_TRUE((*g)->Forward(tokens.data(), nullptr, 1, 5, nullptr).ok());
  // Through LoadAnyModel, as a directory and as the file.
  auto any = LoadAnyModel(dir_);
  ASSERT_TRUE(any.ok()) << any.status().ToString();
  EXPECT_EQ(any->format, "hf-gpt2");
  auto file = LoadAnyModel(dir_ + "/model.safetensors");
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  EXPECT_EQ(file->config.n_head, 2);  // the sibling config.json is a GPT-2 config: used
}

TEST_F(HfGpt2Test, BareFileWithoutConfigInfersTheShape) {
  Shape s;
  s.C = 64;
  s.F = 256;
  s.L = 3;
  s.V = 5;
  s.P = 4;
  const std::string path = dir_ + "/gpt2.safetensors";
  const Built b = Write(path, s, "");
  // An unrelated config.json next to it is ignored.
  WriteConfig(dir_ + "/config.json", json{{"format", "something-else"}});
  auto m = LoadHfGpt2(path);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->config.n_head, 1);
  EXPECT_EQ(m->config.n_layer, 3);
  EXPECT_EQ(m->config.norm_eps, 1e-5f);
  ASSERT_EQ(m->notes.size(), 1u);
  EXPECT_NE(m->notes[0].find("n_head = n_embd / 64 = 1"), std::string::npos) << m->notes[0];
  ExpectMapped(*m, b, s);
  auto any = LoadAnyModel(path);
  ASSERT_TRUE(any.ok()) << any.status().ToString();
}

TEST_F(HfGpt2Test, HalfPrecisionFilesConvertExactly) {
  const Shape s;
  for (SafetensorsDtype dt : {SafetensorsDtype::kF16, SafetensorsDtype::kBF16}) {
    SCOPED_TRACE(SafetensorsDtypeName(dt));
    fs::remove(dir_ + "/model.safetensors");
    const Built b = Write(dir_ + "/model.safetensors", s, "transformer.", dt);
    WriteConfig(dir_ + "/config.json", Config(s, 4));
    auto m = LoadHfGpt2(dir_);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    EXPECT_EQ(m->config.n_head, 4);
    ExpectMapped(*m, b, s);
  }
}

TEST_F(HfGpt2Test, UntiedHead) {
  const Shape s;
  auto add_head = [&](auto& specs, auto& values) {
    specs.push_back({"lm_head.weight", {s.V, s.C}});
    std::vector<float> h = values["wte.weight"];
    h[7] += 1.0f;
    values["lm_head.weight"] = h;
  };
  const Built b =
      Write(dir_ + "/model.safetensors", s, "transformer.", SafetensorsDtype::kF32, add_head);
  json cfg = Config(s, 2);
  WriteConfig(dir_ + "/config.json", cfg);
  auto m = LoadHfGpt2(dir_);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_FALSE(m->config.tie_embeddings);
  ASSERT_EQ(m->notes.size(), 1u);
  ExpectMapped(*m, b, s);
  // A config that ties them wins, as in transformers.
  cfg["tie_word_embeddings"] = true;
  WriteConfig(dir_ + "/config.json", cfg);
  auto tied = LoadHfGpt2(dir_);
  ASSERT_TRUE(tied.ok()) << tied.status().ToString();
  EXPECT_TRUE(tied->config.tie_embeddings);
  EXPECT_EQ(tied->params.Find("lm_head"), nullptr);
  ASSERT_EQ(tied->notes.size(), 1u);
}

struct BadCase {
  const char* name;
  std::function<void(std::vector<std::pair<std::string, std::vector<int64_t>>>&,
                     std::map<std::string, std::vector<float>>&)>
      edit;
  std::function<void(json&)> config;  // null: no config.json
  const char* want;
};

TEST_F(HfGpt2Test, InconsistentFilesAreClearErrors) {
  const Shape s;
  auto drop = [](const char* name) {
    return [name](auto& specs, auto&) {
      specs.erase(
          std::find_if(specs.begin(), specs.end(), [&](auto& x) { return x.first == name; }));
    };
  };
  auto reshape = [](const char* name, std::vector<int64_t> shape) {
    return [name, shape](auto& specs, auto&) {
      for (auto& x : specs) {
        if (x.first == name) x.second = shape;
      }
    };
  };
  auto with = [&](std::function<void(json&)> f) { return f; };
  const std::vector<BadCase> cases = {
      {"missing_tensor", drop("h.1.ln_2.bias"), with([](json&) {}),
       "missing tensor 'h.1.ln_2.bias' (or 'transformer.h.1.ln_2.bias'), expected shape [8]"},
      {"missing_wte", drop("wte.weight"), with([](json&) {}), "missing tensor 'wte.weight'"},
      {"transposed_c_attn", reshape("h.0.attn.c_attn.weight", {24, 8}), with([](json&) {}),
       "'transformer.h.0.attn.c_attn.weight' has shape [24, 8], expected [8, 24] (Conv1D"},
      {"extra_tensor",
       [](auto& specs, auto& values) {
         specs.push_back({"h.0.attn.rotary", {2}});
         values["h.0.attn.rotary"] = {1, 2};
       },
       with([](json&) {}), "unexpected tensor 'transformer.h.0.attn.rotary'"},
      {"missing_block", drop("h.0.ln_1.weight"), with([](json&) {}),
       "missing tensor 'h.0.ln_1.weight'"},
      {"nan", [](auto&, auto& values) { values["h.1.mlp.c_proj.weight"][17] = NAN; },
       with([](json&) {}), "tensor 'transformer.h.1.mlp.c_proj.weight' has NaN at index 17"},
      {"config_n_embd", nullptr, with([](json& j) { j["n_embd"] = 16; }), "says n_embd = 16 but"},
      {"config_vocab", nullptr, with([](json& j) { j["vocab_size"] = 50257; }),
       "says vocab_size = 50257 but"},
      {"config_layers", nullptr, with([](json& j) { j["n_layer"] = 12; }), "says n_layer = 12"},
      {"config_positions", nullptr, with([](json& j) { j["n_positions"] = 1024; }),
       "says n_positions = 1024"},
      {"config_heads", nullptr, with([](json& j) { j["n_head"] = 3; }), "multiple of n_head (3)"},
      {"config_heads_type", nullptr, with([](json& j) { j["n_head"] = "2"; }),
       "\"n_head\" must be an integer"},
      {"config_activation", nullptr, with([](json& j) { j["activation_function"] = "relu"; }),
       "activation_function 'relu' is not supported"},
      {"config_model_type", nullptr, with([](json& j) { j["model_type"] = "llama"; }),
       "is not \"gpt2\""},
      {"config_inverse_layer_idx", nullptr,
       with([](json& j) { j["scale_attn_by_inverse_layer_idx"] = true; }), "not supported"},
      {"config_untied_without_head", nullptr,
       with([](json& j) { j["tie_word_embeddings"] = false; }), "no lm_head.weight"},
      {"no_config_no_heads", nullptr, nullptr, "n_head"},
      {"block_gap",
       [](auto& specs, auto& values) {
         for (auto& x : specs) {
           if (x.first.rfind("h.1.", 0) == 0) {
             const std::string renamed = "h.2." + x.first.substr(4);
             values[renamed] = values[x.first];
             x.first = renamed;
           }
         }
       },
       with([](json& j) { j.erase("n_layer"); }), "block h.1 is missing but h.2 exists"},
  };
  for (const BadCase& c : cases) {
    SCOPED_TRACE(c.name);
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    Write(dir_ + "/model.safetensors", s, "transformer.", SafetensorsDtype::kF32, c.edit);
    if (c.config) {
      json j = Config(s, 2);
      c.config(j);
      WriteConfig(dir_ + "/config.json", j);
    }
    auto m = LoadHfGpt2(dir_);
    ASSERT_FALSE(m.ok());
    EXPECT_NE(m.status().message().find(c.want), std::string::npos) << m.status().ToString();
  }
}

TEST_F(HfGpt2Test, DuplicateNamesWithAndWithoutPrefix) {
  const Shape s;
  Write(dir_ + "/model.safetensors", s, "transformer.", SafetensorsDtype::kF32,
        [](auto& specs, auto& values) {
          specs.push_back(
              {"transformer.ln_f.bias", {8}});  // written as "transformer.transformer.ln_f.bias"
          values["transformer.ln_f.bias"] = std::vector<float>(8, 0.0f);
        });
  // That name strips to "transformer.ln_f.bias": unexpected, not a duplicate.
  WriteConfig(dir_ + "/config.json", Config(s, 2));
  EXPECT_FALSE(LoadHfGpt2(dir_).ok());
  // A real duplicate: ln_f.bias under both spellings.
  std::vector<float> a(8, 0.0f);
  std::vector<NamedTensor> t;
  auto specs = Gpt2Specs(s);
  std::vector<std::vector<float>> vals;
  vals.reserve(specs.size() + 1);
  for (auto& [name, shape] : specs) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    vals.emplace_back(n, 0.5f);
    t.push_back(NamedTensor::F32("transformer." + name, shape, vals.back().data()));
  }
  t.push_back(NamedTensor::F32("ln_f.bias", {8}, a.data()));
  ASSERT_TRUE(WriteSafetensors(dir_ + "/model.safetensors", t).ok());
  auto m = LoadHfGpt2(dir_);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("both with and without"), std::string::npos)
      << m.status().ToString();
}

TEST_F(HfGpt2Test, MissingFiles) {
  auto m = LoadHfGpt2(dir_);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kNotFound);
  ASSERT_TRUE(WriteFileAtomically(dir_ + "/pytorch_model.bin", "PK").ok());
  m = LoadHfGpt2(dir_);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("safe_serialization"), std::string::npos);
  EXPECT_EQ(LoadHfGpt2(dir_ + "/none.safetensors").status().code(), StatusCode::kNotFound);
  // A corrupt config.json in a model directory is an error, not silently skipped.
  Write(dir_ + "/model.safetensors", Shape{});
  ASSERT_TRUE(WriteFileAtomically(dir_ + "/config.json", "{oops").ok());
  m = LoadHfGpt2(dir_);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("config.json"), std::string::npos);
}

}  // namespace
}  // namespace attnlab
