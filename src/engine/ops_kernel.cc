// The row-wise and element-wise ops of engine/ops.h (which states their contracts), compiled
// once per SIMD target (engine/target.h); ops.cc dispatches to the active target's copy
// through engine/kernel_table.h.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "attnlab/thread_pool.h"
#include "engine/kernel_table.h"
#include "engine/ops.h"
#include "engine/simd.h"
#include "engine/target.h"

ATTNLAB_TARGET_BEGIN
namespace attnlab::ATTNLAB_TARGET_NS {

namespace {

using simd::VecF;

ThreadPool& Pool(ThreadPool* p) { return p ? *p : DefaultThreadPool(); }

// Runs fn(begin, end) over [0, n) in contiguous blocks (a fixed partition: results never
// depend on which thread runs which block).
template <typename F>
void ForBlocks(ThreadPool& pool, int64_t n, int64_t min_block, F fn) {
  if (n <= 0) return;
  const int64_t blocks = std::max<int64_t>(1, std::min<int64_t>(4 * pool.num_threads(), n / std::max<int64_t>(1, min_block)));
  const int64_t step = (n + blocks - 1) / blocks;
  pool.ParallelFor((n + step - 1) / step, [&](int64_t t, int) {
    fn(t * step, std::min(n, (t + 1) * step));
  });
}

// Column sums of [N, C] into out[C] (out += ...), threaded over column blocks, rows in order.
template <typename F>
void ColumnReduce(ThreadPool& pool, int64_t N, int64_t C, float* out, F term) {
  ForBlocks(pool, C, 64, [&](int64_t c0, int64_t c1) {
    for (int64_t n = 0; n < N; ++n) {
      for (int64_t c = c0; c < c1; ++c) out[c] += term(n, c);
    }
  });
}

// tanh(z) = 1 - 2 / (e^{2z} + 1), with z clamped to +-15 (tanh(15) rounds to 1 in float).
inline VecF Tanh(VecF z) {
  const VecF zc = simd::Min(simd::Max(z, simd::Set1(-15.0f)), simd::Set1(15.0f));
  const VecF e = simd::Exp2(zc * simd::Set1(2.0f * 1.4426950408889634f));
  return simd::Set1(1.0f) - simd::Set1(2.0f) / (e + simd::Set1(1.0f));
}

// sum_i a[i] * b[i] (b == nullptr: sum_i a[i]), kLanes at a time, then a fixed-order tail.
inline float DotRow(const float* a, const float* b, int64_t n) {
  VecF acc = simd::Zero();
  int64_t i = 0;
  for (; i + simd::kLanes <= n; i += simd::kLanes) acc += b ? simd::Load(a + i) * simd::Load(b + i) : simd::Load(a + i);
  float s = simd::ReduceSum(acc);
  for (; i < n; ++i) s += b ? a[i] * b[i] : a[i];
  return s;
}

constexpr float kGeluK = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluC = 0.044715f;

}  // namespace

void LayerNormForward(int64_t N, int64_t C, const float* x, const float* w, const float* b,
                      float eps, float* y, float* mean, float* rstd, ThreadPool* pool) {
  ForBlocks(Pool(pool), N, 16, [&](int64_t n0, int64_t n1) {
    for (int64_t n = n0; n < n1; ++n) {
      const float* xr = x + n * C;
      float* yr = y + n * C;
      const float m = DotRow(xr, nullptr, C) / C;
      // Two-pass variance (numerically safe): sum (x - m)^2.
      VecF acc = simd::Zero();
      int64_t c = 0;
      for (; c + simd::kLanes <= C; c += simd::kLanes) {
        const VecF d = simd::Load(xr + c) - simd::Set1(m);
        acc += d * d;
      }
      float var = simd::ReduceSum(acc);
      for (; c < C; ++c) var += (xr[c] - m) * (xr[c] - m);
      const float r = 1.0f / std::sqrt(var / C + eps);
      for (c = 0; c < C; ++c) yr[c] = (xr[c] - m) * r * w[c] + (b ? b[c] : 0.0f);
      mean[n] = m;
      rstd[n] = r;
    }
  });
}

void LayerNormBackward(int64_t N, int64_t C, const float* dy, const float* x, const float* w,
                       const float* mean, const float* rstd, float* dx, float* dw, float* db,
                       ThreadPool* pool) {
  ThreadPool& tp = Pool(pool);
  // In the forward pass this was: y = xhat * w + b, xhat = (x - mean) * rstd.
  ForBlocks(tp, N, 16, [&](int64_t n0, int64_t n1) {
    for (int64_t n = n0; n < n1; ++n) {
      const float* xr = x + n * C;
      const float* dyr = dy + n * C;
      const float m = mean[n], r = rstd[n];
      // mean(dnorm) and mean(dnorm * xhat), dnorm = dy * w, xhat = (x - m) r.
      VecF ad = simd::Zero(), adx = simd::Zero();
      int64_t c = 0;
      for (; c + simd::kLanes <= C; c += simd::kLanes) {
        const VecF dn = simd::Load(dyr + c) * simd::Load(w + c);
        ad += dn;
        adx += dn * (simd::Load(xr + c) - simd::Set1(m));
      }
      float mean_d = simd::ReduceSum(ad), mean_dx = simd::ReduceSum(adx);
      for (; c < C; ++c) {
        mean_d += dyr[c] * w[c];
        mean_dx += dyr[c] * w[c] * (xr[c] - m);
      }
      mean_d /= C;
      mean_dx = mean_dx * r / C;
      float* dxr = dx + n * C;
      for (c = 0; c < C; ++c) {
        const float xhat = (xr[c] - m) * r;
        dxr[c] += r * (dyr[c] * w[c] - mean_d - xhat * mean_dx);
      }
    }
  });
  ColumnReduce(tp, N, C, dw, [&](int64_t n, int64_t c) {
    return dy[n * C + c] * (x[n * C + c] - mean[n]) * rstd[n];
  });
  if (db) ColumnReduce(tp, N, C, db, [&](int64_t n, int64_t c) { return dy[n * C + c]; });
}

void RmsNormForward(int64_t N, int64_t C, const float* x, const float* w, float eps, float* y,
                    float* rstd, ThreadPool* pool) {
  ForBlocks(Pool(pool), N, 16, [&](int64_t n0, int64_t n1) {
    for (int64_t n = n0; n < n1; ++n) {
      const float* xr = x + n * C;
      const float r = 1.0f / std::sqrt(DotRow(xr, xr, C) / C + eps);
      for (int64_t c = 0; c < C; ++c) y[n * C + c] = xr[c] * r * w[c];
      rstd[n] = r;
    }
  });
}

void RmsNormBackward(int64_t N, int64_t C, const float* dy, const float* x, const float* w,
                     const float* rstd, float* dx, float* dw, ThreadPool* pool) {
  ThreadPool& tp = Pool(pool);
  // In the forward pass this was: y = x * r * w, r = (mean(x^2) + eps)^(-1/2);
  // dr/dx = -r^3 x / C, so dx = r (dy w) - x r^3 mean(dy w x).
  ForBlocks(tp, N, 16, [&](int64_t n0, int64_t n1) {
    for (int64_t n = n0; n < n1; ++n) {
      const float* xr = x + n * C;
      const float* dyr = dy + n * C;
      const float r = rstd[n];
      float dot = 0;
      int64_t c = 0;
      VecF acc = simd::Zero();
      for (; c + simd::kLanes <= C; c += simd::kLanes) acc += simd::Load(dyr + c) * simd::Load(w + c) * simd::Load(xr + c);
      dot = simd::ReduceSum(acc);
      for (; c < C; ++c) dot += dyr[c] * w[c] * xr[c];
      dot /= C;
      float* dxr = dx + n * C;
      for (c = 0; c < C; ++c) dxr[c] += r * dyr[c] * w[c] - xr[c] * r * r * r * dot;
    }
  });
  ColumnReduce(tp, N, C, dw,
               [&](int64_t n, int64_t c) { return dy[n * C + c] * x[n * C + c] * rstd[n]; });
}

void GeluForward(int64_t n, const float* x, float* y, ThreadPool* pool) {
  ForBlocks(Pool(pool), n, 4096, [&](int64_t i0, int64_t i1) {
    int64_t i = i0;
    for (; i + simd::kLanes <= i1; i += simd::kLanes) {
      const VecF v = simd::Load(x + i);
      const VecF t = Tanh(simd::Set1(kGeluK) * (v + simd::Set1(kGeluC) * v * v * v));
      simd::Store(y + i, simd::Set1(0.5f) * v * (simd::Set1(1.0f) + t));
    }
    for (; i < i1; ++i) {
      const float v = x[i];
      y[i] = 0.5f * v * (1.0f + std::tanh(kGeluK * (v + kGeluC * v * v * v)));
    }
  });
}

void GeluBackward(int64_t n, const float* x, const float* dy, float* dx, ThreadPool* pool) {
  // In the forward pass this was: y = 0.5 x (1 + tanh(u)), u = k (x + c x^3).
  // dy/dx = 0.5 (1 + t) + 0.5 x (1 - t^2) k (1 + 3 c x^2).
  ForBlocks(Pool(pool), n, 4096, [&](int64_t i0, int64_t i1) {
    int64_t i = i0;
    const VecF half = simd::Set1(0.5f), one = simd::Set1(1.0f), k = simd::Set1(kGeluK);
    const VecF c = simd::Set1(kGeluC), c3 = simd::Set1(3.0f * kGeluC);
    for (; i + simd::kLanes <= i1; i += simd::kLanes) {
      const VecF v = simd::Load(x + i);
      const VecF t = Tanh(k * (v + c * v * v * v));
      const VecF g = half * (one + t) + half * v * (one - t * t) * k * (one + c3 * v * v);
      simd::Store(dx + i, simd::Load(dx + i) + g * simd::Load(dy + i));
    }
    for (; i < i1; ++i) {
      const float v = x[i];
      const float t = std::tanh(kGeluK * (v + kGeluC * v * v * v));
      const float g = 0.5f * (1 + t) + 0.5f * v * (1 - t * t) * kGeluK * (1 + 3 * kGeluC * v * v);
      dx[i] += g * dy[i];
    }
  });
}

void AddBias(int64_t N, int64_t C, const float* b, float* y, ThreadPool* pool) {
  ForBlocks(Pool(pool), N, 16, [&](int64_t n0, int64_t n1) {
    for (int64_t n = n0; n < n1; ++n) {
      for (int64_t c = 0; c < C; ++c) y[n * C + c] += b[c];
    }
  });
}

void BiasBackward(int64_t N, int64_t C, const float* dy, float* db, ThreadPool* pool) {
  ColumnReduce(Pool(pool), N, C, db, [&](int64_t n, int64_t c) { return dy[n * C + c]; });
}

double SoftmaxCrossEntropyForward(int64_t N, int64_t V, float* logits, const int32_t* targets,
                                  float* losses, ThreadPool* pool) {
  ForBlocks(Pool(pool), N, 4, [&](int64_t n0, int64_t n1) {
    for (int64_t n = n0; n < n1; ++n) {
      float* row = logits + n * V;
      const int32_t t = targets ? targets[n] : -1;
      const float logit_t = t >= 0 ? row[t] : 0.0f;
      float m = -INFINITY;
      for (int64_t v = 0; v < V; ++v) m = std::max(m, row[v]);
      const float m2 = m * 1.4426950408889634f;
      const VecF mv = simd::Set1(m2), l2e = simd::Set1(1.4426950408889634f);
      VecF acc = simd::Zero();
      int64_t v = 0;
      for (; v + simd::kLanes <= V; v += simd::kLanes) {
        const VecF p = simd::Exp2(simd::Load(row + v) * l2e - mv);
        simd::Store(row + v, p);
        acc += p;
      }
      double sum = simd::ReduceSum(acc);
      for (; v < V; ++v) {
        row[v] = std::exp(row[v] - m);
        sum += row[v];
      }
      const float inv = static_cast<float>(1.0 / sum);
      // loss = -log softmax(logits)[t] = m + log(sum exp(logit - m)) - logit_t
      if (losses) losses[n] = t >= 0 ? static_cast<float>(m + std::log(sum) - logit_t) : 0.0f;
      for (int64_t j = 0; j < V; ++j) row[j] *= inv;
    }
  });
  double total = 0;
  int64_t count = 0;
  for (int64_t n = 0; n < N; ++n) {
    if (targets && targets[n] >= 0) {
      total += losses[n];
      ++count;
    }
  }
  return count ? total / count : 0.0;
}

void SoftmaxCrossEntropyBackward(int64_t N, int64_t V, const float* probs, const int32_t* targets,
                                 float scale, float* dlogits, ThreadPool* pool) {
  ForBlocks(Pool(pool), N, 4, [&](int64_t n0, int64_t n1) {
    for (int64_t n = n0; n < n1; ++n) {
      const int32_t t = targets[n];
      const float* p = probs + n * V;
      float* d = dlogits + n * V;
      if (t < 0) {
        std::fill(d, d + V, 0.0f);
        continue;
      }
      for (int64_t v = 0; v < V; ++v) d[v] = p[v] * scale;
      d[t] -= scale;
    }
  });
}

}  // namespace attnlab::ATTNLAB_TARGET_NS
ATTNLAB_TARGET_END
