// Text generation: prefill a prompt into a KV cache, then sample one token at a time from the
// last logits (inference/sampler.h) and decode it against the cache. Shared by `attnlab
// generate` and the Python package's Model.generate.
//
// Caches: dense (every token; prompt + generated tokens must fit the model's context, checked
// before any work) or a bounded StreamingLLM cache (cache/streaming_cache.h: window, or sinks +
// window) that generates without a length limit at constant memory; the prompt is then
// prefilled in chunks that fit the cache. Generation stops after max_new_tokens, or early when
// the model samples `eos` (which is not returned).
#ifndef ATTNLAB_INFERENCE_GENERATE_H_
#define ATTNLAB_INFERENCE_GENERATE_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <vector>

#include "attnlab/attention_decode.h"
#include "attnlab/status.h"
#include "cache/streaming_cache.h"
#include "inference/sampler.h"
#include "model/gpt.h"

namespace attnlab {

struct GenerationConfig {
  int64_t max_new_tokens = 100;  // >= 1
  SamplerConfig sampler;
  CachePolicy policy = CachePolicy::kDense;  // dense, window or sink (not recompute)
  int64_t n_sink = 4;                        // kSinkWindow
  int64_t window = 0;                        // bounded policies: tokens held (0: the context)
  KvDtype kv_dtype = KvDtype::kF32;          // dense only (the streaming caches hold fp32)
  std::optional<int32_t> eos;                // stop when sampled
};

struct Generation {
  std::vector<int32_t> tokens;  // the generated ids (without the prompt, without eos)
  bool stopped_at_eos = false;
  double prefill_seconds = 0, decode_seconds = 0;
  int64_t cache_tokens = 0, cache_bytes = 0;  // the cache at the end
};

// The bounded cache a window or sink policy uses (window 0 -> the model's context).
StreamingCacheConfig GenerationCacheConfig(const GenerationConfig& gc, const ModelConfig& c);

// InvalidArgument, naming the limit, when the request cannot run as asked: max_new_tokens < 1,
// a bad sampler, the recompute policy, an empty prompt, an eos outside the vocabulary, a dense
// cache that cannot hold prompt + max_new_tokens, a bad window / sinks, or a 16-bit KV dtype
// with a bounded policy.
Status ValidateGeneration(const GenerationConfig& gc, const ModelConfig& c, int64_t prompt_tokens);

// Generates after `prompt` (ids, BOS included if the model wants it). on_token, if set, sees each
// generated id as it comes (a non-OK status stops generation and is returned).
Result<Generation> Generate(Gpt& g, std::span<const int32_t> prompt, const GenerationConfig& gc,
                            const std::function<Status(int32_t)>& on_token = {});

}  // namespace attnlab

#endif  // ATTNLAB_INFERENCE_GENERATE_H_
