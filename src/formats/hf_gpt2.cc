#include "formats/hf_gpt2.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <set>
#include <vector>

#include "core/atomic_file.h"
#include "core/files.h"

namespace attnlab {

namespace {

using nlohmann::json;

constexpr char kPrefix[] = "transformer.";

bool IsFile(const std::string& p) { return KindOf(p) == PathKind::kFile; }
bool IsDir(const std::string& p) { return KindOf(p) == PathKind::kDirectory; }

// "h.12.attn.c_attn.weight" -> layer 12, rest "attn.c_attn.weight". False if not "h.<digits>.".
bool SplitLayer(const std::string& name, int64_t* layer, std::string* rest) {
  if (name.rfind("h.", 0) != 0) return false;
  size_t i = 2;
  int64_t l = 0;
  while (i < name.size() && name[i] >= '0' && name[i] <= '9' && i < 9) {
    l = l * 10 + (name[i] - '0');
    ++i;
  }
  if (i == 2 || i >= name.size() || name[i] != '.') return false;
  if (i > 3 && name[2] == '0') return false;  // no leading zeros: "h.01" is not layer 1
  *layer = l;
  *rest = name.substr(i + 1);
  return true;
}

// The HF name (without prefix) of an attnlab parameter of a GPT-2 layout.
std::string HfName(const std::string& attnlab_name) {
  static const std::pair<const char*, const char*> kLayer[] = {
      {"ln1.weight", "ln_1.weight"},
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
      {"mlp.proj.bias", "mlp.c_proj.bias"},
  };
  if (attnlab_name == "wte" || attnlab_name == "wpe") return attnlab_name + ".weight";
  if (attnlab_name == "lm_head") return "lm_head.weight";
  int64_t l;
  std::string rest;
  if (SplitLayer(attnlab_name, &l, &rest)) {
    for (const auto& [a, h] : kLayer) {
      if (rest == a) return "h." + std::to_string(l) + "." + h;
    }
  }
  return attnlab_name;  // ln_f.weight, ln_f.bias
}

// Optional integer field of config.json.
Status GetConfigInt(const json* cfg, const std::string& name, const char* key, int64_t* out,
                    bool* present) {
  *present = false;
  if (cfg == nullptr) return Status::Ok();
  auto it = cfg->find(key);
  if (it == cfg->end() || it->is_null()) return Status::Ok();
  if (!it->is_number_integer()) {
    return Status::InvalidArgument(name + ": \"" + key + "\" must be an integer");
  }
  *out = it->get<int64_t>();
  *present = true;
  return Status::Ok();
}

// A config value must agree with what the tensors say.
Status Agree(const std::string& config_name, const char* key, int64_t config_value,
             const std::string& file, const std::string& tensor_desc, int64_t tensor_value) {
  if (config_value == tensor_value) return Status::Ok();
  return Status::Corrupt(config_name + " says " + key + " = " + std::to_string(config_value) +
                         " but " + file + " has " + tensor_desc + " = " +
                         std::to_string(tensor_value));
}

}  // namespace

ModelConfig MakeGpt2Config(int64_t vocab, int64_t context, int64_t d_model, int64_t n_layer,
                           int64_t n_head, int64_t mlp_hidden, float norm_eps) {
  ModelConfig c;
  c.vocab_size = vocab;
  c.context = context;
  c.d_model = d_model;
  c.n_layer = n_layer;
  c.n_head = n_head;
  c.n_kv_head = 0;
  c.mlp_hidden = mlp_hidden == 4 * d_model ? 0 : mlp_hidden;
  c.mlp = true;
  c.residual = true;
  c.bias = true;
  c.tie_embeddings = true;
  c.position = PositionEncoding::kLearned;
  c.norm = NormPlacement::kPre;
  c.norm_type = NormType::kLayerNorm;
  c.norm_eps = norm_eps;
  c.residual_scale = ResidualScale::kOne;
  c.softmax = SoftmaxKind::kStandard;
  c.output_gate = false;
  c.mask_first_key = false;
  c.sink_token = false;
  c.attention_window = -1;
  return c;
}

Result<LoadedModel> LoadHfGpt2FromFile(const SafetensorsFile& file, const json* cfg,
                                       const std::string& config_name) {
  const std::string& fname = file.path();
  LoadedModel out;
  out.format = "hf-gpt2";
  out.path = fname;

  // 1. Canonical names: without "transformer.", mask buffers dropped.
  std::map<std::string, const SafetensorsTensor*> by_name;
  std::set<int64_t> layers;
  for (const SafetensorsTensor& t : file.tensors()) {
    std::string name = t.name;
    if (name.rfind(kPrefix, 0) == 0) name = name.substr(std::strlen(kPrefix));
    int64_t l;
    std::string rest;
    const bool in_layer = SplitLayer(name, &l, &rest);
    if (in_layer && (rest == "attn.bias" || rest == "attn.masked_bias")) continue;  // mask buffers
    if (!by_name.emplace(name, &t).second) {
      return Status::Corrupt(fname + ": tensor '" + name +
                             "' appears both with and without the "
                             "\"transformer.\" prefix");
    }
    if (in_layer) layers.insert(l);
  }
  auto find = [&](const std::string& name) -> const SafetensorsTensor* {
    auto it = by_name.find(name);
    return it == by_name.end() ? nullptr : it->second;
  };
  auto shape2 = [&](const char* name, int64_t* rows, int64_t* cols) -> Status {
    const SafetensorsTensor* t = find(name);
    if (t == nullptr) {
      const bool attnlab_names = find("wte") != nullptr && find("h.0.attn.qkv.weight") != nullptr;
      return Status::Corrupt(
          fname + ": missing tensor '" + name + "' (or 'transformer." + name + "'); " +
          (attnlab_names ? "the names are attnlab's (wte, h.0.attn.qkv.weight): this looks like "
                           "the model.safetensors of an attnlab checkpoint, which needs its "
                           "config.json (\"format\": \"attnlab-checkpoint\") next to it"
                         : "is this a GPT-2 model?"));
    }
    if (t->shape.size() != 2) {
      return Status::Corrupt(fname + ": tensor '" + t->name + "' has shape " +
                             TensorShapeString(t->shape) + ", expected 2 dimensions");
    }
    *rows = t->shape[0];
    *cols = t->shape[1];
    return Status::Ok();
  };

  // 2. The shape, from the tensors.
  int64_t V, C, P, P_C;
  ATTNLAB_RETURN_IF_ERROR(shape2("wte.weight", &V, &C));
  ATTNLAB_RETURN_IF_ERROR(shape2("wpe.weight", &P, &P_C));
  if (P_C != C) {
    return Status::Corrupt(fname + ": wpe.weight has " + std::to_string(P_C) +
                           " columns, wte.weight " + std::to_string(C));
  }
  if (layers.empty())
    return Status::Corrupt(fname + ": no transformer blocks (tensors named h.N.*)");
  const int64_t L = static_cast<int64_t>(layers.size());
  if (*layers.rbegin() != L - 1) {
    int64_t missing = 0;
    while (layers.count(missing)) ++missing;
    return Status::Corrupt(fname + ": blocks are not numbered 0.." + std::to_string(L - 1) +
                           ": block h." + std::to_string(missing) + " is missing but h." +
                           std::to_string(*layers.rbegin()) + " exists");
  }
  int64_t fc_in, F;
  ATTNLAB_RETURN_IF_ERROR(shape2("h.0.mlp.c_fc.weight", &fc_in, &F));

  // 3. config.json, if any, must agree; it is the only source of n_head.
  bool has;
  int64_t x;
  ATTNLAB_RETURN_IF_ERROR(GetConfigInt(cfg, config_name, "n_embd", &x, &has));
  if (has) ATTNLAB_RETURN_IF_ERROR(Agree(config_name, "n_embd", x, fname, "wte.weight columns", C));
  ATTNLAB_RETURN_IF_ERROR(GetConfigInt(cfg, config_name, "vocab_size", &x, &has));
  if (has)
    ATTNLAB_RETURN_IF_ERROR(Agree(config_name, "vocab_size", x, fname, "wte.weight rows", V));
  ATTNLAB_RETURN_IF_ERROR(GetConfigInt(cfg, config_name, "n_layer", &x, &has));
  if (has) ATTNLAB_RETURN_IF_ERROR(Agree(config_name, "n_layer", x, fname, "blocks h.N", L));
  ATTNLAB_RETURN_IF_ERROR(GetConfigInt(cfg, config_name, "n_positions", &x, &has));
  if (!has) ATTNLAB_RETURN_IF_ERROR(GetConfigInt(cfg, config_name, "n_ctx", &x, &has));
  if (has)
    ATTNLAB_RETURN_IF_ERROR(Agree(config_name, "n_positions", x, fname, "wpe.weight rows", P));
  ATTNLAB_RETURN_IF_ERROR(GetConfigInt(cfg, config_name, "n_inner", &x, &has));
  if (has)
    ATTNLAB_RETURN_IF_ERROR(Agree(config_name, "n_inner", x, fname, "mlp.c_fc.weight columns", F));
  int64_t H = 0;
  ATTNLAB_RETURN_IF_ERROR(GetConfigInt(cfg, config_name, "n_head", &H, &has));
  if (!has) {
    if (C % 64 != 0) {
      return Status::InvalidArgument(
          fname +
          ": the number of heads is not stored in the weights and there is no config.json "
          "giving n_head; the GPT-2 default C / 64 does not apply to C = " +
          std::to_string(C) + ". Hint: put a config.json with \"n_head\" next to the file");
    }
    H = C / 64;
    out.notes.push_back("no n_head in a config.json: assumed n_head = n_embd / 64 = " +
                        std::to_string(H) + " (head size 64, as in every released GPT-2)");
  }
  float eps = 1e-5f;
  bool tie_from_config = false, tie = true;
  if (cfg != nullptr) {
    auto get = [&](const char* key) -> const json* {
      auto it = cfg->find(key);
      return it == cfg->end() || it->is_null() ? nullptr : &*it;
    };
    if (const json* mt = get("model_type");
        mt && !(mt->is_string() && mt->get<std::string>() == "gpt2")) {
      return Status::InvalidArgument(config_name + ": model_type " + mt->dump() +
                                     " is not \"gpt2\"; attnlab maps only GPT-2 weights");
    }
    if (const json* e = get("layer_norm_epsilon")) {
      if (!e->is_number() || !(e->get<double>() > 0)) {
        return Status::InvalidArgument(config_name +
                                       ": layer_norm_epsilon must be a positive number");
      }
      eps = e->get<float>();
    }
    if (const json* a = get("activation_function")) {
      const std::string act = a->is_string() ? a->get<std::string>() : a->dump();
      if (act != "gelu_new" && act != "gelu_pytorch_tanh" && act != "gelu_fast") {
        return Status::InvalidArgument(config_name + ": activation_function '" + act +
                                       "' is not supported; attnlab's MLP uses GELU with the tanh "
                                       "approximation (gelu_new, as GPT-2)");
      }
    }
    if (const json* s = get("scale_attn_weights"); s && !(s->is_boolean() && s->get<bool>())) {
      return Status::InvalidArgument(config_name +
                                     ": scale_attn_weights must be true (attnlab "
                                     "scales scores by 1/sqrt(head_dim))");
    }
    if (const json* s = get("scale_attn_by_inverse_layer_idx");
        s && !(s->is_boolean() && !s->get<bool>())) {
      return Status::InvalidArgument(config_name +
                                     ": scale_attn_by_inverse_layer_idx is not supported");
    }
    if (const json* s = get("add_cross_attention"); s && !(s->is_boolean() && !s->get<bool>())) {
      return Status::InvalidArgument(config_name + ": cross-attention is not supported");
    }
    if (const json* t = get("tie_word_embeddings")) {
      if (!t->is_boolean())
        return Status::InvalidArgument(config_name + ": tie_word_embeddings must be a boolean");
      tie_from_config = true;
      tie = t->get<bool>();
    }
  }

  // 4. The head: tied unless lm_head differs from wte (or the config says untied).
  const SafetensorsTensor* lm = find("lm_head.weight");
  if (lm != nullptr) {
    if (lm->shape != std::vector<int64_t>{V, C}) {
      return Status::Corrupt(fname + ": tensor '" + lm->name + "' has shape " +
                             TensorShapeString(lm->shape) + ", expected [" + std::to_string(V) +
                             ", " + std::to_string(C) + "] like wte.weight");
    }
    ATTNLAB_ASSIGN_OR_RETURN(std::vector<float> a, file.ToFloat(*lm));
    ATTNLAB_ASSIGN_OR_RETURN(std::vector<float> b, file.ToFloat(*find("wte.weight")));
    const bool same = std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
    if (tie_from_config && tie && !same) {
      out.notes.push_back(
          "lm_head.weight differs from wte.weight but the config ties them: "
          "using wte as the head, as Hugging Face does");
    } else if (!tie_from_config && !same) {
      tie = false;
      out.notes.push_back("lm_head.weight differs from wte.weight: loaded as an untied head");
    }
  } else if (tie_from_config && !tie) {
    return Status::Corrupt(fname + ": " + config_name +
                           " says tie_word_embeddings = false but there is no lm_head.weight");
  }

  ModelConfig c = MakeGpt2Config(V, P, C, L, H, F, eps);
  c.tie_embeddings = tie;
  Status valid = ValidateModelConfig(c);
  if (!valid.ok())
    return valid.WithContext(fname + ": the GPT-2 these tensors describe is not valid");

  // 5. Every attnlab tensor from its HF twin, with the exact shape.
  const std::vector<ParamInfo> layout = ParameterLayout(c);
  std::set<std::string> used;
  for (const ParamInfo& p : layout) {
    const std::string hf = HfName(p.name);
    const SafetensorsTensor* t = find(hf);
    if (t == nullptr) {
      return Status::Corrupt(fname + ": missing tensor '" + hf + "' (or 'transformer." + hf +
                             "'), expected shape " + TensorShapeString(p.shape));
    }
    if (t->shape != p.shape) {
      return Status::Corrupt(fname + ": tensor '" + t->name + "' has shape " +
                             TensorShapeString(t->shape) + ", expected " +
                             TensorShapeString(p.shape) + " (Conv1D [in, out] layout)");
    }
    used.insert(hf);
  }
  used.insert("lm_head.weight");
  for (const auto& [name, t] : by_name) {
    if (!used.count(name)) {
      return Status::Corrupt(fname + ": unexpected tensor '" + t->name + "' " +
                             TensorShapeString(t->shape) + " (not part of GPT-2)");
    }
  }
  out.config = c;
  out.params = ParameterStore(c);
  for (const ParamInfo& p : layout) {
    const SafetensorsTensor* t = find(HfName(p.name));
    ATTNLAB_RETURN_IF_ERROR(file.ReadFloat(*t, out.params.Slice(p), p.size));
    ATTNLAB_RETURN_IF_ERROR(CheckFinite(out.params.Slice(p), p.size, fname, t->name));
  }
  out.meta = json::object();
  out.meta["source"] = "huggingface-gpt2";
  out.meta["file"] = fname;
  if (cfg != nullptr) out.meta["hf_config"] = *cfg;
  return out;
}

Result<LoadedModel> LoadHfGpt2(const std::string& path) {
  std::string file, config;
  bool config_required_gpt2 = false;
  if (IsDir(path)) {
    file = path + "/model.safetensors";
    if (!IsFile(file)) {
      return Status::NotFound(path + ": no model.safetensors in this directory" +
                              std::string(IsFile(path + "/pytorch_model.bin")
                                              ? " (only pytorch_model.bin, which attnlab does not "
                                                "read; save with safe_serialization=True)"
                                              : ""));
    }
    if (IsFile(path + "/config.json")) config = path + "/config.json";
  } else {
    file = path;
    const std::string sibling = ParentDirectory(path) + "/config.json";
    if (IsFile(sibling)) {
      config = sibling;
      config_required_gpt2 = true;
    }
  }
  json cfg;
  bool have_cfg = false;
  if (!config.empty()) {
    ATTNLAB_ASSIGN_OR_RETURN(std::string text, ReadFileToString(config, 16 << 20));
    cfg = json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (cfg.is_discarded() || !cfg.is_object() || text.find('\0') != std::string::npos) {
      if (!config_required_gpt2) return Status::Corrupt(config + ": not a JSON object");
    } else if (!config_required_gpt2 || cfg.contains("n_embd") ||
               (cfg.contains("model_type") && cfg["model_type"] == "gpt2")) {
      have_cfg = true;
    }
  }
  ATTNLAB_ASSIGN_OR_RETURN(SafetensorsFile st, ReadSafetensors(file));
  return LoadHfGpt2FromFile(st, have_cfg ? &cfg : nullptr, config);
}

}  // namespace attnlab
