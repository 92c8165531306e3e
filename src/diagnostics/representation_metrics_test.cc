// Representation metrics against hand-computed values, brute-force O(T^2) / sorting references,
// matrices of known spectrum, and the exact values the definitions promise on collapse.
#include "diagnostics/representation_metrics.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "attnlab/thread_pool.h"
#include "dist/comm.h"

namespace attnlab {
namespace {

std::vector<float> RandomMatrix(int64_t rows, int64_t cols, uint32_t seed, double scale = 1.0) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> n(0.0, scale);
  std::vector<float> x(rows * cols);
  for (float& v : x) v = static_cast<float>(n(rng));
  return x;
}

// Columns of a random [n, r] matrix with orthonormal columns (Gram-Schmidt twice, in double),
// returned row-major.
std::vector<double> RandomOrthonormal(int64_t n, int64_t r, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> g;
  std::vector<double> q(n * r);
  for (double& v : q) v = g(rng);
  for (int64_t j = 0; j < r; ++j) {
    for (int pass = 0; pass < 2; ++pass) {
      for (int64_t i = 0; i < j; ++i) {
        double d = 0;
        for (int64_t k = 0; k < n; ++k) d += q[k * r + i] * q[k * r + j];
        for (int64_t k = 0; k < n; ++k) q[k * r + j] -= d * q[k * r + i];
      }
    }
    double norm = 0;
    for (int64_t k = 0; k < n; ++k) norm += q[k * r + j] * q[k * r + j];
    norm = std::sqrt(norm);
    for (int64_t k = 0; k < n; ++k) q[k * r + j] /= norm;
  }
  return q;
}

// X [rows, c_out] = X [rows, c_in] Q [c_in, c_out] * scale.
std::vector<float> Transform(const std::vector<float>& x, int64_t rows, int64_t c_in,
                             const std::vector<double>& q, int64_t c_out, double scale) {
  std::vector<float> y(rows * c_out);
  for (int64_t t = 0; t < rows; ++t) {
    for (int64_t j = 0; j < c_out; ++j) {
      double s = 0;
      for (int64_t k = 0; k < c_in; ++k) s += x[t * c_in + k] * q[k * c_out + j];
      y[t * c_out + j] = static_cast<float>(scale * s);
    }
  }
  return y;
}

TokenMatrix View(const std::vector<float>& x, int64_t rows, int64_t cols) {
  return MakeTokenMatrix(x.data(), rows, cols);
}

// ---- brute-force references ---------------------------------------------------------------------

double BruteMeanCosine(const std::vector<float>& x, int64_t T, int64_t C) {
  double sum = 0;
  int64_t pairs = 0;
  for (int64_t i = 0; i < T; ++i) {
    for (int64_t j = 0; j < T; ++j) {
      if (i == j) continue;
      double d = 0, ni = 0, nj = 0;
      for (int64_t c = 0; c < C; ++c) {
        d += double(x[i * C + c]) * x[j * C + c];
        ni += double(x[i * C + c]) * x[i * C + c];
        nj += double(x[j * C + c]) * x[j * C + c];
      }
      sum += d / std::sqrt(ni * nj);
      ++pairs;
    }
  }
  return sum / pairs;
}

double BruteDirichlet(const std::vector<float>& x, int64_t T, int64_t C) {
  double sum = 0;
  for (int64_t i = 0; i < T; ++i) {
    for (int64_t j = 0; j < T; ++j) {
      for (int64_t c = 0; c < C; ++c) {
        const double d = double(x[i * C + c]) - x[j * C + c];
        sum += d * d;
      }
    }
  }
  return sum / (2.0 * T * T);
}

double BruteRelativeResidual(const std::vector<float>& x, int64_t T, int64_t C) {
  std::vector<double> mean(C, 0.0);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t c = 0; c < C; ++c) mean[c] += x[t * C + c] / double(T);
  auto composite = [&](bool centre) {
    double n1 = 0, ninf = 0;
    for (int64_t c = 0; c < C; ++c) {
      double s = 0;
      for (int64_t t = 0; t < T; ++t) s += std::fabs(x[t * C + c] - (centre ? mean[c] : 0.0));
      n1 = std::max(n1, s);
    }
    for (int64_t t = 0; t < T; ++t) {
      double s = 0;
      for (int64_t c = 0; c < C; ++c) s += std::fabs(x[t * C + c] - (centre ? mean[c] : 0.0));
      ninf = std::max(ninf, s);
    }
    return std::sqrt(n1 * ninf);
  };
  return composite(true) / composite(false);
}

// exp of the entropy of p = sigma / sum(sigma).
double ErankOf(std::vector<double> sigma) {
  double sum = 0, h = 0;
  for (double s : sigma) sum += s;
  for (double s : sigma) {
    if (s > 0) h -= s / sum * std::log(s / sum);
  }
  return std::exp(h);
}

// ---- collapse: exact values ---------------------------------------------------------------------

void ExpectCollapsed(int64_t T, int64_t C, uint32_t seed) {
  SCOPED_TRACE("T=" + std::to_string(T) + " C=" + std::to_string(C));
  const std::vector<float> v = RandomMatrix(1, C, seed, 3.0);
  std::vector<float> x(T * C);
  for (int64_t t = 0; t < T; ++t) std::copy(v.begin(), v.end(), x.begin() + t * C);
  auto m = ComputeRepresentationMetrics(View(x, T, C));
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->residual.relative, 0.0);
  EXPECT_EQ(m->residual.residual_norm, 0.0);
  EXPECT_GT(m->residual.norm, 0.0);
  EXPECT_EQ(m->cosine.mean_cosine, 1.0);
  EXPECT_EQ(m->cosine.mad, 0.0);
  EXPECT_EQ(m->cosine.nonzero_rows, T);
  EXPECT_EQ(m->dirichlet.energy, 0.0);
  EXPECT_EQ(m->dirichlet.relative, 0.0);
  EXPECT_EQ(m->erank.erank, 1.0);
  EXPECT_EQ(m->erank.numerical_rank, 1);
  EXPECT_EQ(m->erank.top_share, 1.0);
  EXPECT_EQ(m->erank_centred.erank, 0.0);  // the centred matrix is exactly zero
  EXPECT_EQ(m->erank_centred.numerical_rank, 0);
}

