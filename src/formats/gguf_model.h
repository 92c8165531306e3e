// A llama.cpp GGUF model seen as a Hugging Face checkpoint: its config.json, its tensors under
// transformers' names and layouts (a TensorSource), and its embedded vocabulary as plain data.
//
// Architectures (general.architecture -> HF model_type):
//   llama   -> "llama", or "mistral" when llama.attention.sliding_window is present (llama.cpp
//              converts Mistral checkpoints as architecture llama; without a window key
//              nothing tells them apart, and they load as "llama", the same computation)
//   qwen2   -> "qwen2"
//   qwen3   -> "qwen3"
//   gptneox -> "gpt_neox"
//
// Tensor names (N = layer):
//   llama, qwen2, qwen3:
//     token_embd.weight            model.embed_tokens.weight
//     blk.N.attn_norm.weight       model.layers.N.input_layernorm.weight
//     blk.N.attn_{q,k,v}.{weight,bias}  model.layers.N.self_attn.{q,k,v}_proj.{weight,bias}
//     blk.N.attn_output.{weight,bias}   model.layers.N.self_attn.o_proj.{weight,bias}
//     blk.N.attn_{q,k}_norm.weight model.layers.N.self_attn.{q,k}_norm.weight (qwen3)
//     blk.N.ffn_norm.weight        model.layers.N.post_attention_layernorm.weight
//     blk.N.ffn_{gate,up,down}.{weight,bias}  model.layers.N.mlp.{gate,up,down}_proj.*
//     output_norm.weight           model.norm.weight
//     output.weight                lm_head.weight (absent: tie_word_embeddings = true)
//   gptneox (GPTNeoXForCausalLM):
//     token_embd.weight            gpt_neox.embed_in.weight
//     blk.N.attn_norm.{weight,bias}  gpt_neox.layers.N.input_layernorm.*
//     blk.N.attn_qkv.{weight,bias}   gpt_neox.layers.N.attention.query_key_value.*
//     blk.N.attn_output.{weight,bias}  gpt_neox.layers.N.attention.dense.*
//     blk.N.ffn_norm.{weight,bias}   gpt_neox.layers.N.post_attention_layernorm.*
//     blk.N.ffn_up.{weight,bias}     gpt_neox.layers.N.mlp.dense_h_to_4h.*
//     blk.N.ffn_down.{weight,bias}   gpt_neox.layers.N.mlp.dense_4h_to_h.*
//     output_norm.{weight,bias}      gpt_neox.final_layer_norm.*
//     output.weight                  embed_out.weight
// Any other tensor (rope_freqs.weight of Llama 3.1-style rope scaling included) is refused with
// InvalidArgument naming it, rather than silently dropped.
//
// Shapes: a GGUF tensor with ggml dims ne = [in, out] holds the same row-major bytes as the HF
// tensor [out, in]; HF shapes are the ggml dims reversed.
//
// Row orders llama.cpp's converter (convert_hf_to_gguf.py) changes, undone while reading:
//   * llama: LlamaModel.permute(W, n_head, n_head_kv) is applied to q_proj (with n_head) and
//     k_proj (with n_head_kv), weights and biases:
//       W.reshape(n, 2, rows / n / 2, ...).swapaxes(1, 2).reshape(W.shape)
//     so within each head of D = rows / n rows, GGUF row 2 j + i holds HF row i D/2 + j
//     (i in {0, 1}, j < D/2): the rotate-half pairs (j, j + D/2) become adjacent for llama.cpp's
//     interleaved RoPE. Reading HF row h D + i D/2 + j takes GGUF row h D + 2 j + i
//     (`LlamaCppUnpermutedRow`). qwen2 and qwen3 (Qwen2Model, Qwen3Model) and gptneox are not
//     permuted: llama.cpp runs them with NeoX-style (rotate-half) RoPE.
//   * gptneox: GPTNeoXModel.modify_tensors splits HF's fused query_key_value, whose rows are
//     per head [q; k; v] (reshape (n_head, 3, D, C)), into [all q; all k; all v]. The fused
//     tensor stays one tensor; reading HF row (3 h + s) D + d takes GGUF row s C + h D + d
//     (`GptNeoXFusedQkvRow`), weights and biases.
#ifndef ATTNLAB_FORMATS_GGUF_MODEL_H_
#define ATTNLAB_FORMATS_GGUF_MODEL_H_

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "attnlab/status.h"
#include "formats/gguf.h"
#include "formats/tensor_source.h"

