// The ops of engine/ops.h: the row-wise ones run the active SIMD target's copy
// (ops_kernel.cc, engine/kernel_table.h); the linear layers are oneDNN sgemm calls plus those.
#include "engine/ops.h"

#include <type_traits>

#include "attnlab/thread_pool.h"
#include "engine/gemm.h"
#include "engine/kernel_table.h"

namespace attnlab::internal {

#define ATTNLAB_SAME_TYPE(name)                                          \
  static_assert(std::is_same_v<decltype(name), ops_fn::name>, #name \
                ": engine/ops.h and kernel_table.h's ops_fn disagree");
ATTNLAB_DISPATCHED_OPS(ATTNLAB_SAME_TYPE)
#undef ATTNLAB_SAME_TYPE

void LayerNormForward(int64_t N, int64_t C, const float* x, const float* w, const float* b,
                      float eps, float* y, float* mean, float* rstd, ThreadPool* pool) {
  ActiveKernels().ops.LayerNormForward(N, C, x, w, b, eps, y, mean, rstd, pool);
}

void LayerNormBackward(int64_t N, int64_t C, const float* dy, const float* x, const float* w,
                       const float* mean, const float* rstd, float* dx, float* dw, float* db,
                       ThreadPool* pool) {
  ActiveKernels().ops.LayerNormBackward(N, C, dy, x, w, mean, rstd, dx, dw, db, pool);
}

void RmsNormForward(int64_t N, int64_t C, const float* x, const float* w, float eps, float* y,
                    float* rstd, ThreadPool* pool) {
  ActiveKernels().ops.RmsNormForward(N, C, x, w, eps, y, rstd, pool);
}

void RmsNormBackward(int64_t N, int64_t C, const float* dy, const float* x, const float* w,
                     const float* rstd, float* dx, float* dw, ThreadPool* pool) {
  ActiveKernels().ops.RmsNormBackward(N, C, dy, x, w, rstd, dx, dw, pool);
}

void GeluForward(int64_t n, const float* x, float* y, ThreadPool* pool) {
  ActiveKernels().ops.GeluForward(n, x, y, pool);
}

void GeluBackward(int64_t n, const float* x, const float* dy, float* dx, ThreadPool* pool) {
  ActiveKernels().ops.GeluBackward(n, x, dy, dx, pool);
}

void AddBias(int64_t N, int64_t C, const float* b, float* y, ThreadPool* pool) {
  ActiveKernels().ops.AddBias(N, C, b, y, pool);
}

void BiasBackward(int64_t N, int64_t C, const float* dy, float* db, ThreadPool* pool) {
  ActiveKernels().ops.BiasBackward(N, C, dy, db, pool);
}

double SoftmaxCrossEntropyForward(int64_t N, int64_t V, float* logits, const int32_t* targets,
                                  float* losses, ThreadPool* pool) {
  return ActiveKernels().ops.SoftmaxCrossEntropyForward(N, V, logits, targets, losses, pool);
}

void SoftmaxCrossEntropyBackward(int64_t N, int64_t V, const float* probs, const int32_t* targets,
                                 float scale, float* dlogits, ThreadPool* pool) {
  ActiveKernels().ops.SoftmaxCrossEntropyBackward(N, V, probs, targets, scale, dlogits, pool);
}

void LinearForward(int64_t N, int64_t K, int64_t M, const float* x, const float* w,
                   const float* b, float* y, ThreadPool* pool) {
  Sgemm(Trans::kNo, Trans::kNo, N, M, K, 1.0f, x, K, w, M, 0.0f, y, M, pool);
  if (b) AddBias(N, M, b, y, pool);
}

void LinearBackward(int64_t N, int64_t K, int64_t M, const float* x, const float* w,
                    const float* dy, float* dx, float* dw, float* db, ThreadPool* pool) {
  // In the forward pass this was: y = x W + b.
  if (dx) Sgemm(Trans::kNo, Trans::kYes, N, K, M, 1.0f, dy, M, w, M, 1.0f, dx, K, pool);
  Sgemm(Trans::kYes, Trans::kNo, K, M, N, 1.0f, x, K, dy, M, 1.0f, dw, M, pool);
  if (db) BiasBackward(N, M, dy, db, pool);
}

}  // namespace attnlab::internal
