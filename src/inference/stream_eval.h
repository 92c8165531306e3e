// Rolling perplexity of a model over a long token stream, one token at a time, under a KV cache
// policy (StreamingLLM's evaluation, Xiao et al. 2023, arXiv:2309.17453, section 4.1):
//   dense      every token kept (positions grow past the training context)
//   window     the W most recent tokens
//   sink       S pinned first tokens + the W - S most recent
//   recompute  for every token, the last W tokens re-encoded from scratch (the quality baseline;
//              O(W) forward tokens per token)
// Token t is scored by the logits after feeding tokens [0, t); with bos >= 0 a BOS token is fed
// first (and, for recompute, starts every re-encoded window, which then holds W - 1 text tokens).
#ifndef ATTNLAB_INFERENCE_STREAM_EVAL_H_
#define ATTNLAB_INFERENCE_STREAM_EVAL_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "model/gpt.h"
#include "cache/streaming_cache.h"

namespace attnlab {

struct StreamEvalOptions {
  StreamingCacheConfig cache;  // policy, sinks, window, RoPE mode
  int32_t bos = -1;
  int64_t chunk = 256;         // tokens per progress record
  // Recompute only, for a distributed run (every token's window is re-encoded on its own, so the
  // tokens can be shared): score only the tokens t with t % ranks == rank; every other token's
  // token_nll is 0 and no forward runs for it, the sums, losses and chunk losses cover this
  // rank's tokens only and a chunk's tokens_per_s counts them. Merging the ranks' token_nll (a
  // sum: x + 0 is exact) and recomputing the losses in token order gives the one-process result
  // bit for bit. Other policies read the stream in order: 0 of 1 only.
  int rank = 0, ranks = 1;
  // Called at every chunk end of a cached policy with KeptTokenCounts (which tokens the cache
  // keeps, e.g. for a picture of them over time); empty: not called.
  using KeptCallback = std::function<void(const std::vector<int64_t>& kept)>;
  KeptCallback on_kept;
};

struct StreamChunk {
  int64_t end = 0;           // tokens scored so far
  double chunk_loss = 0;     // mean NLL over this chunk's tokens
  double mean_loss = 0;      // mean NLL over all tokens so far
  double tokens_per_s = 0;   // this chunk
  int64_t cache_tokens = 0;  // tokens the KV cache holds after this chunk (KvCache::size();
                             // recompute keeps no cache: 0)
  int64_t cache_bytes = 0;   // bytes the KV cache holds after this chunk (KvCache::bytes():
                             // its allocated buffers)
  int64_t rss_bytes = 0;     // the process' resident memory after this chunk
  // What the cache keeps after this chunk, as shares of its (layer, kv head) slots: tokens among
  // the stream's first kKeptFirstTokens (where sinks live; a BOS and a sink token included), the
  // other tokens among the last `window` arrivals (what a plain window would also hold), and the
  // older ones (what an attention-scored policy keeps from beyond a window's reach). Each in
  // [0, 1], summing to 1; -1 for recompute (no cache).
  double kept_first = -1, kept_window = -1, kept_older = -1;
};

// The first tokens StreamChunk counts apart (StreamingLLM pins 4).
inline constexpr int64_t kKeptFirstTokens = 4;

struct StreamEvalResult {
  std::string policy;
  int64_t tokens = 0;        // scored
  double mean_loss = 0;      // nats per token
  double perplexity = 0;
  double seconds = 0;
  double tokens_per_s = 0;
  std::vector<StreamChunk> chunks;
  std::vector<double> token_nll;   // per scored token, in order (nats)
  // The first scored token (index into token_nll) predicted after the policy dropped a token it
  // had read (window/sink: the cache evicted one; recompute: the re-encoded window no longer
  // starts at the text's start); -1: never.
  int64_t eviction_from = -1;
  // The first scored token predicted with a cache holding more than the model's context (dense
  // past its trained positions); -1: never.
  int64_t beyond_context_from = -1;
  int64_t max_cache_tokens = 0;    // the most tokens the cache held at any step
};

// For a cache that has read `arrivals` tokens (numbered 0 .. arrivals - 1, a dedicated sink
// token's row and a BOS included): per arrival, how many of the model's (layer, kv head) slots
// keep it (0 .. n_layer * kv_heads). Its sum is what the cache holds over all slots.
std::vector<int64_t> KeptTokenCounts(const KvCache& cache, const StreamingCacheConfig& sc,
                                     const ModelConfig& c, int64_t arrivals);

// Scores tokens[1..] (tokens[0] is context only, unless bos >= 0: then every token is scored).
// on_chunk (optional) is called after each chunk, for progress output.
Result<StreamEvalResult> EvaluateStreaming(Gpt& model, const std::vector<int32_t>& tokens,
                                           const StreamEvalOptions& options,
                                           const std::function<void(const StreamChunk&)>& on_chunk = {});

// The losses of a result recomputed from its token_nll, in token order, as EvaluateStreaming
// computes them (mean_loss, perplexity, each chunk's chunk_loss and mean_loss; chunk ends kept):
// for a recompute result whose token_nll was merged over the ranks.
void RecomputeStreamLosses(StreamEvalResult& r);

// The comparison behind `attnlab stream --compare`'s report: every claim the report makes,
// computed from the per-token losses of the same text under each policy.
//
// Two policies are compared on the same scored tokens [from, to) by their per-token NLL
// differences d_i = nll_policy_i - nll_reference_i (a paired comparison): the ratio of their
// perplexities over the range is exp(mean d). The difference counts as measurable when the
// ratio is more than `tolerance` away from 1 AND mean d is more than twice its standard error
// (sd(d) / sqrt(n)); anything else is reported as "no measurable difference".
struct StreamPairStat {
  std::string policy, reference;
  int64_t from = 0, to = 0;        // scored tokens [from, to)
  double perplexity = 0, reference_perplexity = 0;
  double relative = 0;             // perplexity / reference_perplexity - 1
  double noise = 0;                // exp(2 standard errors of mean d) - 1: the noise band
  int verdict = 0;                 // +1 measurably worse than the reference, -1 better, 0 neither
};

struct StreamMemoryStat {
  std::string policy;
  int64_t max_tokens = 0, last_tokens = 0;       // KV-cache tokens (chunk ends)
  int64_t first_bytes = 0, last_bytes = 0, max_bytes = 0;
  bool grows = false;   // the cache held more bytes at the end than after the first chunk
  bool flat = false;    // the bytes never changed
};

struct StreamComparison {
  double tolerance = 0.01;
  int64_t tokens = 0, context = 0, window = 0, sinks = 0;
  int64_t eviction_from = -1;   // the window policy's (-1: the text never filled the window)
  int64_t context_end = 0;      // scored tokens [0, context_end) are within the dense model's range
  bool has_window_vs_sink = false;
  StreamPairStat window_vs_sink;              // window against sink, after eviction starts
  std::vector<StreamPairStat> in_context;     // each policy against dense, [0, context_end)
  std::vector<StreamPairStat> beyond_context; // each policy against recompute, [context_end, tokens)
  std::vector<StreamMemoryStat> memory;
  // Each attention-scored policy without pinned first tokens against itself with them
  // ("h2o" vs "h2o+sinks"), after its eviction starts; policy = without, reference = with.
  std::vector<StreamPairStat> pinning;
  double max_chunk_window_vs_sink = 0;        // largest |chunk ppl ratio - 1| after eviction
  // Sentences (each a complete sentence ending in '.'): what the numbers above say.
  std::string window_vs_sink_text, in_context_text, beyond_context_text, memory_text;
  std::string pinning_text;
  std::string summary;  // the verdict: all of the above that applies, in order
};

// Compares the policies present in `results` (any of dense, window, sink, recompute, and the
// attention-scored ones, "h2o" / "tova" with "+sinks" when their first tokens are pinned; all on
// the same text). context: the model's; window, sinks: the cache's configuration.
StreamComparison CompareStreamPolicies(const std::vector<StreamEvalResult>& results,
                                       int64_t context, int64_t window, int64_t sinks,
                                       double tolerance = 0.01);

// The magnitude of a fraction as a percentage for sentences: 0.123 -> "12.3%", 0.0104 ->
// "1.04%", -0.0042 -> "0.42%", 0.00003 -> "0.003%".
std::string FormatPercent(double fraction);
// A tolerance: 0.01 -> "1%".
std::string FormatTolerance(double fraction);

}  // namespace attnlab

#endif  // ATTNLAB_INFERENCE_STREAM_EVAL_H_
