// Rolling perplexity of a model over a long token stream, one token at a time, under a KV cache
// policy (StreamingLLM's evaluation, Xiao et al. 2023, arXiv:2309.17453, section 4.1):
//   dense      every token kept (positions grow past the training context)
//   window     the W most recent tokens
//   sink       S pinned first tokens + the W - S most recent
//   recompute  for every token, the last W tokens re-encoded from scratch (the quality baseline;
//              O(W) forward tokens per token)
// Token t is scored by the logits after feeding tokens [0, t); with bos >= 0 a BOS token is fed
// first (and, for recompute, starts every re-encoded window, which then holds W - 1 text tokens).
#ifndef ATTNLAB_MODEL_STREAM_EVAL_H_
#define ATTNLAB_MODEL_STREAM_EVAL_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "model/gpt.h"
#include "model/streaming_cache.h"

namespace attnlab {

struct StreamEvalOptions {
  StreamingCacheConfig cache;  // policy, sinks, window, RoPE mode
  int32_t bos = -1;
  int64_t chunk = 256;         // tokens per progress record
};

struct StreamChunk {
  int64_t end = 0;           // tokens scored so far
  double chunk_loss = 0;     // mean NLL over this chunk's tokens
  double mean_loss = 0;      // mean NLL over all tokens so far
  double tokens_per_s = 0;   // this chunk
  int64_t cache_bytes = 0;   // the cache's size after this chunk
  int64_t rss_bytes = 0;     // the process' resident memory after this chunk
};

struct StreamEvalResult {
  std::string policy;
  int64_t tokens = 0;        // scored
  double mean_loss = 0;      // nats per token
  double perplexity = 0;
  double seconds = 0;
  double tokens_per_s = 0;
  std::vector<StreamChunk> chunks;
};

// Scores tokens[1..] (tokens[0] is context only, unless bos >= 0: then every token is scored).
// on_chunk (optional) is called after each chunk, for progress output.
Result<StreamEvalResult> EvaluateStreaming(Gpt& model, const std::vector<int32_t>& tokens,
                                           const StreamEvalOptions& options,
                                           const std::function<void(const StreamChunk&)>& on_chunk = {});

}  // namespace attnlab

#endif  // ATTNLAB_MODEL_STREAM_EVAL_H_