TEST(RepresentationMetrics, IdenticalRowsAreExactlyCollapsed) {
  ExpectCollapsed(50, 7, 1);     // T > C: the C x C Gram
  ExpectCollapsed(5, 40, 2);     // T < C: the T x T Gram
  ExpectCollapsed(300, 96, 3);   // several Gram blocks
  ExpectCollapsed(1000, 3, 4);
}

TEST(RepresentationMetrics, SingleToken) {
  const std::vector<float> x = {0.5f, -2.0f, 3.0f};
  auto m = ComputeRepresentationMetrics(View(x, 1, 3));
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->residual.relative, 0.0);
  EXPECT_EQ(m->cosine.mean_cosine, 1.0);
  EXPECT_EQ(m->cosine.mad, 0.0);
  EXPECT_EQ(m->dirichlet.energy, 0.0);
  EXPECT_EQ(m->erank.erank, 1.0);
  EXPECT_EQ(m->erank_centred.erank, 0.0);
  EXPECT_EQ(m->massive.max_abs, 3.0);
  EXPECT_EQ(m->massive.median_abs, 2.0);
  EXPECT_EQ(m->massive.ratio, 1.5);
  auto cka = ComputeLinearCka(View(x, 1, 3), View(x, 1, 3));
  ASSERT_TRUE(cka.ok());
  EXPECT_EQ(*cka, 0.0);  // centred to zero: defined as 0
}

TEST(RepresentationMetrics, AllZeroIsDefinedWithoutNaN) {
  const std::vector<float> x(6 * 4, 0.0f);
  auto m = ComputeRepresentationMetrics(View(x, 6, 4));
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->residual.relative, 0.0);
  EXPECT_EQ(m->cosine.mean_cosine, 1.0);
  EXPECT_EQ(m->cosine.mad, 0.0);
  EXPECT_EQ(m->cosine.nonzero_rows, 0);
  EXPECT_EQ(m->dirichlet.energy, 0.0);
  EXPECT_EQ(m->dirichlet.relative, 0.0);
  EXPECT_EQ(m->erank.erank, 0.0);
  EXPECT_EQ(m->erank_centred.erank, 0.0);
  EXPECT_EQ(m->massive.max_abs, 0.0);
  EXPECT_EQ(m->massive.ratio, 0.0);
  EXPECT_EQ(m->massive.massive_count, 0);
  auto heads = ComputeHeadCkaMatrix(View(x, 6, 4), 2);
  ASSERT_TRUE(heads.ok());
  for (double v : *heads) EXPECT_EQ(v, 0.0);
}

TEST(RepresentationMetrics, ZeroRowsAreLeftOutOfCosinePairs) {
  // Rows (1, 0), 0, (1, 1), 0: one pair of directions, cos = 1/sqrt(2).
  const std::vector<float> x = {1, 0, 0, 0, 1, 1, 0, 0};
  auto c = ComputePairwiseCosine(View(x, 4, 2));
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->nonzero_rows, 2);
  EXPECT_NEAR(c->mean_cosine, 1 / std::sqrt(2.0), 1e-15);
  EXPECT_NEAR(c->mad, 1 - 1 / std::sqrt(2.0), 1e-15);
  // One non-zero row: no pair.
  const std::vector<float> y = {0, 0, 3, 4};
  auto d = ComputePairwiseCosine(View(y, 2, 2));
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->mean_cosine, 1.0);
  EXPECT_EQ(d->mad, 0.0);
}

TEST(RepresentationMetrics, OrthonormalRows) {
  // Standard basis rows: cosines exactly 0, erank T, centred erank T - 1 (I - 11^T/T).
  const int64_t T = 5, C = 8;
  std::vector<float> e(T * C, 0.0f);
  for (int64_t t = 0; t < T; ++t) e[t * C + (t * 3) % C] = 1.0f;
  auto m = ComputeRepresentationMetrics(View(e, T, C));
  ASSERT_TRUE(m.ok());
  EXPECT_NEAR(m->cosine.mean_cosine, 0.0, 1e-15);
  EXPECT_NEAR(m->cosine.mad, 1.0, 1e-15);
  EXPECT_NEAR(m->erank.erank, T, 1e-12);
  EXPECT_EQ(m->erank.numerical_rank, T);
  EXPECT_NEAR(m->erank_centred.erank, T - 1, 1e-12);
  // Random orthonormal rows (T x C with T <= C), both Gram sides.
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{6, 10}, {12, 12}}) {
    const std::vector<double> q = RandomOrthonormal(cols, rows, 7);  // [cols, rows]
    std::vector<float> x(rows * cols);
    for (int64_t t = 0; t < rows; ++t)
      for (int64_t c = 0; c < cols; ++c) x[t * cols + c] = static_cast<float>(q[c * rows + t]);
    auto r = ComputeRepresentationMetrics(View(x, rows, cols));
    ASSERT_TRUE(r.ok());
    EXPECT_NEAR(r->cosine.mean_cosine, 0.0, 1e-6);
    EXPECT_NEAR(r->erank.erank, rows, 1e-5);
  }
}

