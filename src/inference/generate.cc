#include "inference/generate.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <string>

#include "cache/kv_cache.h"
#include "cache/scored_cache.h"

namespace attnlab {

StreamingCacheConfig GenerationCacheConfig(const GenerationConfig& gc, const ModelConfig& c) {
  StreamingCacheConfig sc;
  sc.policy = gc.policy;
  sc.n_sink = gc.n_sink;
  sc.window = gc.window > 0 ? gc.window : c.context;
  return sc;
}

Status ValidateGeneration(const GenerationConfig& gc, const ModelConfig& c, int64_t prompt_tokens) {
  if (gc.max_new_tokens < 1) {
    return Status::InvalidArgument("max_new_tokens must be >= 1, got " +
                                   std::to_string(gc.max_new_tokens));
  }
  ATTNLAB_RETURN_IF_ERROR(ValidateSampler(gc.sampler));
  if (prompt_tokens < 1) {
    return Status::InvalidArgument("the prompt is empty (start from the BOS token)");
  }
  if (gc.eos && (*gc.eos < 0 || *gc.eos >= c.vocab_size)) {
    return Status::InvalidArgument("eos token " + std::to_string(*gc.eos) +
                                   " is outside the vocabulary [0, " +
                                   std::to_string(c.vocab_size) + ")");
  }
  switch (gc.policy) {
    case CachePolicy::kRecompute:
      return Status::InvalidArgument("the recompute policy is an evaluation baseline, not a "
                                     "cache; use dense, window, sink, h2o, tova or snapkv");
    case CachePolicy::kDense:
      if (prompt_tokens + gc.max_new_tokens > c.context) {
        return Status::InvalidArgument(
            "the dense cache holds the prompt (" + std::to_string(prompt_tokens) +
            " tokens) and every generated token: " + std::to_string(prompt_tokens) + " + " +
            std::to_string(gc.max_new_tokens) + " exceeds the model's context of " +
            std::to_string(c.context) + "; generate fewer tokens, or use the sink (or window) "
            "policy for unlimited length at constant memory");
      }
      return Status::Ok();
    case CachePolicy::kWindow:
    case CachePolicy::kSinkWindow:
    case CachePolicy::kH2O:
    case CachePolicy::kTova:
    case CachePolicy::kSnapKV: {
      if (gc.kv_dtype != KvDtype::kF32) {
        return Status::InvalidArgument("a 16-bit KV cache needs the dense policy (the streaming "
                                       "caches hold fp32)");
      }
      return ValidateStreamingConfig(GenerationCacheConfig(gc, c), c);
    }
  }
  return Status::InvalidArgument("unknown cache policy");
}

Result<Generation> Generate(Gpt& g, std::span<const int32_t> prompt, const GenerationConfig& gc,
                            const std::function<Status(int32_t)>& on_token) {
  const ModelConfig& c = g.config();
  const int64_t P = static_cast<int64_t>(prompt.size());
  ATTNLAB_RETURN_IF_ERROR(ValidateGeneration(gc, c, P));
  std::unique_ptr<KvCache> cache;
  int64_t step_max = P;  // prompt tokens per prefill step
  if (gc.policy == CachePolicy::kDense) {
    ATTNLAB_ASSIGN_OR_RETURN(cache, MakeKvCache(c, gc.kv_dtype));
  } else {
    const StreamingCacheConfig sc = GenerationCacheConfig(gc, c);
    cache = MakeBoundedKvCache(sc, c);
    // A scored cache takes a step of any length while the positions stay inside the context
    // (it evicts after the step); the others, what fits their recent slots.
    step_max = IsScoredPolicy(sc.policy)
                   ? std::max<int64_t>(1, c.context - sc.window + 1)
                   : sc.window - (sc.policy == CachePolicy::kSinkWindow ? sc.n_sink : 0);
  }
  Generation out;
  Sampler sampler(gc.sampler);
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t s = 0; s < P; s += step_max) {
    const int64_t n = std::min<int64_t>(step_max, P - s);
    ATTNLAB_RETURN_IF_ERROR(g.Forward(prompt.data() + s, nullptr, 1, n, nullptr, cache.get()));
  }
  const auto t1 = std::chrono::steady_clock::now();
  const int64_t V = c.vocab_size;
  const float* last = g.logits() + (g.last_len() - 1) * V;
  while (static_cast<int64_t>(out.tokens.size()) < gc.max_new_tokens) {
    const int32_t next = sampler.Sample(std::span<const float>(last, static_cast<size_t>(V)));
    if (gc.eos && next == *gc.eos) {
      out.stopped_at_eos = true;
      break;
    }
    out.tokens.push_back(next);
    if (on_token) ATTNLAB_RETURN_IF_ERROR(on_token(next));
    if (static_cast<int64_t>(out.tokens.size()) == gc.max_new_tokens) break;
    ATTNLAB_RETURN_IF_ERROR(g.Forward(&next, nullptr, 1, 1, nullptr, cache.get()));
    last = g.logits();
  }
  const auto t2 = std::chrono::steady_clock::now();
  out.prefill_seconds = std::chrono::duration<double>(t1 - t0).count();
  out.decode_seconds = std::chrono::duration<double>(t2 - t1).count();
  out.cache_tokens = cache->size();
  out.cache_bytes = cache->bytes();
  return out;
}

}  // namespace attnlab
