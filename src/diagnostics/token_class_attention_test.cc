// Attention by token class (token_class_attention.h) against a brute force in double: scores,
// visibility written out from attention.h's rules, the softmax with its extra terms, the class
// masses and uniform baselines of the sampled rows, fed in uneven chunks as analyze's observer
// does. Plus: a constructed head that attends only to delimiters (ratio ~ 1 / their share) and a
// uniform head (ratio 1 everywhere); the text and frequency classes; bad input.
#include "diagnostics/token_class_attention.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

namespace attnlab {
namespace {

struct ClassCase {
  int64_t hq, hkv, hd, keys, rows_per_window;
  AttentionParams params;
  bool extra_logits = false;
  std::string name;
};

bool Visible(const AttentionMask& m, int64_t p, int64_t j, int64_t len_k) {
  if (j >= len_k) return false;
  if (m.causal && j > p) return false;
  if (m.mask_first_key && j == 0) return false;
  if (j < m.n_sink) return true;
  if (m.window_left >= 0 && p - j > m.window_left) return false;
  return true;
}

// A case's random inputs: q [N, Hq hd], k [Hkv, N, hd] (kv views it), extra logits [Hq, N], key
// classes (delimiters, deciles; key 0 special) and the accumulator's options.
struct CaseInputs {
  std::vector<float> q, k, extra;
  std::vector<uint32_t> labels;
  TokenClassOptions options;
  AttentionTensor kv;
};

CaseInputs MakeInputs(const ClassCase& s, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const int64_t Hq = s.hq, Hkv = s.hkv, hd = s.hd, N = s.keys;
  CaseInputs in;
  in.q.resize(N * Hq * hd), in.k.resize(Hkv * N * hd), in.extra.resize(Hq * N);
  for (float& x : in.q) x = nd(rng) * 1.5f;
  for (float& x : in.k) x = nd(rng);
  for (float& x : in.extra) x = nd(rng);
  in.labels.resize(N);
  for (auto& l : in.labels) l = (rng() % 3 == 0 ? 1u << kClassDelimiter : 0u) | (1u << (kClassDecile1 + rng() % 10));
  in.labels[0] |= 1u << kClassSpecial;
  in.options.first_k = 3, in.options.recent = 5, in.options.rows_per_window = s.rows_per_window;
  in.kv.data = in.k.data(), in.kv.size = static_cast<int64_t>(in.k.size());
  in.kv.stride_token = hd, in.kv.stride_head = N * hd, in.kv.stride_batch = Hkv * N * hd;
  return in;
}

void CheckAgainstBruteForce(const ClassCase& s, uint32_t seed) {
  const int64_t Hq = s.hq, Hkv = s.hkv, hd = s.hd, N = s.keys, Q = Hq * hd;
  const CaseInputs in = MakeInputs(s, seed);
  const std::vector<float>&q = in.q, &k = in.k, &extra = in.extra;
  const std::vector<uint32_t>& labels = in.labels;
  const TokenClassOptions& o = in.options;
  const AttentionTensor& kv = in.kv;
  auto acc = TokenClassAccumulator::Create(o, Hq, Hkv, hd);
  ASSERT_TRUE(acc.ok());
  ASSERT_TRUE(acc.value().BeginWindow(labels).ok());
  // Chunks of uneven size; the keys seen so far are [0, end).
  for (int64_t start = 0, c = 0; start < N; ++c) {
    // (Rows are the last len_q of the keys seen: a non-causal window comes in one chunk.)
    const int64_t len = s.params.mask.causal ? std::min<int64_t>(N - start, 1 + (c * 5) % 9) : N;
    const int64_t len_k = start + len;
    std::vector<float> ex;
    if (s.extra_logits) {
      for (int64_t h = 0; h < Hq; ++h) {
        for (int64_t i = 0; i < len; ++i) ex.push_back(extra[h * N + start + i]);
      }
    }
    ASSERT_TRUE(acc.value()
                    .AddRows(s.params, q.data() + start * Q, Q, len, kv, len_k, ex)
                    .ok())
        << s.name;
    start += len;
  }
  const TokenClassStats got = acc.value().Finish();
  // The brute force.
  const int64_t stride = (N + s.rows_per_window - 1) / s.rows_per_window;
  std::vector<std::vector<double>> mass(Hq, std::vector<double>(kNumTokenClasses, 0.0));
  std::vector<std::vector<double>> uni = mass;
  int64_t rows = 0;
  const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
  for (int64_t p = 0; p < N; p += stride) {
    const int64_t len_k = s.params.mask.causal ? p + 1 : N;
    bool any = false;
    for (int64_t h = 0; h < Hq; ++h) {
      const int64_t g = h / (Hq / Hkv);
      std::vector<double> e(N, 0.0);
      double z = 0;
      int64_t vis = 0;
      for (int64_t j = 0; j < N; ++j) {
        if (!Visible(s.params.mask, p, j, len_k)) continue;
        double dot = 0;
        for (int64_t d = 0; d < hd; ++d) dot += double(q[p * Q + h * hd + d]) * k[(g * N + j) * hd + d];
        e[j] = std::exp(dot * scale);
        z += e[j];
        ++vis;
      }
      if (s.params.softmax == SoftmaxKind::kSoftmax1) z += 1.0;
      if (s.params.softmax == SoftmaxKind::kSinkLogit) z += std::exp(double(s.params.sink_logits[h]));
      if (s.extra_logits) z += std::exp(double(extra[h * N + p]));
      if (vis == 0) continue;
      any = true;
      std::vector<double> cnt(kNumTokenClasses, 0.0);
      for (int64_t j = 0; j < N; ++j) {
        if (!Visible(s.params.mask, p, j, len_k)) continue;
        uint32_t l = labels[j] | (j < o.first_k ? 1u << kClassFirst : 0u);
        if (p - j >= 0 && p - j < o.recent) l |= 1u << kClassRecent;
        for (int c = 0; c < kNumTokenClasses; ++c) {
          if (l >> c & 1u) mass[h][c] += e[j] / z, cnt[c] += 1;
        }
      }
      for (int c = 0; c < kNumTokenClasses; ++c) uni[h][c] += cnt[c] / vis;
    }
    if (any) ++rows;
  }
  ASSERT_EQ(got.rows, rows) << s.name;
  for (int64_t h = 0; h < Hq; ++h) {
    for (int c = 0; c < kNumTokenClasses; ++c) {
      EXPECT_NEAR(got.mass[h][c], mass[h][c] / rows, 2e-5) << s.name << " head " << h << " " << TokenClassName(c);
      EXPECT_NEAR(got.uniform[h][c], uni[h][c] / rows, 1e-12) << s.name << " head " << h << " " << TokenClassName(c);
    }
  }
}

std::vector<ClassCase> Setups() {
  static const std::vector<float> sinks = {0.5f, -1.0f, 2.0f, 0.0f};
  std::vector<ClassCase> setups;
  AttentionParams causal;
  causal.mask.causal = true;
  setups.push_back({4, 2, 8, 70, 1000, causal, false, "causal, every row"});
  setups.push_back({4, 1, 8, 70, 16, causal, false, "causal, sampled"});
  AttentionParams first = causal;
  first.mask.mask_first_key = true;
  setups.push_back({2, 2, 16, 33, 7, first, false, "mask_first_key (row 0 dead)"});
  AttentionParams window = causal;
  window.mask.window_left = 6, window.mask.n_sink = 2;
  setups.push_back({4, 2, 8, 50, 20, window, false, "window + sinks"});
  AttentionParams full;
  setups.push_back({2, 1, 8, 40, 9, full, false, "not causal"});
  AttentionParams s1 = causal;
  s1.softmax = SoftmaxKind::kSoftmax1;
  setups.push_back({2, 2, 8, 45, 15, s1, false, "softmax1"});
  AttentionParams sl = causal;
  sl.softmax = SoftmaxKind::kSinkLogit;
  sl.sink_logits = sinks;
  setups.push_back({4, 2, 8, 45, 15, sl, true, "sink logits + key_bias logits"});
  return setups;
}

TEST(TokenClassAttention, MatchesABruteForceOverMasksSoftmaxesAndSampling) {
  const std::vector<ClassCase> setups = Setups();
  for (size_t i = 0; i < setups.size(); ++i) CheckAgainstBruteForce(setups[i], 100 + i);
}

// One sequence's rows striped over P "ranks" (AddStripedRows, rank r: positions r, r + P, ...):
// the ranks' sums, recombined here (mean x rows, what AllReduce adds), equal one accumulator's
// AddRows of every row: the same sampled rows (counts exactly), the masses within float
// accumulation (1e-6). Fewer rows than ranks included (keys 2, P 3: a rank without rows).
TEST(TokenClassAttention, StripedRowsRecombineToOneProcess) {
  std::vector<ClassCase> setups = Setups();
  setups.push_back(setups[0]);
  setups.back().keys = 2, setups.back().name = "two keys";
  setups.push_back(setups[0]);  // 100+ sampled rows in one call: scored in blocks of 64
  setups.back().keys = 230, setups.back().name = "230 keys, every row";
  for (size_t si = 0; si < setups.size(); ++si) {
    const ClassCase& s = setups[si];
    const int64_t Hq = s.hq, Hkv = s.hkv, hd = s.hd, N = s.keys, Q = Hq * hd;
    const CaseInputs in = MakeInputs(s, static_cast<uint32_t>(300 + si));
    const std::vector<float>&q = in.q, &extra = in.extra;
    const std::vector<uint32_t>& labels = in.labels;
    const TokenClassOptions& o = in.options;
    const AttentionTensor& kv = in.kv;
    auto one = TokenClassAccumulator::Create(o, Hq, Hkv, hd);
    ASSERT_TRUE(one.ok());
    ASSERT_TRUE(one.value().BeginWindow(labels).ok());
    ASSERT_TRUE(one.value()
                    .AddRows(s.params, q.data(), Q, N, kv, N, s.extra_logits ? extra : std::vector<float>())
                    .ok());
    const TokenClassStats want = one.value().Finish();
    for (int64_t P : {2, 3}) {
      int64_t rows = 0;
      std::vector<double> mass(Hq * kNumTokenClasses, 0.0), uni = mass;
      for (int64_t r = 0; r < P; ++r) {
        std::vector<float> lq, lex;
        for (int64_t t = r; t < N; t += P) lq.insert(lq.end(), q.begin() + t * Q, q.begin() + (t + 1) * Q);
        const int64_t n = static_cast<int64_t>(lq.size()) / Q;
        for (int64_t h = 0; h < Hq && s.extra_logits; ++h) {
          for (int64_t t = r; t < N; t += P) lex.push_back(extra[h * N + t]);
        }
        auto acc = TokenClassAccumulator::Create(o, Hq, Hkv, hd);
        ASSERT_TRUE(acc.value().BeginWindow(labels).ok());
        ASSERT_TRUE(acc.value()
                        .AddStripedRows(s.params, n > 0 ? lq.data() : q.data(), Q, r, P, kv, N, lex)
                        .ok())
            << s.name << " P " << P << " rank " << r;
        const TokenClassStats got = acc.value().Finish();
        rows += got.rows;
        for (int64_t h = 0; h < Hq; ++h) {
          for (int c = 0; c < kNumTokenClasses; ++c) {
            mass[h * kNumTokenClasses + c] += got.mass[h][c] * static_cast<double>(got.rows);
            uni[h * kNumTokenClasses + c] += got.uniform[h][c] * static_cast<double>(got.rows);
          }
        }
      }
      ASSERT_EQ(rows, want.rows) << s.name << " P " << P;
      for (int64_t h = 0; h < Hq; ++h) {
        for (int c = 0; c < kNumTokenClasses; ++c) {
          const double n = static_cast<double>(std::max<int64_t>(rows, 1));
          EXPECT_NEAR(mass[h * kNumTokenClasses + c] / n, want.mass[h][c], 1e-6) << s.name << " P " << P << " class " << c;
          EXPECT_NEAR(uni[h * kNumTokenClasses + c] / n, want.uniform[h][c], 1e-12) << s.name << " P " << P << " class " << c;
        }
      }
    }
  }
}

// Head 0's query matches the delimiters' keys (a large score), head 1's query is zero (uniform):
// head 0 puts ~all its mass on delimiters (ratio ~ 1 / their share of the visible keys), head 1
// gives every class exactly its uniform share (ratio 1).
TEST(TokenClassAttention, AHeadThatReadsDelimitersAndAUniformHead) {
  const int64_t N = 64, hd = 4, H = 2;
  std::vector<float> k(N * hd, 0.0f), q(N * H * hd, 0.0f);
  std::vector<uint32_t> labels(N, 0);
  for (int64_t j = 0; j < N; ++j) {
    if (j % 8 == 3) labels[j] = 1u << kClassDelimiter, k[j * hd] = 1.0f;  // key direction e0
  }
  for (int64_t i = 0; i < N; ++i) q[i * H * hd] = 40.0f;  // head 0: 40 e0 (scale 1/2: score 20)
  TokenClassOptions o;
  auto acc = TokenClassAccumulator::Create(o, H, 1, hd);
  ASSERT_TRUE(acc.ok());
  ASSERT_TRUE(acc.value().BeginWindow(labels).ok());
  AttentionParams p;
  p.mask.causal = true;
  AttentionTensor kv;
  kv.data = k.data(), kv.size = N * hd, kv.stride_token = hd, kv.stride_head = N * hd;
  kv.stride_batch = N * hd;
  // Rows 4.. only (every row then sees a delimiter); the keys [0, N) were all added.
  ASSERT_TRUE(acc.value().AddRows(p, q.data() + 4 * H * hd, H * hd, N - 4, kv, N).ok());
  const TokenClassStats s = acc.value().Finish();
  EXPECT_EQ(s.rows, N - 4);
  EXPECT_NEAR(s.mass[0][kClassDelimiter], 1.0, 1e-6);
  EXPECT_GT(s.mass[0][kClassDelimiter] / s.uniform[0][kClassDelimiter], 5.0);
  for (int c = 0; c < kNumTokenClasses; ++c) {
    EXPECT_NEAR(s.mass[1][c], s.uniform[1][c], 1e-6) << TokenClassName(c);
  }
}

TEST(TokenClassAttention, TextAndFrequencyClasses) {
  EXPECT_EQ(TokenTextClasses(","), 1u << kClassDelimiter);
  EXPECT_EQ(TokenTextClasses(" ."), 1u << kClassDelimiter);
  EXPECT_EQ(TokenTextClasses(")\n"), 1u << kClassDelimiter);
  EXPECT_EQ(TokenTextClasses("\n\n"), 1u << kClassWhitespace);
  EXPECT_EQ(TokenTextClasses(" "), 1u << kClassWhitespace);
  EXPECT_EQ(TokenTextClasses(" the"), 0u);
  EXPECT_EQ(TokenTextClasses("3."), 0u);
  EXPECT_EQ(TokenTextClasses(""), 0u);
  EXPECT_EQ(TokenTextClasses("\xe2\x80\x94"), 0u);  // an em dash: not ASCII
  // Of the 8 valid tokens, id 5 (4 of them) starts at 0%: decile 1; id 2 (2) starts at 50%:
  // decile 6; ids 1 and 7 (1 each, the lower id first) start at 75% and 87.5%: deciles 8, 9.
  std::vector<int32_t> t = {5, 5, 5, 5, 2, 2, 7, 1, 99, -1};
  const std::vector<uint32_t> d = FrequencyDecileClasses(t, 10);
  ASSERT_EQ(d.size(), 10u);
  EXPECT_EQ(d[5], 1u << kClassDecile1);
  EXPECT_EQ(d[2], 1u << (kClassDecile1 + 5));
  EXPECT_EQ(d[1], 1u << (kClassDecile1 + 7));   // ties: the lower id first
  EXPECT_EQ(d[7], 1u << (kClassDecile1 + 8));
  EXPECT_EQ(d[0], 0u);
  EXPECT_EQ(TokenClassName(kClassDecile1 + 9), "freq_d10");
}

TEST(TokenClassAttention, BadInputIsAnError) {
  EXPECT_FALSE(TokenClassAccumulator::Create({}, 3, 2, 8).ok());
  TokenClassOptions o;
  o.rows_per_window = 0;
  EXPECT_FALSE(TokenClassAccumulator::Create(o, 2, 1, 8).ok());
  auto acc = TokenClassAccumulator::Create({}, 2, 1, 4);
  ASSERT_TRUE(acc.ok());
  ASSERT_TRUE(acc.value().BeginWindow(std::vector<uint32_t>(5, 0)).ok());
  std::vector<float> q(2 * 4 * 8, 0.0f), k(8 * 4, 0.0f);
  AttentionTensor kv;
  kv.data = k.data(), kv.size = 32, kv.stride_token = 4, kv.stride_head = 32, kv.stride_batch = 32;
  AttentionParams p;
  p.mask.causal = true;
  EXPECT_FALSE(acc.value().AddRows(p, q.data(), 8, 2, kv, 8).ok());  // more keys than the window
  AttentionParams sig = p;
  sig.softmax = SoftmaxKind::kSigmoid;
  EXPECT_FALSE(acc.value().AddRows(sig, q.data(), 8, 2, kv, 4).ok());
  EXPECT_FALSE(TokenClassAccumulator::Supports(sig));
}

}  // namespace
}  // namespace attnlab