// ---- a hand-computed 3 x 2 example ---------------------------------------------------------------
// X = [[1, 0], [0, 1], [1, 1]], xbar = (2/3, 2/3), res = [[1/3, -2/3], [-2/3, 1/3], [1/3, 1/3]].

const std::vector<float> kHand = {1, 0, 0, 1, 1, 1};

TEST(RepresentationMetrics, HandExampleResidual) {
  // ||res||_1 = 4/3, ||res||_inf = 1; ||X||_1 = 2, ||X||_inf = 2: sqrt(4/3) / 2 = 1/sqrt(3).
  auto r = ComputeRankCollapseResidual(View(kHand, 3, 2));
  ASSERT_TRUE(r.ok());
  EXPECT_NEAR(r->residual_norm, std::sqrt(4.0 / 3.0), 1e-15);
  EXPECT_NEAR(r->norm, 2.0, 1e-15);
  EXPECT_NEAR(r->relative, 1 / std::sqrt(3.0), 1e-15);
}

TEST(RepresentationMetrics, HandExampleCosineAndMad) {
  // cos: (x1, x2) 0, (x1, x3) and (x2, x3) 1/sqrt(2): mean sqrt(2)/3.
  auto c = ComputePairwiseCosine(View(kHand, 3, 2));
  ASSERT_TRUE(c.ok());
  EXPECT_NEAR(c->mean_cosine, std::sqrt(2.0) / 3, 1e-15);
  EXPECT_NEAR(c->mad, 1 - std::sqrt(2.0) / 3, 1e-15);
}

TEST(RepresentationMetrics, HandExampleDirichlet) {
  // Squared distances 2, 1, 1 over 3 unordered pairs: 2 * 4 / (2 * 9) = 4/9; mean |x|^2 = 4/3.
  auto e = ComputeDirichletEnergy(View(kHand, 3, 2));
  ASSERT_TRUE(e.ok());
  EXPECT_NEAR(e->energy, 4.0 / 9.0, 1e-15);
  EXPECT_NEAR(e->mean_sq_norm, 4.0 / 3.0, 1e-15);
  EXPECT_NEAR(e->relative, 1.0 / 3.0, 1e-15);
}

TEST(RepresentationMetrics, HandExampleEffectiveRank) {
  // X^T X = [[2, 1], [1, 2]]: sigma = sqrt(3), 1. Centred: [[2/3, -1/3], [-1/3, 2/3]]: sigma =
  // 1, 1/sqrt(3), the same proportions.
  const double s = std::sqrt(3.0);
  const double p1 = s / (s + 1), p2 = 1 / (s + 1);
  const double h = -(p1 * std::log(p1) + p2 * std::log(p2));
  for (bool centred : {false, true}) {
    auto r = ComputeEffectiveRank(View(kHand, 3, 2), centred);
    ASSERT_TRUE(r.ok());
    EXPECT_NEAR(r->entropy, h, 1e-14);
    EXPECT_NEAR(r->erank, std::exp(h), 1e-14);
    EXPECT_NEAR(r->top_share, p1, 1e-14);
    EXPECT_EQ(r->numerical_rank, 2);
  }
}

TEST(RepresentationMetrics, HandExampleMassive) {
  // |x| = 1, 2, 0.5, 8, 3, 1 -> sorted 0.5 1 1 2 3 8: median 1.5, max 8 at (1, 1).
  const std::vector<float> x = {1, -2, 0.5f, 8, 3, -1};
  MassiveActivationOptions opt;
  opt.top_k = 3;
  opt.abs_threshold = 2.5;
  opt.ratio_threshold = 1.9;  // threshold max(2.5, 2.85): only 3 and 8
  auto m = ComputeMassiveActivations(View(x, 3, 2), opt);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->median_abs, 1.5);
  EXPECT_EQ(m->max_abs, 8.0);
  EXPECT_EQ(m->max.token, 1);
  EXPECT_EQ(m->max.channel, 1);
  EXPECT_DOUBLE_EQ(m->ratio, 16.0 / 3.0);
  ASSERT_EQ(m->top.size(), 3u);
  EXPECT_EQ(m->top[0].value, 8.0f);
  EXPECT_EQ(m->top[1].value, 3.0f);
  EXPECT_EQ(m->top[1].token, 2);
  EXPECT_EQ(m->top[1].channel, 0);
  EXPECT_EQ(m->top[2].value, -2.0f);
  EXPECT_EQ(m->massive_count, 2);
}

TEST(RepresentationMetrics, HandExampleCka) {
  // Y = (1, 2, 4): Yc = (-4/3, -1/3, 5/3). Yc^T Xc = (1/3, 4/3): |.|^2 = 17/9.
  // |Xc^T Xc|_F = sqrt(10)/3, |Yc^T Yc|_F = 14/3: CKA = 17 / (14 sqrt(10)).
  const std::vector<float> y = {1, 2, 4};
  auto c = ComputeLinearCka(View(kHand, 3, 2), View(y, 3, 1));
  ASSERT_TRUE(c.ok());
  EXPECT_NEAR(*c, 17.0 / (14.0 * std::sqrt(10.0)), 1e-14);
  auto d = ComputeLinearCka(View(y, 3, 1), View(kHand, 3, 2));  // symmetric
  ASSERT_TRUE(d.ok());
  EXPECT_NEAR(*d, *c, 1e-15);
}

