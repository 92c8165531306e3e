// config.json -> ModelConfig for every family, the safetensors index parser, and the loader's
// refusals. The logits themselves are checked against PyTorch by tests/hf_decoder_torch_test.py.
#include "formats/hf_decoder.h"

#include <gtest/gtest.h>

#include "formats/safetensors_folder.h"

namespace attnlab {
namespace {

using nlohmann::json;

json Llama() {
  return json{{"model_type", "llama"},     {"vocab_size", 32},
              {"hidden_size", 16},         {"num_hidden_layers", 2},
              {"num_attention_heads", 4},  {"num_key_value_heads", 2},
              {"intermediate_size", 24},   {"max_position_embeddings", 64},
              {"rms_norm_eps", 1e-5},      {"rope_theta", 500000.0},
              {"hidden_act", "silu"},      {"tie_word_embeddings", true}};
}

Result<ModelConfig> Convert(const json& j) { return HfDecoderConfig(j, "config.json", nullptr); }

TEST(HfDecoderConfig, LlamaFamilyMapsToRmsNormSwigluGqaRotateHalf) {
  auto c = Convert(Llama());
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->d_model, 16);
  EXPECT_EQ(c->n_kv_head, 2);
  EXPECT_EQ(c->head_dim(), 4);
  EXPECT_EQ(c->mlp_activation, MlpActivation::kSwiGlu);
  EXPECT_EQ(c->norm_type, NormType::kRmsNorm);
  EXPECT_FLOAT_EQ(c->norm_eps, 1e-5f);
  EXPECT_EQ(c->rope_layout, RopeLayout::kNeox);
  EXPECT_DOUBLE_EQ(c->rope_base, 500000.0);
  EXPECT_FALSE(c->bias);
  EXPECT_FALSE(c->qkv_bias);
  EXPECT_TRUE(c->tie_embeddings);
  EXPECT_EQ(c->attention_window, -1);
  EXPECT_EQ(c->context, 64);
}

TEST(HfDecoderConfig, FamiliesDifferWhereTheirModelingCodeDoes) {
  json q2 = Llama();
  q2["model_type"] = "qwen2";
  EXPECT_TRUE(Convert(q2)->qkv_bias);
  json q3 = Llama();
  q3["model_type"] = "qwen3";
  q3["head_dim"] = 8;
  auto c3 = Convert(q3);
  ASSERT_TRUE(c3.ok()) << c3.status().ToString();
  EXPECT_TRUE(c3->qk_norm);
  EXPECT_EQ(c3->head_dim(), 8);
  EXPECT_EQ(c3->attn_dim(), 32);  // 4 heads of 8 in a 16-wide model
  json neox = {{"model_type", "gpt_neox"}, {"vocab_size", 32}, {"hidden_size", 16},
               {"num_hidden_layers", 2},   {"num_attention_heads", 2},
               {"intermediate_size", 64},  {"max_position_embeddings", 64},
               {"rotary_pct", 0.25},       {"rotary_emb_base", 10000},
               {"hidden_act", "gelu"}};
  auto cn = Convert(neox);
  ASSERT_TRUE(cn.ok()) << cn.status().ToString();
  EXPECT_TRUE(cn->parallel_residual);
  EXPECT_EQ(cn->rotary_dim, 2);
  EXPECT_EQ(cn->mlp_activation, MlpActivation::kGeluErf);
  EXPECT_EQ(cn->norm_type, NormType::kLayerNorm);
  EXPECT_TRUE(cn->bias);
  EXPECT_FALSE(cn->tie_embeddings);
}

TEST(HfDecoderConfig, SlidingWindowsMapToTheWindowAndItsLayers) {
  json m = Llama();
  m["model_type"] = "mistral";
  m["sliding_window"] = 4;
  auto c = Convert(m);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->attention_window, 3);  // i - j < 4  <=>  j >= i - 3
  EXPECT_EQ(c->window_layers, "");
  m["sliding_window"] = nullptr;  // Mistral v0.2+: no window
  EXPECT_EQ(Convert(m)->attention_window, -1);
  json q = Llama();
  q["model_type"] = "qwen2";
  q["sliding_window"] = 5;
  EXPECT_EQ(Convert(q)->attention_window, -1);  // use_sliding_window defaults to false
  q["use_sliding_window"] = true;
  q["max_window_layers"] = 1;
  auto cq = Convert(q);
  ASSERT_TRUE(cq.ok());
  EXPECT_EQ(cq->attention_window, 4);
  EXPECT_EQ(cq->window_layers, "fw");
  q["layer_types"] = {"sliding_attention", "full_attention"};
  EXPECT_EQ(Convert(q)->window_layers, "wf");
  q["layer_types"] = {"sliding_attention"};
  EXPECT_FALSE(Convert(q).ok());
}

