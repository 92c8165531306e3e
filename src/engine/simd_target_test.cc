// The SIMD dispatch (attnlab/simd_target.h): names, availability, forcing a target, and that
// every available target's kernels give the same answers (the kernel tests themselves run once
// per target through ctest's simd.<target>.kernels, CMakeLists.txt).
#include "attnlab/simd_target.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "attnlab/attention.h"
#include "attnlab/attention_decode.h"
#include "attnlab/tensor_view.h"
#include "engine/kernel_table.h"

namespace attnlab {
namespace {

// Restores the active target at scope exit.
class ScopedTarget {
 public:
  ScopedTarget() : saved_(ActiveSimdTarget()) {}
  ~ScopedTarget() { EXPECT_TRUE(SetSimdTarget(saved_).ok()); }

 private:
  SimdTarget saved_;
};

TEST(SimdTarget, NamesRoundTripAndUnknownNamesAreRejected) {
  for (SimdTarget t : {SimdTarget::kBaseline, SimdTarget::kAvx2, SimdTarget::kAvx512}) {
    Result<SimdTarget> parsed = ParseSimdTarget(SimdTargetName(t));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, t);
  }
  Result<SimdTarget> bad = ParseSimdTarget("avx1024");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("avx1024"), std::string::npos);
  EXPECT_FALSE(ParseSimdTarget("").ok());
}

TEST(SimdTarget, BaselineIsAlwaysAvailableAndTheListIsBestFirst) {
  const std::vector<SimdTarget> available = AvailableSimdTargets();
  ASSERT_FALSE(available.empty());
  EXPECT_EQ(available.back(), SimdTarget::kBaseline);
  for (size_t i = 1; i < available.size(); ++i) {
    EXPECT_GT(static_cast<int>(available[i - 1]), static_cast<int>(available[i]));
  }
  for (SimdTarget t : available) EXPECT_TRUE(SimdTargetAvailable(t));
#if defined(__x86_64__)
  __builtin_cpu_init();
  // Whatever this CPU runs (and the build compiled) is offered; what it cannot run is not.
  EXPECT_EQ(SimdTargetAvailable(SimdTarget::kAvx512) &&
                !__builtin_cpu_supports("x86-64-v4"),
            false);
  EXPECT_EQ(SimdTargetAvailable(SimdTarget::kAvx2) && !__builtin_cpu_supports("x86-64-v3"),
            false);
#endif
}

TEST(SimdTarget, TheEnvironmentOrTheBestTargetIsActive) {
  const char* env = std::getenv("ATTNLAB_SIMD");
  Result<SimdTarget> forced = ParseSimdTarget(env ? env : "");
  if (forced.ok() && SimdTargetAvailable(*forced)) {
    EXPECT_EQ(ActiveSimdTarget(), *forced) << "ATTNLAB_SIMD=" << env;
  } else {
    EXPECT_EQ(ActiveSimdTarget(), AvailableSimdTargets().front());
  }
  const std::string d = SimdTargetDescription(ActiveSimdTarget());
  EXPECT_NE(d.find(std::string(SimdTargetName(ActiveSimdTarget()))), std::string::npos) << d;
  EXPECT_NE(d.find("lanes"), std::string::npos) << d;
}

TEST(SimdTarget, ForcingATargetSwitchesTheKernelsAndUnavailableOnesAreRefused) {
  ScopedTarget restore;
  for (SimdTarget t : AvailableSimdTargets()) {
    ASSERT_TRUE(SetSimdTarget(t).ok());
    EXPECT_EQ(ActiveSimdTarget(), t);
    EXPECT_EQ(internal::ActiveKernels().target, t);
    const int lanes = internal::ActiveKernels().lanes;
    EXPECT_TRUE(lanes == 4 || lanes == 8 || lanes == 16) << lanes;
    EXPECT_EQ(internal::ActiveKernels().tile_cols % 16, 0);
  }
  for (SimdTarget t : {SimdTarget::kAvx2, SimdTarget::kAvx512}) {
    if (SimdTargetAvailable(t)) continue;
    const Status s = SetSimdTarget(t);
    EXPECT_FALSE(s.ok());
    EXPECT_NE(s.message().find(std::string(SimdTargetName(t))), std::string::npos);
  }
}

