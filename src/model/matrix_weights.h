// The linear layers' weights of an inference-only model kept as its file stores them (bf16,
// fp16, GGUF's quantized row blocks; fp32 where the file has it), outside the fp32
// ParameterStore: what lets a 1.5B BF16 model run in ~3 GB and a 7B one load in 24 GB. The
// blocks point into memory-mapped files where the file's layout is already the one needed,
// else into owned copies of the stored rows (GGUF's permuted Q/K rows, GPT-NeoX's fused q|k|v
// regrouped); `keep` holds both alive.
//
// Layouts are nn.Linear's [out, in] (engine/weight_gemm.h), not the store's [in, out]:
//   embed  [V, C]  token embedding (its rows are looked up)
//   head   [V, C]  the LM head (tied: the same blocks as embed)
//   layers[l].qkv    [Q, C]   q | k | v rows       layers[l].proj    [C, A]
//   layers[l].fc     [F1, C]  gate | up rows (SwiGLU) or fc rows
//   layers[l].fcproj [C, F]
// Everything else (norms, biases, sinks) stays in the ParameterStore, laid out by
// MatrixFreeLayout (parameters.h). Training needs fp32 weights: Gpt::Backward refuses such a
// model, and loaders widen to fp32 when asked to (LoadOptions in formats/load_model.h).
#ifndef ATTNLAB_MODEL_MATRIX_WEIGHTS_H_
#define ATTNLAB_MODEL_MATRIX_WEIGHTS_H_

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/weight_gemm.h"

namespace attnlab {

struct LayerMatrices {
  internal::WeightMatrix qkv, proj, fc, fcproj;
};

struct MatrixWeights {
  internal::WeightMatrix embed, head;
  std::vector<LayerMatrices> layers;
  std::vector<std::shared_ptr<const void>> keep;  // mappings and owned buffers
  int64_t mapped_bytes = 0;  // of bytes(): read in place from a mapped file (the rest owned)

  // The stored types of the blocks, distinct, in order of first appearance, joined by '+':
  // "bf16", "Q8_0", "Q4_K+Q6_K".
  std::string TypeNames() const {
    std::vector<std::string> names;
    auto add = [&](const internal::WeightMatrix& w) {
      for (const internal::WeightBlock& b : w.blocks) {
        const std::string n(internal::WeightTypeName(b));
        if (std::find(names.begin(), names.end(), n) == names.end()) names.push_back(n);
      }
    };
    add(embed);
    for (const LayerMatrices& m : layers) {
      for (const auto* w : {&m.qkv, &m.proj, &m.fc, &m.fcproj}) add(*w);
    }
    add(head);
    std::string s;
    for (const std::string& n : names) s += (s.empty() ? "" : "+") + n;
    return s;
  }

  // Bytes of weight storage (the tied head counted once).
  int64_t bytes() const {
    int64_t n = embed.bytes();
    if (head.blocks.empty() || head.blocks[0].data != embed.blocks[0].data) n += head.bytes();
    for (const LayerMatrices& m : layers) {
      n += m.qkv.bytes() + m.proj.bytes() + m.fc.bytes() + m.fcproj.bytes();
    }
    return n;
  }
};

}  // namespace attnlab

#endif  // ATTNLAB_MODEL_MATRIX_WEIGHTS_H_
