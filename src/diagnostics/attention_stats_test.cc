// The streaming attention statistics (fp32 score blocks, never a len_q x len_k map) against their
// Reference twin on materialised double-precision probability maps, plus hand-computed values
// and bad input.
//
// Tolerance of the comparisons with the twin: the accumulator's only fp32 steps are the logits
// of the score blocks (Sgemm, scaled by log2 e) and their exponentials (engine exp2, relative
// error < 2e-7), summed in fp32 lanes over at most 256 keys before the sums move to double;
// single-entry probabilities and the row max's term use double logits. A logit computed in fp32
// is off by about u * scale * sum_d |q_d k_d| (u = 2^-24), which moves the row's probabilities
// by that relative amount; the statistics are weighted means of them, so their relative error
// is a few u times the largest |logit| plus the exp2 error: with unit-normal q and k
// (|logit| <~ 6 at head_dim <= 64) at most ~5e-7 in one row and less on average. So 1e-6
// relative (observed: ~1e-7), and the Jensen-Shannon distances (sqrt of a divergence) an
// absolute 1e-6. Larger logits get the bound 2 u kappa (LargeLogitsWithinDerivedBound).
#include "diagnostics/attention_stats.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "attnlab/thread_pool.h"
#include "engine/attention_reference.h"

namespace attnlab {
namespace {

// One sequence: q rows [L, q_stride] (heads interleaved, stride padded), keys [Hkv, L, hd]
// token-major with padding (so every stride is non-trivial).
struct Sequence {
  int64_t L = 0, Hq = 0, Hkv = 0, hd = 0, q_stride = 0;
  std::vector<float> q, k, sinks;
  AttentionTensor kview;

