#include "model/parameters.h"

#include <cmath>
#include <random>

namespace attnlab {

namespace {

void AssignOffsets(std::vector<ParamInfo>* infos) {
  int64_t offset = 0;
  for (ParamInfo& p : *infos) {
    p.offset = offset;
    offset += (p.size + 15) / 16 * 16;  // keep every slice 64-byte aligned
  }
}

}  // namespace

std::vector<ParamInfo> ParameterLayout(const ModelConfig& c) {
  std::vector<ParamInfo> out;
  const int64_t C = c.d_model, F = c.hidden(), H = c.n_head, Q = c.qkv_dim(), V = c.vocab_size;
  const int64_t A = c.attn_dim(), F1 = c.fc_dim(), hd = c.head_dim();
  auto add = [&](std::string name, std::vector<int64_t> shape, bool decay, ParamInit init) {
    ParamInfo p;
    p.name = std::move(name);
    p.shape = std::move(shape);
    p.size = 1;
    for (int64_t d : p.shape) p.size *= d;
    p.decay = decay;
    p.init = init;
    out.push_back(std::move(p));
  };
  const bool ln_bias = c.bias && c.norm_type == NormType::kLayerNorm;
  add("wte", {V, C}, true, ParamInit::kNormal);
  if (c.position == PositionEncoding::kLearned) add("wpe", {c.max_positions(), C}, true, ParamInit::kNormal);
  if (c.sink_token) add("sink_token", {C}, false, ParamInit::kNormal);
  for (int64_t l = 0; l < c.n_layer; ++l) {
    const std::string h = "h." + std::to_string(l) + ".";
    if (c.norm != NormPlacement::kNone) {
      add(h + "ln1.weight", {C}, false, ParamInit::kOnes);
      if (ln_bias) add(h + "ln1.bias", {C}, false, ParamInit::kZeros);
    }
    add(h + "attn.qkv.weight", {C, Q}, true, ParamInit::kNormal);
    if (c.has_qkv_bias()) add(h + "attn.qkv.bias", {Q}, false, ParamInit::kZeros);
    if (c.qk_norm) {
      add(h + "attn.q_norm", {hd}, false, ParamInit::kOnes);
      add(h + "attn.k_norm", {hd}, false, ParamInit::kOnes);
    }
    add(h + "attn.proj.weight", {A, C}, true, ParamInit::kNormalResidual);
    if (c.has_proj_bias()) add(h + "attn.proj.bias", {C}, false, ParamInit::kZeros);
    if (c.output_gate) {
      add(h + "attn.gate.weight", {C, c.gate_dim()}, true, ParamInit::kNormal);
      add(h + "attn.gate.bias", {c.gate_dim()}, false, ParamInit::kZeros);
    }
    if (c.softmax == SoftmaxKind::kSinkLogit) add(h + "attn.sink", {H}, false, ParamInit::kZeros);
    if (c.key_bias) add(h + "attn.key_bias", {c.kv_heads(), hd}, false, ParamInit::kZeros);
    if (c.mlp) {
      if (c.norm != NormPlacement::kNone) {
        add(h + "ln2.weight", {C}, false, ParamInit::kOnes);
        if (ln_bias) add(h + "ln2.bias", {C}, false, ParamInit::kZeros);
      }
      add(h + "mlp.fc.weight", {C, F1}, true, ParamInit::kNormal);
      if (c.has_mlp_bias()) add(h + "mlp.fc.bias", {F1}, false, ParamInit::kZeros);
      add(h + "mlp.proj.weight", {F, C}, true, ParamInit::kNormalResidual);
      if (c.has_mlp_bias()) add(h + "mlp.proj.bias", {C}, false, ParamInit::kZeros);
    }
    if (c.residual_scale == ResidualScale::kReZero) add(h + "rezero", {2}, false, ParamInit::kZeros);
  }
  if (c.norm == NormPlacement::kPre) {
    add("ln_f.weight", {C}, false, ParamInit::kOnes);
    if (ln_bias) add("ln_f.bias", {C}, false, ParamInit::kZeros);
  }
  if (!c.tie_embeddings) add("lm_head", {V, C}, true, ParamInit::kNormal);
  AssignOffsets(&out);
  return out;
}

bool IsLinearMatrix(const std::string& name) {
  auto ends_with = [&](const char* suffix) {
    const std::string s(suffix);
    return name.size() >= s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0;
  };
  return name == "wte" || name == "lm_head" || ends_with(".attn.qkv.weight") ||
         ends_with(".attn.proj.weight") || ends_with(".mlp.fc.weight") ||
         ends_with(".mlp.proj.weight");
}

std::vector<ParamInfo> MatrixFreeLayout(const ModelConfig& c) {
  std::vector<ParamInfo> out;
  for (ParamInfo& p : ParameterLayout(c)) {
    if (!IsLinearMatrix(p.name)) out.push_back(std::move(p));
  }
  AssignOffsets(&out);
  return out;
}

int64_t ModelParameterCount(const ModelConfig& c) {
  int64_t n = 0;
  for (const ParamInfo& p : ParameterLayout(c)) n += p.size;
  return n;
}

ParameterStore::ParameterStore(const ModelConfig& c, Matrices matrices)
    : infos_(matrices == Matrices::kInside ? ParameterLayout(c) : MatrixFreeLayout(c)) {
  int64_t total = 0;
  for (size_t i = 0; i < infos_.size(); ++i) {
    index_[infos_[i].name] = i;
    total = infos_[i].offset + (infos_[i].size + 15) / 16 * 16;
  }
  buffer_.Resize(total);
  BindPointers(c);
}

const ParamInfo* ParameterStore::Find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &infos_[it->second];
}

