// Flash kernels against the reference twin over random configurations (attention_test_util.h
// draws them: every mask and softmax variant, GQA ratios, awkward lengths and head dims, three
// memory layouts, fully masked rows, logits up to ~1e4, sink logits in [-10, 10]).
//
// Tolerance, derived from fp32 precision (see AttentionTruth): every element must satisfy
//   |flash - truth| <= kC * u * kappa * M
// with u = 2^-24, kappa the condition of the case's logits plus the summation depth, and M the
// element's term-wise magnitude. kC = 16 covers the folded scale * log2(e) rounding, exp2's
// 2-ulp polynomial, the final normalisation and lse conversion. A fully masked row has M = 0,
// so it must be exactly zero.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "attnlab/attention.h"
#include "attnlab/thread_pool.h"
#include "engine/attention_flash_common.h"
#include "engine/attention_test_util.h"

namespace attnlab {
namespace {

using testing::AttentionCase;
using testing::AttentionTruth;
using testing::BoundRatio;
using testing::Tensor4;

constexpr double kU = 1.0 / (1 << 24);
constexpr double kC = 16.0;

int TrialsFromEnv(int dflt) {
  const char* e = std::getenv("ATTNLAB_TEST_TRIALS");
  return e ? std::atoi(e) : dflt;
}
uint64_t SeedFromEnv(uint64_t dflt) {
  const char* e = std::getenv("ATTNLAB_TEST_SEED");
  return e ? std::strtoull(e, nullptr, 10) : dflt;
}

double LseRatio(const std::vector<float>& got, const std::vector<double>& truth,
                const std::vector<double>& mag, double c_u_kappa) {
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isinf(truth[i]) || std::isinf(got[i]) || std::isnan(got[i])) {
      if (got[i] != truth[i]) return INFINITY;
      continue;
    }
    worst = std::max(worst, std::abs(got[i] - truth[i]) / (c_u_kappa * mag[i]));
  }
  return worst;
}

// Checks one case forward and backward; returns the worst error / tolerance ratio.
double CheckCase(const AttentionCase& c) {
  const AttentionShape& s = c.shape;
  AttentionTruth t;
  testing::ComputeTruth(c, /*with_backward=*/true, t);
  const testing::Layout lay = c.q.layout;
  Tensor4<float> out, dq, dk, dv;
  out.Init(s.batch, s.heads_q, s.len_q, s.head_dim, lay);
  dq.Init(s.batch, s.heads_q, s.len_q, s.head_dim, lay);
  dk.Init(s.batch, s.heads_kv, s.len_k, s.head_dim, lay);
  dv.Init(s.batch, s.heads_kv, s.len_k, s.head_dim, lay);
  // Poison the outputs: the kernels must overwrite every element.
  for (auto* g : {&out, &dq, &dk, &dv}) std::fill(g->data.begin(), g->data.end(), NAN);
  std::vector<float> lse(s.batch * s.heads_q * s.len_q), dsink(s.heads_q, NAN);
  EXPECT_TRUE(
      AttentionForwardFlash(s, c.params, c.q.cview(), c.k.cview(), c.v.cview(), out.view, lse).ok());
  EXPECT_TRUE(AttentionBackwardFlash(s, c.params, c.q.cview(), c.k.cview(), c.v.cview(),
                                     out.cview(), lse, c.dout.cview(), dq.view, dk.view, dv.view,
                                     dsink)
                  .ok());
  const double tol = kC * kU * t.kappa;
  double worst = BoundRatio(out, t.out, t.m_out, tol);
  EXPECT_LE(worst, 1.0) << "out";
  if (c.params.softmax != SoftmaxKind::kSigmoid) {
    const double lr = LseRatio(lse, t.lse, t.m_lse, tol);
    EXPECT_LE(lr, 1.0) << "lse";
    worst = std::max(worst, lr);
  }
  // The backward reads the forward's fp32 output and lse, one more fp32 stage: 2x the bound.
  const double rq = BoundRatio(dq, t.dq, t.m_dq, 2 * tol);
  const double rk = BoundRatio(dk, t.dk, t.m_dk, 2 * tol);
  const double rv = BoundRatio(dv, t.dv, t.m_dv, 2 * tol);
  EXPECT_LE(rq, 1.0) << "dq";
  EXPECT_LE(rk, 1.0) << "dk";
  EXPECT_LE(rv, 1.0) << "dv";
  worst = std::max({worst, rq, rk, rv});
  if (c.params.softmax == SoftmaxKind::kSinkLogit) {
    for (int64_t h = 0; h < s.heads_q; ++h) {
      const double r = std::abs(dsink[h] - t.d_sink[h]) / (2 * tol * t.m_sink[h] + 1e-30);
      EXPECT_LE(r, 1.0) << "d_sink[" << h << "] = " << dsink[h] << " vs " << t.d_sink[h];
      worst = std::max(worst, r);
    }
  }
  return worst;
}