// The same flash forward and decode on every available target: they differ only in summation
// order, so they agree to a few ulps of the output scale (the per-target kernel tests compare
// each against the double reference with derived tolerances).
TEST(SimdTarget, EveryTargetComputesTheSameAttention) {
  ScopedTarget restore;
  std::mt19937 rng(7);
  std::normal_distribution<float> nd;
  AttentionShape s;
  s.batch = 1, s.heads_q = 4, s.heads_kv = 2, s.len_q = 97, s.len_k = 97, s.head_dim = 59;
  const int64_t n = s.heads_q * s.len_q * s.head_dim, nk = s.heads_kv * s.len_k * s.head_dim;
  std::vector<float> q(n), k(nk), v(nk);
  for (float* p : {q.data(), k.data(), v.data()}) {
    for (int64_t i = 0; i < (p == q.data() ? n : nk); ++i) p[i] = nd(rng);
  }
  AttentionParams params;
  params.mask.causal = true;
  const auto view = [&](const std::vector<float>& x, int64_t h, int64_t l) {
    return ContiguousView(x.data(), 1, h, l, s.head_dim);
  };
  std::vector<std::vector<float>> outs, decodes;
  for (SimdTarget t : AvailableSimdTargets()) {
    ASSERT_TRUE(SetSimdTarget(t).ok());
    std::vector<float> o(n);
    const AttentionTensorMut ov = ContiguousView(o.data(), 1, s.heads_q, s.len_q, s.head_dim);
    ASSERT_TRUE(AttentionForwardFlash(s, params, view(q, s.heads_q, s.len_q),
                                      view(k, s.heads_kv, s.len_k), view(v, s.heads_kv, s.len_k),
                                      ov, {})
                    .ok());
    outs.push_back(o);
    // Decode of the last query row against bf16 keys and values.
    DecodeShape ds{s.heads_q, s.heads_kv, s.len_k, s.head_dim};
    std::vector<uint16_t> k16(nk), v16(nk);
    ConvertToKvDtype(k.data(), nk, KvDtype::kBF16, k16.data());
    ConvertToKvDtype(v.data(), nk, KvDtype::kBF16, v16.data());
    KvView kv{k16.data(), KvDtype::kBF16, nk, s.len_k * s.head_dim, s.head_dim};
    KvView vv{v16.data(), KvDtype::kBF16, nk, s.len_k * s.head_dim, s.head_dim};
    std::vector<float> qd(s.heads_q * s.head_dim), od(s.heads_q * s.head_dim);
    for (int64_t h = 0; h < s.heads_q; ++h) {
      for (int64_t d = 0; d < s.head_dim; ++d) {
        qd[h * s.head_dim + d] = q[(h * s.len_q + s.len_q - 1) * s.head_dim + d];
      }
    }
    ASSERT_TRUE(AttentionDecode(ds, DecodeParams{}, qd, kv, vv, od, {}).ok());
    decodes.push_back(od);
  }
  for (size_t t = 1; t < outs.size(); ++t) {
    for (int64_t i = 0; i < n; ++i) ASSERT_NEAR(outs[t][i], outs[0][i], 2e-6f) << "target " << t;
    for (size_t i = 0; i < decodes[0].size(); ++i) {
      ASSERT_NEAR(decodes[t][i], decodes[0][i], 2e-6f) << "decode, target " << t;
    }
  }
}

