// Row-wise and element-wise operations of a transformer, each *Forward with its *Backward right
// after it (llm.c's habit). Rows are tokens: x is [N, C] row-major. Threaded over rows (or over
// columns for parameter gradients, so every reduction runs in a fixed order and results are
// bit-reproducible for a fixed thread count). Backward functions ACCUMULATE into input
// gradients (dx += ...), because a residual stream's gradient has several contributions, and
// into parameter gradients (dw += ...), because gradients accumulate over micro-batches.
#ifndef ATTNLAB_ENGINE_OPS_H_
#define ATTNLAB_ENGINE_OPS_H_

#include <cstdint>

namespace attnlab {
class ThreadPool;
}

namespace attnlab::internal {

// LayerNorm (Ba et al. 2016): y = (x - mean) * rstd * w + b, rstd = 1 / sqrt(var + eps).
// x, y: [N, C]; w: [C]; b: [C] or null; mean, rstd: [N] (saved for the backward).
void LayerNormForward(int64_t N, int64_t C, const float* x, const float* w, const float* b,
                      float eps, float* y, float* mean, float* rstd, ThreadPool* pool = nullptr);
// dx += J^T dy; dw += sum_n dy * xhat; db += sum_n dy (db may be null).
void LayerNormBackward(int64_t N, int64_t C, const float* dy, const float* x, const float* w,
                       const float* mean, const float* rstd, float* dx, float* dw, float* db,
                       ThreadPool* pool = nullptr);

// RMSNorm (Zhang & Sennrich 2019): y = x * rstd * w, rstd = 1 / sqrt(mean(x^2) + eps).
void RmsNormForward(int64_t N, int64_t C, const float* x, const float* w, float eps, float* y,
                    float* rstd, ThreadPool* pool = nullptr);
void RmsNormBackward(int64_t N, int64_t C, const float* dy, const float* x, const float* w,
                     const float* rstd, float* dx, float* dw, ThreadPool* pool = nullptr);

// GELU, tanh approximation (GPT-2's "gelu_new"; Hendrycks & Gimpel 2016).
void GeluForward(int64_t n, const float* x, float* y, ThreadPool* pool = nullptr);
// dx += gelu'(x) * dy.
void GeluBackward(int64_t n, const float* x, const float* dy, float* dx, ThreadPool* pool = nullptr);

// GELU, exact: x Phi(x) = x (1 + erf(x / sqrt 2)) / 2 (GPT-NeoX/Pythia's "gelu").
// Baseline code (activations.cc), not dispatched per SIMD target.
void GeluErfForward(int64_t n, const float* x, float* y, ThreadPool* pool = nullptr);
// dx += gelu'(x) * dy, gelu'(x) = Phi(x) + x phi(x).
void GeluErfBackward(int64_t n, const float* x, const float* dy, float* dx,
                     ThreadPool* pool = nullptr);

// SwiGLU (Shazeer 2020, arXiv:2002.05202): h [N, 2F] = [g | u] per row, y [N, F] =
// silu(g) * u, silu(g) = g / (1 + exp(-g)). Baseline code (activations.cc).
void SwigluForward(int64_t N, int64_t F, const float* h, float* y, ThreadPool* pool = nullptr);
// dh[:, :F] += dy * u * silu'(g), dh[:, F:] += dy * silu(g);
// silu'(g) = sigmoid(g) (1 + g (1 - sigmoid(g))).
void SwigluBackward(int64_t N, int64_t F, const float* h, const float* dy, float* dh,
                    ThreadPool* pool = nullptr);

// y[n, :] += b (broadcast over rows).
void AddBias(int64_t N, int64_t C, const float* b, float* y, ThreadPool* pool = nullptr);
// db[c] += sum_n dy[n, c].
void BiasBackward(int64_t N, int64_t C, const float* dy, float* db, ThreadPool* pool = nullptr);

// Linear layer y = x W (+ b): x [N, K], W [K, M] (row-major, [in, out]), y [N, M] overwritten.
void LinearForward(int64_t N, int64_t K, int64_t M, const float* x, const float* w,
                   const float* b, float* y, ThreadPool* pool = nullptr);
// dx += dy W^T (dx may be null), dW += x^T dy, db += colsum(dy) (db may be null).
void LinearBackward(int64_t N, int64_t K, int64_t M, const float* x, const float* w,
                    const float* dy, float* dx, float* dw, float* db, ThreadPool* pool = nullptr);

// Softmax cross-entropy over rows of logits [N, V] against targets [N] (target < 0: ignored).
// losses[n] = -log softmax(logits[n])[target]; logits are replaced IN PLACE by the softmax
// probabilities (the backward needs them). Returns the mean loss over counted rows (0 if none).
double SoftmaxCrossEntropyForward(int64_t N, int64_t V, float* logits, const int32_t* targets,
                                  float* losses, ThreadPool* pool = nullptr);
// dlogits = (probs - onehot(target)) * scale for counted rows, 0 for ignored rows
// (overwrites; dlogits may alias probs).
void SoftmaxCrossEntropyBackward(int64_t N, int64_t V, const float* probs,
                                 const int32_t* targets, float scale, float* dlogits,
                                 ThreadPool* pool = nullptr);

}  // namespace attnlab::internal

#endif  // ATTNLAB_ENGINE_OPS_H_