TEST(AttentionFlash, ForwardMatchesReferenceOnRandomConfigs) {
  std::mt19937_64 rng(SeedFromEnv(1234));
  double worst = 0;
  const int trials = TrialsFromEnv(250);
  for (int trial = 0; trial < trials; ++trial) {
    AttentionCase c;
    testing::MakeRandomCase(rng, c);
    const AttentionShape& s = c.shape;
    SCOPED_TRACE("trial " + std::to_string(trial) + ": " + c.Describe());
    AttentionTruth t;
    testing::ComputeTruth(c, /*with_backward=*/false, t);
    Tensor4<float> out;
    out.Init(s.batch, s.heads_q, s.len_q, s.head_dim, c.q.layout);
    std::vector<float> lse(s.batch * s.heads_q * s.len_q);
    ASSERT_TRUE(
        AttentionForwardFlash(s, c.params, c.q.cview(), c.k.cview(), c.v.cview(), out.view, lse)
            .ok());
    const double tol = kC * kU * t.kappa;
    const double r = BoundRatio(out, t.out, t.m_out, tol);
    EXPECT_LE(r, 1.0) << "kappa " << t.kappa;
    worst = std::max(worst, r);
    if (c.params.softmax != SoftmaxKind::kSigmoid) {
      const double lr = LseRatio(lse, t.lse, t.m_lse, tol);
      EXPECT_LE(lr, 1.0);
      worst = std::max(worst, lr);
    }
  }
  std::printf("%d configurations; worst error / tolerance = %.3f\n", trials, worst);
}

TEST(AttentionFlash, ForwardAndBackwardMatchReferenceOnRandomConfigs) {
  std::mt19937_64 rng(SeedFromEnv(4321));
  double worst = 0;
  const int trials = TrialsFromEnv(220);
  for (int trial = 0; trial < trials; ++trial) {
    AttentionCase c;
    testing::MakeRandomCase(rng, c, /*max_work=*/2e6);
    SCOPED_TRACE("trial " + std::to_string(trial) + ": " + c.Describe());
    worst = std::max(worst, CheckCase(c));
  }
  std::printf("%d configurations; worst error / tolerance = %.3f\n", trials, worst);
}

// Every combination of mask features x softmax variant x GQA ratio, at lengths and a head_dim
// that divide no tile (97 queries, 113 keys, head_dim 59), so each feature meets each other.
TEST(AttentionFlash, EveryMaskAndVariantCombination) {
  std::mt19937_64 rng(77);
  double worst = 0;
  int count = 0;
  for (int causal = 0; causal < 2; ++causal)
  for (int window = 0; window < 3; ++window)
  for (int prefix = 0; prefix < 3; ++prefix)  // none, 2 sinks, 20 global tokens (4 rows)
  for (int first = 0; first < 2; ++first)
  for (int expl = 0; expl < 2; ++expl)
  for (int variant = 0; variant < 4; ++variant)
  for (int64_t ratio : {1, 4}) {
    AttentionCase c;
    c.shape = AttentionShape{1, ratio, 1, 97, 113, 59};
    AttentionMask& m = c.params.mask;
    m.causal = causal;
    if (window == 1) m.window_left = 30;
    if (window == 2) m.window_left = 30, m.window_right = causal ? -1 : 5;
    m.n_sink = prefix == 1 ? 2 : 0;
    m.n_global = prefix == 2 ? 20 : 0;  // p(i) = i + 16: rows 0-3 and keys 0-19 are global
    m.mask_first_key = first;
    c.params.softmax = static_cast<SoftmaxKind>(variant);
    if (expl) testing::AddRandomExplicitMask(rng, c);
    testing::FillCase(rng, c, testing::Layout::kTokenMajor);
    SCOPED_TRACE(c.Describe());
    worst = std::max(worst, CheckCase(c));
    ++count;
  }
  std::printf("%d combinations; worst error / tolerance = %.3f\n", count, worst);
}

