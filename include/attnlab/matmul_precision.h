// attnlab/matmul_precision.h: how products with BF16 weights are computed (issue 37).
//
// A model whose linear layers stay BF16 as stored (Hugging Face BF16 safetensors, GGUF BF16)
// multiplies them with the activations in one of two ways when a product has more than a few
// input rows (prefill, analyze, eval; decode's 1-4 rows always read the bf16 rows directly in
// fp32 arithmetic):
//   fp32  each panel of weights is widened to fp32 and multiplied by oneDNN's sgemm: the
//         activations keep fp32 precision.
//   bf16  the activations are rounded to bf16 (relative error <= 2^-8 each) and oneDNN's bf16
//         matmul multiplies them with the stored weights, accumulating in fp32 (AVX512-BF16 or
//         AMX: 2-4x the fp32 rate on CPUs that have them; engine/gemm_bf16.h).
// `auto` (the default) takes bf16 where the CPU multiplies bf16 natively and the kernels' SIMD
// target is avx512 (so ATTNLAB_SIMD=avx2 measures what an AVX2 machine does), else fp32. The
// environment variable ATTNLAB_MATMUL (auto | fp32 | bf16) or SetWeightMatmul() choose; `bf16`
// forces the bf16 product wherever oneDNN can run it at all (emulated, slower, on AVX-512 CPUs
// without BF16). Training never uses it: its weights are fp32.
#ifndef ATTNLAB_MATMUL_PRECISION_H_
#define ATTNLAB_MATMUL_PRECISION_H_

#include <string>
#include <string_view>

#include "attnlab/status.h"

namespace attnlab {

enum class WeightMatmul { kAuto = 0, kF32 = 1, kBf16 = 2 };

std::string_view WeightMatmulName(WeightMatmul m);  // "auto", "fp32", "bf16"
Result<WeightMatmul> ParseWeightMatmul(std::string_view name);

// The chosen setting (kAuto unless ATTNLAB_MATMUL or SetWeightMatmul said otherwise).
WeightMatmul GetWeightMatmul();
// Sets it for the whole process (thread-safe; takes effect at the next product).
// Unavailable when `m` is kBf16 and oneDNN cannot multiply bf16 on this CPU.
Status SetWeightMatmul(WeightMatmul m);

// Whether products with BF16 weights take the bf16 path now (the setting resolved for this CPU
// and the active SIMD target).
bool Bf16WeightMatmulActive();

// One line for --version, tables and reports: "bf16 (oneDNN brg:avx512_core_amx_bf16)" or
// "fp32 (sgemm; this CPU has no native bf16 products)".
std::string WeightMatmulDescription();

// Sets the path for a scope (a measurement, a test) and restores the previous setting after it.
class ScopedWeightMatmul {
 public:
  explicit ScopedWeightMatmul(WeightMatmul m) : saved_(GetWeightMatmul()), status_(SetWeightMatmul(m)) {}
  ~ScopedWeightMatmul() { (void)SetWeightMatmul(saved_); }
  ScopedWeightMatmul(const ScopedWeightMatmul&) = delete;
  ScopedWeightMatmul& operator=(const ScopedWeightMatmul&) = delete;
  // Whether the setting took (kBf16 fails where oneDNN cannot multiply bf16).
  const Status& status() const { return status_; }

 private:
  WeightMatmul saved_;
  Status status_;
};

}  // namespace attnlab

#endif  // ATTNLAB_MATMUL_PRECISION_H_