// The attention statistics' row loops (RowStatsTable): every target against a double-precision
// reference of the contract in kernel_table.h, on rows with invisible keys, padding, a long row
// (several flushes) and a one-hot row; ties in the arg max keep the first column.
TEST(SimdTarget, EveryTargetComputesTheSameRowStatistics) {
  ScopedTarget restore;
  std::mt19937 rng(8);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  const float ninf = -INFINITY;
  for (int64_t ld : {16, 48, 1040}) {
    std::vector<float> t(ld);
    for (int64_t j = 0; j < ld; ++j) t[j] = (j % 7 == 3 || j >= ld - 5) ? ninf : nd(rng);
    t[1] = t[9] = 9.0f;  // the max twice: the first column wins
    double mx = ninf, s0 = 0, s1 = 0, s2 = 0, p0 = 0, p2 = 0;
    for (float x : t) mx = std::max<double>(mx, x);
    const int64_t dist0 = ld + 11;
    const float b2 = -0.7f;
    for (int64_t j = 0; j < ld; ++j) {
      if (t[j] == ninf) continue;
      const double u = t[j] - mx, e = std::exp2(u);
      s0 += e, s1 += e * u, s2 += e * static_cast<double>(dist0 - j);
      const double p = 1.0 / (1.0 + std::exp2(-(static_cast<double>(t[j]) + b2)));
      p0 += p, p2 += p * static_cast<double>(dist0 - j);
    }
    // Two renormalised rows for the JSD (7 keys, zero-padded to 8).
    std::vector<double> q1(8, 0.0), q2(8, 0.0), l1(8, 0.0), l2(8, 0.0);
    double z1 = 0, z2 = 0, want_js = 0;
    for (int j = 0; j < 7; ++j) z1 += q1[j] = std::exp(nd(rng) * 0.3), z2 += q2[j] = j == 2 ? 0.0 : std::exp(nd(rng) * 0.3);
    for (int j = 0; j < 7; ++j) {
      q1[j] /= z1, q2[j] /= z2;
      l1[j] = std::log(q1[j]), l2[j] = q2[j] > 0 ? std::log(q2[j]) : 0.0;
      const double m = 0.5 * (q1[j] + q2[j]);
      if (q1[j] > 0) want_js += 0.5 * q1[j] * std::log(q1[j] / m);
      if (q2[j] > 0) want_js += 0.5 * q2[j] * std::log(q2[j] / m);
    }
    want_js = std::sqrt(want_js / std::log(2.0));
    for (SimdTarget target : AvailableSimdTargets()) {
      ASSERT_TRUE(SetSimdTarget(target).ok());
      const internal::RowStatsTable& k = internal::ActiveKernels().row_stats;
      const std::string what = std::string(SimdTargetName(target)) + " ld " + std::to_string(ld);
      EXPECT_EQ(k.row_max(t.data(), ld), 9.0f) << what;
      int64_t arg = -1;
      EXPECT_EQ(k.row_arg_max(t.data(), ld, &arg), 9.0f) << what;
      EXPECT_EQ(arg, 1) << what;
      const internal::RowSumsD s = k.softmax_row_sums(t.data(), ld, 9.0f, dist0);
      EXPECT_NEAR(s.s0, s0, 1e-5 * s0) << what;
      EXPECT_NEAR(s.s1, s1, 1e-5 * (1 + std::abs(s1))) << what;
      EXPECT_NEAR(s.s2, s2, 1e-5 * std::abs(s2)) << what;
      const internal::RowSumsD g = k.sigmoid_row_sums(t.data(), ld, b2, dist0);
      EXPECT_NEAR(g.s0, p0, 1e-5 * p0) << what;
      EXPECT_NEAR(g.s2, p2, 1e-5 * std::abs(p2)) << what;
      EXPECT_NEAR(k.js_distance(q1.data(), l1.data(), q2.data(), l2.data(), 8), want_js, 1e-12)
          << what;
    }
  }
}

// row_arg_max: the first column holding the max wherever the ties fall (in one vector, in other
// vectors of the four chains, in the tail past the last whole step), with -inf and NaN keys
// around; every target, awkward lengths.
TEST(SimdTarget, EveryTargetsRowArgMaxKeepsTheFirstOfTies) {
  ScopedTarget restore;
  std::mt19937 rng(13);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (int64_t ld : {16, 48, 64, 80, 1040}) {
    for (int trial = 0; trial < 40; ++trial) {
      std::vector<float> t(ld);
      for (float& x : t) x = nd(rng);
      t[rng() % ld] = -INFINITY;
      t[rng() % ld] = NAN;
      int64_t a = rng() % ld, b = rng() % ld;
      if (std::isnan(t[a]) || std::isnan(t[b])) continue;
      t[a] = t[b] = 7.5f;
      const int64_t want = std::min(a, b);
      for (SimdTarget target : AvailableSimdTargets()) {
        ASSERT_TRUE(SetSimdTarget(target).ok());
        int64_t arg = -1;
        const float m = internal::ActiveKernels().row_stats.row_arg_max(t.data(), ld, &arg);
        ASSERT_EQ(m, 7.5f) << SimdTargetName(target) << " ld " << ld;
        ASSERT_EQ(arg, want) << SimdTargetName(target) << " ld " << ld << " ties " << a << ", " << b;
      }
    }
  }
}

