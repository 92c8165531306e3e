// KeptTokenCounts and EvaluateStreaming's on_kept: which tokens each policy keeps, per (layer,
// kv head) slot, against what each cache says it holds (the window and sink caches by their
// definition, the scored caches by RetainedTokens), and the chunk shares built from them.
#include "inference/stream_eval.h"

#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <vector>

#include "cache/scored_cache.h"
#include "model/test_models.h"

namespace attnlab {
namespace {

ModelConfig TinyRopeGqa() {
  ModelConfig c = test_models::TinyConfig({.vocab_size = 29, .context = 32, .d_model = 16});
  c.n_kv_head = 2;  // 4 query heads, 2 kv heads: 2 layers x 2 slots
  return c;
}

TEST(StreamEval, KeptTokenCountsSayWhatEachCacheHolds) {
  const ModelConfig c = TinyRopeGqa();
  std::unique_ptr<Gpt> g = test_models::TinyModel(c, 3);
  ASSERT_TRUE(g);
  std::mt19937_64 rng(2);
  const std::vector<int32_t> text = test_models::RandomTokens(40, c.vocab_size, rng);
  const int64_t slots = c.n_layer * c.kv_heads(), W = 8;
  for (CachePolicy p : {CachePolicy::kWindow, CachePolicy::kSinkWindow, CachePolicy::kH2O,
                        CachePolicy::kTova, CachePolicy::kSnapKV}) {
    SCOPED_TRACE(CachePolicyName(p));
    StreamingCacheConfig sc;
    sc.policy = p;
    sc.window = W;
    sc.n_sink = p == CachePolicy::kSinkWindow ? 2 : 0;
    ASSERT_TRUE(ValidateStreamingConfig(sc, c).ok());
    std::unique_ptr<KvCache> cache = MakeBoundedKvCache(sc, c);
    for (int64_t t = 0; t < static_cast<int64_t>(text.size()); ++t) {
      ASSERT_TRUE(g->Forward(&text[t], nullptr, 1, 1, nullptr, cache.get()).ok());
      const int64_t arrivals = t + 1;
      const std::vector<int64_t> kept = KeptTokenCounts(*cache, sc, c, arrivals);
      ASSERT_EQ(static_cast<int64_t>(kept.size()), arrivals);
      int64_t sum = 0;
      for (int64_t k : kept) {
        EXPECT_GE(k, 0);
        EXPECT_LE(k, slots);
        sum += k;
      }
      EXPECT_EQ(sum, cache->size() * slots) << "after " << arrivals << " tokens";
      if (const auto* scored = dynamic_cast<const ScoredKvCache*>(cache.get())) {
        std::vector<int64_t> want(arrivals, 0);
        for (int64_t l = 0; l < c.n_layer; ++l) {
          for (int64_t h = 0; h < c.kv_heads(); ++h) {
            for (int64_t a : scored->RetainedTokens(l, h)) ++want[a];
          }
        }
        EXPECT_EQ(kept, want);
      } else {
        // Window: the last size() arrivals; sink: the first 2 and the last size() - 2.
        const int64_t held = cache->size(), pinned = std::min<int64_t>(sc.n_sink, held);
        for (int64_t a = 0; a < arrivals; ++a) {
          const bool in = a < pinned || a >= arrivals - (held - pinned);
          EXPECT_EQ(kept[a], in ? slots : 0) << "arrival " << a;
        }
      }
    }
  }
}

TEST(StreamEval, OnKeptSeesEveryChunkAndMatchesTheShares) {
  const ModelConfig c = TinyRopeGqa();
  std::unique_ptr<Gpt> g = test_models::TinyModel(c, 4);
  ASSERT_TRUE(g);
  std::mt19937_64 rng(5);
  const std::vector<int32_t> text = test_models::RandomTokens(30, c.vocab_size, rng);
  StreamEvalOptions o;
  o.cache.policy = CachePolicy::kH2O;
  o.cache.window = 6;
  o.cache.n_sink = 1;
  o.chunk = 7;
  std::vector<std::vector<int64_t>> seen;
  o.on_kept = [&](const std::vector<int64_t>& kept) { seen.push_back(kept); };
  auto r = EvaluateStreaming(*g, text, o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(seen.size(), r->chunks.size());
  for (size_t i = 0; i < seen.size(); ++i) {
    const std::vector<int64_t>& kept = seen[i];
    const int64_t arrivals = static_cast<int64_t>(kept.size());
    EXPECT_EQ(arrivals, r->chunks[i].end);  // tokens 0..t read, token t + 1 scored
    EXPECT_EQ(kept[0], c.n_layer * c.kv_heads());  // pinned
    int64_t first = 0, total = 0;
    for (int64_t a = 0; a < arrivals; ++a) {
      total += kept[a];
      if (a < kKeptFirstTokens) first += kept[a];
    }
    EXPECT_DOUBLE_EQ(r->chunks[i].kept_first, double(first) / double(total));
  }
}

}  // namespace
}  // namespace attnlab
