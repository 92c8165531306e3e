// Hugging Face GPT-2 weights (transformers' GPT2LMHeadModel saved as safetensors) -> attnlab.
//
// Accepted input: a model.safetensors file, or a directory holding one, with config.json next to
// it optional. Tensor names may carry the "transformer." prefix (GPT2LMHeadModel) or not
// (GPT2Model); the attention mask buffers "h.N.attn.bias" / "h.N.attn.masked_bias" are ignored.
// Any dtype among F32, F16, BF16, F64 is converted to float.
//
// Name mapping (C = n_embd, F = n_inner or 4C, V = vocab_size, P = n_positions). HF's Conv1D
// stores weights [in, out], the same as attnlab, so no transposition:
//   wte.weight [V, C]                  -> wte
//   wpe.weight [P, C]                  -> wpe
//   h.N.ln_1.weight/.bias [C]          -> h.N.ln1.weight/.bias
//   h.N.attn.c_attn.weight [C, 3C]     -> h.N.attn.qkv.weight   (columns q | k | v)
//   h.N.attn.c_attn.bias [3C]          -> h.N.attn.qkv.bias
//   h.N.attn.c_proj.weight [C, C]      -> h.N.attn.proj.weight   (.bias [C] likewise)
//   h.N.ln_2.weight/.bias [C]          -> h.N.ln2.weight/.bias
//   h.N.mlp.c_fc.weight [C, F]         -> h.N.mlp.fc.weight      (.bias [F])
//   h.N.mlp.c_proj.weight [F, C]       -> h.N.mlp.proj.weight    (.bias [C])
//   ln_f.weight/.bias [C]              -> ln_f.weight/.bias
//   lm_head.weight [V, C] (optional)   equal to wte: tied (ignored); different: an untied lm_head
//                                      unless config.json says tie_word_embeddings (HF then
//                                      ignores it too), with a note either way
//
// The resulting ModelConfig: learned positions, pre-LN LayerNorm with bias (eps =
// layer_norm_epsilon, default 1e-5), GELU tanh MLP, standard softmax, tied embeddings, context =
// n_positions. Without config.json the shape is inferred from the tensors (C and V from wte, P
// from wpe, L by counting h.N, F from c_fc) and n_head defaults to C / 64, as in every released
// GPT-2, with a note in LoadedModel::notes. With config.json its values must agree with the
// tensors; settings attnlab cannot reproduce (another activation, scale_attn_by_inverse_layer_idx,
// cross-attention) are errors.
#ifndef ATTNLAB_FORMATS_HF_GPT2_H_
#define ATTNLAB_FORMATS_HF_GPT2_H_

#include <nlohmann/json.hpp>
#include <string>

#include "attnlab/status.h"
#include "formats/loaded_model.h"
#include "formats/safetensors.h"

namespace attnlab {

// The attnlab configuration of a GPT-2 (the mapping above): learned positions, pre-LN LayerNorm
// with bias, GELU tanh MLP of width mlp_hidden (4C -> stored as 0), standard softmax, tied.
ModelConfig MakeGpt2Config(int64_t vocab, int64_t context, int64_t d_model, int64_t n_layer,
                           int64_t n_head, int64_t mlp_hidden, float norm_eps = 1e-5f);

// `path`: a .safetensors file (a sibling config.json is used only if it is a GPT-2 config, i.e.
// has "n_embd" or "model_type": "gpt2") or a directory with model.safetensors [+ config.json].
Result<LoadedModel> LoadHfGpt2(const std::string& path);

// The mapping itself, from an opened file and an optional parsed config.json (null: infer).
// `config_name` names the config in errors.
Result<LoadedModel> LoadHfGpt2FromFile(const SafetensorsFile& file, const nlohmann::json* hf_config,
                                       const std::string& config_name);

}  // namespace attnlab

#endif  // ATTNLAB_FORMATS_HF_GPT2_H_
