#include "attnlab/model_config.h"

#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>

namespace attnlab {

namespace {

using nlohmann::json;

template <typename E>
struct EnumNames {
  E value;
  const char* name;
};

constexpr EnumNames<PositionEncoding> kPositionNames[] = {
    {PositionEncoding::kLearned, "learned"}, {PositionEncoding::kRope, "rope"},
    {PositionEncoding::kNone, "none"}};
constexpr EnumNames<RopeLayout> kRopeLayoutNames[] = {{RopeLayout::kNeox, "neox"},
                                                      {RopeLayout::kGptJ, "gptj"}};
constexpr EnumNames<RopeScaling> kRopeScalingNames[] = {{RopeScaling::kNone, "none"},
                                                        {RopeScaling::kLinear, "linear"},
                                                        {RopeScaling::kNtk, "ntk"},
                                                        {RopeScaling::kYarn, "yarn"},
                                                        {RopeScaling::kYarnHf, "yarn_hf"},
                                                        {RopeScaling::kLlama3, "llama3"},
                                                        {RopeScaling::kDynamicHf, "dynamic_hf"}};
constexpr EnumNames<NormPlacement> kNormNames[] = {
    {NormPlacement::kPre, "pre"}, {NormPlacement::kPost, "post"}, {NormPlacement::kNone, "none"}};
constexpr EnumNames<NormType> kNormTypeNames[] = {{NormType::kLayerNorm, "layernorm"},
                                                  {NormType::kRmsNorm, "rmsnorm"}};
constexpr EnumNames<ResidualScale> kResidualNames[] = {{ResidualScale::kOne, "one"},
                                                       {ResidualScale::kInvSqrt2L, "inv_sqrt_2l"},
                                                       {ResidualScale::kReZero, "rezero"},
                                                       {ResidualScale::kDeepNorm, "deepnorm"}};
constexpr EnumNames<SoftmaxKind> kSoftmaxNames[] = {{SoftmaxKind::kStandard, "standard"},
                                                    {SoftmaxKind::kSoftmax1, "softmax1"},
                                                    {SoftmaxKind::kSinkLogit, "sink_logit"},
                                                    {SoftmaxKind::kSigmoid, "sigmoid"},
                                                    {SoftmaxKind::kSoftpick, "softpick"}};

constexpr EnumNames<MlpActivation> kMlpActivationNames[] = {
    {MlpActivation::kGeluTanh, "gelu_tanh"},
    {MlpActivation::kGeluErf, "gelu_erf"},
    {MlpActivation::kSwiGlu, "swiglu"}};

constexpr EnumNames<AttentionType> kAttentionTypeNames[] = {{AttentionType::kSoftmax, "softmax"},
                                                            {AttentionType::kLinear, "linear"},
                                                            {AttentionType::kSparse, "sparse"}};

template <typename E, size_t N>
const char* NameOf(const EnumNames<E> (&names)[N], E v) {
  for (const auto& n : names) {
    if (n.value == v) return n.name;
  }
  return "?";
}

template <typename E, size_t N>
Status ParseEnum(const EnumNames<E> (&names)[N], const json& j, const char* key, E* out) {
  if (!j.is_string()) return Status::InvalidArgument(std::string("config key '") + key + "' must be a string");
  const std::string s = j.get<std::string>();
  std::string allowed;
  for (const auto& n : names) {
    if (s == n.name) {
      *out = n.value;
      return Status::Ok();
    }
    allowed += std::string(allowed.empty() ? "" : ", ") + n.name;
  }
  return Status::InvalidArgument(std::string("config key '") + key + "': unknown value '" + s +
                                 "' (allowed: " + allowed + ")");
}

Status ParseInt(const json& j, const char* key, int64_t* out) {
  if (!j.is_number_integer()) {
    return Status::InvalidArgument(std::string("config key '") + key + "' must be an integer");
  }
  *out = j.get<int64_t>();
  return Status::Ok();
}

template <typename F>
Status ParseFloat(const json& j, const char* key, F* out) {
  if (!j.is_number()) return Status::InvalidArgument(std::string("config key '") + key + "' must be a number");
  const double x = j.get<double>();
  if (!std::isfinite(x) || std::fabs(x) > static_cast<double>(std::numeric_limits<F>::max())) {
    return Status::InvalidArgument(std::string("config key '") + key + "' = " + j.dump() +
                                   " is not a finite number");
  }
  *out = static_cast<F>(x);
  return Status::Ok();
}

Status ParseBool(const json& j, const char* key, bool* out) {
  if (!j.is_boolean()) return Status::InvalidArgument(std::string("config key '") + key + "' must be true or false");
  *out = j.get<bool>();
  return Status::Ok();
}

Status Range(const char* name, int64_t v, int64_t lo, int64_t hi) {
  if (v < lo || v > hi) {
    return Status::InvalidArgument(std::string(name) + " = " + std::to_string(v) +
                                   " is outside [" + std::to_string(lo) + ", " +
                                   std::to_string(hi) + "]");
  }
  return Status::Ok();
}

}  // namespace

float ModelConfig::effective_sigmoid_bias() const {
  return sigmoid_bias != 0.0f ? sigmoid_bias : -std::log(static_cast<float>(max_positions()));
}

// ref: https://arxiv.org/abs/2203.00555, table 1 (decoder-only: alpha = (2M)^(1/4),
// beta = (8M)^(-1/4), M layers).
float ModelConfig::deepnorm_alpha() const {
  if (residual_scale != ResidualScale::kDeepNorm) return 1.0f;
  return static_cast<float>(std::pow(2.0 * n_layer, 0.25));
}
float ModelConfig::deepnorm_beta() const {
  if (residual_scale != ResidualScale::kDeepNorm) return 1.0f;
  return static_cast<float>(std::pow(8.0 * n_layer, -0.25));
}

namespace {

// The attention type against the options that only some types give a meaning to.
Status ValidateAttentionType(const ModelConfig& c) {
  if (c.attention_global < 0) {
    return Status::InvalidArgument("attention_global must be >= 0 (0: no global tokens), got " +
                                   std::to_string(c.attention_global));
  }
  if (c.attention_global > 0 && c.attention_type != AttentionType::kSparse) {
    return Status::InvalidArgument(
        "attention_global (global tokens) needs attention_type = sparse (a window plus global "
        "tokens)");
  }
  if (c.gate_elementwise && !c.output_gate) {
    return Status::InvalidArgument(
        "gate_elementwise chooses one gate per channel for the output gate: it needs "
        "output_gate = true");
  }
  if (c.key_bias && (c.attention_type == AttentionType::kLinear ||
                     c.softmax == SoftmaxKind::kSigmoid || c.softmax == SoftmaxKind::kSoftpick)) {
    return Status::InvalidArgument(
        "key_bias (a learnable key with a zero value, Gu et al. 2024) joins a softmax's "
        "denominator: it needs softmax attention with softmax standard, softmax1 or sink_logit");
  }
  if (c.attention_type == AttentionType::kSparse) {
    if (c.attention_window < 0) {
      return Status::InvalidArgument(
          "attention_type sparse is a causal sliding window plus global tokens: set "
          "attention_window >= 0 (and attention_global >= 0)");
    }
    if (!c.causal) return Status::InvalidArgument("attention_type sparse needs causal = true");
  }
  if (c.attention_type == AttentionType::kLinear) {
    const std::string linear = "attention_type linear (phi = elu + 1, no softmax) ";
    if (c.softmax != SoftmaxKind::kStandard) {
      return Status::InvalidArgument(linear + "has no softmax to vary: softmax must be "
                                     "'standard', got '" + NameOf(kSoftmaxNames, c.softmax) + "'");
    }
    if (c.mask_first_key) {
      return Status::InvalidArgument(
          linear + "cannot take mask_first_key: with positive weights and no softmax there is "
          "no attention sink to remove, and row 0 would have no key at all");
    }
    if (c.sink_token) {
      return Status::InvalidArgument(
          linear + "cannot take a dedicated sink_token: a sink absorbs softmax mass, and linear "
          "attention has no softmax");
    }
    if (c.attention_window >= 0) {
      return Status::InvalidArgument(
          linear + "attends to the whole causal prefix through its state; attention_window must "
          "be -1");
    }
    if (!c.causal) {
      return Status::InvalidArgument(linear + "is causal (a running state): causal must be true");
    }
  }
  return Status::Ok();
}

// The options that describe released decoder families (Llama, Qwen, GPT-NeoX, gpt-oss).
Status ValidateDecoderOptions(const ModelConfig& c) {
  if (c.parallel_residual &&
      (c.norm != NormPlacement::kPre || !c.residual || !c.mlp ||
       c.residual_scale == ResidualScale::kReZero)) {
    return Status::InvalidArgument(
        "parallel_residual (x + attn(LN1(x)) + mlp(LN2(x)), GPT-NeoX) needs norm = pre, "
        "residual = true, mlp = true and no ReZero");
  }
  if (c.qk_norm && c.attention_type == AttentionType::kLinear) {
    return Status::InvalidArgument("qk_norm is for softmax attention, not attention_type linear");
  }
  if (!c.window_layers.empty()) {
    if (static_cast<int64_t>(c.window_layers.size()) != c.n_layer) {
      return Status::InvalidArgument("window_layers has " + std::to_string(c.window_layers.size()) +
                                     " characters; it needs one per layer (n_layer = " +
                                     std::to_string(c.n_layer) + ")");
    }
    for (char ch : c.window_layers) {
      if (ch != 'w' && ch != 'f') {
        return Status::InvalidArgument(
            "window_layers may hold only 'w' (windowed layer) and 'f' (full causal layer)");
      }
    }
    if (c.attention_window < 0) {
      return Status::InvalidArgument("window_layers needs attention_window >= 0 (the window)");
    }
    if (c.attention_type == AttentionType::kSparse) {
      return Status::InvalidArgument("window_layers cannot be combined with attention_type sparse");
    }
  }
  return Status::Ok();
}

}  // namespace

RopeConfig MakeRopeConfig(const ModelConfig& c) {
  RopeConfig rc;
  rc.head_dim = c.head_dim();
  rc.rotary_dim = c.rotary_dim == 0 ? c.head_dim() : c.rotary_dim;
  rc.base = c.rope_base;
  rc.layout = c.rope_layout;
  rc.scaling = c.rope_scaling;
  rc.factor = c.rope_factor;
  rc.original_context = c.rope_original_context > 0 ? c.rope_original_context : c.context;
  rc.attention_factor = c.rope_attention_factor;
  rc.low_freq_factor = c.rope_low_freq_factor;
  rc.high_freq_factor = c.rope_high_freq_factor;
  return rc;
}

Status ValidateModelConfig(const ModelConfig& c) {
  ATTNLAB_RETURN_IF_ERROR(Range("vocab_size", c.vocab_size, 2, 1 << 24));
  ATTNLAB_RETURN_IF_ERROR(Range("context", c.context, 1, 1 << 20));
  ATTNLAB_RETURN_IF_ERROR(Range("d_model", c.d_model, 1, 1 << 16));
  ATTNLAB_RETURN_IF_ERROR(Range("n_layer", c.n_layer, 1, 1024));
  ATTNLAB_RETURN_IF_ERROR(Range("n_head", c.n_head, 1, c.d_model));
  ATTNLAB_RETURN_IF_ERROR(Range("n_kv_head", c.n_kv_head, 0, c.n_head));
  ATTNLAB_RETURN_IF_ERROR(Range("mlp_hidden", c.mlp_hidden, 0, 1 << 20));
  ATTNLAB_RETURN_IF_ERROR(Range("head_size", c.head_size, 0, 1 << 12));
  if (c.head_size == 0 && c.d_model % c.n_head != 0) {
    return Status::InvalidArgument("d_model (" + std::to_string(c.d_model) +
                                   ") must be a multiple of n_head (" + std::to_string(c.n_head) + ")");
  }
  if (c.n_head % c.kv_heads() != 0) {
    return Status::InvalidArgument("n_head (" + std::to_string(c.n_head) +
                                   ") must be a multiple of n_kv_head (" +
                                   std::to_string(c.kv_heads()) + ")");
  }
  if (c.position_every_layer && c.position != PositionEncoding::kLearned) {
    return Status::InvalidArgument(
        "position_every_layer adds the learned position table before every layer: it needs "
        "position = learned (RoPE already acts in every layer's attention)");
  }
  if (c.position == PositionEncoding::kRope) {
    const int64_t rot = c.rotary_dim == 0 ? c.head_dim() : c.rotary_dim;
    if (rot < 2 || rot > c.head_dim() || rot % 2 != 0) {
      return Status::InvalidArgument("rotary_dim must be even and in [2, head_dim = " +
                                     std::to_string(c.head_dim()) + "], got " + std::to_string(rot));
    }
    if (!(c.rope_base > 1.0 && c.rope_base <= 1e12)) {
      return Status::InvalidArgument("rope_base must be in (1, 1e12]");
    }
    // Finite and bounded: Gpt::Create sizes its rotation table as max_positions * rope_factor.
    if (!(c.rope_factor >= 1.0 && c.rope_factor <= 1024.0)) {
      return Status::InvalidArgument("rope_factor must be in [1, 1024], got " +
                                     std::to_string(c.rope_factor));
    }
    ATTNLAB_RETURN_IF_ERROR(Range("rope_original_context", c.rope_original_context, 0, 1 << 20));
    const RopeConfig rc = MakeRopeConfig(c);
    ATTNLAB_RETURN_IF_ERROR(ValidateRope(rc));
    const int64_t table = c.max_positions() * static_cast<int64_t>(c.rope_factor) * rot;
    if (table > (int64_t{1} << 31)) {
      return Status::InvalidArgument(
          "context x rope_factor x rotary_dim = " + std::to_string(table) +
          " exceeds the 2^31 entries of the largest rotation table attnlab builds");
    }
  }
  if (!(c.norm_eps > 0.0f) || !std::isfinite(c.norm_eps)) {
    return Status::InvalidArgument("norm_eps must be a finite number > 0");
  }
  if (!(c.init_std > 0.0f) || !std::isfinite(c.init_std)) {
    return Status::InvalidArgument("init_std must be a positive number");
  }
  if (!std::isfinite(c.sigmoid_bias)) return Status::InvalidArgument("sigmoid_bias must be finite");
  if (c.attention_window < -1) {
    return Status::InvalidArgument("attention_window must be >= 0, or -1 for full causal attention");
  }
  if (c.residual_scale == ResidualScale::kDeepNorm && c.norm != NormPlacement::kPost) {
    return Status::InvalidArgument(
        "residual_scale deepnorm needs norm = post (DeepNorm is x = LN(alpha x + f(x)))");
  }
  ATTNLAB_RETURN_IF_ERROR(ValidateAttentionType(c));
  ATTNLAB_RETURN_IF_ERROR(ValidateDecoderOptions(c));
  if (!c.causal && c.attention_window >= 0) {
    return Status::InvalidArgument("causal = false (bidirectional) takes no attention_window");
  }
  return Status::Ok();
}

std::string ModelConfigToJson(const ModelConfig& c) {
  json j;
  j["vocab_size"] = c.vocab_size;
  j["context"] = c.context;
  j["d_model"] = c.d_model;
  j["n_layer"] = c.n_layer;
  j["n_head"] = c.n_head;
  j["n_kv_head"] = c.n_kv_head;
  j["head_size"] = c.head_size;
  j["mlp_hidden"] = c.mlp_hidden;
  j["mlp"] = c.mlp;
  j["residual"] = c.residual;
  j["bias"] = c.bias;
  j["qkv_bias"] = c.qkv_bias;
  j["proj_bias"] = c.proj_bias;
  j["mlp_bias"] = c.mlp_bias;
  j["mlp_activation"] = NameOf(kMlpActivationNames, c.mlp_activation);
  j["parallel_residual"] = c.parallel_residual;
  j["tie_embeddings"] = c.tie_embeddings;
  j["position"] = NameOf(kPositionNames, c.position);
  j["position_every_layer"] = c.position_every_layer;
  j["rope_layout"] = NameOf(kRopeLayoutNames, c.rope_layout);
  j["rotary_dim"] = c.rotary_dim;
  j["rope_base"] = c.rope_base;
  j["rope_scaling"] = NameOf(kRopeScalingNames, c.rope_scaling);
  j["rope_factor"] = c.rope_factor;
  j["rope_original_context"] = c.rope_original_context;
  j["norm"] = NameOf(kNormNames, c.norm);
  j["norm_type"] = NameOf(kNormTypeNames, c.norm_type);
  j["norm_eps"] = c.norm_eps;
  j["residual_scale"] = NameOf(kResidualNames, c.residual_scale);
  j["causal"] = c.causal;
  j["softmax"] = NameOf(kSoftmaxNames, c.softmax);
  j["sigmoid_bias"] = c.sigmoid_bias;
  j["output_gate"] = c.output_gate;
  j["gate_elementwise"] = c.gate_elementwise;
  j["mask_first_key"] = c.mask_first_key;
  j["key_bias"] = c.key_bias;
  j["qk_norm"] = c.qk_norm;
  j["sink_token"] = c.sink_token;
  j["attention_window"] = c.attention_window;
  j["window_layers"] = c.window_layers;
  j["rope_low_freq_factor"] = c.rope_low_freq_factor;
  j["rope_high_freq_factor"] = c.rope_high_freq_factor;
  j["rope_attention_factor"] = c.rope_attention_factor;
  j["attention_type"] = NameOf(kAttentionTypeNames, c.attention_type);
  j["attention_global"] = c.attention_global;
  j["init_std"] = c.init_std;
  j["scale_residual_init"] = c.scale_residual_init;
  return j.dump(2);
}

Result<ModelConfig> ModelConfigFromJson(const std::string& text) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Status::InvalidArgument("model config is not valid JSON");
  if (!j.is_object()) return Status::InvalidArgument("model config must be a JSON object");
  ModelConfig c;
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& k = it.key();
    const json& v = it.value();
    const char* key = k.c_str();
    Status st;
    if (k == "vocab_size") st = ParseInt(v, key, &c.vocab_size);
    else if (k == "context") st = ParseInt(v, key, &c.context);
    else if (k == "d_model") st = ParseInt(v, key, &c.d_model);
    else if (k == "n_layer") st = ParseInt(v, key, &c.n_layer);
    else if (k == "n_head") st = ParseInt(v, key, &c.n_head);
    else if (k == "n_kv_head") st = ParseInt(v, key, &c.n_kv_head);
    else if (k == "head_size") st = ParseInt(v, key, &c.head_size);
    else if (k == "mlp_hidden") st = ParseInt(v, key, &c.mlp_hidden);
    else if (k == "mlp") st = ParseBool(v, key, &c.mlp);
    else if (k == "residual") st = ParseBool(v, key, &c.residual);
    else if (k == "bias") st = ParseBool(v, key, &c.bias);
    else if (k == "qkv_bias") st = ParseBool(v, key, &c.qkv_bias);
    else if (k == "proj_bias") st = ParseBool(v, key, &c.proj_bias);
    else if (k == "mlp_bias") st = ParseBool(v, key, &c.mlp_bias);
    else if (k == "mlp_activation") st = ParseEnum(kMlpActivationNames, v, key, &c.mlp_activation);
    else if (k == "parallel_residual") st = ParseBool(v, key, &c.parallel_residual);
    else if (k == "tie_embeddings") st = ParseBool(v, key, &c.tie_embeddings);
    else if (k == "position") st = ParseEnum(kPositionNames, v, key, &c.position);
    else if (k == "position_every_layer") st = ParseBool(v, key, &c.position_every_layer);
    else if (k == "rope_layout") st = ParseEnum(kRopeLayoutNames, v, key, &c.rope_layout);
    else if (k == "rotary_dim") st = ParseInt(v, key, &c.rotary_dim);
    else if (k == "rope_base") st = ParseFloat(v, key, &c.rope_base);
    else if (k == "rope_scaling") st = ParseEnum(kRopeScalingNames, v, key, &c.rope_scaling);
    else if (k == "rope_factor") st = ParseFloat(v, key, &c.rope_factor);
    else if (k == "rope_original_context") st = ParseInt(v, key, &c.rope_original_context);
    else if (k == "norm") st = ParseEnum(kNormNames, v, key, &c.norm);
    else if (k == "norm_type") st = ParseEnum(kNormTypeNames, v, key, &c.norm_type);
    else if (k == "norm_eps") st = ParseFloat(v, key, &c.norm_eps);
    else if (k == "residual_scale") st = ParseEnum(kResidualNames, v, key, &c.residual_scale);
    else if (k == "causal") st = ParseBool(v, key, &c.causal);
    else if (k == "softmax") st = ParseEnum(kSoftmaxNames, v, key, &c.softmax);
    else if (k == "sigmoid_bias") st = ParseFloat(v, key, &c.sigmoid_bias);
    else if (k == "output_gate") st = ParseBool(v, key, &c.output_gate);
    else if (k == "gate_elementwise") st = ParseBool(v, key, &c.gate_elementwise);
    else if (k == "mask_first_key") st = ParseBool(v, key, &c.mask_first_key);
    else if (k == "key_bias") st = ParseBool(v, key, &c.key_bias);
    else if (k == "qk_norm") st = ParseBool(v, key, &c.qk_norm);
    else if (k == "sink_token") st = ParseBool(v, key, &c.sink_token);
    else if (k == "attention_window") st = ParseInt(v, key, &c.attention_window);
    else if (k == "window_layers") {
      if (!v.is_string()) st = Status::InvalidArgument("config key 'window_layers' must be a string");
      else if (v.get<std::string>().size() > 4096) st = Status::InvalidArgument("config key 'window_layers' is too long");
      else c.window_layers = v.get<std::string>();
    }
    else if (k == "rope_low_freq_factor") st = ParseFloat(v, key, &c.rope_low_freq_factor);
    else if (k == "rope_high_freq_factor") st = ParseFloat(v, key, &c.rope_high_freq_factor);
    else if (k == "rope_attention_factor") st = ParseFloat(v, key, &c.rope_attention_factor);
    else if (k == "attention_type") st = ParseEnum(kAttentionTypeNames, v, key, &c.attention_type);
    else if (k == "attention_global") st = ParseInt(v, key, &c.attention_global);
    else if (k == "init_std") st = ParseFloat(v, key, &c.init_std);
    else if (k == "scale_residual_init") st = ParseBool(v, key, &c.scale_residual_init);
    else st = Status::InvalidArgument("unknown model config key '" + k + "'");
    ATTNLAB_RETURN_IF_ERROR(st);
  }
  ATTNLAB_RETURN_IF_ERROR(ValidateModelConfig(c));
  return c;
}

}  // namespace attnlab