void ParameterStore::BindPointers(const ModelConfig& c) {
  auto get = [&](const std::string& name) -> float* {
    const ParamInfo* p = Find(name);
    return p ? buffer_.data() + p->offset : nullptr;
  };
  ptrs_ = ModelParams();
  ptrs_.wte = get("wte");
  ptrs_.wpe = get("wpe");
  ptrs_.sink_token = get("sink_token");
  ptrs_.lnf_w = get("ln_f.weight");
  ptrs_.lnf_b = get("ln_f.bias");
  ptrs_.lm_head = c.tie_embeddings ? ptrs_.wte : get("lm_head");
  ptrs_.layers.resize(c.n_layer);
  for (int64_t l = 0; l < c.n_layer; ++l) {
    const std::string h = "h." + std::to_string(l) + ".";
    LayerParams& p = ptrs_.layers[l];
    p.ln1_w = get(h + "ln1.weight");
    p.ln1_b = get(h + "ln1.bias");
    p.qkv_w = get(h + "attn.qkv.weight");
    p.qkv_b = get(h + "attn.qkv.bias");
    p.q_norm = get(h + "attn.q_norm");
    p.k_norm = get(h + "attn.k_norm");
    p.proj_w = get(h + "attn.proj.weight");
    p.proj_b = get(h + "attn.proj.bias");
    p.gate_w = get(h + "attn.gate.weight");
    p.gate_b = get(h + "attn.gate.bias");
    p.sink = get(h + "attn.sink");
    p.key_bias = get(h + "attn.key_bias");
    p.ln2_w = get(h + "ln2.weight");
    p.ln2_b = get(h + "ln2.bias");
    p.fc_w = get(h + "mlp.fc.weight");
    p.fc_b = get(h + "mlp.fc.bias");
    p.fcproj_w = get(h + "mlp.proj.weight");
    p.fcproj_b = get(h + "mlp.proj.bias");
    p.rezero = get(h + "rezero");
  }
}

void ParameterStore::Initialize(const ModelConfig& c, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const float std_res =
      c.scale_residual_init ? c.init_std / std::sqrt(2.0f * c.n_layer) : c.init_std;
  for (const ParamInfo& p : infos_) {
    float* x = buffer_.data() + p.offset;
    switch (p.init) {
      case ParamInit::kZeros:
        std::fill(x, x + p.size, 0.0f);
        break;
      case ParamInit::kOnes:
        std::fill(x, x + p.size, 1.0f);
        break;
      case ParamInit::kNormal:
      case ParamInit::kNormalResidual: {
        std::normal_distribution<float> nd(0.0f, p.init == ParamInit::kNormal ? c.init_std : std_res);
        for (int64_t i = 0; i < p.size; ++i) x[i] = nd(rng);
        break;
      }
    }
    if (c.residual_scale == ResidualScale::kDeepNorm) DeepNormScale(c, p, x);
  }
}

// ref: https://arxiv.org/abs/2203.00555, figure 2 (pseudo-code): v, out projection and FFN get
// gain beta; q and k gain 1. Residual projections drawn with std_res are rescaled to init_std.
void ParameterStore::DeepNormScale(const ModelConfig& c, const ParamInfo& p, float* x) {
  auto ends_with = [&](const char* suffix) {
    const std::string s(suffix);
    return p.name.size() >= s.size() && p.name.compare(p.name.size() - s.size(), s.size(), s) == 0;
  };
  const float beta = c.deepnorm_beta();
  const float std_res =
      c.scale_residual_init ? c.init_std / std::sqrt(2.0f * c.n_layer) : c.init_std;
  if (ends_with("attn.qkv.weight")) {
    // [C, Q], columns q | k | v: scale the v columns.
    const int64_t C = c.d_model, Q = c.qkv_dim(), v0 = (c.n_head + c.kv_heads()) * c.head_dim();
    for (int64_t i = 0; i < C; ++i) {
      for (int64_t j = v0; j < Q; ++j) x[i * Q + j] *= beta;
    }
  } else if (ends_with("attn.proj.weight") || ends_with("mlp.proj.weight")) {
    const float f = beta * c.init_std / std_res;  // undo the residual-projection scaling
    for (int64_t i = 0; i < p.size; ++i) x[i] *= f;
  } else if (ends_with("mlp.fc.weight")) {
    for (int64_t i = 0; i < p.size; ++i) x[i] *= beta;
  }
}

}  // namespace attnlab
