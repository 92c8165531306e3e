// llm.c's GPT-2 checkpoint files (gpt2_124M.bin, written by llm.c's train_gpt2.py).
// ref: https://github.com/karpathy/llm.c (train_gpt2.c: gpt2_build_from_checkpoint)
//
// Layout of a file:
//   header   256 int32, little-endian:
//              [0] magic 20240326   [1] version: 3 = fp32 parameters, 5 = bf16
//              [2] maxT (context)   [3] V (vocab)   [4] L (layers)   [5] NH (heads)
//              [6] C (channels)     [7] Vp (vocab padded, e.g. 50304; Vp >= V)   rest 0
//   params   the 16 tensors below, concatenated, fp32 (or bf16), nothing after them.
//            Linear weights are [out, in] (PyTorch nn.Linear), the transpose of attnlab's
//            [in, out], so they are transposed on load:
//              wte [Vp, C]      (rows V..Vp-1 are padding: dropped)
//              wpe [maxT, C]
//              ln1w [L, C]  ln1b [L, C]
//              qkvw [L, 3C, C]  qkvb [L, 3C]          -> h.l.attn.qkv.weight [C, 3C]
//              attprojw [L, C, C]  attprojb [L, C]    -> h.l.attn.proj.weight [C, C]
//              ln2w [L, C]  ln2b [L, C]
//              fcw [L, 4C, C]  fcb [L, 4C]            -> h.l.mlp.fc.weight [C, 4C]
//              fcprojw [L, C, 4C]  fcprojb [L, C]     -> h.l.mlp.proj.weight [4C, C]
//              lnfw [C]  lnfb [C]
// The file size must equal 1024 + (number of parameters) * (4 or 2) bytes; it is checked before
// anything is read. The model maps to the same GPT-2 ModelConfig as hf_gpt2.h (learned
// positions, pre-LN LayerNorm eps 1e-5, GELU tanh, tied embeddings, context = maxT).
#ifndef ATTNLAB_FORMATS_LLMC_H_
#define ATTNLAB_FORMATS_LLMC_H_

#include <cstdint>
#include <string>

#include "attnlab/model_config.h"
#include "attnlab/status.h"
#include "formats/loaded_model.h"
#include "model/parameters.h"

namespace attnlab {

inline constexpr int32_t kLlmcMagic = 20240326;
inline constexpr int32_t kLlmcVersionFp32 = 3;
inline constexpr int32_t kLlmcVersionBf16 = 5;

struct LlmcHeader {
  int32_t version = 0, max_t = 0, vocab = 0, layers = 0, heads = 0, channels = 0, padded_vocab = 0;
  int64_t NumParameters() const;     // elements after the header (padded wte included)
  int64_t ExpectedFileSize() const;  // 1024 + NumParameters() * bytes per element
};

// Checks the 256-int header (magic, version, positive and consistent sizes). `name` prefixes
// errors.
Result<LlmcHeader> ParseLlmcHeader(const int32_t* header256, const std::string& name);

// Loads an llm.c checkpoint (version 3 fp32, or version 5 bf16, converted exactly to float).
Result<LoadedModel> LoadLlmc(const std::string& path);

// Writes `params` as an llm.c version-3 (fp32) checkpoint, wte padded with zero rows up to
// padded_vocab (0: the next multiple of 128). REQUIRES (else InvalidArgument): the config is
// GPT-2 shaped: learned positions, no sink token, pre-LN LayerNorm with bias, mlp with hidden 4C,
// tied embeddings, standard softmax, MHA, no gate, residual scale one, residual on.
Status WriteLlmc(const std::string& path, const ModelConfig& config, const ParameterStore& params,
                 int64_t padded_vocab = 0);

}  // namespace attnlab

#endif  // ATTNLAB_FORMATS_LLMC_H_
