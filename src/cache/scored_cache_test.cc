// The attention-scored caches (H2O, TOVA, SnapKV) against a naive twin: per (layer, KV head) a plain
// list of retained tokens, keys rotated in double at every step, attention recomputed by a
// softmax in double from scratch (not from the kernel's lse), the eviction rule written again.
// Token by token on a GQA RoPE model: the same logits (to fp32 rounding) and the same retained
// tokens in every head of every layer (the fast cache scores in fp32: where its choice differs
// from the twin's only between scores equal to 1e-5, the twin follows it, and such near-ties
// must stay rare), over awkward budgets (the smallest, sinks only, larger
// than the text). Plus: a budget larger than the text equals the dense cache; uniform attention
// (ties everywhere) makes TOVA the sink / window policy; bad configurations are errors.
#include "cache/scored_cache.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "cache/cache_test_util.h"
#include "cache/streaming_cache.h"
#include "model/gpt.h"

namespace attnlab {
namespace {

ModelConfig TinyGqaRope() {
  ModelConfig c;
  c.vocab_size = 40, c.context = 64, c.d_model = 16, c.n_layer = 2, c.n_head = 4, c.n_kv_head = 2;
  c.init_std = 0.3f;
  return c;
}

// The Llama-family layout of the same decoder (RMSNorm, SwiGLU, no biases, interleaved RoPE
// pairs, 4 query heads per KV head): the cache sees only keys, queries and lse, so the policies
// must not care; tested anyway.
ModelConfig TinyLlama() {
  ModelConfig c = TinyGqaRope();
  c.n_head = 8, c.n_kv_head = 2, c.d_model = 32;
  c.norm_type = NormType::kRmsNorm, c.mlp_activation = MlpActivation::kSwiGlu;
  c.bias = false, c.rope_layout = RopeLayout::kGptJ;
  return c;
}

class NaiveScoredCache : public KvCache {
 public:
  NaiveScoredCache(const StreamingCacheConfig& sc, const ModelConfig& c)
      : sc_(sc), c_(c), heads_(c.n_layer, std::vector<std::vector<Tok>>(c.kv_heads())),
        k_(c.n_layer), v_(c.n_layer) {
    recent_ = sc.policy == CachePolicy::kH2O ? (sc.recent >= 0 ? sc.recent : DefaultH2oRecent(sc)) : 0;
  }
  int64_t size() const override { return static_cast<int64_t>(heads_[0][0].size()); }
  // The twin's positions, from the definitions in scored_cache.h.
  int64_t Position(int64_t rank, int64_t arrival) const {
    if (sc_.scored_positions == StreamingCacheConfig::ScoredPositions::kRank) return rank;
    const int64_t newest = arrivals_ + T_ - 1;
    const int64_t p_newest = std::min<int64_t>(newest, c_.context - 1);
    return std::max<int64_t>(0, p_newest - (newest - arrival));
  }
  Status BeginStep(int64_t T, std::vector<int64_t>* positions) override {
    T_ = T;
    positions->clear();
    for (int64_t t = 0; t < T; ++t) positions->push_back(Position(size() + t, arrivals_ + t));
    return Status::Ok();
  }
  Status Update(int64_t layer, const float* k_new, const float* v_new, int64_t ld,
                const RopeTable* rope, AttentionTensor* k_all, AttentionTensor* v_all,
                int64_t* len_k) override {
    const int64_t hd = c_.head_dim(), Hkv = c_.kv_heads();
    for (int64_t g = 0; g < Hkv; ++g) {
      for (int64_t t = 0; t < T_; ++t) {
        Tok tok;
        tok.seq = arrivals_ + t;
        tok.k.assign(k_new + t * ld + g * hd, k_new + t * ld + (g + 1) * hd);
        tok.v.assign(v_new + t * ld + g * hd, v_new + t * ld + (g + 1) * hd);
        heads_[layer][g].push_back(tok);
      }
    }
    const int64_t n = static_cast<int64_t>(heads_[layer][0].size());
    // [Hkv, n, hd] keys rotated in double to their ranks (the attention factor first, as
    // RopeForward applies it), then rounded once.
    k_[layer].assign(Hkv * n * hd, 0.0f);
    v_[layer].assign(Hkv * n * hd, 0.0f);
    rot_.assign(Hkv * n * hd, 0.0);
    for (int64_t g = 0; g < Hkv; ++g) {
      for (int64_t i = 0; i < n; ++i) {
        const Tok& tok = heads_[layer][g][i];
        double* x = rot_.data() + (g * n + i) * hd;
        for (int64_t d = 0; d < hd; ++d) x[d] = tok.k[d];
        for (int64_t d = 0; d < rope->rotary_dim(); ++d) x[d] *= rope->AttentionFactor();
        RopeRotateVector(*rope, x, Position(i, tok.seq));
        for (int64_t d = 0; d < hd; ++d) {
          k_[layer][(g * n + i) * hd + d] = static_cast<float>(x[d]);
          v_[layer][(g * n + i) * hd + d] = tok.v[d];
        }
      }
    }
    auto view = [&](const float* base) {
      AttentionTensor a;
      a.data = base, a.size = Hkv * n * hd, a.stride_token = hd, a.stride_head = n * hd;
      a.stride_batch = Hkv * n * hd;
      return a;
    };
    *k_all = view(k_[layer].data());
    *v_all = view(v_[layer].data());
    *len_k = n;
    return Status::Ok();
  }
  bool WantsAttention() const override { return true; }
  Status ObserveAttention(int64_t layer, const AttentionParams& params, const AttentionTensor& q,
                          int64_t T, std::span<const float> lse) override {
    (void)params, (void)lse;  // the twin recomputes the softmax itself
    const int64_t hd = c_.head_dim(), H = c_.n_head, Hkv = c_.kv_heads(), group = H / Hkv;
    const int64_t n = static_cast<int64_t>(heads_[layer][0].size());
    std::vector<std::vector<double>> p(H, std::vector<double>(n, 0.0));  // summed over rows
    for (int64_t h = 0; h < H; ++h) {
      const int64_t g = h / group;
      const int64_t first = sc_.policy == CachePolicy::kTova     ? T - 1
                            : sc_.policy == CachePolicy::kSnapKV ? std::max<int64_t>(0, T - sc_.snap_window)
                                                                 : 0;
      for (int64_t i = first; i < T; ++i) {
        const int64_t visible = n - T + i + 1;
        std::vector<double> s(visible);
        double m = -INFINITY;
        for (int64_t j = 0; j < visible; ++j) {
          double dot = 0;
          for (int64_t d = 0; d < hd; ++d) {
            dot += static_cast<double>(q.at(0, h, i)[d]) * rot_[(g * n + j) * hd + d];
          }
          s[j] = dot / std::sqrt(static_cast<double>(hd));
          m = std::max(m, s[j]);
        }
        double z = 0;
        for (double x : s) z += std::exp(x - m);
        for (int64_t j = 0; j < visible; ++j) p[h][j] += std::exp(s[j] - m) / z;
      }
    }
    for (int64_t g = 0; g < Hkv; ++g) {
      for (int64_t j = 0; j < n; ++j) {
        double s = 0;
        if (sc_.policy == CachePolicy::kTova) {
          for (int64_t h = 0; h < H; ++h) s += p[h][j];
          heads_[layer][g][j].score = s / H;
        } else {
          for (int64_t h = g * group; h < (g + 1) * group; ++h) s += p[h][j];
          // H2O accumulates; SnapKV's votes are this step's alone.
          heads_[layer][g][j].score = sc_.policy == CachePolicy::kSnapKV ? s : heads_[layer][g][j].score + s;
        }
      }
    }
    return Status::Ok();
  }
  // SnapKV written again: candidates [n_sink, n - obs), votes average-pooled with zero padding
  // (divided by the kernel), the `drop` lowest leave, the oldest first on ties. Following the
  // fast cache, its choice is taken when every token it dropped has a pooled vote within 1e-5
  // of the twin's drop-th lowest (near-ties, counted when the two choices differ).
  void SnapEndStep() {
    for (size_t l = 0; l < heads_.size(); ++l) {
      for (size_t g = 0; g < heads_[l].size(); ++g) {
        std::vector<Tok>& toks = heads_[l][g];
        const int64_t n = static_cast<int64_t>(toks.size()), drop = n - (sc_.window - 1);
        if (drop <= 0) continue;
        const int64_t obs = std::min({T_, sc_.snap_window, sc_.window - 1 - sc_.n_sink});
        const int64_t lo = sc_.n_sink, hi = n - obs, k = sc_.snap_kernel;
        std::vector<double> pooled(n, 0.0);
        std::vector<int64_t> order;
        for (int64_t i = lo; i < hi; ++i) {
          for (int64_t j = i - k / 2; j <= i + k / 2; ++j) {
            if (j >= lo && j < hi) pooled[i] += toks[j].score;
          }
          pooled[i] /= static_cast<double>(k);
          order.push_back(i);
        }
        std::stable_sort(order.begin(), order.end(),
                         [&](int64_t a, int64_t b) { return pooled[a] < pooled[b]; });
        std::vector<int64_t> victims(order.begin(), order.begin() + drop);
        if (follow_) {
          const std::vector<int64_t> kept = follow_->RetainedTokens(static_cast<int64_t>(l), static_cast<int64_t>(g));
          std::vector<int64_t> theirs;
          for (int64_t i = 0; i < n; ++i) {
            if (std::find(kept.begin(), kept.end(), toks[i].seq) == kept.end()) theirs.push_back(i);
          }
          const double bar = pooled[order[drop - 1]];
          bool close = static_cast<int64_t>(theirs.size()) == drop;
          for (int64_t i : theirs) close = close && i >= lo && i < hi && pooled[i] <= bar + 1e-5 * std::max(1.0, bar);
          std::vector<int64_t> mine = victims;
          std::sort(mine.begin(), mine.end());
          if (close && theirs != mine) {
            victims = theirs;
            ++near_ties_;
          }
        }
        std::sort(victims.rbegin(), victims.rend());
        for (int64_t i : victims) toks.erase(toks.begin() + i);
        evictions_ += drop;
      }
    }
    arrivals_ += T_;
  }
  void EndStep() override {
    if (sc_.policy == CachePolicy::kSnapKV) {
      SnapEndStep();
      return;
    }
    for (size_t l = 0; l < heads_.size(); ++l) {
      for (size_t g = 0; g < heads_[l].size(); ++g) {
        std::vector<Tok>& toks = heads_[l][g];
        std::vector<int64_t> kept;  // what the fast cache kept (when following it)
        if (follow_) kept = follow_->RetainedTokens(static_cast<int64_t>(l), static_cast<int64_t>(g));
        auto fast_kept = [&](int64_t seq) {
          return std::find(kept.begin(), kept.end(), seq) != kept.end();
        };
        while (static_cast<int64_t>(toks.size()) > sc_.window - 1) {
          const int64_t n = static_cast<int64_t>(toks.size());
          int64_t best = -1;
          for (int64_t i = sc_.n_sink; i < n - recent_; ++i) {
            if (best < 0 || toks[i].score < toks[best].score) best = i;
          }
          // The fast cache scores in fp32 (GEMM, exp2 lanes): where it kept the twin's choice
          // and dropped another candidate whose score ties the twin's lowest to fp32 rounding,
          // follow it (a near-tie, counted) so the two stay comparable afterwards.
          if (follow_ && fast_kept(toks[best].seq)) {
            const double tol = 1e-5 * std::max(1.0, std::abs(toks[best].score));
            for (int64_t i = sc_.n_sink; i < n - recent_; ++i) {
              if (!fast_kept(toks[i].seq) && toks[i].score <= toks[best].score + tol) {
                best = i;
                ++near_ties_;
                break;
              }
            }
          }
          toks.erase(toks.begin() + best);
          ++evictions_;
        }
      }
    }
    arrivals_ += T_;
  }
  // Break near-ties as `fast` did (see EndStep).
  void Follow(const ScoredKvCache* fast) { follow_ = fast; }
  int64_t near_ties() const { return near_ties_; }
  int64_t evictions() const { return evictions_; }
  int64_t bytes() const override { return 0; }
  std::vector<int64_t> Retained(int64_t layer, int64_t head) const {
    std::vector<int64_t> out;
    for (const Tok& t : heads_[layer][head]) out.push_back(t.seq);
    return out;
  }

