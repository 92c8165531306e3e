// The threaded row and column operations of ops.h: with a pool of several threads every result
// equals the single-threaded one bit for bit (the partition is fixed and each reduction runs in
// a fixed order, whatever the thread count), and matches a double-precision reference. Run under
// ThreadSanitizer by scripts/sanitize.sh tsan.
//
// Reference tolerances: the row operations are a few fp32 operations per element on O(1) data,
// plus C-term sums (rounding error <= C u |sum of magnitudes|, Higham eq. 3.5); GELU uses an
// approximate exp2 (simd.h) whose relative error is below 1e-6, so 1e-5 of max(1, |y|) covers
// every case with room, and a wrong formula is off by orders more.
#include "engine/ops.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <vector>

#include "attnlab/thread_pool.h"
#include "engine/simd.h"

namespace attnlab::internal {
namespace {

std::vector<float> Random(int64_t n, uint64_t seed, float scale = 1.0f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = nd(rng);
  return v;
}

// Runs `op` with a 1-thread and a 4-thread pool on copies of the same outputs; they must agree
// bitwise. Returns the result.
std::vector<std::vector<float>> SameOnEveryPool(
    const std::vector<std::vector<float>>& outputs_init,
    const std::function<void(std::vector<std::vector<float>>&, ThreadPool*)>& op) {
  ThreadPool one(1), four(4);
  std::vector<std::vector<float>> a = outputs_init, b = outputs_init;
  op(a, &one);
  op(b, &four);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i], b[i]) << "output " << i;
  return a;
}

constexpr double kTol = 1e-5;

TEST(Ops, LayerNormForwardAndBackward) {
  const int64_t N = 97, C = 67;  // odd: tails in every loop, several row and column blocks
  const auto x = Random(N * C, 1, 2.0f), w = Random(C, 2), b = Random(C, 3), dy = Random(N * C, 4);
  const float eps = 1e-5f;
  auto fwd = SameOnEveryPool({std::vector<float>(N * C), std::vector<float>(N), std::vector<float>(N)},
                             [&](auto& o, ThreadPool* p) {
                               LayerNormForward(N, C, x.data(), w.data(), b.data(), eps, o[0].data(),
                                                o[1].data(), o[2].data(), p);
                             });
  auto bwd = SameOnEveryPool(
      {std::vector<float>(N * C, 0.5f), std::vector<float>(C, 0.25f), std::vector<float>(C, 0.0f)},
      [&](auto& o, ThreadPool* p) {
        LayerNormBackward(N, C, dy.data(), x.data(), w.data(), fwd[1].data(), fwd[2].data(),
                          o[0].data(), o[1].data(), o[2].data(), p);
      });
  std::vector<double> dw(C, 0.25), db(C, 0.0);
  for (int64_t n = 0; n < N; ++n) {
    double m = 0, v = 0;
    for (int64_t c = 0; c < C; ++c) m += x[n * C + c];
    m /= C;
    for (int64_t c = 0; c < C; ++c) v += (x[n * C + c] - m) * (x[n * C + c] - m);
    const double r = 1 / std::sqrt(v / C + eps);
    double mean_g = 0, mean_gx = 0;
    for (int64_t c = 0; c < C; ++c) {
      const double xh = (x[n * C + c] - m) * r, g = dy[n * C + c] * double(w[c]);
      ASSERT_NEAR(fwd[0][n * C + c], xh * w[c] + b[c], kTol * (1 + std::fabs(xh * w[c] + b[c])));
      mean_g += g / C;
      mean_gx += g * xh / C;
      dw[c] += dy[n * C + c] * xh;
      db[c] += dy[n * C + c];
    }
    for (int64_t c = 0; c < C; ++c) {
      const double xh = (x[n * C + c] - m) * r, g = dy[n * C + c] * double(w[c]);
      const double dx = 0.5 + r * (g - mean_g - xh * mean_gx);
      ASSERT_NEAR(bwd[0][n * C + c], dx, kTol * (1 + std::fabs(dx)) * 10) << n << "," << c;
    }
  }
  for (int64_t c = 0; c < C; ++c) {
    EXPECT_NEAR(bwd[1][c], dw[c], kTol * N);
    EXPECT_NEAR(bwd[2][c], db[c], kTol * N);
  }
}