TEST(HfDecoderConfig, RopeScalingTypes) {
  json j = Llama();
  j["rope_scaling"] = {{"rope_type", "llama3"},       {"factor", 8.0},
                       {"low_freq_factor", 1.0},      {"high_freq_factor", 4.0},
                       {"original_max_position_embeddings", 16}};
  auto c = Convert(j);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->rope_scaling, RopeScaling::kLlama3);
  EXPECT_EQ(c->rope_original_context, 16);
  j["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}};
  EXPECT_EQ(Convert(j)->rope_scaling, RopeScaling::kLinear);
  j["rope_scaling"] = {{"type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", 16}};
  EXPECT_EQ(Convert(j)->rope_scaling, RopeScaling::kYarnHf);
  j["rope_scaling"] = {{"type", "dynamic"}, {"factor", 2.0}};
  EXPECT_EQ(Convert(j)->rope_scaling, RopeScaling::kDynamicHf);
  EXPECT_EQ(Convert(j)->rope_factor, 2.0);
  EXPECT_EQ(Convert(j)->rope_original_context, j["max_position_embeddings"].get<int64_t>());
  EXPECT_EQ(Convert(j)->context, 2 * j["max_position_embeddings"].get<int64_t>());
  j["rope_scaling"] = {{"type", "longrope"}, {"factor", 2.0}};
  auto bad = Convert(j);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("rope_scaling type 'longrope'"), std::string::npos);
  j["rope_scaling"] = nullptr;
  EXPECT_EQ(Convert(j)->rope_scaling, RopeScaling::kNone);
}

TEST(HfDecoderConfig, BiasKeysAsTransformersReadsThem) {
  json j = Llama();
  auto c = Convert(j);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_FALSE(c->bias || c->qkv_bias || c->proj_bias || c->mlp_bias);
  j["attention_bias"] = true;  // LlamaAttention: q, k, v and o
  c = Convert(j);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_TRUE(c->qkv_bias && c->proj_bias);
  EXPECT_FALSE(c->mlp_bias || c->bias);
  j["mlp_bias"] = true;  // LlamaMLP: gate, up and down
  EXPECT_TRUE(Convert(j)->mlp_bias);
  j["model_type"] = "qwen3";  // Qwen3Attention reads attention_bias; its MLP has no biases
  c = Convert(j);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_TRUE(c->qkv_bias && c->proj_bias);
  EXPECT_FALSE(c->mlp_bias);
  j["model_type"] = "mistral";  // no biases whatever the keys say
  c = Convert(j);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_FALSE(c->qkv_bias || c->proj_bias || c->mlp_bias);
  j["model_type"] = "qwen2";  // q, k, v always; never o
  c = Convert(j);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_TRUE(c->qkv_bias);
  EXPECT_FALSE(c->proj_bias || c->mlp_bias);
}

TEST(HfDecoderConfig, RefusesWhatTheDecoderCannotReproduceNamingTheKey) {
  auto refuses = [](json j, const std::string& needle) {
    auto c = Convert(j);
    ASSERT_FALSE(c.ok()) << j.dump();
    EXPECT_NE(c.status().message().find(needle), std::string::npos) << c.status().ToString();
    EXPECT_NE(c.status().message().find("config.json"), std::string::npos);
  };
  json j = Llama();
  j["model_type"] = "phi3";
  refuses(j, "model_type 'phi3'");
  j = Llama();
  j.erase("hidden_size");
  refuses(j, "'hidden_size' is required");
  j = Llama();
  j["hidden_size"] = "16";
  refuses(j, "'hidden_size' must be an integer");
  j = Llama();
  j["hidden_act"] = "gelu";
  refuses(j, "hidden_act 'gelu'");
  j = Llama();
  j["num_hidden_layers"] = int64_t{1} << 40;
  refuses(j, "num_hidden_layers");
  j = Llama();
  j["num_key_value_heads"] = 3;
  refuses(j, "n_kv_head");
}

TEST(SafetensorsIndex, ParsesTheWeightMapAndRefusesPathsOutsideTheFolder) {
  auto ok = ParseSafetensorsIndex(
      R"({"metadata": {"total_size": 8}, "weight_map": {"a": "m-1.safetensors", "b": "m-2.safetensors"}})",
      "idx");
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(ok->at("b"), "m-2.safetensors");
  for (const char* bad : {R"({"weight_map": {"a": "../m.safetensors"}})",
                          R"({"weight_map": {"a": "/etc/m.safetensors"}})",
                          R"({"weight_map": {"a": "m.bin"}})", R"({"weight_map": {"a": 1}})",
                          R"({"weight_map": {}})", R"({"metadata": {}})", R"([1, 2])", "{"}) {
    auto r = ParseSafetensorsIndex(bad, "idx");
    EXPECT_FALSE(r.ok()) << bad;
    if (!r.ok()) {
      EXPECT_EQ(r.status().message().rfind("idx", 0), 0u) << r.status().ToString();
    }
  }
}

}  // namespace
}  // namespace attnlab
