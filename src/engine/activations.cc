// The MLP activations that are not dispatched per SIMD target (ops.h): exact GELU and SwiGLU.
// Plain loops the compiler vectorises at the baseline width; the MLP's two matrix products
// dominate their cost by a factor of ~C.
#include <algorithm>
#include <cmath>
#include <numbers>

#include "attnlab/thread_pool.h"
#include "engine/ops.h"

namespace attnlab::internal {

namespace {

ThreadPool& PoolOr(ThreadPool* pool) { return pool ? *pool : DefaultThreadPool(); }

// Runs f(begin, end) over [0, n) in chunks of 4096 elements.
template <typename F>
void Chunked(int64_t n, ThreadPool* pool, F&& f) {
  constexpr int64_t kChunk = 4096;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  PoolOr(pool).ParallelFor(chunks, [&](int64_t c, int) {
    f(c * kChunk, std::min(n, (c + 1) * kChunk));
  });
}

inline float Sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

}  // namespace

void GeluErfForward(int64_t n, const float* x, float* y, ThreadPool* pool) {
  const float inv_sqrt2 = static_cast<float>(1.0 / std::numbers::sqrt2);
  Chunked(n, pool, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) y[i] = 0.5f * x[i] * (1.0f + std::erf(x[i] * inv_sqrt2));
  });
}

void GeluErfBackward(int64_t n, const float* x, const float* dy, float* dx, ThreadPool* pool) {
  const float inv_sqrt2 = static_cast<float>(1.0 / std::numbers::sqrt2);
  const float inv_sqrt2pi = static_cast<float>(1.0 / std::sqrt(2.0 * std::numbers::pi));
  Chunked(n, pool, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const float cdf = 0.5f * (1.0f + std::erf(x[i] * inv_sqrt2));
      const float pdf = inv_sqrt2pi * std::exp(-0.5f * x[i] * x[i]);
      dx[i] += (cdf + x[i] * pdf) * dy[i];
    }
  });
}

void SwigluForward(int64_t N, int64_t F, const float* h, float* y, ThreadPool* pool) {
  PoolOr(pool).ParallelFor(N, [&](int64_t n, int) {
    const float* g = h + n * 2 * F;
    const float* u = g + F;
    float* out = y + n * F;
    for (int64_t i = 0; i < F; ++i) out[i] = g[i] * Sigmoid(g[i]) * u[i];
  });
}

void SwigluBackward(int64_t N, int64_t F, const float* h, const float* dy, float* dh,
                    ThreadPool* pool) {
  PoolOr(pool).ParallelFor(N, [&](int64_t n, int) {
    const float* g = h + n * 2 * F;
    const float* u = g + F;
    const float* d = dy + n * F;
    float* dg = dh + n * 2 * F;
    float* du = dg + F;
    for (int64_t i = 0; i < F; ++i) {
      const float s = Sigmoid(g[i]);
      const float silu = g[i] * s;
      dg[i] += d[i] * u[i] * s * (1.0f + g[i] * (1.0f - s));
      du[i] += d[i] * silu;
    }
  });
}

}  // namespace attnlab::internal
