#include "engine/gemm.h"

#include <omp.h>
#include <oneapi/dnnl/dnnl.h>

#include <algorithm>

#include "attnlab/status.h"
#include "attnlab/thread_pool.h"

namespace attnlab::internal {

OneOmpThread::OneOmpThread() : saved_(omp_get_max_threads()) {
  if (saved_ != 1) omp_set_num_threads(1);
}

OneOmpThread::~OneOmpThread() {
  if (saved_ != 1) omp_set_num_threads(saved_);
}

namespace {

// One sequential oneDNN call.
void SgemmTile(Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
               int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  if (M == 0 || N == 0) return;
  if (K == 0) {  // C = beta C (oneDNN rejects K = 0); beta = 0 overwrites, as BLAS does
    for (int64_t i = 0; i < M; ++i) {
      for (int64_t j = 0; j < N; ++j) C[i * ldc + j] = beta == 0.0f ? 0.0f : beta * C[i * ldc + j];
    }
    return;
  }
  dnnl_status_t st;
  {
    OneOmpThread one;
    st = dnnl_sgemm(ta == Trans::kYes ? 'T' : 'N', tb == Trans::kYes ? 'T' : 'N', M, N, K, alpha,
                    A, lda, B, ldb, beta, C, ldc);
  }
  ATTNLAB_CHECK(st == dnnl_success);
}

}  // namespace

void Sgemm(Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
           int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc,
           ThreadPool* pool) {
  if (M <= 0 || N <= 0) return;
  ThreadPool& tp = pool ? *pool : DefaultThreadPool();
  // Fixed tiles (independent of scheduling): split the larger of M and N into about 2 tiles
  // per thread, in multiples of 16 rows/columns; a small product stays in one tile.
  const double flops = 2.0 * M * N * K;
  int64_t tiles = flops < 2e6 ? 1 : 2 * tp.num_threads();
  const bool split_rows = M >= N;
  const int64_t extent = split_rows ? M : N;
  int64_t step = (extent + tiles - 1) / tiles;
  step = std::max<int64_t>(16, (step + 15) / 16 * 16);
  tiles = (extent + step - 1) / step;
  tp.ParallelFor(tiles, [&](int64_t t, int) {
    const int64_t lo = t * step, hi = std::min(extent, lo + step);
    if (split_rows) {
      const float* a = ta == Trans::kNo ? A + lo * lda : A + lo;
      SgemmTile(ta, tb, hi - lo, N, K, alpha, a, lda, B, ldb, beta, C + lo * ldc, ldc);
    } else {
      const float* b = tb == Trans::kNo ? B + lo : B + lo * ldb;
      SgemmTile(ta, tb, M, hi - lo, K, alpha, A, lda, b, ldb, beta, C + lo, ldc);
    }
  });
}

}  // namespace attnlab::internal
