// The parameters of a GPT (model_config.h) as one flat float buffer with named slices, so the
// optimizer sees one array and the checkpoint writer sees named tensors (llm.c's
// ParameterTensors, with names).
//
// Names and shapes (C = d_model, F = mlp hidden, H = n_head, Q = qkv_dim, V = vocab, P = max
// positions). Linear weights are stored [in, out] (y = x W + b; Hugging Face GPT-2's Conv1D
// layout):
//   wte [V, C]                     token embedding (also the LM head when tied)
//   wpe [P, C]                     learned positions only
//   sink_token [C]                 dedicated sink token only
//   h.{l}.ln1.weight [C], h.{l}.ln1.bias [C]          norm != none (bias: LayerNorm with bias)
//   h.{l}.attn.qkv.weight [C, Q], .bias [Q]          Q = (H + 2 H_kv) * head_dim: q | k | v
//                                                     (bias: bias or qkv_bias)
//   h.{l}.attn.q_norm [hd], h.{l}.attn.k_norm [hd]    qk_norm only
//   h.{l}.attn.proj.weight [A, C], .bias [C]          A = attn_dim() = H * head_dim
//                                                     (bias: bias or proj_bias)
//   h.{l}.attn.gate.weight [C, G], .bias [G]         output gate only; G = gate_dim(): H
//                                                     headwise, H * hd elementwise
//   h.{l}.attn.sink [H]                               softmax == sink_logit only
//   h.{l}.attn.key_bias [H_kv, hd]                    key_bias only (k*, unrotated)
//   h.{l}.ln2.weight [C], h.{l}.ln2.bias [C]          mlp and norm != none
//   h.{l}.mlp.fc.weight [C, F1], .bias [F1]           mlp only; F1 = 2F for SwiGLU (gate | up)
//   h.{l}.mlp.proj.weight [F, C], .bias [C]           mlp only (both biases: bias or mlp_bias)
//   h.{l}.rezero [2]                                  ReZero: alpha for attention and MLP
//   ln_f.weight [C], ln_f.bias [C]                    pre-LN only
//   lm_head [V, C]                                    untied only
#ifndef ATTNLAB_MODEL_PARAMETERS_H_
#define ATTNLAB_MODEL_PARAMETERS_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "attnlab/model_config.h"
#include "core/aligned_buffer.h"

namespace attnlab {

enum class ParamInit { kNormal, kNormalResidual, kZeros, kOnes };

struct ParamInfo {
  std::string name;
  std::vector<int64_t> shape;
  int64_t offset = 0;  // into the flat buffer
  int64_t size = 0;    // number of floats
  bool decay = false;  // AdamW weight decay applies (matrices and embeddings, as nanoGPT)
  ParamInit init = ParamInit::kNormal;
};

// Pointers into the flat buffer for one layer; null where the configuration has no such tensor.
struct LayerParams {
  float *ln1_w = nullptr, *ln1_b = nullptr;
  float *qkv_w = nullptr, *qkv_b = nullptr;
  float *q_norm = nullptr, *k_norm = nullptr;
  float *proj_w = nullptr, *proj_b = nullptr;
  float *gate_w = nullptr, *gate_b = nullptr;
  float* sink = nullptr;
  float* key_bias = nullptr;
  float *ln2_w = nullptr, *ln2_b = nullptr;
  float *fc_w = nullptr, *fc_b = nullptr;
  float *fcproj_w = nullptr, *fcproj_b = nullptr;
  float* rezero = nullptr;
};

struct ModelParams {
  float* wte = nullptr;
  float* wpe = nullptr;
  float* sink_token = nullptr;
  float *lnf_w = nullptr, *lnf_b = nullptr;
  float* lm_head = nullptr;  // == wte when tied
  std::vector<LayerParams> layers;
};

// The layout of every parameter a configuration implies, in a fixed order.
std::vector<ParamInfo> ParameterLayout(const ModelConfig& c);

// The linear layers' weight matrices (wte, lm_head, attn.qkv/proj.weight, mlp.fc/proj.weight):
// what a 16-bit inference model keeps outside the store (model/matrix_weights.h).
bool IsLinearMatrix(const std::string& name);
// ParameterLayout(c) without them (offsets packed again): such a model's store.
std::vector<ParamInfo> MatrixFreeLayout(const ModelConfig& c);

// A flat buffer laid out by ParameterLayout plus typed pointers into it. Gradients and optimizer
// moments use the same class, so slices line up one to one.
class ParameterStore {
 public:
  ParameterStore() = default;
  // kOutside: laid out by MatrixFreeLayout, the matrices' pointers null (held by MatrixWeights).
  enum class Matrices { kInside, kOutside };
  explicit ParameterStore(const ModelConfig& c, Matrices matrices = Matrices::kInside);
  ParameterStore(ParameterStore&&) = default;
  ParameterStore& operator=(ParameterStore&&) = default;

  const std::vector<ParamInfo>& infos() const { return infos_; }
  const ParamInfo* Find(const std::string& name) const;
  float* data() { return buffer_.data(); }
  const float* data() const { return buffer_.data(); }
  int64_t size() const { return static_cast<int64_t>(buffer_.size()); }
  float* Slice(const ParamInfo& p) { return buffer_.data() + p.offset; }
  const float* Slice(const ParamInfo& p) const { return buffer_.data() + p.offset; }
  const ModelParams& ptrs() const { return ptrs_; }
  void Zero() { buffer_.Zero(); }

  // GPT-2 initialisation: N(0, init_std) for weights, N(0, init_std / sqrt(2 n_layer)) for
  // residual output projections (if scale_residual_init), zeros for biases and ReZero alphas,
  // ones for norm gains. Deterministic in seed.
  // DeepNorm (residual_scale = deepnorm): the value columns of attn.qkv.weight, attn.proj.weight,
  // mlp.fc.weight and mlp.proj.weight get N(0, init_std * beta), beta = deepnorm_beta(), in place
  // of the above (Wang et al. 2022's xavier_normal_(gain = beta) for v, out and the FFN; q and k
  // keep init_std). The same random numbers are drawn either way, then scaled.
  void Initialize(const ModelConfig& c, uint64_t seed);

 private:
  void BindPointers(const ModelConfig& c);
  static void DeepNormScale(const ModelConfig& c, const ParamInfo& p, float* x);
  std::vector<ParamInfo> infos_;
  std::map<std::string, size_t> index_;
  AlignedBuffer<float> buffer_;
  ModelParams ptrs_;
};

}  // namespace attnlab

#endif  // ATTNLAB_MODEL_PARAMETERS_H_