  void Init(int64_t len, int64_t hq, int64_t hkv, int64_t d) {
    L = len, Hq = hq, Hkv = hkv, hd = d;
    q_stride = Hq * hd + 3;
    q.assign(L * q_stride, 0.0f);
    const int64_t k_stride = Hkv * hd + 5;
    k.assign(L * k_stride, 0.0f);
    kview.data = k.data();
    kview.size = static_cast<int64_t>(k.size());
    kview.stride_batch = 0;
    kview.stride_head = hd;
    kview.stride_token = k_stride;
  }
  float& Q(int64_t t, int64_t h, int64_t d) { return q[t * q_stride + h * hd + d]; }
  float& K(int64_t t, int64_t h, int64_t d) { return k[t * kview.stride_token + h * hd + d]; }
  void Randomise(std::mt19937_64& rng, double logit_scale = 1.0) {
    std::normal_distribution<float> nd(0, 1);
    for (int64_t t = 0; t < L; ++t) {
      for (int64_t h = 0; h < Hq; ++h)
        for (int64_t d = 0; d < hd; ++d) Q(t, h, d) = nd(rng) * static_cast<float>(logit_scale);
      for (int64_t h = 0; h < Hkv; ++h)
        for (int64_t d = 0; d < hd; ++d) K(t, h, d) = nd(rng);
    }
  }
  // Query rows [len_k - len_q, len_k) as an attention view [1, Hq, len_q, hd].
  AttentionTensor QView(int64_t len_q, int64_t len_k) const {
    AttentionTensor v;
    v.data = q.data() + (len_k - len_q) * q_stride;
    v.size = static_cast<int64_t>(q.size()) - (len_k - len_q) * q_stride;
    v.stride_batch = 0, v.stride_head = hd, v.stride_token = q_stride;
    return v;
  }
};

// Double-precision probabilities [Hq, len_q, len_k] of one call, by the engine's reference row.
std::vector<double> ReferenceProbs(const Sequence& s, const AttentionParams& p, int64_t len_q,
                                   int64_t len_k) {
  const AttentionShape shape{1, s.Hq, s.Hkv, len_q, len_k, s.hd};
  const double scale = internal::DefaultScaleOf(p, s.hd);  // the engine's fp32 default
  std::vector<double> probs(s.Hq * len_q * len_k), row(len_k);
  const AttentionTensor qv = s.QView(len_q, len_k);
  for (int64_t h = 0; h < s.Hq; ++h) {
    for (int64_t i = 0; i < len_q; ++i) {
      double lse;
      internal::ReferenceRowProbs<float, double>(shape, p, scale, p.sink_logits.data(), qv, s.kview,
                                                 0, h, i, row, &lse);
      std::copy(row.begin(), row.end(), probs.begin() + (h * len_q + i) * len_k);
    }
  }
  return probs;
}

// Feeds the same call (the last len_q of len_k tokens) to the accumulator and the twin.
void AddCall(const Sequence& s, const AttentionParams& p, int64_t len_q, int64_t len_k,
             AttentionStatsAccumulator* acc, AttentionStatsReference* ref) {
  ASSERT_TRUE(
      acc->AddRows(p, s.q.data() + (len_k - len_q) * s.q_stride, s.q_stride, len_q, s.kview, len_k)
          .ok());
  if (ref) {
    ASSERT_TRUE(ref->AddProbs(p, ReferenceProbs(s, p, len_q, len_k), len_q, len_k).ok());
  }
}

bool Close(double got, double want, double rtol, double atol) {
  if (std::isnan(want) || std::isnan(got)) return std::isnan(want) && std::isnan(got);
  return std::abs(got - want) <= rtol * std::abs(want) + atol;
}

// Every field of two results; returns the largest relative error seen (for the log).
// distance_atol: an absolute allowance for the distances, whose signed terms can cancel (rows
// that see later keys) so that only a tolerance relative to their term-wise magnitude holds.
double ExpectStatsNear(const AttentionLayerStats& got, const AttentionLayerStats& want, double rtol,
                       const std::string& what, double distance_atol = 1e-12) {
  double worst = 0;
  auto check = [&](double g, double w, const std::string& name, double atol = 1e-12) {
    if (!std::isnan(w) && w != 0) worst = std::max(worst, std::abs(g - w) / std::abs(w));
    EXPECT_TRUE(Close(g, w, rtol, atol)) << what << ": " << name << " got " << g << " want " << w;
  };
  EXPECT_EQ(got.rows, want.rows) << what;
  EXPECT_EQ(got.alpha_rows, want.alpha_rows) << what;
  EXPECT_EQ(got.diagonal_rows, want.diagonal_rows) << what;
  EXPECT_EQ(got.jsd_sample_rows, want.jsd_sample_rows) << what;
  EXPECT_EQ(got.heads.size(), want.heads.size()) << what;
  for (size_t h = 0; h < std::min(got.heads.size(), want.heads.size()); ++h) {
    const AttentionHeadStats &g = got.heads[h], &w = want.heads[h];
    const std::string hs = "head " + std::to_string(h) + " ";
    EXPECT_EQ(g.entropy_rows, w.entropy_rows) << what << hs;
    EXPECT_EQ(g.live_rows, w.live_rows) << what << hs;
    EXPECT_EQ(g.last_visible, w.last_visible) << what << hs;
    check(g.entropy, w.entropy, hs + "entropy");
    check(g.sink_mass, w.sink_mass, hs + "sink_mass");
    check(g.distance, w.distance, hs + "distance", distance_atol);
    check(g.last_key0, w.last_key0, hs + "last_key0");
    for (size_t j = 0; j < w.alpha.size(); ++j) {
      check(g.alpha[j], w.alpha[j], hs + "alpha_" + std::to_string(j + 1));
      check(g.alpha_uniform[j], w.alpha_uniform[j], hs + "alpha_uniform_" + std::to_string(j + 1));
      check(g.first_mass[j], w.first_mass[j], hs + "first_mass_" + std::to_string(j + 1));
    }
    for (size_t d = 0; d < w.diagonal.size(); ++d) {
      check(g.diagonal[d], w.diagonal[d], hs + "diagonal " + std::to_string(d));
    }
  }
  for (size_t e = 0; e < want.jsd.size(); ++e) {
    check(got.jsd[e], want.jsd[e], "jsd " + std::to_string(e), 1e-6);
  }
  return worst;
}

struct MaskCase {
  const char* name;
  bool causal;
  int64_t window_left, window_right, n_sink;
  bool mask_first_key;
};

constexpr MaskCase kCausalMasks[] = {
    {"causal", true, -1, -1, 0, false},
    {"causal window 7", true, 7, -1, 0, false},
    {"causal window 5 + 2 sinks", true, 5, -1, 2, false},
    {"causal mask_first_key", true, -1, -1, 0, true},
    {"causal window 0", true, 0, -1, 0, false},
};

AttentionParams MakeParams(const MaskCase& m, SoftmaxKind kind, Sequence& s, std::mt19937_64& rng) {
  AttentionParams p;
  p.mask.causal = m.causal;
  p.mask.window_left = m.window_left;
  p.mask.window_right = m.window_right;
  p.mask.n_sink = m.n_sink;
  p.mask.mask_first_key = m.mask_first_key;
  p.softmax = kind;
  if (kind == SoftmaxKind::kSinkLogit) {
    std::uniform_real_distribution<float> u(-10, 10);  // ggml's range, extreme on purpose
    s.sinks.resize(s.Hq);
    for (float& x : s.sinks) x = u(rng);
    p.sink_logits = s.sinks;
  }
  if (kind == SoftmaxKind::kSigmoid) p.sigmoid_bias = -std::log(static_cast<float>(s.L));
  return p;
}

const char* KindName(SoftmaxKind k) {
  switch (k) {
    case SoftmaxKind::kStandard:
      return "standard";
    case SoftmaxKind::kSoftmax1:
      return "softmax1";
    case SoftmaxKind::kSinkLogit:
      return "sink-logit";
    case SoftmaxKind::kSigmoid:
      return "sigmoid";
    case SoftmaxKind::kSoftpick:
      return "softpick";
  }
  return "?";
}

constexpr SoftmaxKind kKinds[] = {SoftmaxKind::kStandard, SoftmaxKind::kSoftmax1,
                                  SoftmaxKind::kSinkLogit, SoftmaxKind::kSigmoid,
                                  SoftmaxKind::kSoftpick};

AttentionStatsAccumulator MakeAcc(const AttentionStatsOptions& o, const Sequence& s) {
  auto r = AttentionStatsAccumulator::Create(o, s.Hq, s.Hkv, s.hd);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return std::move(r).value();
}

// Streaming == reference for every variant and causal mask, GQA, in one call and in chunks
// (chunks also equal one call), with a sampled and a full JSD.
TEST(AttentionStats, StreamingMatchesReferenceCausal) {
  std::mt19937_64 rng(7);
  struct Shape {
    int64_t L, Hq, Hkv, hd;
  };
  const Shape shapes[] = {{37, 4, 2, 16}, {130, 3, 1, 24}, {300, 6, 3, 8}, {512, 4, 4, 64}};
  double worst = 0;
  for (const Shape& sh : shapes) {
    for (const MaskCase& mc : kCausalMasks) {
      for (SoftmaxKind kind : kKinds) {
        Sequence s;
        s.Init(sh.L, sh.Hq, sh.Hkv, sh.hd);
        s.Randomise(rng);
        const AttentionParams p = MakeParams(mc, kind, s, rng);
        AttentionStatsOptions o;
        o.first_k = 5;
        o.diagonals = {{1, 0, -1}, {3, 10, 40}, {0, 0, -1}, {sh.L / 3, sh.L / 3, -1}};
        o.block_rows = sh.L % 2 ? 7 : 64;
        o.jsd_rows = sh.L == 130 ? 0 : 16;
        const std::string what = std::string(mc.name) + " " + KindName(kind) +
                                 " L=" + std::to_string(sh.L) + " Hq=" + std::to_string(sh.Hq) +
                                 " Hkv=" + std::to_string(sh.Hkv) + " hd=" + std::to_string(sh.hd);
        // One call.
        AttentionStatsAccumulator one = MakeAcc(o, s);
        AttentionStatsReference ref(o, s.Hq);
        AddCall(s, p, sh.L, sh.L, &one, &ref);
        const AttentionLayerStats want = ref.Finish();
        worst = std::max(worst, ExpectStatsNear(one.Finish(), want, 1e-6, what + " one call"));
        // Chunks of awkward sizes (len_q < len_k from the second chunk on), like a KV cache.
        AttentionStatsAccumulator chunked = MakeAcc(o, s);
        const int64_t cuts[] = {0, sh.L / 5, sh.L / 5 + 1, sh.L / 2, sh.L - 3, sh.L};
        for (int c = 0; c + 1 < 6; ++c) {
          if (cuts[c + 1] > cuts[c]) {
            AddCall(s, p, cuts[c + 1] - cuts[c], cuts[c + 1], &chunked, nullptr);
          }
        }
        worst = std::max(worst, ExpectStatsNear(chunked.Finish(), want, 1e-6, what + " chunks"));
        if (IsUnnormalisedWeights(kind)) {
          EXPECT_TRUE(std::isnan(want.heads[0].entropy));
        }
        if (kind == SoftmaxKind::kStandard) {
          EXPECT_TRUE(std::isnan(want.heads[0].sink_mass));
        }
      }
    }
  }
  std::printf("largest relative difference streaming vs reference: %.3g\n", worst);
}

// Non-causal masks (window on both sides), len_q < len_k in one call, and an explicit mask
// with fully masked rows (dead rows: excluded from row means, zeros in alpha and diagonals).
TEST(AttentionStats, StreamingMatchesReferenceNonCausalAndExplicit) {
  std::mt19937_64 rng(11);
  const MaskCase masks[] = {
      {"bidirectional", false, -1, -1, 0, false},
      {"window (3, 2)", false, 3, 2, 0, false},
      {"window (4, 0) + 1 sink, mask_first_key", false, 4, 0, 1, true},
  };
  for (const MaskCase& mc : masks) {
    for (SoftmaxKind kind : kKinds) {
      for (bool explicit_mask : {false, true}) {
        Sequence s;
        s.Init(200, 4, 2, 16);
        s.Randomise(rng);
        AttentionParams p = MakeParams(mc, kind, s, rng);
        const int64_t len_q = 150, len_k = 200;
        std::vector<uint8_t> bytes;
        if (explicit_mask) {
          std::bernoulli_distribution vis(0.7), dead(0.1);
          bytes.resize(s.Hq * len_q * len_k);
          for (auto& b : bytes) b = vis(rng);
          for (int64_t r = 0; r < s.Hq * len_q; ++r) {
            if (dead(rng)) std::fill_n(bytes.begin() + r * len_k, len_k, 0);
          }
          std::fill_n(bytes.begin() + (len_q - 1) * len_k, len_k, 0);  // head 0's last row dead
          ExplicitMask e;
          e.data = bytes.data();
          e.size = static_cast<int64_t>(bytes.size());
          e.stride_row = len_k, e.stride_head = len_q * len_k;
          p.mask.explicit_mask = e;
        }
        AttentionStatsOptions o;
        o.diagonals = {{1, 0, -1}, {-2, 0, -1}};
        o.block_rows = 16;
        o.jsd_rows = 0;
        AttentionStatsAccumulator acc = MakeAcc(o, s);
        AttentionStatsReference ref(o, s.Hq);
        AddCall(s, p, len_q, len_k, &acc, &ref);
        const AttentionLayerStats want = ref.Finish();
        ExpectStatsNear(
            acc.Finish(), want, 1e-6,
            std::string(mc.name) + " " + KindName(kind) + (explicit_mask ? " explicit" : ""));
        if (explicit_mask) {
          EXPECT_EQ(want.heads[0].last_visible, 0);
          EXPECT_LT(want.heads[0].live_rows, len_q);
        }
      }
    }
  }
}

// Global rows (Longformer) with a bidirectional window: a global row sees every key, the next
// (local) row only keys up to p + window_right, so the visible-key bound DROPS at the boundary
// (attention_mask.h). A row block that straddles it must still score every key its global rows
// see; blocks of 4, 7 and 64 rows put the boundary inside a block, on a block edge, and with
// the block's last row far from the end. One call, and a call with len_q < len_k whose first
// rows are global (p(i) = i + 2 < n_global).
TEST(AttentionStats, GlobalRowsWithBidirectionalWindow) {
  std::mt19937_64 rng(17);
  for (SoftmaxKind kind : kKinds) {
    for (int64_t block_rows : {4, 7, 64}) {
      for (int64_t len_q : {120, 118}) {
        Sequence s;
        s.Init(120, 4, 2, 16);
        s.Randomise(rng);
        const MaskCase mc{"window (3, 2)", false, 3, 2, 0, false};
        AttentionParams p = MakeParams(mc, kind, s, rng);
        p.mask.n_global = 5;
        AttentionStatsOptions o;
        o.diagonals = {{1, 0, -1}, {-2, 0, -1}};
        o.block_rows = block_rows;
        o.jsd_rows = 0;
        AttentionStatsAccumulator acc = MakeAcc(o, s);
        AttentionStatsReference ref(o, s.Hq);
        AddCall(s, p, len_q, s.L, &acc, &ref);
        const AttentionLayerStats want = ref.Finish();
        // The distances' term-wise magnitude, mean_i sum_j P[i, j] |pos(i) - j| (largest head):
        // a global row's keys on both sides cancel, so 1e-6 of it, not of the mean, is the bound.
        const std::vector<double> probs = ReferenceProbs(s, p, len_q, s.L);
        double magnitude = 0;
        for (int64_t h = 0; h < s.Hq; ++h) {
          double sum = 0;
          for (int64_t i = 0; i < len_q; ++i) {
            for (int64_t j = 0; j < s.L; ++j) {
              sum += probs[(h * len_q + i) * s.L + j] * std::abs(i + s.L - len_q - j);
            }
          }
          magnitude = std::max(magnitude, sum / static_cast<double>(len_q));
        }
        ExpectStatsNear(acc.Finish(), want, 1e-6,
                        std::string("n_global 5, ") + mc.name + " " + KindName(kind) +
                            " block_rows " + std::to_string(block_rows) + " len_q " +
                            std::to_string(len_q),
                        1e-6 * magnitude);
      }
    }
  }
}

// Large logits (q scaled by 20: |logit| up to ~100): the error grows like u * kappa, kappa =
// max_ij scale * sum_d |q_id k_jd| (the condition of the fp32 logits, as in the engine's kernel
// tests); 2 u kappa bounds every statistic (observed: ~30x below it).
TEST(AttentionStats, LargeLogitsWithinDerivedBound) {
  std::mt19937_64 rng(13);
  for (SoftmaxKind kind : kKinds) {
    Sequence s;
    s.Init(200, 4, 2, 16);
    s.Randomise(rng, 20.0);
    const AttentionParams p = MakeParams(kCausalMasks[2], kind, s, rng);
    double kappa = 0;
    const double scale = internal::DefaultScaleOf(p, s.hd);
    for (int64_t h = 0; h < s.Hq; ++h) {
      for (int64_t i = 0; i < s.L; ++i) {
        for (int64_t j = 0; j < s.L; ++j) {
          double a = 0;
          for (int64_t d = 0; d < s.hd; ++d) a += std::abs(s.Q(i, h, d) * s.K(j, h / 2, d));
          kappa = std::max(kappa, scale * a);
        }
      }
    }
    AttentionStatsOptions o;
    o.diagonals = {{1, 0, -1}};
    AttentionStatsAccumulator acc = MakeAcc(o, s);
    AttentionStatsReference ref(o, s.Hq);
    AddCall(s, p, s.L, s.L, &acc, &ref);
    const double tol = 2 * std::ldexp(1.0, -24) * kappa;
    const double worst = ExpectStatsNear(acc.Finish(), ref.Finish(), tol, KindName(kind));
    std::printf("%s: kappa %.0f, tolerance %.2g, largest relative difference %.2g\n",
                KindName(kind), kappa, tol, worst);
  }
}

// Same pool, same input: bit-identical results.
TEST(AttentionStats, BitReproducibleForFixedThreadCount) {
  std::mt19937_64 rng(3);
  Sequence s;
  s.Init(400, 4, 2, 16);
  s.Randomise(rng);
  ThreadPool pool(2);
  AttentionParams p;
  p.mask.causal = true;
  p.pool = &pool;
  AttentionStatsOptions o;
  o.diagonals = {{1, 0, -1}};
  AttentionLayerStats r[2];
  for (auto& x : r) {
    AttentionStatsAccumulator acc = MakeAcc(o, s);
    AddCall(s, p, 400, 400, &acc, nullptr);
    x = acc.Finish();
  }
  for (size_t h = 0; h < r[0].heads.size(); ++h) {
    EXPECT_EQ(r[0].heads[h].entropy, r[1].heads[h].entropy);
    EXPECT_EQ(r[0].heads[h].distance, r[1].heads[h].distance);
    EXPECT_EQ(r[0].heads[h].alpha, r[1].heads[h].alpha);
    EXPECT_EQ(r[0].heads[h].diagonal, r[1].heads[h].diagonal);
  }
  EXPECT_EQ(r[0].jsd, r[1].jsd);
}

// All scores equal (q = 0): uniform rows. Entropy 1 on every row with n >= 2, distance (n-1)/2,
// alpha_k = 1/(T-k+1) sum_{t >= k} 1/t (tokens from 1). Exact up to a few ulps (1e-12).
TEST(AttentionStats, UniformAttention) {
  const int64_t L = 100;
  Sequence s;
  s.Init(L, 2, 1, 16);
  std::mt19937_64 rng(5);
  s.Randomise(rng);
  std::fill(s.q.begin(), s.q.end(), 0.0f);
  AttentionParams p;
  p.mask.causal = true;
  AttentionStatsOptions o;
  o.first_k = 3;
  // The whole sequence.
  AttentionStatsAccumulator acc = MakeAcc(o, s);
  AddCall(s, p, L, L, &acc, nullptr);
  const AttentionLayerStats st = acc.Finish();
  for (const AttentionHeadStats& h : st.heads) {
    EXPECT_NEAR(h.entropy, 1.0, 1e-12);
    EXPECT_EQ(h.entropy_rows, L - 1);
    EXPECT_NEAR(h.distance, (L - 1) / 4.0, 1e-12);  // mean over rows of pos / 2
    for (int64_t k = 1; k <= 3; ++k) {
      double sum = 0;
      for (int64_t t = k; t <= L; ++t) sum += 1.0 / t;
      EXPECT_NEAR(h.alpha[k - 1], sum / (L - k + 1), 1e-12) << k;
      EXPECT_NEAR(h.alpha_uniform[k - 1], sum / (L - k + 1), 1e-12) << k;  // H-sums, exactly
    }
    EXPECT_NEAR(h.last_key0, 1.0 / L, 1e-12);
    EXPECT_EQ(h.last_visible, L);
  }
  EXPECT_NEAR(st.jsd[1], 0.0, 1e-6);  // identical heads
  // Single rows of n keys: entropy exactly 1, distance (n - 1) / 2.
  for (int64_t n : {2, 17, 64, 100}) {
    AttentionStatsAccumulator one = MakeAcc(o, s);
    AddCall(s, p, 1, n, &one, nullptr);
    const AttentionHeadStats h = one.Finish().heads[0];
    EXPECT_NEAR(h.entropy, 1.0, 1e-12) << n;
    EXPECT_NEAR(h.distance, (n - 1) / 2.0, 1e-12) << n;
  }
}

// One-hot attention on the previous token (row 0: on itself): entropy 0, distance 1 on rows
// >= 1, previous-token score (L-1)/L as TransformerLens counts it; head 1 attends to key 0
// only, so the two heads' rows are disjoint except on rows 0 and 1: JSD distance 1 elsewhere.
TEST(AttentionStats, OneHotAttention) {
  const int64_t L = 16, hd = 16;
  Sequence s;
  s.Init(L, 2, 2, hd);
  for (int64_t t = 0; t < L; ++t) {
    s.K(t, 0, t) = 1.0f;  // head 0: key t = e_t
    s.K(t, 1, 0) = t == 0 ? 1.0f : 0.0f;
    s.Q(t, 0, std::max<int64_t>(0, t - 1)) = 1000.0f;  // logit 250 on the previous key
    s.Q(t, 1, 0) = 1000.0f;
  }
  AttentionParams p;
  p.mask.causal = true;
  AttentionStatsOptions o;
  o.diagonals = {{1, 0, -1}};
  o.jsd_rows = 0;
  AttentionStatsAccumulator acc = MakeAcc(o, s);
  AttentionStatsReference ref(o, 2);
  AddCall(s, p, L, L, &acc, &ref);
  for (const AttentionLayerStats& st : {acc.Finish(), ref.Finish()}) {
    EXPECT_NEAR(st.heads[0].entropy, 0.0, 1e-12);  // the twin sees exp(-250), not 0
    EXPECT_NEAR(st.heads[1].entropy, 0.0, 1e-12);
    EXPECT_NEAR(st.heads[0].distance, (L - 1.0) / L, 1e-12);
    EXPECT_NEAR(st.heads[0].diagonal[0], (L - 1.0) / L, 1e-12);
    EXPECT_NEAR(st.heads[1].alpha[0], 1.0, 1e-12);
    EXPECT_NEAR(st.heads[1].last_key0, 1.0, 1e-12);
    EXPECT_NEAR(st.jsd[1], (L - 2.0) / L, 1e-12);  // rows 0, 1: same key; others disjoint
  }
}

// A hand-built 4 x 4 causal map, realised through q and k (k_j = e_j, q_i = ln A[i, :] / scale,
// so softmax gives A exactly up to fp32 rounding: 1e-6).
//   A = [1                ]   alpha_1 = (1 + .5 + .2 + .4) / 4 = .525
//       [.5  .5           ]   alpha_2 = (.5 + .3 + .1) / 3   = .3
//       [.2  .3  .5       ]   alpha_3 = (.5 + .1) / 2        = .3
//       [.4  .1  .1  .4   ]   alpha_4 = .4 / 1               = .4
//   first_mass_k = mean_i sum_{j<k} A[i, j]: .525, .75, .9, 1
//   distance = mean_i sum_j A[i, j] (i - j) = (0 + .5 + .7 + 1.5) / 4 = .675
TEST(AttentionStats, HandBuiltAlpha) {
  const double A[4][4] = {{1, 0, 0, 0}, {.5, .5, 0, 0}, {.2, .3, .5, 0}, {.4, .1, .1, .4}};
  Sequence s;
  s.Init(4, 1, 1, 4);
  const double scale = 0.5;
  for (int64_t t = 0; t < 4; ++t) {
    s.K(t, 0, t) = 1.0f;
    for (int64_t j = 0; j <= t; ++j) s.Q(t, 0, j) = static_cast<float>(std::log(A[t][j]) / scale);
  }
  AttentionParams p;
  p.mask.causal = true;
  AttentionStatsOptions o;
  o.first_k = 4;
  AttentionStatsAccumulator acc = MakeAcc(o, s);
  AddCall(s, p, 4, 4, &acc, nullptr);
  AttentionStatsReference ref(o, 1);
  std::vector<double> probs(&A[0][0], &A[0][0] + 16);
  ASSERT_TRUE(ref.AddProbs(p, probs, 4, 4).ok());
  const double alpha[4] = {.525, .3, .3, .4}, mass[4] = {.525, .75, .9, 1};
  for (const AttentionLayerStats& st : {acc.Finish(), ref.Finish()}) {
    for (int k = 0; k < 4; ++k) {
      EXPECT_NEAR(st.heads[0].alpha[k], alpha[k], 1e-6) << k;
      EXPECT_NEAR(st.heads[0].first_mass[k], mass[k], 1e-6) << k;
    }
    EXPECT_NEAR(st.heads[0].distance, .675, 1e-6);
    EXPECT_EQ(st.alpha_rows, (std::vector<int64_t>{4, 3, 2, 1}));
  }
  const AttentionLayerStats layers[] = {ref.Finish()};
  EXPECT_EQ(AttentionSinkRate(layers, 1, 0.3), 1.0);
  EXPECT_EQ(AttentionSinkRate(layers, 2, 0.35), 0.0);
}

// The JSD sample: jsd_rows = m keeps rows r % s == s - 1 with s the smallest power of two such
// that floor(R / s) <= m, however the rows were split into calls.
TEST(AttentionStats, JsdSampleSize) {
  std::mt19937_64 rng(9);
  Sequence s;
  s.Init(300, 2, 2, 8);
  s.Randomise(rng);
  AttentionParams p;
  p.mask.causal = true;
  AttentionStatsOptions o;
  o.jsd_rows = 10;
  AttentionStatsAccumulator acc = MakeAcc(o, s);
  int64_t done = 0;
  for (int64_t n : {1, 2, 5, 9, 30, 100, 153}) {
    AddCall(s, p, n, done + n, &acc, nullptr);
    done += n;
    int64_t st = 1;
    while (done / st > 10) st *= 2;
    EXPECT_EQ(acc.Finish().jsd_sample_rows, done / st) << done;
  }
}

// Distributed runs number rows across ranks with SkipRows: a rank that skips the calls another
// adds keeps exactly its own rows of the one-process sample, so the ranks' samples partition it
// (AllReduce's merge; its collectives are tested under mpirun by tests/distributed_cli_test.py).
TEST(AttentionStats, SkippedRowsKeepTheOneProcessSampleNumbering) {
  std::mt19937_64 rng(10);
  Sequence s;
  s.Init(300, 2, 2, 8);
  s.Randomise(rng);
  AttentionParams p;
  p.mask.causal = true;
  AttentionStatsOptions o;
  o.jsd_rows = 10;
  const std::vector<int64_t> calls = {1, 2, 5, 9, 30, 100, 153};
  AttentionStatsAccumulator all = MakeAcc(o, s), even = MakeAcc(o, s), odd = MakeAcc(o, s);
  int64_t done = 0;
  for (size_t c = 0; c < calls.size(); ++c) {
    const int64_t n = calls[c];
    AddCall(s, p, n, done + n, &all, nullptr);
    AttentionStatsAccumulator& mine = c % 2 == 0 ? even : odd;
    AttentionStatsAccumulator& other = c % 2 == 0 ? odd : even;
    AddCall(s, p, n, done + n, &mine, nullptr);
    other.SkipRows(n);
    done += n;
    EXPECT_EQ(even.rows(), done);
    EXPECT_EQ(odd.rows(), done);
    EXPECT_EQ(even.Finish().jsd_sample_rows + odd.Finish().jsd_sample_rows,
              all.Finish().jsd_sample_rows)
        << done;
  }
  // One process: AllReduce changes nothing.
  const AttentionLayerStats before = all.Finish();
  ASSERT_TRUE(all.AllReduce(dist::SingleProcess(), "test").ok());
  const AttentionLayerStats after = all.Finish();
  EXPECT_EQ(after.jsd_sample_rows, before.jsd_sample_rows);
  EXPECT_EQ(after.heads[1].alpha, before.heads[1].alpha);
}

// Sequence parallelism (AddStripedRows): one rank of one is AddRows exactly; P ranks' striped
// rows (a rank with no rows when L < P, a last rank with fewer rows) partition one process's
// statistics: every count recombined from the ranks' Finish equals the one-process count, every
// sum its value within the fp32 tolerance of the header above (a row is scored in another row
// block, so its keys sit in other lanes, or through the other GEMM), the JSD samples partition
// the one-process sample, and the rank holding the last position alone reports last_key0. Every variant and causal mask, GQA, packed and
// unpacked row counts, key0_prob per local row. (AllReduce's merge of the same states runs
// under mpirun in tests/dist_model_check.cc.)
TEST(AttentionStats, StripedRowsPartitionOneProcess) {
  std::mt19937_64 rng(31);
  for (const MaskCase& mc : kCausalMasks) {
    for (SoftmaxKind kind : kKinds) {
      for (int64_t L : {2, 41, 130}) {
        Sequence s;
        s.Init(L, 4, 2, 8);
        s.Randomise(rng);
        const AttentionParams p = MakeParams(mc, kind, s, rng);
        AttentionStatsOptions o;
        o.first_k = 3;
        o.jsd_rows = 16;
        o.diagonals = {AttentionDiagonal{1, 0, -1}, AttentionDiagonal{2, 5, 30}};
        const std::string what = std::string(mc.name) + " " + KindName(kind) + " L=" +
                                 std::to_string(L);
        AttentionStatsAccumulator one = MakeAcc(o, s);
        std::vector<float> key0_one(s.Hq * L);
        ASSERT_TRUE(one.AddRows(p, s.q.data(), s.q_stride, L, s.kview, L, {}, key0_one).ok());
        const AttentionLayerStats want = one.Finish();
        AttentionStatsAccumulator striped1 = MakeAcc(o, s);
        ASSERT_TRUE(striped1.AddStripedRows(p, s.q.data(), s.q_stride, 0, 1, s.kview, L).ok());
        ExpectStatsNear(striped1.Finish(), want, 0.0, what + " one rank");
        for (int64_t P : {2, 3}) {
          std::vector<AttentionLayerStats> got;
          int64_t sample_rows = 0;
          for (int64_t r = 0; r < P; ++r) {
            const int64_t n = StripedRowCount(L, r, P);
            std::vector<float> q(std::max<int64_t>(1, n) * s.q_stride, 0.0f);
            for (int64_t i = 0; i < n; ++i) {
              std::copy_n(&s.q[(r + P * i) * s.q_stride], s.q_stride, &q[i * s.q_stride]);
            }
            std::vector<float> key0(s.Hq * n);
            AttentionStatsAccumulator acc = MakeAcc(o, s);
            ASSERT_TRUE(acc.AddStripedRows(p, q.data(), s.q_stride, r, P, s.kview, L, {}, key0).ok())
                << what;
            for (int64_t h = 0; h < s.Hq; ++h) {
              for (int64_t i = 0; i < n; ++i) {
                const float w = key0_one[h * L + r + P * i];
                ASSERT_NEAR(key0[h * n + i], w, 1e-6 * std::abs(w) + 1e-12) << what << " key0_prob";
              }
            }
            got.push_back(acc.Finish());
            EXPECT_EQ(got.back().rows, L) << what;
            sample_rows += got.back().jsd_sample_rows;
          }
          const std::string wp = what + " P=" + std::to_string(P);
          EXPECT_EQ(sample_rows, want.jsd_sample_rows) << wp;
          for (int64_t h = 0; h < s.Hq; ++h) {
            const AttentionHeadStats& w = want.heads[h];
            double entropy = 0, distance = 0, sink = 0, last_key0 = 0;
            int64_t entropy_rows = 0, live = 0, last_visible = 0;
            std::vector<double> alpha(o.first_k, 0.0), mass(o.first_k, 0.0), diag(2, 0.0);
            std::vector<int64_t> alpha_rows(o.first_k, 0), diag_rows(2, 0);
            for (int64_t r = 0; r < P; ++r) {
              const AttentionHeadStats& g = got[r].heads[h];
              if (g.entropy_rows > 0 && !std::isnan(g.entropy)) entropy += g.entropy * g.entropy_rows;
              entropy_rows += g.entropy_rows;
              if (g.live_rows > 0) {
                distance += g.distance * g.live_rows;
                if (!std::isnan(g.sink_mass)) sink += g.sink_mass * g.live_rows;
                for (int64_t j = 0; j < o.first_k; ++j) mass[j] += g.first_mass[j] * g.live_rows;
              }
              live += g.live_rows;
              for (int64_t j = 0; j < o.first_k; ++j) {
                if (got[r].alpha_rows[j] > 0) alpha[j] += g.alpha[j] * got[r].alpha_rows[j];
                alpha_rows[j] += got[r].alpha_rows[j];
              }
              for (int64_t d = 0; d < 2; ++d) {
                if (got[r].diagonal_rows[d] > 0) diag[d] += g.diagonal[d] * got[r].diagonal_rows[d];
                diag_rows[d] += got[r].diagonal_rows[d];
              }
              if (g.last_visible > 0) last_key0 = g.last_key0, last_visible = g.last_visible;
              EXPECT_EQ(g.last_visible > 0, r == (L - 1) % P && w.last_visible > 0) << wp;
            }
            const auto near = [&](double a, double b, const char* name) {
              if (std::isnan(b)) return;  // undefined in one process (sigmoid entropy, ...)
              EXPECT_NEAR(a, b, 1e-6 * std::abs(b) + 1e-12) << wp << " head " << h << " " << name;
            };
            EXPECT_EQ(entropy_rows, w.entropy_rows) << wp;
            EXPECT_EQ(live, w.live_rows) << wp;
            EXPECT_EQ(alpha_rows, want.alpha_rows) << wp;
            EXPECT_EQ(diag_rows, want.diagonal_rows) << wp;
            EXPECT_EQ(last_visible, w.last_visible) << wp;
            EXPECT_NEAR(last_key0, w.last_key0, 1e-6 * w.last_key0 + 1e-12) << wp;
            if (entropy_rows > 0) near(entropy / entropy_rows, w.entropy, "entropy");
            if (live > 0) {
              near(distance / live, w.distance, "distance");
              near(sink / live, w.sink_mass, "sink_mass");
            }
            for (int64_t j = 0; j < o.first_k; ++j) {
              if (alpha_rows[j] > 0) near(alpha[j] / alpha_rows[j], w.alpha[j], "alpha");
              if (live > 0) near(mass[j] / live, w.first_mass[j], "first_mass");
            }
            for (int64_t d = 0; d < 2; ++d) {
              if (diag_rows[d] > 0) near(diag[d] / diag_rows[d], w.diagonal[d], "diagonal");
            }
          }
        }
      }
    }
  }
}

// Striped rows' bad input: a rank outside [0, ranks), an explicit mask, wrong local buffers.
TEST(AttentionStats, StripedRowsBadInputIsAnError) {
  std::mt19937_64 rng(32);
  Sequence s;
  s.Init(10, 2, 1, 4);
  s.Randomise(rng);
  AttentionParams p;
  p.mask.causal = true;
  AttentionStatsAccumulator acc = MakeAcc(AttentionStatsOptions{}, s);
  EXPECT_FALSE(acc.AddStripedRows(p, s.q.data(), s.q_stride, 2, 2, s.kview, 10).ok());
  EXPECT_FALSE(acc.AddStripedRows(p, s.q.data(), s.q_stride, -1, 2, s.kview, 10).ok());
  EXPECT_FALSE(acc.AddStripedRows(p, s.q.data(), s.q_stride, 0, 0, s.kview, 10).ok());
  EXPECT_FALSE(acc.AddStripedRows(p, s.q.data(), s.q_stride, 0, 2, s.kview, 0).ok());
  EXPECT_FALSE(acc.AddStripedRows(p, s.q.data(), s.q_stride, 0, 2, s.kview, 11).ok());  // keys
  std::vector<float> key0(2 * 10);  // two heads x 5 local rows expected
  EXPECT_FALSE(acc.AddStripedRows(p, s.q.data(), s.q_stride, 0, 2, s.kview, 10, {}, key0).ok());
  std::vector<uint8_t> bytes(2 * 10 * 10, 1);
  AttentionParams e = p;
  ExplicitMask m;
  m.data = bytes.data();
  m.size = static_cast<int64_t>(bytes.size());
  m.stride_row = 10, m.stride_head = 100;
  e.mask.explicit_mask = m;
  const Status st = acc.AddStripedRows(e, s.q.data(), s.q_stride, 0, 2, s.kview, 10);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.ToString().find("explicit"), std::string::npos) << st.ToString();
  EXPECT_EQ(acc.rows(), 0);
}

// A key_bias model's per-row extra logit (row_extra_logits): with the same logit b_h on every row
// of head h it is exactly a sink logit, and on top of softmax1 it is a sink logit of
// log(1 + e^b) (both extra entries in one); in chunks like a KV cache. Causal masks, GQA.
TEST(AttentionStats, RowExtraLogitsActLikeASinkLogit) {
  std::mt19937_64 rng(23);
  for (const MaskCase& mc : kCausalMasks) {
    for (SoftmaxKind base : {SoftmaxKind::kStandard, SoftmaxKind::kSoftmax1}) {
      Sequence s;
      s.Init(59, 4, 2, 16);
      s.Randomise(rng);
      AttentionParams with_sink = MakeParams(mc, SoftmaxKind::kSinkLogit, s, rng);
      std::vector<float> sinks = s.sinks;
      std::vector<float> extra(s.Hq * s.L);
      for (int64_t h = 0; h < s.Hq; ++h) {
        for (int64_t i = 0; i < s.L; ++i) extra[h * s.L + i] = sinks[h];
        if (base == SoftmaxKind::kSoftmax1) {
          sinks[h] = static_cast<float>(std::log1p(std::exp(static_cast<double>(s.sinks[h]))));
        }
      }
      with_sink.sink_logits = sinks;
      AttentionParams plain = with_sink;
      plain.softmax = base;
      plain.sink_logits = {};
      AttentionStatsOptions o;
      o.first_k = 3;
      o.diagonals = {{1, 0, -1}};
      o.jsd_rows = 0;
      AttentionStatsAccumulator want_acc = MakeAcc(o, s), got_acc = MakeAcc(o, s);
      ASSERT_TRUE(want_acc.AddRows(with_sink, s.q.data(), s.q_stride, s.L, s.kview, s.L).ok());
      const int64_t cuts[] = {0, 17, 18, 59};
      for (int c = 0; c < 3; ++c) {
        const int64_t n = cuts[c + 1] - cuts[c];
        std::vector<float> chunk(s.Hq * n);
        for (int64_t h = 0; h < s.Hq; ++h) {
          for (int64_t i = 0; i < n; ++i) chunk[h * n + i] = extra[h * s.L + cuts[c] + i];
        }
        ASSERT_TRUE(got_acc.AddRows(plain, s.q.data() + cuts[c] * s.q_stride, s.q_stride, n,
                                    s.kview, cuts[c + 1], chunk).ok());
      }
      const AttentionLayerStats want = want_acc.Finish(), got = got_acc.Finish();
      ExpectStatsNear(got, want, 1e-6, std::string(mc.name) + " " + KindName(base));
      EXPECT_TRUE(std::isfinite(got.heads[0].sink_mass));
    }
  }
  // Refused: a wrong size, unnormalised weights, and a call without after one with.
  Sequence s;
  s.Init(8, 4, 2, 16);
  AttentionParams p;
  p.mask.causal = true;
  AttentionStatsAccumulator acc = MakeAcc(AttentionStatsOptions{}, s);
  const std::vector<float> extra(4 * 8, 0.5f);
  EXPECT_FALSE(acc.AddRows(p, s.q.data(), s.q_stride, 8, s.kview, 8,
                           std::span<const float>(extra.data(), 31)).ok());
  AttentionParams sp = p;
  sp.softmax = SoftmaxKind::kSoftpick;
  EXPECT_FALSE(acc.AddRows(sp, s.q.data(), s.q_stride, 8, s.kview, 8, extra).ok());
  ASSERT_TRUE(acc.AddRows(p, s.q.data(), s.q_stride, 8, s.kview, 8, extra).ok());
  EXPECT_FALSE(acc.AddRows(p, s.q.data(), s.q_stride, 8, s.kview, 8).ok());
}

// key0_prob: each row's P[i, 0] against the engine's double-precision reference rows, for every
// variant and causal mask, GQA, in chunks (a KV cache's calls), plus an explicit mask whose
// rows 2 and 5 see nothing (0) and whose key 0 is hidden from row 4 (0); a row extra logit
// joins the normaliser (the reference's sink logit with the same value). Tolerance: one
// probability, so the header's per-row bound (~5e-7 relative; 1e-6) plus float rounding of the
// output (6e-8 relative).
TEST(AttentionStats, Key0ProbIsEachRowsFirstKeyWeight) {
  std::mt19937_64 rng(29);
  auto expect_rows = [](const std::vector<float>& got, const std::vector<double>& want,
                        int64_t Hq, int64_t len_q, int64_t len_k, int64_t row0, int64_t L,
                        const std::string& what) {
    for (int64_t h = 0; h < Hq; ++h) {
      for (int64_t i = 0; i < len_q; ++i) {
        const double w = want[(h * len_q + i) * len_k];
        const double g = got[h * L + row0 + i];
        EXPECT_TRUE(Close(g, w, 1.1e-6, 1e-12))
            << what << " head " << h << " row " << row0 + i << ": got " << g << " want " << w;
      }
    }
  };
  for (const MaskCase& mc : kCausalMasks) {
    for (SoftmaxKind kind : kKinds) {
      Sequence s;
      s.Init(61, 6, 2, 16);
      s.Randomise(rng);
      const AttentionParams p = MakeParams(mc, kind, s, rng);
      const std::string what = std::string(mc.name) + " " + KindName(kind);
      AttentionStatsAccumulator acc = MakeAcc(AttentionStatsOptions{}, s);
      std::vector<float> all(s.Hq * s.L, -1.0f);
      const int64_t cuts[] = {0, 1, 20, 21, 61};
      for (int c = 0; c < 4; ++c) {
        const int64_t n = cuts[c + 1] - cuts[c];
        std::vector<float> got(s.Hq * n, -1.0f);
        ASSERT_TRUE(acc.AddRows(p, s.q.data() + cuts[c] * s.q_stride, s.q_stride, n, s.kview,
                                cuts[c + 1], {}, got).ok()) << what;
        for (int64_t h = 0; h < s.Hq; ++h) {
          for (int64_t i = 0; i < n; ++i) all[h * s.L + cuts[c] + i] = got[h * n + i];
        }
        expect_rows(all, ReferenceProbs(s, p, n, cuts[c + 1]), s.Hq, n, cuts[c + 1], cuts[c],
                    s.L, what);
      }
      if (mc.mask_first_key) {
        for (float v : all) EXPECT_EQ(v, 0.0f) << what << ": key 0 is masked";
      }
    }
  }
  {  // An explicit mask with dead rows, and a row extra logit.
    Sequence s;
    s.Init(9, 4, 2, 16);
    s.Randomise(rng);
    std::vector<uint8_t> keep(9 * 9, 0);
    for (int64_t i = 0; i < 9; ++i) {
      for (int64_t j = 0; j <= i; ++j) keep[i * 9 + j] = (i != 2 && i != 5 && !(i == 4 && j == 0));
    }
    AttentionParams p;
    p.mask.causal = true;
    ExplicitMask e;  // one [9, 9] mask for every head
    e.data = keep.data();
    e.size = static_cast<int64_t>(keep.size());
    e.stride_row = 9;
    p.mask.explicit_mask = e;
    AttentionStatsAccumulator acc = MakeAcc(AttentionStatsOptions{}, s);
    std::vector<float> got(4 * 9, -1.0f);
    ASSERT_TRUE(acc.AddRows(p, s.q.data(), s.q_stride, 9, s.kview, 9, {}, got).ok());
    expect_rows(got, ReferenceProbs(s, p, 9, 9), 4, 9, 9, 0, 9, "explicit");
    for (int64_t h = 0; h < 4; ++h) {
      EXPECT_EQ(got[h * 9 + 2], 0.0f);
      EXPECT_EQ(got[h * 9 + 4], 0.0f);
      EXPECT_EQ(got[h * 9 + 5], 0.0f);
    }
    AttentionParams sink;
    sink.mask.causal = true;
    sink.softmax = SoftmaxKind::kSinkLogit;
    s.sinks = {1.5f, -2.0f, 0.25f, 3.0f};
    sink.sink_logits = s.sinks;
    std::vector<float> extra(4 * 9);
    for (int64_t h = 0; h < 4; ++h) {
      for (int64_t i = 0; i < 9; ++i) extra[h * 9 + i] = s.sinks[h];
    }
    AttentionParams plain;
    plain.mask.causal = true;
    AttentionStatsAccumulator acc2 = MakeAcc(AttentionStatsOptions{}, s);
    ASSERT_TRUE(acc2.AddRows(plain, s.q.data(), s.q_stride, 9, s.kview, 9, extra, got).ok());
    expect_rows(got, ReferenceProbs(s, sink, 9, 9), 4, 9, 9, 0, 9, "row extra");
  }
  // A wrong size is refused and adds nothing.
  Sequence s;
  s.Init(8, 4, 2, 16);
  AttentionParams p;
  p.mask.causal = true;
  AttentionStatsAccumulator acc = MakeAcc(AttentionStatsOptions{}, s);
  std::vector<float> short_out(4 * 8 - 1);
  EXPECT_FALSE(acc.AddRows(p, s.q.data(), s.q_stride, 8, s.kview, 8, {}, short_out).ok());
  EXPECT_EQ(acc.rows(), 0);
}

TEST(AttentionStats, BadInputIsAnError) {
  Sequence s;
  s.Init(8, 4, 2, 16);
  AttentionParams p;
  p.mask.causal = true;
  AttentionStatsOptions o;
  EXPECT_FALSE(AttentionStatsAccumulator::Create(o, 4, 3, 16).ok());  // not a multiple
  EXPECT_FALSE(AttentionStatsAccumulator::Create(o, 0, 1, 16).ok());
  EXPECT_FALSE(AttentionStatsAccumulator::Create(o, 4, 2, 0).ok());
  {
    AttentionStatsOptions bad = o;
    bad.first_k = -1;
    EXPECT_FALSE(AttentionStatsAccumulator::Create(bad, 4, 2, 16).ok());
    bad = o;
    bad.block_rows = 0;
    EXPECT_FALSE(AttentionStatsAccumulator::Create(bad, 4, 2, 16).ok());
    bad = o;
    bad.diagonals = {{1, 5, 3}};
    EXPECT_FALSE(AttentionStatsAccumulator::Create(bad, 4, 2, 16).ok());
  }
  AttentionStatsAccumulator acc = MakeAcc(o, s);
  EXPECT_FALSE(acc.AddRows(p, nullptr, s.q_stride, 8, s.kview, 8).ok());
  EXPECT_FALSE(acc.AddRows(p, s.q.data(), s.q_stride, 0, s.kview, 8).ok());
  EXPECT_FALSE(acc.AddRows(p, s.q.data(), s.q_stride, 9, s.kview, 8).ok());  // len_q > len_k
  EXPECT_FALSE(acc.AddRows(p, s.q.data(), 4 * 16 - 1, 8, s.kview, 8).ok());  // stride too small
  EXPECT_FALSE(acc.AddRows(p, s.q.data(), s.q_stride, 8, s.kview, 9).ok());  // k too short
  AttentionTensor null_k = s.kview;
  null_k.data = nullptr;
  EXPECT_FALSE(acc.AddRows(p, s.q.data(), s.q_stride, 8, null_k, 8).ok());
  AttentionParams sink = p;
  sink.softmax = SoftmaxKind::kSinkLogit;  // no sink logits
  EXPECT_FALSE(acc.AddRows(sink, s.q.data(), s.q_stride, 8, s.kview, 8).ok());
  AttentionParams neg = p;
  neg.mask.window_left = -2;
  EXPECT_FALSE(acc.AddRows(neg, s.q.data(), s.q_stride, 8, s.kview, 8).ok());
  EXPECT_EQ(acc.rows(), 0);  // nothing was added
  ASSERT_TRUE(acc.AddRows(p, s.q.data(), s.q_stride, 8, s.kview, 8).ok());
  AttentionParams other = p;
  other.softmax = SoftmaxKind::kSoftmax1;  // variant changes between calls
  EXPECT_FALSE(acc.AddRows(other, s.q.data(), s.q_stride, 8, s.kview, 8).ok());
  AttentionStatsReference ref(o, 4);
  EXPECT_FALSE(ref.AddProbs(p, std::vector<double>(10), 8, 8).ok());  // wrong size
}

}  // namespace
}  // namespace attnlab