// softmax_row_sums at the edges of its exp2: keys 126-127 below the max (2^u for u >= -126, 0
// below, as simd::Exp2), far below, -inf (0) across two flushes, against double; one NaN score
// makes every sum NaN, on every target.
TEST(SimdTarget, EveryTargetsSoftmaxRowSumsHandleUnderflowAndNaN) {
  ScopedTarget restore;
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0.0f, 2.0f);
  const int64_t ld = 272;
  std::vector<float> t(ld);
  for (int64_t j = 0; j < ld; ++j) t[j] = nd(rng);
  const float mx = 20.0f;
  t[100] = mx;
  t[3] = mx - 125.5f, t[4] = mx - 126.0f, t[5] = mx - 126.25f, t[6] = mx - 127.0f;
  t[7] = mx - 400.0f, t[8] = -INFINITY, t[ld - 1] = -INFINITY;
  double s0 = 0, s1 = 0, s2 = 0;
  const int64_t dist0 = 500;
  for (int64_t j = 0; j < ld; ++j) {
    const double u = static_cast<double>(t[j]) - mx;
    if (!(u >= -126.0)) continue;
    const double e = std::exp2(u);
    s0 += e, s1 += e * u, s2 += e * static_cast<double>(dist0 - j);
  }
  for (SimdTarget target : AvailableSimdTargets()) {
    ASSERT_TRUE(SetSimdTarget(target).ok());
    const internal::RowStatsTable& k = internal::ActiveKernels().row_stats;
    const std::string what(SimdTargetName(target));
    const internal::RowSumsD s = k.softmax_row_sums(t.data(), ld, mx, dist0);
    EXPECT_NEAR(s.s0, s0, 1e-6 * s0) << what;
    EXPECT_NEAR(s.s1, s1, 1e-6 * (1 + std::abs(s1))) << what;
    EXPECT_NEAR(s.s2, s2, 1e-6 * std::abs(s2)) << what;
    std::vector<float> bad = t;
    bad[200] = NAN;
    const internal::RowSumsD n = k.softmax_row_sums(bad.data(), ld, mx, dist0);
    EXPECT_TRUE(std::isnan(n.s0) && std::isnan(n.s1) && std::isnan(n.s2)) << what;
  }
}

// score_panels: every target equals the plain triple loop exactly on small integers (exact
// products and sums), for one row, a tail of rows, several panels and head dims 1, 7, 64.
TEST(SimdTarget, EveryTargetScoresPackedKeysExactly) {
  ScopedTarget restore;
  std::mt19937 rng(12);
  for (int64_t d : {1, 7, 64}) {
    for (int64_t rows : {1, 7, 64}) {
      const int64_t keys = 150, panels = 3, ld = panels * internal::kScorePanel + 16;
      std::vector<float> q(rows * d), kp(panels * d * internal::kScorePanel, 0.0f);
      std::vector<float> kk(keys * d);
      for (float& x : q) x = static_cast<float>(static_cast<int>(rng() % 9) - 4);
      for (float& x : kk) x = static_cast<float>(static_cast<int>(rng() % 9) - 4);
      for (int64_t j = 0; j < keys; ++j) {
        for (int64_t e = 0; e < d; ++e) kp[internal::ScorePanelIndex(j, e, d)] = kk[j * d + e];
      }
      for (SimdTarget target : AvailableSimdTargets()) {
        ASSERT_TRUE(SetSimdTarget(target).ok());
        std::vector<float> out(rows * ld, 123.0f);
        internal::ActiveKernels().row_stats.score_panels(rows, panels, d, q.data(), kp.data(),
                                                         out.data(), ld);
        const std::string what = std::string(SimdTargetName(target)) + " d " +
                                 std::to_string(d) + " rows " + std::to_string(rows);
        for (int64_t r = 0; r < rows; ++r) {
          for (int64_t j = 0; j < panels * internal::kScorePanel; ++j) {
            double want = 0;
            for (int64_t e = 0; e < d && j < keys; ++e) want += q[r * d + e] * kk[j * d + e];
            ASSERT_EQ(out[r * ld + j], want) << what << " row " << r << " key " << j;
          }
          for (int64_t j = panels * internal::kScorePanel; j < ld; ++j) {
            ASSERT_EQ(out[r * ld + j], 123.0f) << what << " past the panels";
          }
        }
      }
    }
  }
}