// Same inputs, same thread count: bit-identical results (no atomics, fixed reduction order).
TEST(AttentionFlash, IsBitReproducible) {
  std::mt19937_64 rng(99);
  AttentionCase c;
  testing::MakeRandomCase(rng, c, 2e6);
  const AttentionShape& s = c.shape;
  auto run = [&](std::vector<float>& o, std::vector<float>& g) {
    Tensor4<float> out, dq, dk, dv;
    out.Init(s.batch, s.heads_q, s.len_q, s.head_dim, c.q.layout);
    dq.Init(s.batch, s.heads_q, s.len_q, s.head_dim, c.q.layout);
    dk.Init(s.batch, s.heads_kv, s.len_k, s.head_dim, c.q.layout);
    dv.Init(s.batch, s.heads_kv, s.len_k, s.head_dim, c.q.layout);
    std::vector<float> lse(s.batch * s.heads_q * s.len_q), dsink(s.heads_q);
    ASSERT_TRUE(AttentionForwardFlash(s, c.params, c.q.cview(), c.k.cview(), c.v.cview(), out.view, lse).ok());
    ASSERT_TRUE(AttentionBackwardFlash(s, c.params, c.q.cview(), c.k.cview(), c.v.cview(),
                                       out.cview(), lse, c.dout.cview(), dq.view, dk.view, dv.view, dsink).ok());
    o = out.data;
    g = dq.data;
    g.insert(g.end(), dk.data.begin(), dk.data.end());
    g.insert(g.end(), dv.data.begin(), dv.data.end());
  };
  std::vector<float> o1, g1, o2, g2;
  run(o1, g1);
  run(o2, g2);
  EXPECT_EQ(0, std::memcmp(o1.data(), o2.data(), o1.size() * sizeof(float)));
  EXPECT_EQ(0, std::memcmp(g1.data(), g2.data(), g1.size() * sizeof(float)));
}

// attention.h's memory contract for AttentionBackwardFlash, in bytes for `threads` workers:
// 16 (len_q + len_k + 256) (head_dim + 16) per worker thread, plus 8 per (batch, query head)
// for kSinkLogit.
int64_t BackwardContractBytes(const AttentionShape& s, int threads, SoftmaxKind kind) {
  const int64_t per_thread = 16 * (s.len_q + s.len_k + 256) * (s.head_dim + 16);
  return threads * per_thread + (kind == SoftmaxKind::kSinkLogit ? 8 * s.batch * s.heads_q : 0);
}

// The backward's scratch (internal::FlashBackwardScratch, which is what the kernel allocates)
// within attention.h's bound, above all where keys are split across tasks: batch 1, MQA, many
// threads, long N. Keeping a dQ copy per key chunk there (n_kchunks * heads_q * len_q *
// head_dim floats: 275 GB for the first shape) broke the bound by 7x; the partials now hold one
// query head per chunk. Sizes only: nothing is allocated.
TEST(AttentionFlash, BackwardScratchWithinContract) {
  struct Case {
    AttentionShape shape;
    int threads;
  };
  const Case cases[] = {
      {{1, 32, 1, 131072, 131072, 128}, 64},  // MQA, long N, 128 key chunks
      {{1, 64, 8, 32768, 32768, 64}, 32},     // GQA 8:1, 8 chunks per kv head
      {{1, 4, 1, 97, 97, 59}, 16},            // 2 chunks
      {{2, 8, 2, 1025, 1025, 32}, 16},        // GQA, awkward N
      {{3, 4, 4, 4096, 512, 80}, 2},          // no split (batch * heads_kv >= threads)
      {{1, 1, 1, 1, 1, 1}, 1},                // smallest
  };
  for (const Case& c : cases) {
    for (SoftmaxKind kind : {SoftmaxKind::kStandard, SoftmaxKind::kSinkLogit}) {
      const AttentionShape& s = c.shape;
      const internal::FlashBackwardPlan plan = internal::MakeFlashBackwardPlan(s, c.threads);
      const internal::FlashBackwardScratchSizes z = internal::FlashBackwardScratch(s, plan, kind);
      const int64_t bound = BackwardContractBytes(s, c.threads, kind);
      SCOPED_TRACE("B " + std::to_string(s.batch) + " Hq " + std::to_string(s.heads_q) + " Hkv " +
                   std::to_string(s.heads_kv) + " N " + std::to_string(s.len_q) + "/" +
                   std::to_string(s.len_k) + " D " + std::to_string(s.head_dim) + " threads " +
                   std::to_string(c.threads) + " key chunks " + std::to_string(plan.n_kchunks));
      EXPECT_LE(z.TotalBytes(c.threads), bound)
          << "scratch " << z.TotalBytes(c.threads) / 1e9 << " GB, contract " << bound / 1e9
          << " GB (dQ partials " << z.dq_partial * 4 / 1e9 << " GB)";
    }
  }
  // The first case does split its keys (else the check above would say nothing about partials).
  const internal::FlashBackwardPlan plan = internal::MakeFlashBackwardPlan(cases[0].shape, 64);
  EXPECT_EQ(plan.n_kchunks, 128);
  EXPECT_EQ(plan.passes, 32);
}