TEST(RepresentationMetrics, HandExampleSinkKeyGeometry) {
  // k0 = (3, 0), k1 = (0, 1), k2 = (1, 1); q0 = (1, 0), q1 = (1, 1), q2 = (0, 2).
  const std::vector<float> k = {3, 0, 0, 1, 1, 1};
  const std::vector<float> q = {1, 0, 1, 1, 0, 2};
  auto g = ComputeSinkKeyGeometry(View(q, 3, 2), View(k, 3, 2));
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  const double r2 = std::sqrt(2.0), r5 = std::sqrt(5.0), r10 = std::sqrt(10.0);
  EXPECT_NEAR(g->key0_norm, 3.0, 1e-15);
  EXPECT_NEAR(g->mean_other_key_norm, (1 + r2) / 2, 1e-15);
  EXPECT_NEAR(g->key_norm_ratio, 6 / (1 + r2), 1e-14);
  EXPECT_NEAR(g->cos_key0, (1 + 1 / r2 + 0) / 3, 1e-15);
  // kbar = (4/3, 2/3) ~ (2, 1): cosines 2/sqrt(5), 3/sqrt(10), 1/sqrt(5).
  EXPECT_NEAR(g->cos_key_mean, (2 / r5 + 3 / r10 + 1 / r5) / 3, 1e-15);
  // q0 sees only k0 (skipped); q1 sees k1: 1/sqrt(2); q2 sees k1, k2: (1 + 1/sqrt(2)) / 2.
  EXPECT_NEAR(g->cos_key_other, (1 / r2 + (1 + 1 / r2) / 2) / 2, 1e-15);
  // Two new queries against all three cached keys: they sit at key positions 1 and 2.
  auto h = ComputeSinkKeyGeometry(MakeTokenMatrix(q.data() + 2, 2, 2), View(k, 3, 2));
  ASSERT_TRUE(h.ok());
  EXPECT_NEAR(h->cos_key0, (1 / r2 + 0) / 2, 1e-15);
  EXPECT_NEAR(h->cos_key_other, (1 / r2 + (1 + 1 / r2) / 2) / 2, 1e-15);
}

// ---- random inputs against brute force ----------------------------------------------------------

TEST(RepresentationMetrics, MatchesBruteForce) {
  for (auto [T, C] : {std::pair<int64_t, int64_t>{2, 1}, {3, 5}, {17, 9}, {64, 33}, {9, 130}}) {
    SCOPED_TRACE("T=" + std::to_string(T) + " C=" + std::to_string(C));
    std::vector<float> x = RandomMatrix(T, C, 11 + T);
    for (int64_t c = 0; c < C; ++c) x[c] += 2.0f;  // an off-centre first token
    auto m = ComputeRepresentationMetrics(View(x, T, C));
    ASSERT_TRUE(m.ok());
    EXPECT_NEAR(m->residual.relative, BruteRelativeResidual(x, T, C), 1e-12);
    EXPECT_NEAR(m->cosine.mean_cosine, BruteMeanCosine(x, T, C), 1e-12);
    EXPECT_NEAR(m->cosine.mad, 1 - BruteMeanCosine(x, T, C), 1e-12);
    const double e = BruteDirichlet(x, T, C);
    EXPECT_NEAR(m->dirichlet.energy, e, 1e-12 * (1 + e));
  }
}

TEST(RepresentationMetrics, StridedInputMatchesContiguous) {
  const int64_t T = 23, C = 12, stride = 31, offset = 5;
  const std::vector<float> x = RandomMatrix(T, C, 5);
  std::vector<float> big(T * stride + offset, 1e30f);  // padding that must never be read
  for (int64_t t = 0; t < T; ++t)
    std::copy(x.begin() + t * C, x.begin() + (t + 1) * C, big.begin() + offset + t * stride);
  const TokenMatrix strided = MakeTokenMatrix(big.data() + offset, T, C, stride);
  auto a = ComputeRepresentationMetrics(View(x, T, C));
  auto b = ComputeRepresentationMetrics(strided);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->residual.relative, b->residual.relative);
  EXPECT_EQ(a->cosine.mean_cosine, b->cosine.mean_cosine);
  EXPECT_EQ(a->dirichlet.energy, b->dirichlet.energy);
  EXPECT_EQ(a->erank.erank, b->erank.erank);
  EXPECT_EQ(a->erank_centred.erank, b->erank_centred.erank);
  EXPECT_EQ(a->massive.max_abs, b->massive.max_abs);
}

TEST(RepresentationMetrics, EffectiveRankOfKnownSpectrum) {
  // X = U diag(s) V^T with orthonormal U [T, r], V [C, r]: sigma = s exactly (up to float storage).
  for (auto [T, C] : {std::pair<int64_t, int64_t>{40, 12}, {12, 40}, {300, 70}}) {
    SCOPED_TRACE("T=" + std::to_string(T) + " C=" + std::to_string(C));
    const int64_t r = 6;
    const std::vector<double> s = {10, 5, 3, 1, 0.5, 0.1};
    const std::vector<double> U = RandomOrthonormal(T, r, 21), V = RandomOrthonormal(C, r, 22);
    std::vector<float> x(T * C);
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t c = 0; c < C; ++c) {
        double v = 0;
        for (int64_t k = 0; k < r; ++k) v += U[t * r + k] * s[k] * V[c * r + k];
        x[t * C + c] = static_cast<float>(v);
      }
    }
    auto e = ComputeEffectiveRank(View(x, T, C), /*centred=*/false);
    ASSERT_TRUE(e.ok());
    EXPECT_NEAR(e->erank, ErankOf(s), 1e-5);
    EXPECT_NEAR(e->top_share, 10.0 / 19.6, 1e-6);
  }
}

