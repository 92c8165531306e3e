// bf16 x bf16 -> fp32 matrix products on CPUs that multiply bf16 natively (AVX512-BF16, AMX),
// through oneDNN's matmul primitive (brgemm kernels; Debian's oneDNN 2.6 has them). Used by
// weight_gemm.cc for BF16 weights: the activations are rounded to bf16 once per product and the
// weights are read as stored, instead of widening every weight panel to fp32 for sgemm.
//
// Precision: every product of bf16 values is exact in fp32 and oneDNN accumulates in fp32, so
// C = A B^T equals the double-precision product of the bf16 inputs up to fp32 accumulation
// error (gamma_K sum_k |a_k b_k|, Higham eq. 3.5). Against fp32 activations the rounding of A to
// bf16 (relative error <= 2^-8 per element, round to nearest even) adds at most
// 2^-8 sum_k |a_k b_k|.
#ifndef ATTNLAB_ENGINE_GEMM_BF16_H_
#define ATTNLAB_ENGINE_GEMM_BF16_H_

#include <cstdint>
#include <string>

#include "attnlab/status.h"

namespace attnlab::internal {

// Whether oneDNN's effective ISA on this CPU multiplies bf16 natively (AVX512-BF16 or AMX).
bool Bf16GemmNative();

// The oneDNN kernel a bf16 product would use here ("brg:avx512_core_amx_bf16"), or an error
// when oneDNN cannot multiply bf16 on this CPU at all.
Result<std::string> Bf16GemmImplementation();

// C[M, N] = A[M, K] B^T, A row-major bf16 (lda >= K), B [N, K] row-major bf16 (ldb >= K), C
// row-major fp32 (ldc >= N), on the calling thread only (oneDNN's own threads kept off, as in
// gemm.cc). M, N, K >= 1. Error when oneDNN refuses the product on this CPU.
Status GemmBf16NT(int64_t M, int64_t N, int64_t K, const uint16_t* A, int64_t lda,
                  const uint16_t* B, int64_t ldb, float* C, int64_t ldc);

}  // namespace attnlab::internal

#endif  // ATTNLAB_ENGINE_GEMM_BF16_H_
