// attnlab/model_config.h: one configuration for every GPT-style decoder attnlab trains and runs.
//
// A block, with x the residual stream, f the attention or MLP sublayer and a the residual scale:
//   pre-LN  (GPT-2):        x = x + a * f(LN(x))            and a final LN before the head
//   post-LN (original):     x = LN(x + a * f(x))
//   no norm:                x = x + a * f(x)
//   no residual:            x = f(x) (with the norm placement above applied to f's input/output)
//   a = 1, 1/sqrt(2L), or a learned scalar per sublayer initialised to 0 (ReZero, Bachlechner
//   et al. 2020).
//   DeepNorm (Wang et al. 2022, arXiv:2203.00555; post-LN only): x = LN(alpha x + f(x)) with
//   alpha = (2L)^(1/4) on the skip, and the value, output-projection and MLP weights initialised
//   with std init_std * beta, beta = (8L)^(-1/4) (their decoder-only constants, L = n_layer;
//   parameters.h). The branch scale a is 1.
// Attention is causal (a decoder); causal = false makes every key visible to every query (an
// encoder, as in Dong et al. 2021's analysis of rank collapse): full-sequence forward and
// backward only (no KV cache, no window).
// Attention variants are the engine's softmax kinds (attention.h), plus: a per-head output gate
// o_h <- sigmoid(x W_g + b_g)_h * o_h (head-wise gating after SDPA, Qiu et al. 2025), masking the
// first token as a key (a proposed mitigation, "MaskedSelfAttention"), and a dedicated learnable
// sink token prepended to every sequence (StreamingLLM, Xiao et al. 2023, section 3.3).
// Attention types (attention_type):
//   softmax  the engine's exact attention (flash kernels) with the variants above (default)
//   sparse   softmax attention with Longformer's local + global mask (Beltagy et al. 2020): a
//            causal window of attention_window keys plus attention_global global tokens, the
//            first attention_global positions the transformer sees (the dedicated sink token, if
//            any, is position 0): every query sees their keys, and their queries see every
//            earlier key (attention.h's n_global)
//   linear   causal linear attention, phi = elu + 1 (Katharopoulos et al. 2020;
//            linear_attention.h), chunked in training, recurrent with a running state when
//            decoding (LinearAttentionCache). RoPE, if configured, rotates q and k BEFORE phi:
//            it injects position, but the weight phi(R_i q) . phi(R_j k) is no longer a function
//            of i - j alone (Su et al. 2021, section 3.3, rotate after phi instead, which needs a
//            different feature in the numerator and the denominator). Softmax variants,
//            mask_first_key, the sink token and attention_window have no meaning for it and are
//            rejected.
#ifndef ATTNLAB_MODEL_CONFIG_H_
#define ATTNLAB_MODEL_CONFIG_H_

#include <cstdint>
#include <string>

#include "attnlab/attention.h"
#include "attnlab/rope.h"
#include "attnlab/status.h"

