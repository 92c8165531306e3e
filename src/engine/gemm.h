// Dense fp32 matrix products for the model's linear layers.
//
// C[M x N] = alpha * op(A) * op(B) + beta * C, all row-major, op(X) = X or X^T.
// The product is split into fixed tiles of C, one per task of attnlab's thread pool, and each
// tile is computed by oneDNN's single-threaded sgemm (oneDNN's own OpenMP threading is switched
// off inside our tasks, so there is exactly one threading system and results are bit-identical
// for a fixed thread count).
#ifndef ATTNLAB_ENGINE_GEMM_H_
#define ATTNLAB_ENGINE_GEMM_H_

#include <cstdint>

namespace attnlab {
class ThreadPool;
}

namespace attnlab::internal {

enum class Trans { kNo, kYes };

// For the scope of one oneDNN call inside a task of attnlab's pool: keeps oneDNN from starting
// OpenMP threads of its own (a primitive fixes its thread count when it is built, a BLAS call
// when it runs), so there is exactly one threading system. Restores the setting after.
class OneOmpThread {
 public:
  OneOmpThread();
  ~OneOmpThread();
  OneOmpThread(const OneOmpThread&) = delete;
  OneOmpThread& operator=(const OneOmpThread&) = delete;

 private:
  int saved_;
};

// REQUIRES: M, N, K >= 0; lda >= (ta == kNo ? K : M); ldb >= (tb == kNo ? N : K); ldc >= N.
void Sgemm(Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
           int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc,
           ThreadPool* pool = nullptr);

}  // namespace attnlab::internal

#endif  // ATTNLAB_ENGINE_GEMM_H_