namespace attnlab {

// The tokenizer.ggml.* arrays, as stored (empty / nullopt when absent).
struct GgufVocabulary {
  std::string model;                // tokenizer.ggml.model: "gpt2", "llama", ...
  std::string pre;                  // tokenizer.ggml.pre: the pre-tokenizer name
  std::vector<std::string> tokens;  // tokenizer.ggml.tokens
  std::vector<float> scores;        // tokenizer.ggml.scores
  std::vector<int32_t> token_type;  // tokenizer.ggml.token_type
  std::vector<std::string> merges;  // tokenizer.ggml.merges ("a b" per merge)
  std::optional<int64_t> bos_token_id, eos_token_id;
  std::optional<bool> add_bos_token;
};

struct GgufAsHf {
  std::string architecture;  // general.architecture
  nlohmann::json hf_config;  // what the model's config.json would say
  std::unique_ptr<TensorSource> tensors;
  GgufVocabulary vocabulary;
};

// hf_config keys: model_type, architectures, hidden_size, intermediate_size, num_hidden_layers,
// num_attention_heads, max_position_embeddings (context_length), vocab_size (token_embd rows),
// tie_word_embeddings (output.weight absent), rope_theta (rope.freq_base, default 10000),
// rope_scaling (null, or {rope_type, type, factor[, original_max_position_embeddings]} from
// rope.scaling.*), bos_token_id / eos_token_id when the vocabulary has them; llama family:
// num_key_value_heads, head_dim (attention.key_length, else hidden / heads), rms_norm_eps,
// hidden_act "silu", attention_bias (blk.0.attn_q/k/output.bias present), llama's mlp_bias
// (blk.0.ffn_down.bias present), sliding_window when present;
// gpt_neox: layer_norm_eps, rotary_pct (rope.dimension_count / head_dim), rotary_emb_base,
// use_parallel_residual (default true), hidden_act "gelu". Float32 values are given as the
// shortest decimal that rounds to them (1e-06, not 9.99999997e-07), as config.json has them.
//
// Reads `path` (ReadGguf), then maps it. Errors name the file and the key or tensor:
// InvalidArgument for an unsupported architecture, a missing or mistyped hyperparameter, a
// tensor without HF name, or shapes the permutation cannot apply to.
Result<GgufAsHf> OpenGgufAsHf(const std::string& path);
// Same on an already parsed file (in-memory files from ParseGguf included).
Result<GgufAsHf> GgufFileAsHf(const GgufFile& file);

// The GGUF row that holds HF row `hf_row` of a q_proj/k_proj weight (or bias element) permuted
// by llama.cpp for architecture llama; head_dim is rows / heads and must be even.
inline int64_t LlamaCppUnpermutedRow(int64_t hf_row, int64_t head_dim) {
  const int64_t h = hf_row / head_dim, k = hf_row % head_dim, half = head_dim / 2;
  return h * head_dim + 2 * (k % half) + k / half;
}
// The GGUF row that holds HF row `hf_row` of GPT-NeoX's fused query_key_value ([3 C, C]).
inline int64_t GptNeoXFusedQkvRow(int64_t hf_row, int64_t n_head, int64_t head_dim) {
  const int64_t h = hf_row / (3 * head_dim), s = (hf_row / head_dim) % 3, d = hf_row % head_dim;
  return s * n_head * head_dim + h * head_dim + d;
}

}  // namespace attnlab

#endif  // ATTNLAB_FORMATS_GGUF_MODEL_H_
