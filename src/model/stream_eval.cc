#include "model/stream_eval.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>

#include "core/process_memory.h"

namespace attnlab {

namespace {

// -log softmax(logits)[target], in double.
double Nll(const float* logits, int64_t V, int32_t target) {
  double m = logits[0];
  for (int64_t v = 1; v < V; ++v) m = std::max(m, static_cast<double>(logits[v]));
  double sum = 0;
  for (int64_t v = 0; v < V; ++v) sum += std::exp(logits[v] - m);
  return m + std::log(sum) - logits[target];
}

}  // namespace

Result<StreamEvalResult> EvaluateStreaming(Gpt& model, const std::vector<int32_t>& text,
                                           const StreamEvalOptions& o,
                                           const std::function<void(const StreamChunk&)>& on_chunk) {
  const ModelConfig& c = model.config();
  ATTNLAB_RETURN_IF_ERROR(ValidateStreamingConfig(o.cache, c));
  if (o.chunk < 1) return Status::InvalidArgument("chunk must be >= 1");
  // The stream the model reads: optional BOS, then the text.
  std::vector<int32_t> stream;
  if (o.bos >= 0) stream.push_back(o.bos);
  stream.insert(stream.end(), text.begin(), text.end());
  if (stream.size() < 2) return Status::InvalidArgument("the text has too few tokens to score");
  const int64_t n = static_cast<int64_t>(stream.size()), V = c.vocab_size;
  const CachePolicy policy = o.cache.policy;
  if (policy == CachePolicy::kDense && c.position == PositionEncoding::kLearned &&
      n - 1 > c.max_positions()) {
    return Status::InvalidArgument(
        "the dense policy needs one learned position per token: the text has " +
        std::to_string(n - 1) + " tokens, the model " + std::to_string(c.max_positions()) +
        " positions (use --policy recompute)");
  }
  std::unique_ptr<KvCache> cache;
  if (policy == CachePolicy::kDense) {
    cache = MakeKvCache(c);  // linear attention: its running state
  } else if (policy != CachePolicy::kRecompute) {
    cache = std::make_unique<StreamingKvCache>(o.cache, c);
  }
  StreamEvalResult r;
  r.policy = CachePolicyName(policy);
  const auto t_start = std::chrono::steady_clock::now();
  auto t_chunk = t_start;
  double total = 0, chunk_total = 0;
  int64_t chunk_count = 0;
  std::vector<int32_t> window;
  const int64_t W = o.cache.window;
  for (int64_t t = 0; t + 1 < n; ++t) {
    // Logits after reading stream[0..t]; they score stream[t + 1].
    const float* logits = nullptr;
    if (cache) {
      ATTNLAB_RETURN_IF_ERROR(model.Forward(&stream[t], nullptr, 1, 1, nullptr, cache.get()));
      // The last row: a sink-token model's first step returns two (the sink token, then t).
      logits = model.logits() + (model.last_len() - 1) * V;
    } else {
      // Recompute: re-encode the last W tokens ending at t (BOS first when the model uses one).
      window.clear();
      const int64_t keep = o.bos >= 0 ? W - 1 : W;
      const int64_t start = std::max<int64_t>(o.bos >= 0 ? 1 : 0, t + 1 - keep);
      if (o.bos >= 0) window.push_back(o.bos);
      for (int64_t i = start; i <= t; ++i) window.push_back(stream[i]);
      ATTNLAB_RETURN_IF_ERROR(
          model.Forward(window.data(), nullptr, 1, static_cast<int64_t>(window.size()), nullptr));
      logits = model.logits() + (model.last_len() - 1) * V;
    }
    const double nll = Nll(logits, V, stream[t + 1]);
    if (!std::isfinite(nll)) {
      return Status::Internal("non-finite loss at token " + std::to_string(t + 1));
    }
    total += nll;
    chunk_total += nll;
    ++chunk_count;
    ++r.tokens;
    if (r.tokens % o.chunk == 0 || t + 2 == n) {
      const auto now = std::chrono::steady_clock::now();
      StreamChunk ch;
      ch.end = r.tokens;
      ch.chunk_loss = chunk_total / chunk_count;
      ch.mean_loss = total / r.tokens;
      const double dt = std::chrono::duration<double>(now - t_chunk).count();
      ch.tokens_per_s = dt > 0 ? chunk_count / dt : 0;
      ch.cache_bytes = cache ? cache->bytes() : 0;
      ch.rss_bytes = ResidentBytes();
      r.chunks.push_back(ch);
      if (on_chunk) on_chunk(ch);
      t_chunk = now;
      chunk_total = 0;
      chunk_count = 0;
    }
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
  r.mean_loss = total / r.tokens;
  r.perplexity = std::exp(r.mean_loss);
  r.tokens_per_s = r.seconds > 0 ? r.tokens / r.seconds : 0;
  return r;
}

}  // namespace attnlab