TEST(Ops, RmsNormForwardAndBackwardAreThreadInvariant) {
  const int64_t N = 70, C = 130;
  const auto x = Random(N * C, 5), w = Random(C, 6), dy = Random(N * C, 7);
  auto fwd = SameOnEveryPool({std::vector<float>(N * C), std::vector<float>(N)},
                             [&](auto& o, ThreadPool* p) {
                               RmsNormForward(N, C, x.data(), w.data(), 1e-6f, o[0].data(),
                                              o[1].data(), p);
                             });
  for (int64_t n = 0; n < N; ++n) {
    double ms = 0;
    for (int64_t c = 0; c < C; ++c) ms += double(x[n * C + c]) * x[n * C + c] / C;
    const double r = 1 / std::sqrt(ms + 1e-6);
    for (int64_t c = 0; c < C; ++c) {
      const double y = x[n * C + c] * r * w[c];
      ASSERT_NEAR(fwd[0][n * C + c], y, kTol * (1 + std::fabs(y)));
    }
  }
  SameOnEveryPool({std::vector<float>(N * C), std::vector<float>(C)}, [&](auto& o, ThreadPool* p) {
    RmsNormBackward(N, C, dy.data(), x.data(), w.data(), fwd[1].data(), o[0].data(), o[1].data(), p);
  });
}

TEST(Ops, GeluForwardAndBackward) {
  const int64_t n = 5000;
  auto x = Random(n, 8, 3.0f);
  x[0] = 40.0f;
  x[1] = -40.0f;  // saturated tails
  const auto dy = Random(n, 9);
  auto y = SameOnEveryPool({std::vector<float>(n)}, [&](auto& o, ThreadPool* p) {
    GeluForward(n, x.data(), o[0].data(), p);
  });
  auto dx = SameOnEveryPool({std::vector<float>(n, 1.0f)}, [&](auto& o, ThreadPool* p) {
    GeluBackward(n, x.data(), dy.data(), o[0].data(), p);
  });
  const double k = std::sqrt(2 / M_PI), c = 0.044715;
  for (int64_t i = 0; i < n; ++i) {
    const double v = x[i], t = std::tanh(k * (v + c * v * v * v));
    const double want = 0.5 * v * (1 + t);
    ASSERT_NEAR(y[0][i], want, kTol * (1 + std::fabs(want))) << "x = " << v;
    const double d = 0.5 * (1 + t) + 0.5 * v * (1 - t * t) * k * (1 + 3 * c * v * v);
    ASSERT_NEAR(dx[0][i], 1.0 + d * dy[i], kTol * (1 + std::fabs(d * dy[i])) * 10) << "x = " << v;
  }
}

TEST(Ops, BiasAndLinear) {
  const int64_t N = 45, K = 33, M = 70;
  const auto x = Random(N * K, 10), w = Random(K * M, 11), b = Random(M, 12), dy = Random(N * M, 13);
  auto y = SameOnEveryPool({std::vector<float>(N * M)}, [&](auto& o, ThreadPool* p) {
    LinearForward(N, K, M, x.data(), w.data(), b.data(), o[0].data(), p);
  });
  // LinearForward runs the threaded sgemm, whose tiles depend on the pool size above 2e6 flops;
  // this product is one tile on any pool, so bitwise equal too. The bound is gemm_test's.
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t m = 0; m < M; ++m) {
      double s = b[m], mag = std::fabs(b[m]);
      for (int64_t k = 0; k < K; ++k) {
        s += double(x[n * K + k]) * w[k * M + m];
        mag += std::fabs(double(x[n * K + k]) * w[k * M + m]);
      }
      ASSERT_NEAR(y[0][n * M + m], s, 2 * (K + 2) * std::ldexp(1.0, -24) * mag);
    }
  }
  SameOnEveryPool({std::vector<float>(M, 1.0f)}, [&](auto& o, ThreadPool* p) {
    BiasBackward(N, M, dy.data(), o[0].data(), p);
  });
  SameOnEveryPool({std::vector<float>(N * M, 0.0f)}, [&](auto& o, ThreadPool* p) {
    AddBias(N, M, b.data(), o[0].data(), p);
  });
}

