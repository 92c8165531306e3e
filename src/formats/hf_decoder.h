// Hugging Face decoder checkpoints of the Llama, Mistral, Qwen2, Qwen3 and GPT-NeoX (Pythia)
// families -> the one decoder (model/gpt.h), configured by config.json's `model_type`. The
// weights come from any TensorSource (tensor_source.h): safetensors files and shards
// (safetensors_folder.h) or a GGUF file renamed to HF's names (gguf_model.h).
//
// config.json -> ModelConfig (docs/MODELS.md has the table):
//   every family   d_model = hidden_size, n_layer = num_hidden_layers, n_head =
//                  num_attention_heads, n_kv_head = num_key_value_heads (default: n_head),
//                  head_size = head_dim (default hidden_size / heads), mlp_hidden =
//                  intermediate_size, vocab_size, context = max_position_embeddings, RoPE
//                  (rotate_half layout = attnlab's kNeox) with base rope_theta, tie_embeddings =
//                  tie_word_embeddings, pre-norm, standard softmax, causal
//   llama, mistral RMSNorm (rms_norm_eps), SwiGLU (hidden_act silu), no biases; llama's
//                  attention_bias = true: biases on q, k, v and o (qkv_bias, proj_bias), its
//                  mlp_bias = true: on gate, up and down (mlp_bias); mistral has none
//   qwen2          as llama, plus biases on q, k, v (never o; no attention_bias key)
//   qwen3          as llama, plus per-head RMSNorm of q and k (q_norm, k_norm); attention_bias
//                  as llama's
//   gpt_neox       LayerNorm with biases (layer_norm_eps), biases everywhere, GELU (hidden_act
//                  "gelu" exact erf, "gelu_new"/"gelu_pytorch_tanh" tanh), partial rotary
//                  rotary_dim = head_dim * rotary_pct, base rotary_emb_base, parallel residual
//                  (use_parallel_residual, default true)
//   rope_scaling   {"rope_type" or "type": "linear" | "llama3" | "yarn" | "dynamic"} with factor,
//                  low_freq_factor, high_freq_factor, original_max_position_embeddings,
//                  attention_factor: rope.h's kLinear, kLlama3, kYarnHf, kDynamicHf (dynamic:
//                  context = factor x max_position_embeddings). Others ("longrope", ...) are
//                  an error naming the type
//   sliding window mistral: sliding_window (a key j is visible to query i iff i - j <
//                  sliding_window, so attention_window = sliding_window - 1); qwen2/qwen3:
//                  use_sliding_window with max_window_layers (layers >= it are windowed);
//                  layer_types ["sliding_attention" | "full_attention", ...] wherever given
//
// Tensor names (HF [out, in] weights are transposed into attnlab's [in, out]; with
// LoadOptions::keep_stored they stay [out, in] as MatrixWeights' row blocks instead):
//   model.embed_tokens.weight [V, C]                       -> wte
//   model.layers.N.input_layernorm.weight                  -> h.N.ln1.weight
//   model.layers.N.self_attn.{q,k,v}_proj.{weight,bias}    -> h.N.attn.qkv.{weight,bias} (q|k|v)
//   model.layers.N.self_attn.{q,k}_norm.weight             -> h.N.attn.{q,k}_norm
//   model.layers.N.self_attn.o_proj.weight                 -> h.N.attn.proj.weight
//   model.layers.N.post_attention_layernorm.weight         -> h.N.ln2.weight
//   model.layers.N.mlp.{gate,up}_proj.weight               -> h.N.mlp.fc.weight (gate | up)
//   model.layers.N.mlp.down_proj.weight                    -> h.N.mlp.proj.weight
//   model.norm.weight -> ln_f.weight;  lm_head.weight -> lm_head (absent: tied, with a note)
// GPT-NeoX: gpt_neox.embed_in, gpt_neox.layers.N.{input,post_attention}_layernorm,
//   attention.query_key_value (rows per head: [H, 3, hd], q k v of head h together),
//   attention.dense, mlp.dense_h_to_4h, mlp.dense_4h_to_h, gpt_neox.final_layer_norm, embed_out.
// Buffers that hold no parameter (rotary_emb.inv_freq, attention.bias, attention.masked_bias)
// are ignored; any other tensor the mapping does not use is an error (a wrong family would
// otherwise load silently), as is a missing tensor or one whose shape disagrees with the config.
#ifndef ATTNLAB_FORMATS_HF_DECODER_H_
#define ATTNLAB_FORMATS_HF_DECODER_H_

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "attnlab/model_config.h"
#include "attnlab/status.h"
#include "formats/loaded_model.h"
#include "formats/tensor_source.h"

namespace attnlab {

// model_type values this loader reads (gpt2 has its own, hf_gpt2.h).
bool IsHfDecoderModelType(const std::string& model_type);

// config.json -> ModelConfig. `name` names the file in errors; notes collect assumptions.
Result<ModelConfig> HfDecoderConfig(const nlohmann::json& cfg, const std::string& name,
                                    std::vector<std::string>* notes);

// The model from a parsed config.json and its tensors. `path` is what LoadedModel::path says.
// options.keep_stored: BF16/F16 linear layers stay 16-bit (LoadedModel::matrices), mapped from
// the file where its layout allows.
Result<LoadedModel> LoadHfDecoder(const nlohmann::json& cfg, const std::string& config_name,
                                  const TensorSource& tensors, const std::string& path,
                                  const LoadOptions& options = {});

// A folder with config.json (model_type one of the above) and safetensors weights.
Result<LoadedModel> LoadHfDecoderFolder(const std::string& dir, const LoadOptions& options = {});

}  // namespace attnlab

#endif  // ATTNLAB_FORMATS_HF_DECODER_H_