// Keys split across tasks (batch * heads_kv < threads: an explicit pool of 16 threads): dQ from
// the partials of every chunk and dK, dV carried across the per-head passes match the
// reference, for awkward lengths (97, 1025 keys: chunks that divide neither), GQA and MQA,
// causal and bidirectional windows, global tokens, sinks and explicit masks, every variant.
TEST(AttentionFlash, BackwardWithKeysSplitMatchesReference) {
  ThreadPool pool(16);
  std::mt19937_64 rng(2024);
  struct Config {
    AttentionShape shape;
    bool causal;
    int64_t window_left, window_right, n_sink, n_global;
    bool explicit_mask;
  };
  const Config configs[] = {
      {{1, 4, 1, 97, 97, 59}, true, -1, -1, 0, 0, false},
      {{1, 4, 2, 97, 97, 16}, false, 30, 5, 0, 20, false},
      {{1, 8, 2, 300, 1025, 32}, true, 200, -1, 2, 0, false},
      {{2, 3, 1, 1025, 1025, 8}, false, 64, 64, 0, 70, false},
      {{1, 2, 1, 97, 1025, 24}, true, -1, -1, 0, 0, true},
      {{1, 1, 1, 1025, 1025, 16}, true, 100, -1, 0, 0, false},
  };
  double worst = 0;
  for (const Config& cfg : configs) {
    for (int variant = 0; variant < 4; ++variant) {
      AttentionCase c;
      c.shape = cfg.shape;
      AttentionMask& m = c.params.mask;
      m.causal = cfg.causal;
      m.window_left = cfg.window_left;
      m.window_right = cfg.window_right;
      m.n_sink = cfg.n_sink;
      m.n_global = cfg.n_global;
      c.params.softmax = static_cast<SoftmaxKind>(variant);
      if (cfg.explicit_mask) testing::AddRandomExplicitMask(rng, c);
      testing::FillCase(rng, c, testing::Layout::kPadded);
      c.params.pool = &pool;
      const internal::FlashBackwardPlan plan =
          internal::MakeFlashBackwardPlan(c.shape, pool.num_threads());
      ASSERT_GT(plan.n_kchunks, 1) << "this test is about split keys";
      SCOPED_TRACE(c.Describe() + " key chunks " + std::to_string(plan.n_kchunks));
      worst = std::max(worst, CheckCase(c));
    }
  }
  std::printf("split-key configurations; worst error / tolerance = %.3f\n", worst);
}