TEST(RepresentationMetrics, PoolGivesTheSameResult) {
  ThreadPool pool(4);
  for (auto [T, C] : {std::pair<int64_t, int64_t>{700, 40}, {30, 900}}) {
    const std::vector<float> x = RandomMatrix(T, C, 31);
    auto a = ComputeEffectiveRank(View(x, T, C), true);
    auto b = ComputeEffectiveRank(View(x, T, C), true, &pool);
    auto c = ComputeEffectiveRank(View(x, T, C), true, &pool);
    ASSERT_TRUE(a.ok() && b.ok() && c.ok());
    EXPECT_NEAR(a->erank, b->erank, 1e-9 * a->erank);
    EXPECT_EQ(b->erank, c->erank);  // reproducible for a fixed thread count
    auto h1 = ComputeHeadCkaMatrix(View(x, T, C), 4);
    auto h2 = ComputeHeadCkaMatrix(View(x, T, C), 4, &pool);
    ASSERT_TRUE(h1.ok() && h2.ok());
    for (size_t i = 0; i < h1->size(); ++i) EXPECT_NEAR((*h1)[i], (*h2)[i], 1e-12);
  }
}

// ---- CKA ------------------------------------------------------------------------------------------

TEST(RepresentationMetrics, CkaOfItselfIsOne) {
  const std::vector<float> x = RandomMatrix(50, 8, 41);
  auto c = ComputeLinearCka(View(x, 50, 8), View(x, 50, 8));
  ASSERT_TRUE(c.ok());
  EXPECT_NEAR(*c, 1.0, 1e-13);
}

TEST(RepresentationMetrics, CkaInvariantToRotationAndIsotropicScale) {
  const int64_t T = 80, d = 10;
  const std::vector<float> x = RandomMatrix(T, d, 42);
  const std::vector<float> z = RandomMatrix(T, 6, 43);  // an unrelated representation
  std::vector<float> zx = z;  // partly related to x
  for (int64_t t = 0; t < T; ++t) zx[t * 6] += 2 * x[t * d] - x[t * d + 3];
  const std::vector<double> q = RandomOrthonormal(d, d, 44);  // [d, d] orthogonal
  const std::vector<float> y = Transform(x, T, d, q, d, 7.5);  // 7.5 X Q
  auto same = ComputeLinearCka(View(x, T, d), View(y, T, d));
  ASSERT_TRUE(same.ok());
  EXPECT_NEAR(*same, 1.0, 1e-10);
  const std::vector<float>* others[] = {&z, &zx};
  for (const std::vector<float>* other : others) {
    auto a = ComputeLinearCka(View(x, T, d), View(*other, T, 6));
    auto b = ComputeLinearCka(View(y, T, d), View(*other, T, 6));
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_NEAR(*a, *b, 1e-5);
    EXPECT_GT(*a, 0.0);
    EXPECT_LT(*a, 1.0);
  }
  // A translation of X (a bias) changes nothing either: CKA centres the columns.
  std::vector<float> shifted = x;
  for (int64_t t = 0; t < T; ++t) shifted[t * d + 2] += 100.0f;
  auto s = ComputeLinearCka(View(x, T, d), View(shifted, T, d));
  ASSERT_TRUE(s.ok());
  EXPECT_NEAR(*s, 1.0, 1e-9);
}

TEST(RepresentationMetrics, CkaOfIndependentRandomMatricesIsSmall) {
  // E[CKA] ~ sqrt(d1 d2) / T for independent Gaussians: 8 / 2000 here.
  const int64_t T = 2000;
  const std::vector<float> x = RandomMatrix(T, 8, 51), y = RandomMatrix(T, 8, 52);
  auto c = ComputeLinearCka(View(x, T, 8), View(y, T, 8));
  ASSERT_TRUE(c.ok());
  EXPECT_LT(*c, 0.02);
  EXPECT_GE(*c, 0.0);
}

TEST(RepresentationMetrics, HeadCkaMatrix) {
  // Heads 0 and 1: the same representation rotated and scaled; head 2: independent; head 3: 0.
  const int64_t T = 400, hd = 6, H = 4, C = H * hd;
  const std::vector<float> a = RandomMatrix(T, hd, 61), b = RandomMatrix(T, hd, 62);
  const std::vector<double> q = RandomOrthonormal(hd, hd, 63);
  const std::vector<float> ra = Transform(a, T, hd, q, hd, 0.25);
  std::vector<float> x(T * C, 0.0f);
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t d = 0; d < hd; ++d) {
      x[t * C + d] = a[t * hd + d];
      x[t * C + hd + d] = ra[t * hd + d];
      x[t * C + 2 * hd + d] = b[t * hd + d];
      x[t * C + 3 * hd + d] = 0.0f;
    }
  }
  auto m = ComputeHeadCkaMatrix(View(x, T, C), H);
  ASSERT_TRUE(m.ok());
  const auto& k = *m;
  EXPECT_EQ(k[0 * H + 0], 1.0);
  EXPECT_EQ(k[2 * H + 2], 1.0);
  EXPECT_EQ(k[3 * H + 3], 0.0);  // a constant head: defined as 0
  EXPECT_NEAR(k[0 * H + 1], 1.0, 1e-10);
  EXPECT_LT(k[0 * H + 2], 0.05);
  EXPECT_EQ(k[0 * H + 3], 0.0);
  for (int64_t i = 0; i < H; ++i)
    for (int64_t j = 0; j < H; ++j) EXPECT_EQ(k[i * H + j], k[j * H + i]);
  // Each entry equals the pairwise CKA of the head views (stride C).
  for (int64_t i = 0; i < 3; ++i) {
    for (int64_t j = 0; j < i; ++j) {
      auto c = ComputeLinearCka(MakeTokenMatrix(x.data() + i * hd, T, hd, C),
                                MakeTokenMatrix(x.data() + j * hd, T, hd, C));
      ASSERT_TRUE(c.ok());
      EXPECT_NEAR(k[i * H + j], *c, 1e-12);
    }
  }
}