 private:
  struct Tok {
    int64_t seq = 0;
    std::vector<float> k, v;
    double score = 0;
  };
  StreamingCacheConfig sc_;
  ModelConfig c_;
  int64_t recent_ = 0, T_ = 0, arrivals_ = 0, near_ties_ = 0, evictions_ = 0;
  const ScoredKvCache* follow_ = nullptr;
  std::vector<std::vector<std::vector<Tok>>> heads_;
  std::vector<std::vector<float>> k_, v_;
  std::vector<double> rot_;
};

using testing::MaxRelDiff;

struct Budget {
  CachePolicy policy;
  int64_t window, sinks, recent;
};

TEST(ScoredKvCache, MatchesANaiveTwinTokenByTokenOverAwkwardBudgets) {
 for (const ModelConfig& c : {TinyGqaRope(), TinyLlama()}) {
  auto g = Gpt::Create(c);
  ASSERT_TRUE(g.ok());
  Gpt& gpt = *g.value();
  gpt.params().Initialize(c, 21);
  const std::vector<Budget> budgets = {
      {CachePolicy::kH2O, 2, 0, 0},    {CachePolicy::kH2O, 12, 0, -1},
      {CachePolicy::kH2O, 12, 3, -1},  {CachePolicy::kH2O, 6, 5, 0},  // sinks only
      {CachePolicy::kH2O, 9, 2, 6},    {CachePolicy::kH2O, 64, 2, -1},  // larger than the text
      {CachePolicy::kTova, 2, 0, 0},   {CachePolicy::kTova, 12, 0, 0},
      {CachePolicy::kTova, 12, 4, 0},  {CachePolicy::kTova, 5, 4, 0},
      {CachePolicy::kTova, 64, 0, 0},
      {CachePolicy::kSnapKV, 2, 0, 0},   {CachePolicy::kSnapKV, 12, 0, 0},
      {CachePolicy::kSnapKV, 12, 4, 0},  {CachePolicy::kSnapKV, 6, 4, 0},  // one left to choose
      {CachePolicy::kSnapKV, 64, 2, 0}};
  for (const Budget& b : budgets) {
   for (auto mode : {StreamingCacheConfig::ScoredPositions::kDistance,
                     StreamingCacheConfig::ScoredPositions::kRank}) {
    StreamingCacheConfig sc;
    sc.policy = b.policy, sc.window = b.window, sc.n_sink = b.sinks, sc.recent = b.recent;
    sc.scored_positions = mode;
    ASSERT_TRUE(ValidateStreamingConfig(sc, c).ok()) << ValidateStreamingConfig(sc, c).message();
    ScoredKvCache fast(sc, c);
    NaiveScoredCache naive(sc, c);
    naive.Follow(&fast);
    std::mt19937 rng(5 + b.window);
    const int64_t V = c.vocab_size;
    double worst = 0;
    const std::string what = std::string(CachePolicyName(b.policy)) + " W=" +
                             std::to_string(b.window) + " sinks=" + std::to_string(b.sinks) +
                             " recent=" + std::to_string(b.recent) +
                             (mode == StreamingCacheConfig::ScoredPositions::kRank ? " rank" : " distance");
    for (int64_t i = 0; i < 90; ++i) {  // past the context of 64
      const int32_t tok = static_cast<int32_t>(rng() % V);
      ASSERT_TRUE(gpt.Forward(&tok, nullptr, 1, 1, nullptr, &fast).ok()) << what;
      std::vector<float> got(gpt.logits(), gpt.logits() + V);
      ASSERT_TRUE(gpt.Forward(&tok, nullptr, 1, 1, nullptr, &naive).ok()) << what;
      worst = std::max(worst, MaxRelDiff(got.data(), gpt.logits(), V));
      ASSERT_EQ(fast.size(), std::min<int64_t>(i + 1, b.window - 1)) << what;
      for (int64_t l = 0; l < c.n_layer; ++l) {
        for (int64_t h = 0; h < c.kv_heads(); ++h) {
          ASSERT_EQ(fast.RetainedTokens(l, h), naive.Retained(l, h))
              << what << " step " << i << " layer " << l << " head " << h;
        }
      }
    }
    EXPECT_LE(worst, 1e-5) << what;
    // Near-ties followed: rare (fp32 rounding decides only between scores equal to 1e-5).
    EXPECT_LE(naive.near_ties() * 50, naive.evictions()) << what;
    // Pinned sinks are never evicted.
    for (int64_t s = 0; s < b.sinks; ++s) EXPECT_EQ(fast.RetainedTokens(1, 0)[s], s) << what;
   }
  }
 }
}

// A prompt in one step: every token attends densely, then the cache evicts down to W - 1.
TEST(ScoredKvCache, AMultiTokenStepMatchesTheTwin) {
  const ModelConfig c = TinyGqaRope();
  auto g = Gpt::Create(c);
  ASSERT_TRUE(g.ok());
  Gpt& gpt = *g.value();
  gpt.params().Initialize(c, 22);
  for (CachePolicy p : {CachePolicy::kH2O, CachePolicy::kTova, CachePolicy::kSnapKV}) {
    StreamingCacheConfig sc;
    sc.policy = p, sc.window = 10, sc.n_sink = 1, sc.recent = p == CachePolicy::kH2O ? 2 : -1;
    sc.snap_window = 4, sc.snap_kernel = 3;  // the prompt's last 4 rows vote (SnapKV's prefill)
    ScoredKvCache fast(sc, c);
    NaiveScoredCache naive(sc, c);
    naive.Follow(&fast);
    std::vector<int32_t> prompt(23);
    for (int32_t i = 0; i < 23; ++i) prompt[i] = (i * 7 + 3) % c.vocab_size;
    ASSERT_TRUE(gpt.Forward(prompt.data(), nullptr, 1, 23, nullptr, &fast).ok());
    std::vector<float> got(gpt.logits(), gpt.logits() + 23 * c.vocab_size);
    ASSERT_TRUE(gpt.Forward(prompt.data(), nullptr, 1, 23, nullptr, &naive).ok());
    EXPECT_LE(MaxRelDiff(got.data(), gpt.logits(), 23 * c.vocab_size), 1e-5);
    EXPECT_EQ(fast.size(), 9);
    for (int64_t l = 0; l < c.n_layer; ++l) {
      for (int64_t h = 0; h < c.kv_heads(); ++h) {
        EXPECT_EQ(fast.RetainedTokens(l, h), naive.Retained(l, h)) << CachePolicyName(p);
      }
    }
  }
}

// A budget the text never fills keeps every token at its own position: the dense cache's logits.
TEST(ScoredKvCache, ABudgetLargerThanTheTextIsTheDenseCache) {
  const ModelConfig c = TinyGqaRope();
  auto g = Gpt::Create(c);
  ASSERT_TRUE(g.ok());
  Gpt& gpt = *g.value();
  gpt.params().Initialize(c, 23);
  StreamingCacheConfig sc;
  sc.policy = CachePolicy::kH2O, sc.window = 64, sc.n_sink = 0;
  ScoredKvCache scored(sc, c);
  DenseKvCache dense(c.n_layer, c.kv_heads(), c.head_dim());
  for (int32_t i = 0; i < 50; ++i) {
    const int32_t tok = (i * 11) % c.vocab_size;
    ASSERT_TRUE(gpt.Forward(&tok, nullptr, 1, 1, nullptr, &scored).ok());
    std::vector<float> got(gpt.logits(), gpt.logits() + c.vocab_size);
    ASSERT_TRUE(gpt.Forward(&tok, nullptr, 1, 1, nullptr, &dense).ok());
    EXPECT_LE(MaxRelDiff(got.data(), gpt.logits(), c.vocab_size), 1e-6) << i;
  }
  EXPECT_EQ(scored.evictions(), 0);
}

// Zero query weights make every row uniform: TOVA's scores tie and it drops the oldest unpinned
// token, which is exactly the sink policy (the window policy without sinks).
TEST(ScoredKvCache, TiesDropTheOldestSoUniformTovaIsTheSinkPolicy) {
  const ModelConfig c = TinyGqaRope();
  auto g = Gpt::Create(c);
  ASSERT_TRUE(g.ok());
  Gpt& gpt = *g.value();
  gpt.params().Initialize(c, 24);
  const int64_t C = c.d_model, hd = c.head_dim();
  for (int64_t l = 0; l < c.n_layer; ++l) {  // q columns of W_qkv (and their bias) to zero
    float* w = gpt.params().ptrs().layers[l].qkv_w;
    float* bias = gpt.params().ptrs().layers[l].qkv_b;
    const int64_t Q = c.qkv_dim();
    for (int64_t r = 0; r < C; ++r) {
      for (int64_t j = 0; j < c.n_head * hd; ++j) w[r * Q + j] = 0.0f;
    }
    for (int64_t j = 0; bias && j < c.n_head * hd; ++j) bias[j] = 0.0f;
  }
  for (int64_t sinks : {0, 3}) {
    StreamingCacheConfig sc;
    sc.policy = CachePolicy::kTova, sc.window = 9, sc.n_sink = sinks;
    ScoredKvCache tova(sc, c);
    for (int32_t i = 0; i < 30; ++i) {
      const int32_t tok = (i * 5) % c.vocab_size;
      ASSERT_TRUE(gpt.Forward(&tok, nullptr, 1, 1, nullptr, &tova).ok());
    }
    std::vector<int64_t> want;
    for (int64_t s = 0; s < sinks; ++s) want.push_back(s);
    for (int64_t t = 30 - (8 - sinks); t < 30; ++t) want.push_back(t);
    for (int64_t l = 0; l < c.n_layer; ++l) {
      for (int64_t h = 0; h < c.kv_heads(); ++h) EXPECT_EQ(tova.RetainedTokens(l, h), want);
    }
  }
}

TEST(ScoredKvCache, BadConfigurationsAreErrors) {
  const ModelConfig c = TinyGqaRope();
  StreamingCacheConfig sc;
  sc.policy = CachePolicy::kH2O, sc.n_sink = 0;
  sc.window = 1;
  EXPECT_FALSE(ValidateStreamingConfig(sc, c).ok());  // nothing kept between steps
  sc.window = 10, sc.n_sink = 5, sc.recent = 5;
  EXPECT_FALSE(ValidateStreamingConfig(sc, c).ok());  // nothing left to choose from
  sc.n_sink = -1, sc.recent = 0;
  EXPECT_FALSE(ValidateStreamingConfig(sc, c).ok());
  sc.n_sink = 0, sc.recent = -2;
  EXPECT_FALSE(ValidateStreamingConfig(sc, c).ok());
  sc.recent = -1, sc.window = 65;
  EXPECT_FALSE(ValidateStreamingConfig(sc, c).ok());  // past the context
  sc.window = 10;
  EXPECT_TRUE(ValidateStreamingConfig(sc, c).ok());
  for (int variant = 0; variant < 4; ++variant) {
    ModelConfig m = c;
    if (variant == 0) m.softmax = SoftmaxKind::kSoftmax1;
    if (variant == 1) m.sink_token = true;
    if (variant == 2) m.attention_window = 8;
    if (variant == 3) m.position = PositionEncoding::kLearned;
    EXPECT_FALSE(ValidateStreamingConfig(sc, m).ok()) << variant;
  }
  EXPECT_TRUE(ParseCachePolicy("tova").ok());
  EXPECT_FALSE(ParseCachePolicy("h3o").ok());
  // SnapKV: an observation window of at least one query, an odd kernel, something to choose.
  StreamingCacheConfig snap;
  snap.policy = CachePolicy::kSnapKV, snap.window = 10, snap.n_sink = 0;
  EXPECT_TRUE(ValidateStreamingConfig(snap, c).ok());
  EXPECT_EQ(ParseCachePolicy("snapkv").value(), CachePolicy::kSnapKV);
  snap.snap_window = 0;
  EXPECT_FALSE(ValidateStreamingConfig(snap, c).ok());
  snap.snap_window = 32, snap.snap_kernel = 4;
  EXPECT_FALSE(ValidateStreamingConfig(snap, c).ok());
  snap.snap_kernel = 5, snap.n_sink = 9;
  EXPECT_FALSE(ValidateStreamingConfig(snap, c).ok());
}

}  // namespace
}  // namespace attnlab