namespace attnlab {

enum class PositionEncoding { kLearned, kRope, kNone };
enum class NormPlacement { kPre, kPost, kNone };
enum class NormType { kLayerNorm, kRmsNorm };
enum class ResidualScale { kOne, kInvSqrt2L, kReZero, kDeepNorm };
enum class AttentionType { kSoftmax, kLinear, kSparse };
// The MLP: y = act(x W_fc + b) W_proj + b, act one of
//   kGeluTanh  GELU, tanh approximation (GPT-2's "gelu_new"); W_fc [C, F]
//   kGeluErf   GELU, exact: x Phi(x) with the erf (GPT-NeoX/Pythia's "gelu"); W_fc [C, F]
//   kSwiGlu    SwiGLU (Shazeer 2020, arXiv:2002.05202; Llama, Mistral, Qwen): W_fc [C, 2F] holds
//              the gate's columns then the up projection's, h = x W_fc = [g | u] and
//              act(h) = silu(g) * u with silu(g) = g sigmoid(g); W_proj [F, C]
enum class MlpActivation { kGeluTanh, kGeluErf, kSwiGlu };

struct ModelConfig {
  // Shape.
  int64_t vocab_size = 256;
  int64_t context = 256;  // longest sequence (excluding the dedicated sink token)
  int64_t d_model = 256;
  int64_t n_layer = 4;
  int64_t n_head = 4;
  int64_t n_kv_head = 0;  // 0: same as n_head (MHA)
  int64_t head_size = 0;  // elements per head; 0: d_model / n_head. Otherwise free (Qwen3:
                          // 16 heads of 128 in a 1024-wide model): attention runs at width
                          // attn_dim() = n_head * head_dim() and the output projection maps
                          // attn_dim() back to d_model
  int64_t mlp_hidden = 0;  // 0: 4 * d_model
  bool mlp = true;
  bool residual = true;
  bool bias = true;            // biases in linear layers and LayerNorm
  bool qkv_bias = false;       // biases on q, k and v even when bias = false (Qwen2)
  bool proj_bias = false;      // a bias on the attention output projection even when
                               // bias = false (Llama's / Qwen3's attention_bias: q, k, v and o)
  bool mlp_bias = false;       // biases on the MLP's matrices even when bias = false (Llama's
                               // mlp_bias)
  MlpActivation mlp_activation = MlpActivation::kGeluTanh;
  bool parallel_residual = false;  // GPT-NeoX: x + attn(LN1(x)) + mlp(LN2(x)) (pre-LN only)
  bool tie_embeddings = true;  // lm_head = wte^T
  // Positions.
  PositionEncoding position = PositionEncoding::kRope;
  // Learned positions only: add the position table to the residual stream entering every layer,
  // not only the first (the mission's sinks document proposes injecting position at every layer
  // so the model leans less on the first position; Universal Transformers add their coordinate
  // embedding at every step, Dehghani et al. 2018, arXiv:1807.03819). One shared table.
  bool position_every_layer = false;
  RopeLayout rope_layout = RopeLayout::kNeox;
  int64_t rotary_dim = 0;  // 0: head_dim
  double rope_base = 10000.0;
  RopeScaling rope_scaling = RopeScaling::kNone;
  double rope_factor = 1.0;
  int64_t rope_original_context = 0;  // YaRN's / llama3's L_orig (0: context)
  double rope_low_freq_factor = 1.0;   // llama3 scaling (rope.h)
  double rope_high_freq_factor = 4.0;  // llama3 scaling
  double rope_attention_factor = 0.0;  // yarn_hf: A (0: 0.1 ln(s) + 1)
  // Normalisation and residual.
  NormPlacement norm = NormPlacement::kPre;
  NormType norm_type = NormType::kLayerNorm;
  float norm_eps = 1e-5f;
  ResidualScale residual_scale = ResidualScale::kOne;
  bool causal = true;  // false: bidirectional attention (experiments; no KV cache)
  // Attention.
  SoftmaxKind softmax = SoftmaxKind::kStandard;
  float sigmoid_bias = 0.0f;  // kSigmoid; 0 means -log(max_positions())
  // Gated attention, G1 of Qiu et al. 2025 (arXiv:2505.06708): each head's SDPA output is
  // multiplied by sigmoid(X W_g + b_g), X the layer's attention input (the normalised input with
  // pre-LN), before the output projection. One gate per head (headwise) or, with
  // gate_elementwise, one per attention channel (their best variant).
  bool output_gate = false;
  bool gate_elementwise = false;  // requires output_gate: W_g [C, attn_dim()] instead of [C, H]
  bool mask_first_key = false;
  // A learnable key with a zero value in every layer and kv head (Gu et al. 2024, "When
  // Attention Sink Emerges in Language Models", arXiv:2410.10781, the k* / v* = 0 attention
  // bias): each query i of a head also scores s*_i = scale q_i . k*, after RoPE with k*
  // unrotated, and that entry joins the softmax's denominator but adds nothing to the output.
  // Softmax-family attention only (standard, softmax1, sink_logit).
  bool key_bias = false;
  bool qk_norm = false;  // Qwen3: RMSNorm (norm_eps, a learned [head_dim] gain for q and one for
                         // k) over each head's q and k, before RoPE
  bool sink_token = false;
  int64_t attention_window = -1;  // causal sliding window (keys i-w..i, plus the sink token
                                  // if any); -1: full causal
  std::string window_layers;      // which layers the window applies to: "" every layer, else
                                  // one character per layer, 'w' windowed, 'f' full causal
                                  // (gpt-oss alternates "wfwf...")
  AttentionType attention_type = AttentionType::kSoftmax;
  int64_t attention_global = 0;  // sparse: global tokens (the first positions); 0: none
  // Initialisation.
  float init_std = 0.02f;
  bool scale_residual_init = true;  // GPT-2: output projections get std / sqrt(2 n_layer)

  int64_t head_dim() const { return head_size > 0 ? head_size : d_model / n_head; }
  int64_t attn_dim() const { return n_head * head_dim(); }
  int64_t kv_heads() const { return n_kv_head == 0 ? n_head : n_kv_head; }
  int64_t hidden() const { return mlp_hidden == 0 ? 4 * d_model : mlp_hidden; }
  int64_t qkv_dim() const { return (n_head + 2 * kv_heads()) * head_dim(); }
  // Columns of the output gate: attn_dim() elementwise, n_head headwise, 0 without a gate.
  int64_t gate_dim() const { return !output_gate ? 0 : gate_elementwise ? attn_dim() : n_head; }
  bool has_qkv_bias() const { return bias || qkv_bias; }
  bool has_proj_bias() const { return bias || proj_bias; }
  bool has_mlp_bias() const { return bias || mlp_bias; }
  // Columns of the MLP's first matrix: 2F with SwiGLU's gate and up, else F.
  int64_t fc_dim() const { return mlp_activation == MlpActivation::kSwiGlu ? 2 * hidden() : hidden(); }
  // The causal sliding window of layer l (attention_window, or -1 where window_layers says 'f').
  int64_t layer_window(int64_t l) const {
    if (attention_window < 0 || window_layers.empty()) return attention_window;
    return window_layers[static_cast<size_t>(l)] == 'w' ? attention_window : -1;
  }
  // Sequence length the transformer sees: context + 1 with a sink token.
  int64_t max_positions() const { return context + (sink_token ? 1 : 0); }
  float effective_sigmoid_bias() const;
  // DeepNorm's constants (1 for every other residual_scale): the skip multiplier alpha and the
  // init multiplier beta.
  float deepnorm_alpha() const;
  float deepnorm_beta() const;
};

// The RoPE configuration a model config implies (position must be kRope to be meaningful).
RopeConfig MakeRopeConfig(const ModelConfig& c);

// Checks every field; the message names the field and the allowed range.
Status ValidateModelConfig(const ModelConfig& c);

// JSON with one key per field (enums as strings: "rope", "pre", "layernorm", "rezero",
// "softmax1", ...). Parsing rejects unknown keys and wrong types with a message naming the key;
// missing keys keep their defaults.
std::string ModelConfigToJson(const ModelConfig& c);
Result<ModelConfig> ModelConfigFromJson(const std::string& json);

// Number of parameters the configuration implies.
int64_t ModelParameterCount(const ModelConfig& c);

}  // namespace attnlab

#endif  // ATTNLAB_MODEL_CONFIG_H_