// ---- massive activations ------------------------------------------------------------------------

TEST(RepresentationMetrics, MassiveActivationFindsPlantedOutlier) {
  const int64_t T = 64, C = 32;
  std::vector<float> x = RandomMatrix(T, C, 71);
  x[17 * C + 3] = -500.0f;
  x[0 * C + 9] = 120.0f;  // above 100 but not 1000x the median (~0.67)
  auto m = ComputeMassiveActivations(View(x, T, C));
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->max.token, 17);
  EXPECT_EQ(m->max.channel, 3);
  EXPECT_EQ(m->max.value, -500.0f);
  EXPECT_GT(m->ratio, 500.0);
  EXPECT_EQ(m->massive_count, 0);  // 500 < 1000 x median
  ASSERT_EQ(m->top.size(), 5u);
  EXPECT_EQ(m->top[0].token, 17);
  EXPECT_EQ(m->top[1].value, 120.0f);
  x[17 * C + 3] = -5000.0f;
  auto n = ComputeMassiveActivations(View(x, T, C));
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(n->massive_count, 1);
}

TEST(RepresentationMetrics, MassiveMedianAndTopMatchSorting) {
  std::mt19937 rng(81);
  for (int trial = 0; trial < 40; ++trial) {
    const int64_t T = 1 + rng() % 13, C = 1 + rng() % 11;
    std::vector<float> x(T * C);
    // Few distinct values so that ties and repeated medians are common; signs and -0 too.
    for (float& v : x) v = static_cast<float>(static_cast<int>(rng() % 9) - 4) * 0.75f;
    if (trial % 3 == 0) x[0] = -0.0f;
    if (trial % 5 == 0) for (float& v : x) v *= 1e-30f;  // tiny values, still normal floats
    std::vector<double> a(x.size());
    for (size_t i = 0; i < x.size(); ++i) a[i] = std::fabs(x[i]);
    std::vector<double> sorted = a;
    std::sort(sorted.begin(), sorted.end());
    const size_t n = sorted.size();
    const double median = n % 2 ? sorted[n / 2] : 0.5 * (sorted[n / 2 - 1] + sorted[n / 2]);
    MassiveActivationOptions opt;
    opt.top_k = 4;
    auto m = ComputeMassiveActivations(View(x, T, C), opt);
    ASSERT_TRUE(m.ok());
    EXPECT_EQ(m->median_abs, median) << "trial " << trial;
    EXPECT_EQ(m->max_abs, sorted.back());
    // Top-k: by |x| descending, ties in row-major order.
    std::vector<int64_t> idx(n);
    for (size_t i = 0; i < n; ++i) idx[i] = i;
    std::stable_sort(idx.begin(), idx.end(), [&](int64_t p, int64_t q) { return a[p] > a[q]; });
    ASSERT_EQ(m->top.size(), std::min<size_t>(4, n));
    for (size_t i = 0; i < m->top.size(); ++i) {
      EXPECT_EQ(m->top[i].token * C + m->top[i].channel, idx[i]) << "trial " << trial;
      EXPECT_EQ(m->top[i].value, x[idx[i]]);
    }
    EXPECT_EQ(m->max.token * C + m->max.channel, idx[0]);
  }
}

// ---- sink geometry ------------------------------------------------------------------------------

TEST(RepresentationMetrics, SinkKeyGeometrySeesAPlantedSinkDirection) {
  // Keys: random, except k0, small and along a direction every query shares.
  const int64_t T = 40, hd = 16;
  std::vector<float> k = RandomMatrix(T, hd, 91), q = RandomMatrix(T, hd, 92);
  for (int64_t d = 0; d < hd; ++d) k[d] = d == 0 ? 0.3f : 0.0f;
  for (int64_t t = 0; t < T; ++t) q[t * hd] += 6.0f;
  auto g = ComputeSinkKeyGeometry(View(q, T, hd), View(k, T, hd));
  ASSERT_TRUE(g.ok());
  EXPECT_LT(g->key_norm_ratio, 0.2);
  EXPECT_GT(g->cos_key0, 0.6);
  EXPECT_LT(std::fabs(g->cos_key_other), 0.2);
  // A zero query counts as cosine 0; a zero k0 gives cos_key0 = 0; Tk = 1 gives ratio 1.
  const std::vector<float> zero(hd, 0.0f);
  auto z = ComputeSinkKeyGeometry(View(zero, 1, hd), View(k, 1, hd));
  ASSERT_TRUE(z.ok());
  EXPECT_EQ(z->cos_key0, 0.0);
  EXPECT_EQ(z->key_norm_ratio, 1.0);
  EXPECT_EQ(z->cos_key_other, 0.0);
  auto w = ComputeSinkKeyGeometry(View(q, 1, hd), View(zero, 1, hd));
  ASSERT_TRUE(w.ok());
  EXPECT_EQ(w->cos_key0, 0.0);
  EXPECT_EQ(w->cos_key_mean, 0.0);
}

// ---- bad input ------------------------------------------------------------------------------------

