// The engine's one hot micro-kernel: C[M x N] (+)= A[M x K] * B[K x N] for the small, L1/L2-
// resident blocks inside the attention kernels (S^T = K Q^T, O += P V and the backward's five
// products). A is read by scalar broadcast, row-major (element (r, k) at A[r * lda + k]) or
// column-major (at A[k * lda + r], kAColMajor), so transposed operands need no copy; B and C are
// row-major with N a multiple of 16, so every B row is a few vector loads. A register tile of
// kTileRows x (kLanes * kTileVecs) accumulators stays in registers across the whole K loop.
//
// Tiles per target (engine/target.h), sized to the register file: the tile, one B row of the
// tile and a broadcast A element must fit, else the compiler spills on every step of K.
//   16 lanes (AVX-512, 32 zmm): 6 x 4 vectors = 24 accumulators + 4 B + 1 A      (6 x 64 floats)
//    8 lanes (AVX2, 16 ymm):    6 x 2 vectors = 12 accumulators + 2 B + 1 A      (6 x 16, as
//                               BLIS's Haswell sgemm kernel)
//    4 lanes (SSE, 16 xmm):     3 x 4 vectors = 12 accumulators + 4 B + 1 A      (3 x 16)
#ifndef ATTNLAB_ENGINE_MICRO_GEMM_H_
#define ATTNLAB_ENGINE_MICRO_GEMM_H_

#include <cstdint>

#include "engine/simd.h"
#include "engine/target.h"

ATTNLAB_TARGET_BEGIN
namespace attnlab::ATTNLAB_TARGET_NS {

constexpr int kTileRows = simd::kLanes == 4 ? 3 : 6;
constexpr int kTileVecs = simd::kLanes == 8 ? 2 : 4;
static_assert((kTileVecs * simd::kLanes) % 16 == 0, "a tile column block is whole 16-float slots");

template <int R, int NV, bool kAColMajor>
inline void MicroTile(int64_t K, const float* __restrict A, int64_t lda,
                      const float* __restrict B, int64_t ldb, float* __restrict C, int64_t ldc,
                      bool accumulate) {
  using simd::VecF;
  constexpr int L = simd::kLanes;
  VecF acc[R][NV];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) {
      acc[r][v] = accumulate ? simd::Load(C + r * ldc + L * v) : simd::Zero();
    }
  }
  for (int64_t k = 0; k < K; ++k) {
    VecF b[NV];
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) b[v] = simd::Load(B + k * ldb + L * v);
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const VecF a = simd::Set1(kAColMajor ? A[k * lda + r] : A[r * lda + k]);
#pragma GCC unroll 8
      for (int v = 0; v < NV; ++v) acc[r][v] += a * b[v];
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) simd::Store(C + r * ldc + L * v, acc[r][v]);
  }
}

// Rows [0, M) in tiles of kTileRows, with a tail tile of M % kTileRows rows.
template <int NV, bool kAColMajor>
inline void MicroColumn(int64_t M, int64_t K, const float* A, int64_t lda, const float* B,
                        int64_t ldb, float* C, int64_t ldc, bool accumulate) {
  constexpr int kRows = kTileRows;
  const int64_t row_step = kAColMajor ? 1 : lda;  // distance between consecutive rows of A
  int64_t m = 0;
  for (; m + kRows <= M; m += kRows) {
    MicroTile<kRows, NV, kAColMajor>(K, A + m * row_step, lda, B, ldb, C + m * ldc, ldc,
                                     accumulate);
  }
  const float* a = A + m * row_step;
  float* c = C + m * ldc;
  switch (M - m) {
    case 5: MicroTile<5, NV, kAColMajor>(K, a, lda, B, ldb, c, ldc, accumulate); break;
    case 4: MicroTile<4, NV, kAColMajor>(K, a, lda, B, ldb, c, ldc, accumulate); break;
    case 3: MicroTile<3, NV, kAColMajor>(K, a, lda, B, ldb, c, ldc, accumulate); break;
    case 2: MicroTile<2, NV, kAColMajor>(K, a, lda, B, ldb, c, ldc, accumulate); break;
    case 1: MicroTile<1, NV, kAColMajor>(K, a, lda, B, ldb, c, ldc, accumulate); break;
    default: break;
  }
}

// C[M x N] = A[M x K] * B[K x N] (+ C if accumulate); A row-major (element (r, k) at
// A[r * lda + k]) or, with kAColMajor, column-major (at A[k * lda + r]).
// REQUIRES: N % 16 == 0; ldb, ldc >= N; B and C rows need not be aligned.
template <bool kAColMajor = false>
inline void SmallGemm(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
                      const float* B, int64_t ldb, float* C, int64_t ldc, bool accumulate) {
  constexpr int L = simd::kLanes;
  constexpr int64_t kCols = L * kTileVecs;
  int64_t n = 0;
  for (; n + kCols <= N; n += kCols) {
    MicroColumn<kTileVecs, kAColMajor>(M, K, A, lda, B + n, ldb, C + n, ldc, accumulate);
  }
  // The rest is a whole number of vectors, fewer than kTileVecs (N % 16 == 0).
  const int64_t vecs = (N - n) / L;
  if constexpr (kTileVecs > 3) {
    if (vecs == 3) MicroColumn<3, kAColMajor>(M, K, A, lda, B + n, ldb, C + n, ldc, accumulate);
  }
  if constexpr (kTileVecs > 2) {
    if (vecs == 2) MicroColumn<2, kAColMajor>(M, K, A, lda, B + n, ldb, C + n, ldc, accumulate);
  }
  if (vecs == 1) MicroColumn<1, kAColMajor>(M, K, A, lda, B + n, ldb, C + n, ldc, accumulate);
}

}  // namespace attnlab::ATTNLAB_TARGET_NS
ATTNLAB_TARGET_END

#endif  // ATTNLAB_ENGINE_MICRO_GEMM_H_