// Split keys and several passes: the same inputs and thread count give bit-identical gradients.
TEST(AttentionFlash, BackwardWithKeysSplitIsBitReproducible) {
  ThreadPool pool(16);
  std::mt19937_64 rng(8);
  AttentionCase c;
  c.shape = AttentionShape{1, 4, 1, 257, 1025, 24};
  c.params.mask.causal = true;
  c.params.mask.window_left = 300;
  c.params.softmax = SoftmaxKind::kSinkLogit;
  testing::FillCase(rng, c, testing::Layout::kContiguous);
  c.params.pool = &pool;
  const AttentionShape& s = c.shape;
  std::vector<float> first;
  for (int run = 0; run < 2; ++run) {
    Tensor4<float> out, dq, dk, dv;
    out.Init(s.batch, s.heads_q, s.len_q, s.head_dim, c.q.layout);
    dq.Init(s.batch, s.heads_q, s.len_q, s.head_dim, c.q.layout);
    dk.Init(s.batch, s.heads_kv, s.len_k, s.head_dim, c.q.layout);
    dv.Init(s.batch, s.heads_kv, s.len_k, s.head_dim, c.q.layout);
    std::vector<float> lse(s.batch * s.heads_q * s.len_q), dsink(s.heads_q);
    ASSERT_TRUE(AttentionForwardFlash(s, c.params, c.q.cview(), c.k.cview(), c.v.cview(),
                                      out.view, lse)
                    .ok());
    ASSERT_TRUE(AttentionBackwardFlash(s, c.params, c.q.cview(), c.k.cview(), c.v.cview(),
                                       out.cview(), lse, c.dout.cview(), dq.view, dk.view, dv.view,
                                       dsink)
                    .ok());
    std::vector<float> all = dq.data;
    for (const auto* g : {&dk.data, &dv.data, &dsink}) all.insert(all.end(), g->begin(), g->end());
    if (run == 0) {
      first = all;
    } else {
      ASSERT_EQ(first.size(), all.size());
      EXPECT_EQ(0, std::memcmp(first.data(), all.data(), all.size() * sizeof(float)));
    }
  }
}

// d sink_h = -sum_i P_sink,i D_i sums one term per row: at N = 131072 a float running sum lost
// 5e-4 relative here (each of the last 65536 additions rounds to a multiple of ulp(sum), ~2^-7
// of a term, and equal terms round the same way), against 1.5e-7 summed in double. Here
// every term past row 16 is the same (q = 0: uniform attention over a causal window of 16 + 1
// keys; every value vector v and dO row the same), the case where the rounding errors all have
// one sign. The truth in closed form, in double, with n_i = min(i + 1, 17) visible keys:
//   P_sink,i = e^b / (e^b + n_i),  O_i = (1 - P_sink,i) v,  D_i = (1 - P_sink,i) dO . v,
//   d sink = -sum_i P_sink,i D_i.
// Tolerance (fp32 per row, summed in double): 2 kC u kappa |d sink|, kappa = log2(17 + 1) + 1
// (the logits are exactly 0; a row sums at most 17 terms), as in CheckCase; ~1e-5 relative.
TEST(AttentionFlash, SinkGradientAtLongSequenceIsSummedInDouble) {
  const int64_t n = 131072, hd = 8, window = 16;
  const AttentionShape s{1, 1, 1, n, n, hd};
  std::mt19937_64 rng(21);
  std::uniform_real_distribution<float> pos(0.5f, 1.5f);
  std::vector<float> q(n * hd, 0.0f), k(n * hd), v(n * hd), dout(n * hd), sinks = {0.75f};
  std::vector<float> v_row(hd), do_row(hd);
  for (float& x : v_row) x = pos(rng);
  for (float& x : do_row) x = pos(rng);
  std::normal_distribution<float> nd;
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t d = 0; d < hd; ++d) {
      k[i * hd + d] = nd(rng);  // irrelevant to the scores (q = 0), but not degenerate
      v[i * hd + d] = v_row[d];
      dout[i * hd + d] = do_row[d];
    }
  }
  AttentionParams p;
  p.mask.causal = true;
  p.mask.window_left = window;
  p.softmax = SoftmaxKind::kSinkLogit;
  p.sink_logits = sinks;
  ThreadPool pool(4);
  p.pool = &pool;
  auto cv = [&](const std::vector<float>& x) {
    return ContiguousView<const float>(x.data(), 1, 1, n, hd);
  };
  auto mv = [&](std::vector<float>& x) { return ContiguousView<float>(x.data(), 1, 1, n, hd); };
  std::vector<float> out(n * hd), dq(n * hd), dk(n * hd), dv(n * hd), lse(n), dsink(1);
  ASSERT_TRUE(AttentionForwardFlash(s, p, cv(q), cv(k), cv(v), mv(out), lse).ok());
  ASSERT_TRUE(AttentionBackwardFlash(s, p, cv(q), cv(k), cv(v), cv(out), lse, cv(dout), mv(dq),
                                     mv(dk), mv(dv), dsink)
                  .ok());
  double dot = 0;
  for (int64_t d = 0; d < hd; ++d) dot += static_cast<double>(do_row[d]) * v_row[d];
  const double eb = std::exp(static_cast<double>(sinks[0]));
  double truth = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double p_sink = eb / (eb + static_cast<double>(std::min(i + 1, window + 1)));
    truth -= p_sink * (1 - p_sink) * dot;
  }
  const double kappa = std::log2(static_cast<double>(window + 1) + 1) + 1;
  const double tol = 2 * kC * kU * kappa * std::abs(truth);
  const double err = std::abs(dsink[0] - truth);
  std::printf("d sink at N = %lld: %.9g vs %.9g, relative error %.2g (tolerance %.2g)\n",
              static_cast<long long>(n), dsink[0], truth, err / std::abs(truth),
              tol / std::abs(truth));
  EXPECT_LE(err, tol) << "d sink " << dsink[0] << " vs " << truth;
}