TEST(RepresentationMetrics, BadInputIsAnError) {
  const std::vector<float> x = {1, 2, 3, 4, 5, 6};
  auto bad = [](const Status& s) { return !s.ok() && s.code() == StatusCode::kInvalidArgument; };
  EXPECT_TRUE(bad(ComputePairwiseCosine(MakeTokenMatrix(nullptr, 2, 3)).status()));
  EXPECT_TRUE(bad(ComputePairwiseCosine(MakeTokenMatrix(x.data(), 0, 3)).status()));
  EXPECT_TRUE(bad(ComputeDirichletEnergy(MakeTokenMatrix(x.data(), 2, 0)).status()));
  EXPECT_TRUE(bad(ComputeRankCollapseResidual(MakeTokenMatrix(x.data(), 2, 3, 2)).status()));
  std::vector<float> nan = x;
  nan[4] = std::numeric_limits<float>::quiet_NaN();
  const Status st = ComputeEffectiveRank(View(nan, 2, 3), true).status();
  EXPECT_TRUE(bad(st));
  EXPECT_NE(st.message().find("[1, 1]"), std::string::npos) << st.message();
  std::vector<float> inf = x;
  inf[0] = std::numeric_limits<float>::infinity();
  EXPECT_TRUE(bad(ComputeMassiveActivations(View(inf, 2, 3)).status()));
  EXPECT_TRUE(bad(ComputeRepresentationMetrics(View(inf, 2, 3)).status()));
  MassiveActivationOptions opt;
  opt.top_k = -1;
  EXPECT_TRUE(bad(ComputeMassiveActivations(View(x, 2, 3), opt).status()));
  EXPECT_TRUE(bad(ComputeLinearCka(View(x, 2, 3), View(x, 3, 2)).status()));  // T differs
  EXPECT_TRUE(bad(ComputeHeadCkaMatrix(View(x, 2, 3), 2).status()));  // 3 columns, 2 heads
  EXPECT_TRUE(bad(ComputeHeadCkaMatrix(View(x, 2, 3), 0).status()));
  EXPECT_TRUE(bad(ComputeSinkKeyGeometry(View(x, 2, 3), View(x, 3, 2)).status()));  // hd
  EXPECT_TRUE(bad(ComputeSinkKeyGeometry(View(x, 3, 2), View(x, 2, 3)).status()));
  EXPECT_TRUE(bad(ComputeSinkKeyGeometry(View(x, 3, 2), View(x, 1, 2)).status()));  // Tk < Tq
}


// ---- Chunked accumulators (analyze's long windows) ---------------------------------------------

// Fed in awkward chunks, the head CKA equals the one-shot matrix; columns with a large common
// offset (attention outputs are not centred) do not cost precision through the shifted Gram.
TEST(RepresentationMetrics, HeadCkaAccumulatorMatchesTheWholeMatrix) {
  ThreadPool pool(3);
  for (auto [T, H, hd] : {std::tuple<int64_t, int64_t, int64_t>{1, 2, 3}, {2, 3, 2},
                          {257, 4, 5}, {1000, 7, 16}}) {
    SCOPED_TRACE("T " + std::to_string(T) + " H " + std::to_string(H));
    const int64_t C = H * hd;
    std::vector<float> x = RandomMatrix(T, C, 5 + T);
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t c = 0; c < C; ++c) x[t * C + c] += 40.0f + 0.1f * static_cast<float>(c);
      for (int64_t d = 0; d < hd && H >= 2; ++d) {  // head 1 a scaled copy of head 0 (CKA 1)
        x[t * C + hd + d] = 3.0f * x[t * C + d];
      }
    }
    auto whole = ComputeHeadCkaMatrix(View(x, T, C), H);
    ASSERT_TRUE(whole.ok());
    for (int64_t chunk : {int64_t{1}, int64_t{7}, int64_t{256}, T}) {
      auto acc = HeadCkaAccumulator::Create(H, C);
      ASSERT_TRUE(acc.ok());
      for (int64_t t0 = 0; t0 < T; t0 += chunk) {
        const int64_t n = std::min(chunk, T - t0);
        ASSERT_TRUE(acc->Add(MakeTokenMatrix(x.data() + t0 * C, n, C), chunk == 7 ? &pool : nullptr).ok());
      }
      EXPECT_EQ(acc->rows(), T);
      auto m = acc->Finish();
      ASSERT_TRUE(m.ok()) << m.status().ToString();
      for (size_t i = 0; i < whole->size(); ++i) {
        EXPECT_NEAR((*m)[i], (*whole)[i], 1e-9) << "chunk " << chunk << " entry " << i;
      }
      if (T >= 3) {
        EXPECT_NEAR((*m)[1], 1.0, 1e-9);  // heads 0 and 1
      }
    }
  }
  auto bad = HeadCkaAccumulator::Create(3, 8);
  EXPECT_FALSE(bad.ok());
  auto acc = HeadCkaAccumulator::Create(2, 4);
  ASSERT_TRUE(acc.ok());
  EXPECT_FALSE(acc->Finish().ok());  // no rows
  const std::vector<float> y = RandomMatrix(3, 6, 1);
  EXPECT_FALSE(acc->Add(View(y, 3, 6)).ok());  // 6 columns, not 4
}

