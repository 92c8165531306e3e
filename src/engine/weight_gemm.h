// Products with weight matrices kept in their file's precision (fp32, bf16 or fp16), for models
// whose 16-bit weights stay 16-bit in memory (model/matrix_weights.h): an inference-only path
// that halves the resident weights and reads them straight from a memory-mapped file.
//
// A WeightMatrix is [rows, cols] in nn.Linear's layout (rows = output features, y = x W^T),
// stored as one or more row blocks that may live in different places (a model's q | k | v rows
// come from three tensors of a safetensors file). The product widens one panel of rows at a
// time to fp32 in per-thread scratch and multiplies it with oneDNN's sgemm (engine/gemm.h), so
// every product accumulates in fp32 and the widened weights never exist all at once.
#ifndef ATTNLAB_ENGINE_WEIGHT_GEMM_H_
#define ATTNLAB_ENGINE_WEIGHT_GEMM_H_

#include <cstdint>
#include <vector>

#include "attnlab/attention_decode.h"  // KvDtype: fp32, bf16, fp16 and their conversions
#include "attnlab/status.h"

namespace attnlab {
class ThreadPool;
}

namespace attnlab::internal {

// `rows` rows of `cols` elements of `dtype`, row-major and contiguous, at `data` (aligned to the
// element size). The memory is owned elsewhere (matrix_weights.h keeps it alive).
struct WeightBlock {
  const void* data = nullptr;
  KvDtype dtype = KvDtype::kF32;
  int64_t rows = 0;
};

struct WeightMatrix {
  int64_t rows = 0, cols = 0;       // rows = sum of the blocks' rows
  std::vector<WeightBlock> blocks;  // top to bottom
  bool empty() const { return blocks.empty(); }
  int64_t bytes() const;  // the blocks' storage
};

// InvalidArgument unless the blocks are non-null, correctly aligned, have rows > 0, and add up
// to rows x cols (cols > 0).
Status ValidateWeightMatrix(const WeightMatrix& w);

// y[N, rows] = x[N, cols] W^T (+ bias[rows] if bias), fp32 accumulation. REQUIRES: a validated
// w, N >= 0, x and y not overlapping. Deterministic for a fixed thread count.
void MatmulWeightT(int64_t N, const float* x, const WeightMatrix& w, const float* bias, float* y,
                   ThreadPool* pool = nullptr);

// Row r of W (cols floats) into out (an embedding lookup). REQUIRES: 0 <= r < w.rows.
void WeightRowToFloat(const WeightMatrix& w, int64_t r, float* out);

}  // namespace attnlab::internal

#endif  // ATTNLAB_ENGINE_WEIGHT_GEMM_H_