// NaN in the inputs (docs/BAD_INPUTS.md, .npy NaN row): both twins compute as IEEE arithmetic and
// PyTorch do. A NaN in a query poisons exactly that query's row (output and lse), a NaN in a key
// exactly the rows that see that key; every other row equals the NaN-free run bit for bit. (The
// flash kernel once turned NaN scores into weights of 2^-126 and returned finite rows.) A NaN in a
// value poisons every row that sees it; rows that mask it may be NaN too in the flash kernel
// (0 x NaN in the block product P V, as in a matmul-based PyTorch attention).
TEST(AttentionFlash, NaNInputsPoisonExactlyTheRowsThatUseThem) {
  AttentionShape s;
  s.batch = 2;
  s.heads_q = 4;
  s.heads_kv = 2;
  s.len_q = s.len_k = 150;  // three key blocks
  s.head_dim = 16;
  const int64_t nq = s.batch * s.heads_q * s.len_q * s.head_dim;
  const int64_t nk = s.batch * s.heads_kv * s.len_k * s.head_dim;
  std::mt19937_64 rng(5);
  std::normal_distribution<float> nd;
  std::vector<float> q(nq), k(nk), v(nk);
  for (auto* x : {&q, &k, &v}) {
    for (float& e : *x) e = nd(rng);
  }
  const std::vector<float> sinks = {0.5f, -1.0f, 2.0f, 0.0f};
  const int64_t rows = s.batch * s.heads_q * s.len_q;
  struct Run {
    std::vector<float> out, lse;
  };
  auto run = [&](bool flash, const AttentionParams& p, const std::vector<float>& qq,
                 const std::vector<float>& kk, const std::vector<float>& vv) {
    Run r;
    r.out.assign(nq, 0.0f);
    r.lse.assign(rows, 0.0f);
    const int64_t B = s.batch, Hq = s.heads_q, Hk = s.heads_kv, D = s.head_dim;
    const auto qv = ContiguousView<const float>(qq.data(), B, Hq, s.len_q, D);
    const auto kv = ContiguousView<const float>(kk.data(), B, Hk, s.len_k, D);
    const auto vview = ContiguousView<const float>(vv.data(), B, Hk, s.len_k, D);
    const auto ov = ContiguousView<float>(r.out.data(), B, Hq, s.len_q, D);
    const Status st = flash ? AttentionForwardFlash(s, p, qv, kv, vview, ov, r.lse)
                            : AttentionForwardReference(s, p, qv, kv, vview, ov, r.lse);
    EXPECT_TRUE(st.ok()) << st.ToString();
    return r;
  };
  // Whether output row `row` (the flat index of (b, h, i)) holds a NaN.
  auto row_nan = [&](const Run& r, int64_t row) {
    bool any = false;
    for (int64_t d = 0; d < s.head_dim; ++d) any = any || std::isnan(r.out[row * s.head_dim + d]);
    return any;
  };
  const int64_t kNanB = 1, kNanQHead = 3, kNanKvHead = 0, kNanPos = 70;
  std::vector<float> q_nan = q, k_nan = k, v_nan = v;
  q_nan[((kNanB * s.heads_q + kNanQHead) * s.len_q + kNanPos) * s.head_dim + 5] = NAN;
  k_nan[((kNanB * s.heads_kv + kNanKvHead) * s.len_k + kNanPos) * s.head_dim + 9] = NAN;
  v_nan[((kNanB * s.heads_kv + kNanKvHead) * s.len_k + kNanPos) * s.head_dim + 2] = NAN;
  const SoftmaxKind kinds[] = {SoftmaxKind::kStandard, SoftmaxKind::kSoftmax1,
                               SoftmaxKind::kSinkLogit, SoftmaxKind::kSigmoid,
                               SoftmaxKind::kSoftpick};
  for (const SoftmaxKind kind : kinds) {
    for (const int64_t window : {int64_t{-1}, int64_t{20}}) {
      AttentionParams p;
      p.softmax = kind;
      if (kind == SoftmaxKind::kSinkLogit) p.sink_logits = sinks;
      p.mask.causal = true;
      p.mask.window_left = window;
      // Does query row (b, h, i) see key kNanPos of batch kNanB, kv head kNanKvHead?
      auto sees = [&](int64_t b, int64_t h, int64_t i) {
        return b == kNanB && h / (s.heads_q / s.heads_kv) == kNanKvHead && i >= kNanPos &&
               (window < 0 || i - kNanPos <= window);
      };
      for (const bool flash : {true, false}) {
        SCOPED_TRACE(std::string(flash ? "flash" : "reference") + ", softmax kind " +
                     std::to_string(static_cast<int>(kind)) + ", window " +
                     std::to_string(window));
        const Run clean = run(flash, p, q, k, v);
        const Run rq = run(flash, p, q_nan, k, v);
        const Run rk = run(flash, p, q, k_nan, v);
        const Run rv = run(flash, p, q, k, v_nan);
        int64_t poisoned_q = 0, poisoned_k = 0;
        for (int64_t b = 0; b < s.batch; ++b) {
          for (int64_t h = 0; h < s.heads_q; ++h) {
            for (int64_t i = 0; i < s.len_q; ++i) {
              const int64_t row = (b * s.heads_q + h) * s.len_q + i;
              const bool q_hit = b == kNanB && h == kNanQHead && i == kNanPos;
              for (const auto& [r, hit, name] :
                   {std::tuple{&rq, q_hit, "q"}, std::tuple{&rk, sees(b, h, i), "k"}}) {
                EXPECT_EQ(row_nan(*r, row), hit) << "NaN in " << name << ": row b " << b
                                                 << " h " << h << " i " << i;
                if (kind != SoftmaxKind::kSigmoid) {
                  EXPECT_EQ(std::isnan(r->lse[row]), hit) << "NaN in " << name << ": lse row "
                                                          << row;
                }
                if (!hit) {
                  EXPECT_EQ(0, std::memcmp(&r->out[row * s.head_dim],
                                           &clean.out[row * s.head_dim],
                                           sizeof(float) * s.head_dim))
                      << "NaN in " << name << " changed row b " << b << " h " << h << " i " << i;
                }
              }
              poisoned_q += q_hit;
              poisoned_k += sees(b, h, i);
              if (sees(b, h, i)) {
                EXPECT_TRUE(row_nan(rv, row)) << "NaN in v: row i " << i;
              }
            }
          }
        }
        EXPECT_EQ(poisoned_q, 1);
        EXPECT_GT(poisoned_k, 2);
      }
    }
  }
}