TEST(Ops, SoftmaxCrossEntropyForwardAndBackward) {
  const int64_t N = 31, V = 300;
  const auto logits = Random(N * V, 14, 4.0f);
  std::vector<int32_t> targets(N);
  for (int64_t n = 0; n < N; ++n) targets[n] = n % 5 == 0 ? -1 : static_cast<int32_t>((n * 37) % V);
  std::vector<double> mean(2);
  auto out = SameOnEveryPool({logits, std::vector<float>(N)}, [&](auto& o, ThreadPool* p) {
    mean[p->num_threads() == 1 ? 0 : 1] =
        SoftmaxCrossEntropyForward(N, V, o[0].data(), targets.data(), o[1].data(), p);
  });
  EXPECT_EQ(mean[0], mean[1]);
  double total = 0;
  int64_t counted = 0;
  for (int64_t n = 0; n < N; ++n) {
    double mx = -1e30, z = 0;
    for (int64_t v = 0; v < V; ++v) mx = std::max(mx, double(logits[n * V + v]));
    for (int64_t v = 0; v < V; ++v) z += std::exp(logits[n * V + v] - mx);
    for (int64_t v = 0; v < V; ++v) {
      ASSERT_NEAR(out[0][n * V + v], std::exp(logits[n * V + v] - mx) / z, kTol);
    }
    if (targets[n] >= 0) {
      total += std::log(z) + mx - logits[n * V + targets[n]];
      ++counted;
    }
  }
  EXPECT_NEAR(mean[0], total / counted, kTol * (1 + total / counted));
  auto d = SameOnEveryPool({std::vector<float>(N * V)}, [&](auto& o, ThreadPool* p) {
    SoftmaxCrossEntropyBackward(N, V, out[0].data(), targets.data(), 0.5f, o[0].data(), p);
  });
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t v = 0; v < V; ++v) {
      const double want =
          targets[n] < 0 ? 0.0 : 0.5 * (out[0][n * V + v] - (v == targets[n] ? 1.0 : 0.0));
      ASSERT_NEAR(d[0][n * V + v], want, kTol);
    }
  }
}

// A NaN logit anywhere in a row (the vectorised part or the tail, target or not) makes that row's
// loss NaN, so the trainer's loss check sees it and skips the step (docs/BAD_INPUTS.md); the other
// rows are untouched. (simd::Exp2 once turned NaN into 2^-126, a finite loss.)
TEST(Ops, SoftmaxCrossEntropyLossIsNaNWhenALogitIsNaN) {
  const int64_t N = 4, V = 37;  // two 16-lane blocks and a tail of 5
  const auto logits = Random(N * V, 15);
  const std::vector<int32_t> targets = {3, 3, 3, 3};
  std::vector<float> clean = logits, clean_loss(N);
  SoftmaxCrossEntropyForward(N, V, clean.data(), targets.data(), clean_loss.data(), nullptr);
  for (const int64_t at : {int64_t{7}, int64_t{3}, int64_t{35}}) {  // block, target, tail
    std::vector<float> x = logits, loss(N);
    x[1 * V + at] = NAN;
    const double mean =
        SoftmaxCrossEntropyForward(N, V, x.data(), targets.data(), loss.data(), nullptr);
    EXPECT_TRUE(std::isnan(loss[1])) << "NaN at " << at;
    EXPECT_TRUE(std::isnan(mean)) << "NaN at " << at;
    for (const int64_t n : {0, 2, 3}) EXPECT_EQ(loss[n], clean_loss[n]) << "NaN at " << at;
  }
}

// simd::Exp2m1Small (softpick's e^s - 1 near s = 0 in the exp2 domain): within 4 ulp of the
// result over [-0.5, 0.5], down to subnormal-free tiny arguments, where 2^x - 1 by subtraction
// loses most of its digits (checked too, so the test shows what the function is for).
TEST(Ops, Exp2m1SmallIsAccurateWhereSubtractionIsNot) {
  const double u = std::ldexp(1.0, -24), ln2 = std::log(2.0);
  double worst = 0, worst_naive = 0;
  std::vector<float> xs = {1e-30f, -1e-30f, 1e-8f, -1e-8f, 1e-4f, -3e-3f, 0.5f, -0.5f};
  for (int k = -2000; k <= 2000; ++k) xs.push_back(static_cast<float>(k) / 4000.0f);
  for (float x : xs) {
    if (x == 0.0f) continue;
    const double want = std::expm1(static_cast<double>(x) * ln2);
    const double got = simd::Exp2m1Small(simd::Set1(x))[0];
    const double naive = static_cast<double>(simd::Exp2(simd::Set1(x))[0] - 1.0f);
    worst = std::max(worst, std::abs(got - want) / std::abs(want));
    worst_naive = std::max(worst_naive, std::abs(naive - want) / std::abs(want));
  }
  EXPECT_LE(worst, 4 * u);
  EXPECT_GT(worst_naive, 100 * u);
  std::printf("Exp2m1Small worst relative error %.3g (2^x - 1 by subtraction: %.3g)\n", worst,
              worst_naive);
}

}  // namespace
}  // namespace attnlab::internal
