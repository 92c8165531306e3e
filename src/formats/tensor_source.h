// A set of named tensors under Hugging Face's names and layouts, whatever file holds them:
// safetensors (one file or shards, hf_decoder.h) or a llama.cpp GGUF file (gguf_model.h, which
// renames llama.cpp's tensors to HF's and undoes its Q/K row permutation). The one decoder
// loader (hf_decoder.h) reads every family through this interface, so a format only has to say
// where a tensor is and how to turn it into floats.
//
// Names and shapes are exactly what transformers' state_dict() would hold, e.g.
//   "model.layers.0.self_attn.q_proj.weight"  [out, in]  (nn.Linear: rows are output features)
//   "model.embed_tokens.weight"                [V, C]
#ifndef ATTNLAB_FORMATS_TENSOR_SOURCE_H_
#define ATTNLAB_FORMATS_TENSOR_SOURCE_H_

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "attnlab/attention_decode.h"  // KvDtype
#include "attnlab/status.h"

namespace attnlab::internal {
struct QuantCodec;  // engine/weight_gemm.h
}  // namespace attnlab::internal

namespace attnlab {

struct SourceTensorInfo {
  std::vector<int64_t> shape;  // HF shape, row-major
  std::string dtype;           // as stored: "F32", "BF16", "F16", "Q8_0", ...
  std::string file;            // the file that holds it (for error messages)
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
};

class TensorSource {
 public:
  virtual ~TensorSource() = default;
  // Every tensor name, sorted.
  virtual std::vector<std::string> Names() const = 0;
  // nullptr if there is no such tensor.
  virtual const SourceTensorInfo* Find(const std::string& name) const = 0;
  // The tensor's elements as float, row-major in its HF shape, into out (out.size() must equal
  // numel: else InvalidArgument). Errors name the file and the tensor.
  virtual Status ReadFloat(const std::string& name, std::span<float> out) const = 0;

  // A matrix's bytes as stored, row-major in its HF shape, and what keeps them alive: how
  // inference models keep their weights as the file has them (model/matrix_weights.h). The
  // rows sit in place in the memory-mapped file (in_place) or, where the format reorders rows
  // (GGUF's permuted Q/K rows, GPT-NeoX's fused q|k|v), in an owned reordered copy of the same
  // bytes. Elements are `dtype` (F32, F16, BF16) or, with `quant`, quantized row blocks (GGUF's
  // Q8_0, Q4_0, Q4_K, Q6_K). Empty bytes where the tensor cannot be given as stored (other
  // dtypes, a shape that is not a matrix): use ReadFloat then.
  struct Mapped {
    std::span<const uint8_t> bytes;
    std::shared_ptr<const void> keepalive;
    KvDtype dtype = KvDtype::kF32;
    const internal::QuantCodec* quant = nullptr;
    bool in_place = true;
  };
  virtual Mapped StoredRows(const std::string& name) const {
    (void)name;
    return {};
  }
};

}  // namespace attnlab

#endif  // ATTNLAB_FORMATS_TENSOR_SOURCE_H_