// Queries fed chunk by chunk at their key positions give ComputeSinkKeyGeometry's numbers,
// including zero queries and keys; positions that go backwards or past the keys are refused.
TEST(RepresentationMetrics, SinkKeyGeometryAccumulatorMatchesOneShot) {
  for (auto [Tq, Tk, hd] : {std::tuple<int64_t, int64_t, int64_t>{1, 1, 2}, {5, 5, 3},
                            {37, 40, 4}, {300, 300, 8}}) {
    SCOPED_TRACE("Tq " + std::to_string(Tq) + " Tk " + std::to_string(Tk));
    std::vector<float> q = RandomMatrix(Tq, hd, 3 + Tq), k = RandomMatrix(Tk, hd, 9 + Tk);
    if (Tq > 2) std::fill(q.begin() + hd, q.begin() + 2 * hd, 0.0f);  // a zero query
    if (Tk > 3) std::fill(k.begin() + 3 * hd, k.begin() + 4 * hd, 0.0f);  // a zero key
    auto whole = ComputeSinkKeyGeometry(View(q, Tq, hd), View(k, Tk, hd));
    ASSERT_TRUE(whole.ok());
    for (int64_t chunk : {int64_t{1}, int64_t{4}, Tq}) {
      SinkKeyGeometryAccumulator acc(hd);
      for (int64_t t0 = 0; t0 < Tq; t0 += chunk) {
        const int64_t n = std::min(chunk, Tq - t0);
        const int64_t first = Tk - Tq + t0;  // bottom-right: the keys so far end with these rows
        ASSERT_TRUE(acc.Add(MakeTokenMatrix(q.data() + t0 * hd, n, hd),
                            MakeTokenMatrix(k.data(), first + n, hd), first).ok());
      }
      auto g = acc.Finish(View(k, Tk, hd));
      ASSERT_TRUE(g.ok());
      EXPECT_NEAR(g->cos_key0, whole->cos_key0, 1e-12);
      EXPECT_NEAR(g->cos_key_mean, whole->cos_key_mean, 1e-12);
      EXPECT_NEAR(g->cos_key_other, whole->cos_key_other, 1e-12);
      EXPECT_EQ(g->key_norm_ratio, whole->key_norm_ratio);
    }
  }
  const std::vector<float> q = RandomMatrix(4, 2, 1), k = RandomMatrix(6, 2, 2);
  SinkKeyGeometryAccumulator acc(2);
  EXPECT_FALSE(acc.Finish(View(k, 6, 2)).ok());                                // no query
  EXPECT_FALSE(acc.Add(View(q, 4, 2), View(k, 3, 2), 0).ok());                 // too few keys
  EXPECT_FALSE(acc.Add(View(q, 4, 3), View(k, 6, 3), 0).ok());                 // wrong head_dim
  ASSERT_TRUE(acc.Add(View(q, 2, 2), View(k, 4, 2), 2).ok());                  // positions 2, 3
  EXPECT_FALSE(acc.Add(View(q, 1, 2), View(k, 6, 2), 3).ok());                 // backwards
  std::vector<float> bad_q = q;
  bad_q[1] = std::numeric_limits<float>::quiet_NaN();
  SinkKeyGeometryAccumulator nan_acc(2);
  EXPECT_FALSE(nan_acc.Add(View(bad_q, 2, 2), View(k, 6, 2), 0).ok());        // NaN query
}

// One rank: the across-ranks entry point is the one-process computation, bit for bit (every
// collective of a single-process communicator leaves its values as they are), on T below and
// above C (the gathered and the Gram paths), a zero row and a massive channel; bad input is an
// error.
TEST(RepresentationMetrics, AcrossOneRankIsTheOneProcessResult) {
  std::mt19937_64 rng(77);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (auto [T, C] : {std::pair<int64_t, int64_t>{1, 4}, {6, 10}, {50, 7}, {129, 16}}) {
    std::vector<float> x(T * C);
    for (float& v : x) v = nd(rng);
    if (T > 3) std::fill_n(x.data() + 3 * C, C, 0.0f);
    for (int64_t t = 0; t < T; ++t) x[t * C + 1] *= 300.0f;
    RepresentationMetricsOptions opt;
    opt.massive.top_k = 4;
    const TokenMatrix m = MakeTokenMatrix(x.data(), T, C);
    auto one = ComputeRepresentationMetrics(m, opt);
    auto across = ComputeRepresentationMetricsAcrossRanks(m, dist::SingleProcess(), opt);
    ASSERT_TRUE(one.ok() && across.ok()) << across.status().ToString();
    const RepresentationMetrics &a = across.value(), &b = one.value();
    EXPECT_EQ(a.residual.relative, b.residual.relative);
    EXPECT_EQ(a.cosine.mean_cosine, b.cosine.mean_cosine);
    EXPECT_EQ(a.dirichlet.energy, b.dirichlet.energy);
    EXPECT_EQ(a.erank.erank, b.erank.erank);
    EXPECT_EQ(a.erank_centred.erank, b.erank_centred.erank);
    EXPECT_EQ(a.massive.median_abs, b.massive.median_abs);
    EXPECT_EQ(a.massive.max.token, b.massive.max.token);
    EXPECT_EQ(a.massive.massive_count, b.massive.massive_count);
    ASSERT_EQ(a.massive.top.size(), b.massive.top.size());
    for (size_t i = 0; i < b.massive.top.size(); ++i) {
      EXPECT_EQ(a.massive.top[i].token, b.massive.top[i].token);
      EXPECT_EQ(a.massive.top[i].value, b.massive.top[i].value);
    }
  }
  std::vector<float> x(8, 1.0f);
  x[5] = std::numeric_limits<float>::infinity();
  EXPECT_FALSE(ComputeRepresentationMetricsAcrossRanks(MakeTokenMatrix(x.data(), 2, 4),
                                                       dist::SingleProcess()).ok());
  EXPECT_FALSE(ComputeRepresentationMetricsAcrossRanks(MakeTokenMatrix(nullptr, 0, 4),
                                                       dist::SingleProcess()).ok());
  EXPECT_FALSE(ComputeRepresentationMetricsAcrossRanks(MakeTokenMatrix(x.data(), 1, 4, 2),
                                                       dist::SingleProcess()).ok());
}

}  // namespace
}  // namespace attnlab