// exp2_accumulate: every target against std::exp2 in double over awkward lengths (empty, below
// one vector, a tail, several vectors), with -inf (adds 0), very negative scores (underflow to
// 0) and a NaN (poisons its own key only); keys past n are untouched.
TEST(SimdTarget, EveryTargetAccumulatesExp2) {
  ScopedTarget restore;
  std::mt19937 rng(10);
  std::normal_distribution<float> nd(0.0f, 4.0f);
  for (int64_t n : {0, 1, 5, 16, 23, 100}) {
    std::vector<float> t(n + 3);
    for (float& x : t) x = nd(rng);
    if (n > 2) t[1] = -INFINITY, t[2] = -300.0f;
    if (n > 4) t[4] = NAN;
    const float shift2 = 1.25f;
    for (SimdTarget target : AvailableSimdTargets()) {
      ASSERT_TRUE(SetSimdTarget(target).ok());
      std::vector<float> acc(n + 3, 0.5f);
      internal::ActiveKernels().row_stats.exp2_accumulate(t.data(), n, shift2, acc.data());
      const std::string what = std::string(SimdTargetName(target)) + " n " + std::to_string(n);
      for (int64_t j = 0; j < n; ++j) {
        if (std::isnan(t[j])) {
          EXPECT_TRUE(std::isnan(acc[j])) << what;
          continue;
        }
        const double want = 0.5 + std::exp2(static_cast<double>(t[j]) - shift2);
        EXPECT_NEAR(acc[j], want, 4e-7 * want) << what << " key " << j;
      }
      for (int64_t j = n; j < n + 3; ++j) EXPECT_EQ(acc[j], 0.5f) << what;
    }
  }
}

// The Gram kernel (GramTable): every target's lower triangle equals the plain triple loop
// exactly on small integers (every product and partial sum is exact in double), for awkward
// widths (one column, below and past a tile, past 16) and row counts.
TEST(SimdTarget, EveryTargetComputesTheSameGramExactly) {
  ScopedTarget restore;
  std::mt19937 rng(9);
  for (int64_t n : {1, 7, 17, 100}) {
    for (int64_t rows : {1, 5, 130}) {
      const int64_t ld = (n + 15) / 16 * 16;
      std::vector<double> x(rows * ld, 0.0);
      for (int64_t t = 0; t < rows; ++t) {
        for (int64_t c = 0; c < n; ++c) x[t * ld + c] = static_cast<double>(rng() % 19) - 9.0;
      }
      std::vector<double> want(ld * ld, 0.0);
      for (int64_t a = 0; a < n; ++a) {
        for (int64_t b = 0; b <= a; ++b) {
          for (int64_t t = 0; t < rows; ++t) want[a * ld + b] += x[t * ld + a] * x[t * ld + b];
        }
      }
      for (SimdTarget target : AvailableSimdTargets()) {
        ASSERT_TRUE(SetSimdTarget(target).ok());
        const internal::GramTable& k = internal::ActiveKernels().gram;
        const int64_t w = k.gram_columns();
        ASSERT_TRUE(w % 4 == 0 && 16 % w == 0) << w;
        std::vector<double> g(ld * ld, 1.0);  // the kernel adds: start from 1
        std::vector<double> xp(rows * ld, 0.0);  // the kernel's panels
        for (int64_t t = 0; t < rows; ++t) {
          for (int64_t c = 0; c < ld; ++c) xp[internal::GramPackedIndex(t, c, rows)] = x[t * ld + c];
        }
        for (int64_t b0 = 0; b0 < n; b0 += w) k.gram_lower_columns(xp.data(), rows, n, b0, g.data(), ld);
        for (int64_t a = 0; a < n; ++a) {
          for (int64_t b = 0; b <= a; ++b) {
            ASSERT_EQ(g[a * ld + b], want[a * ld + b] + 1.0)
                << SimdTargetName(target) << " n " << n << " rows " << rows << " at " << a << "," << b;
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace attnlab
