// The threaded sgemm wrapper: every transpose combination, leading dimensions wider than the
// matrix, alpha/beta, sizes that split into several tiles across threads and sizes that do not;
// against a double-precision reference, and run-to-run bitwise reproducible for a fixed pool.
//
// Tolerance (derived): each element is a K-term fp32 dot product; its rounding error is at most
// gamma_K * sum_k |a_ik b_kj| with gamma_K = K u / (1 - K u), u = 2^-24 (Higham, Accuracy and
// Stability, eq. 3.5), plus one rounding each for alpha and beta * C. We allow 2x that.
#include "engine/gemm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <thread>
#include <tuple>
#include <vector>

#include "attnlab/thread_pool.h"

namespace attnlab::internal {
namespace {

struct Case {
  Trans ta, tb;
  int64_t M, N, K;
};

void RunCase(const Case& c, ThreadPool& pool, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd;
  const int64_t ar = c.ta == Trans::kNo ? c.M : c.K, ac = c.ta == Trans::kNo ? c.K : c.M;
  const int64_t br = c.tb == Trans::kNo ? c.K : c.N, bc = c.tb == Trans::kNo ? c.N : c.K;
  const int64_t lda = ac + 3, ldb = bc + 5, ldc = c.N + 2;  // padded rows
  std::vector<float> A(ar * lda), B(br * ldb), C(c.M * ldc), C0;
  for (float& x : A) x = nd(rng);
  for (float& x : B) x = nd(rng);
  for (float& x : C) x = nd(rng);
  C0 = C;
  const float alpha = 0.75f, beta = -0.5f;
  auto a = [&](int64_t i, int64_t k) { return c.ta == Trans::kNo ? A[i * lda + k] : A[k * lda + i]; };
  auto b = [&](int64_t k, int64_t j) { return c.tb == Trans::kNo ? B[k * ldb + j] : B[j * ldb + k]; };
  Sgemm(c.ta, c.tb, c.M, c.N, c.K, alpha, A.data(), lda, B.data(), ldb, beta, C.data(), ldc, &pool);
  const double u = std::ldexp(1.0, -24), gamma = c.K * u / (1 - c.K * u);
  for (int64_t i = 0; i < c.M; ++i) {
    for (int64_t j = 0; j < c.N; ++j) {
      double dot = 0, mag = 0;
      for (int64_t k = 0; k < c.K; ++k) {
        dot += double(a(i, k)) * b(k, j);
        mag += std::fabs(double(a(i, k)) * b(k, j));
      }
      const double want = alpha * dot + beta * double(C0[i * ldc + j]);
      const double bound =
          2 * (alpha * gamma * mag + 2 * u * (std::fabs(alpha * dot) + std::fabs(beta * C0[i * ldc + j])));
      ASSERT_NEAR(C[i * ldc + j], want, bound + 1e-30)
          << "M " << c.M << " N " << c.N << " K " << c.K << " at " << i << "," << j;
    }
    for (int64_t j = c.N; j < ldc; ++j) {
      ASSERT_EQ(C[i * ldc + j], C0[i * ldc + j]) << "wrote outside the matrix";
    }
  }
  // Same inputs, same pool: bit for bit.
  std::vector<float> C2 = C0;
  Sgemm(c.ta, c.tb, c.M, c.N, c.K, alpha, A.data(), lda, B.data(), ldb, beta, C2.data(), ldc, &pool);
  Sgemm(c.ta, c.tb, c.M, c.N, c.K, alpha, A.data(), lda, B.data(), ldb, beta, C0.data(), ldc, &pool);
  ASSERT_EQ(C2, C0);
}

TEST(Gemm, MatchesDoubleReferenceForEveryTransposeAndTiling) {
  ThreadPool pool(3);
  uint64_t seed = 1;
  for (Trans ta : {Trans::kNo, Trans::kYes}) {
    for (Trans tb : {Trans::kNo, Trans::kYes}) {
      // Small (one tile), rows split (M >= N, 2 M N K >= 2e6), columns split, odd sizes.
      for (auto [M, N, K] : {std::tuple<int64_t, int64_t, int64_t>{1, 1, 1},
                             {5, 7, 3},
                             {300, 70, 53},
                             {37, 290, 101},
                             {129, 129, 0}}) {
        RunCase({ta, tb, M, N, K}, pool, seed++);
      }
    }
  }
}

TEST(Gemm, EmptyProductsTouchNothing) {
  ThreadPool pool(2);
  std::vector<float> C(4, 3.0f);
  Sgemm(Trans::kNo, Trans::kNo, 0, 2, 2, 1.0f, nullptr, 2, nullptr, 2, 0.0f, C.data(), 2, &pool);
  Sgemm(Trans::kNo, Trans::kNo, 2, 0, 2, 1.0f, nullptr, 2, nullptr, 2, 0.0f, C.data(), 2, &pool);
  for (float x : C) EXPECT_EQ(x, 3.0f);
}

TEST(Gemm, ConcurrentProductsOnSeparatePools) {
  // Two threads, each with its own pool, multiplying at once (oneDNN is called from several
  // threads in both): results equal the same products computed one after the other.
  const int64_t M = 200, N = 64, K = 80;
  std::mt19937_64 rng(9);
  std::normal_distribution<float> nd;
  std::vector<float> A(M * K), B(K * N);
  for (float& x : A) x = nd(rng);
  for (float& x : B) x = nd(rng);
  ThreadPool p1(2), p2(2);
  std::vector<float> C1(M * N), C2(M * N), R(M * N);
  Sgemm(Trans::kNo, Trans::kNo, M, N, K, 1.0f, A.data(), K, B.data(), N, 0.0f, R.data(), N, &p1);
  std::thread t1([&] {
    for (int i = 0; i < 10; ++i)
      Sgemm(Trans::kNo, Trans::kNo, M, N, K, 1.0f, A.data(), K, B.data(), N, 0.0f, C1.data(), N, &p1);
  });
  std::thread t2([&] {
    for (int i = 0; i < 10; ++i)
      Sgemm(Trans::kNo, Trans::kNo, M, N, K, 1.0f, A.data(), K, B.data(), N, 0.0f, C2.data(), N, &p2);
  });
  t1.join();
  t2.join();
  EXPECT_EQ(C1, R);
  EXPECT_EQ(C2, R);
}

}  // namespace
}  // namespace attnlab::internal