TEST(AttentionFlash, SoftpickRefusesABadEps) {
  const AttentionShape s{1, 2, 1, 7, 7, 4};
  std::vector<float> q(2 * 7 * 4, 0.5f), k(7 * 4, 0.25f), v(7 * 4, 1.0f), out(2 * 7 * 4);
  const AttentionTensor qv{q.data(), int64_t(q.size()), 2 * 7 * 4, 7 * 4, 4};
  const AttentionTensor kv{k.data(), int64_t(k.size()), 7 * 4, 7 * 4, 4};
  const AttentionTensor vv{v.data(), int64_t(v.size()), 7 * 4, 7 * 4, 4};
  const AttentionTensorMut ov{out.data(), int64_t(out.size()), 2 * 7 * 4, 7 * 4, 4};
  AttentionParams p;
  p.softmax = SoftmaxKind::kSoftpick;
  EXPECT_TRUE(AttentionForwardFlash(s, p, qv, kv, vv, ov).ok());
  for (const float eps : {0.0f, -1e-6f, NAN, INFINITY}) {
    p.softpick_eps = eps;
    for (const bool flash : {true, false}) {
      const Status st = flash ? AttentionForwardFlash(s, p, qv, kv, vv, ov)
                              : AttentionForwardReference(s, p, qv, kv, vv, ov);
      EXPECT_FALSE(st.ok()) << "eps " << eps;
      EXPECT_NE(st.ToString().find("softpick eps must be finite and > 0"), std::string::npos)
          << st.ToString();
    }
  }
}

}  // namespace
}  // namespace attnlab
