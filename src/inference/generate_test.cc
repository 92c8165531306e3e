// Generate (generate.h) against a naive reference: greedy decoding through the cache equals the
// argmax of a full forward over the whole sequence so far, recomputed for every token; a sink
// cache that never evicts equals the dense one; eos stops; bad requests are refused.
#include "inference/generate.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "model/test_models.h"

namespace attnlab {
namespace {

using test_models::TinyConfig;
using test_models::TinyModel;

// The greedy continuation by full forwards (no cache): argmax of the last row each time.
std::vector<int32_t> NaiveGreedy(Gpt& g, std::vector<int32_t> seq, int64_t n) {
  std::vector<int32_t> out;
  const int64_t V = g.config().vocab_size;
  for (int64_t i = 0; i < n; ++i) {
    EXPECT_TRUE(g.Forward(seq.data(), nullptr, 1, static_cast<int64_t>(seq.size()), nullptr).ok());
    const float* last = g.logits() + (g.last_len() - 1) * V;
    const int32_t next = static_cast<int32_t>(std::max_element(last, last + V) - last);
    out.push_back(next);
    seq.push_back(next);
  }
  return out;
}

ModelConfig LearnedConfig() {
  ModelConfig c = TinyConfig({.vocab_size = 41, .context = 24});
  c.position = PositionEncoding::kLearned;
  return c;
}

ModelConfig RopeConfig() {
  ModelConfig c = TinyConfig({.vocab_size = 41, .context = 24});
  c.position = PositionEncoding::kRope;
  return c;
}

TEST(Generate, GreedyThroughTheCacheEqualsFullForwardsAndASinkCacheThatKeepsAllEqualsDense) {
  for (const ModelConfig& c : {LearnedConfig(), RopeConfig()}) {
    auto g = TinyModel(c, 5);
    ASSERT_NE(g, nullptr);
    const std::vector<int32_t> prompt = {3, 17, 9, 40, 1};
    GenerationConfig gc;
    gc.max_new_tokens = 12;
    gc.sampler.temperature = 0.0f;  // greedy
    Result<Generation> dense = Generate(*g, prompt, gc);
    ASSERT_TRUE(dense.ok()) << dense.status().ToString();
    EXPECT_EQ(dense->tokens, NaiveGreedy(*g, prompt, 12));
    EXPECT_FALSE(dense->stopped_at_eos);
    EXPECT_EQ(dense->cache_tokens, 5 + 11);  // the last token is sampled, never decoded
    if (c.position == PositionEncoding::kRope) {
      gc.policy = CachePolicy::kSinkWindow;
      gc.n_sink = 2;
      gc.window = 24;  // holds all 16 tokens: nothing is evicted
      Result<Generation> sink = Generate(*g, prompt, gc);
      ASSERT_TRUE(sink.ok()) << sink.status().ToString();
      EXPECT_EQ(sink->tokens, dense->tokens);
      // Past the window: it keeps going at constant size.
      gc.window = 6;
      gc.max_new_tokens = 40;
      Result<Generation> longer = Generate(*g, prompt, gc);
      ASSERT_TRUE(longer.ok()) << longer.status().ToString();
      EXPECT_EQ(longer->tokens.size(), 40u);
      EXPECT_EQ(longer->cache_tokens, 6);
    }
  }
}

TEST(Generate, StopsAtEosAndCallsBackEachToken) {
  auto g = TinyModel(RopeConfig(), 7);
  ASSERT_NE(g, nullptr);
  const std::vector<int32_t> prompt = {2, 4};
  GenerationConfig gc;
  gc.max_new_tokens = 8;
  gc.sampler.temperature = 0.0f;
  const std::vector<int32_t> greedy = NaiveGreedy(*g, prompt, 8);
  gc.eos = greedy[3];
  const auto first = std::find(greedy.begin(), greedy.end(), greedy[3]) - greedy.begin();
  std::vector<int32_t> seen;
  Result<Generation> r = Generate(*g, prompt, gc, [&](int32_t t) {
    seen.push_back(t);
    return Status::Ok();
  });
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->stopped_at_eos);
  EXPECT_EQ(r->tokens, std::vector<int32_t>(greedy.begin(), greedy.begin() + first));
  EXPECT_EQ(seen, r->tokens);
  // A callback's error stops generation and is returned.
  gc.eos.reset();
  Result<Generation> stopped =
      Generate(*g, prompt, gc, [](int32_t) { return Status::IoError("stdout closed"); });
  ASSERT_FALSE(stopped.ok());
  EXPECT_NE(stopped.status().message().find("stdout closed"), std::string::npos);
}

TEST(Generate, BadRequestsAreRefusedWithTheLimit) {
  auto g = TinyModel(RopeConfig(), 3);
  ASSERT_NE(g, nullptr);
  const std::vector<int32_t> prompt = {1, 2, 3};
  auto refused = [&](GenerationConfig gc, std::span<const int32_t> p, const std::string& text) {
    Result<Generation> r = Generate(*g, p, gc);
    ASSERT_FALSE(r.ok()) << text;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(text), std::string::npos) << r.status().message();
  };
  GenerationConfig gc;
  gc.max_new_tokens = 0;
  refused(gc, prompt, "max_new_tokens must be >= 1");
  gc.max_new_tokens = 22;  // 3 + 22 > 24
  refused(gc, prompt, "exceeds the model's context of 24");
  gc.max_new_tokens = 21;
  EXPECT_TRUE(Generate(*g, prompt, gc).ok());  // exactly fits
  refused(gc, {}, "the prompt is empty");
  gc.eos = 41;
  refused(gc, prompt, "outside the vocabulary");
  gc.eos.reset();
  gc.policy = CachePolicy::kRecompute;
  refused(gc, prompt, "evaluation baseline");
  gc.policy = CachePolicy::kSinkWindow;
  gc.n_sink = 4;
  gc.window = 4;
  refused(gc, prompt, "sink");
  gc.window = 8;
  gc.kv_dtype = KvDtype::kBF16;
  refused(gc, prompt, "needs the dense policy");
  gc.kv_dtype = KvDtype::kF32;
  gc.sampler.top_p = 0.0f;
  refused(gc, prompt, "top");
}

}  // namespace
}  // namespace attnlab
