// Products with weight matrices kept in their file's encoding (fp32, bf16, fp16, or a
// block-quantized row format such as GGUF's Q8_0), for inference models whose weights stay as
// stored (model/matrix_weights.h): a path that halves (or quarters) the resident weights and
// reads them straight from a memory-mapped file.
//
// A WeightMatrix is [rows, cols] in nn.Linear's layout (rows = output features, y = x W^T),
// stored as one or more row blocks that may live in different places (a model's q | k | v rows
// come from three tensors of a safetensors file). The product widens one panel of rows at a
// time to fp32 in per-thread scratch and multiplies it with oneDNN's sgemm (engine/gemm.h), so
// every product accumulates in fp32 and the widened weights never exist all at once.
#ifndef ATTNLAB_ENGINE_WEIGHT_GEMM_H_
#define ATTNLAB_ENGINE_WEIGHT_GEMM_H_

#include <cstdint>
#include <string_view>
#include <vector>

#include "attnlab/attention_decode.h"  // KvDtype: fp32, bf16, fp16 and their conversions
#include "attnlab/status.h"

namespace attnlab {
class ThreadPool;
}

namespace attnlab::internal {

// A block-quantized row encoding: each run of block_elems elements is block_bytes bytes (GGUF's
// Q8_0 is 32 elements in 34 bytes: an fp16 scale and 32 int8). Formats define the codecs
// (formats/gguf.h's GgmlRowCodec); the engine widens whole rows with them, and for the layouts
// it knows also multiplies the stored blocks directly (products with few input rows).
enum class QuantLayout {
  kOpaque,  // only `widen` knows it
  kQ8_0,    // ggml's block_q8_0: fp16 d, int8 q[32], x = d q (block_elems 32, block_bytes 34)
};
struct QuantCodec {
  const char* name = "";  // "Q8_0"
  int64_t block_elems = 0, block_bytes = 0;
  // Decodes n elements (a multiple of block_elems) from n / block_elems * block_bytes bytes at
  // src (any alignment) into out.
  void (*widen)(const uint8_t* src, int64_t n, float* out) = nullptr;
  QuantLayout layout = QuantLayout::kOpaque;
};

// `rows` rows of `cols` elements, row-major and contiguous, at `data`: elements of `dtype`
// (aligned to the element size) or, when `quant` is set, rows of quant->block_elems-element
// blocks (cols a multiple of it; any alignment). The memory is owned elsewhere
// (matrix_weights.h keeps it alive).
struct WeightBlock {
  const void* data = nullptr;
  KvDtype dtype = KvDtype::kF32;
  int64_t rows = 0;
  const QuantCodec* quant = nullptr;
};

// Bytes of one row of `cols` elements of b.
int64_t WeightRowBytes(const WeightBlock& b, int64_t cols);
// "f32", "bf16", "f16" or the codec's name ("Q8_0").
std::string_view WeightTypeName(const WeightBlock& b);

struct WeightMatrix {
  int64_t rows = 0, cols = 0;       // rows = sum of the blocks' rows
  std::vector<WeightBlock> blocks;  // top to bottom
  bool empty() const { return blocks.empty(); }
  int64_t bytes() const;  // the blocks' storage
};

// InvalidArgument unless the blocks are non-null, correctly aligned, have rows > 0, and add up
// to rows x cols (cols > 0); a quantized block's codec must be complete and divide cols.
Status ValidateWeightMatrix(const WeightMatrix& w);

// y[N, rows] = x[N, cols] W^T (+ bias[rows] if bias), fp32 accumulation. REQUIRES: a validated
// w, N >= 0, x and y not overlapping. Deterministic for a fixed thread count. Up to
// kWeightRowsMaxN (4) input rows (decode), blocks of fp32 / bf16 / fp16 / Q8_0 are multiplied
// in their stored form by the dispatched row kernel (weight_rows_kernel.cc; each output one dot
// product, independent of the thread count), other quantized blocks widened 8 rows at a time
// into small per-thread scratch for it; with more input rows one ~1 MiB panel of rows at a time
// is widened into per-thread scratch and multiplied by oneDNN's sgemm.
void MatmulWeightT(int64_t N, const float* x, const WeightMatrix& w, const float* bias, float* y,
                   ThreadPool* pool = nullptr);

// n elements (whole rows, any number of them) of block b stored at src into out.
void WidenRows(const WeightBlock& b, const void* src, int64_t n, float* out);

// Row r of W (cols floats) into out (an embedding lookup). REQUIRES: 0 <= r < w.rows.
void WeightRowToFloat(const WeightMatrix& w, int64_t r, float* out);

}  // namespace attnlab::internal

#endif  // ATTNLAB_ENGINE_WEIGHT_GEMM_H_
