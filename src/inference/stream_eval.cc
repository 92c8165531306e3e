#include "inference/stream_eval.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cctype>
#include <cstdio>
#include <limits>
#include <memory>

#include "cache/scored_cache.h"
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

namespace {

// StreamChunk's kept shares from KeptTokenCounts.
void KeptShares(const std::vector<int64_t>& kept, int64_t window, StreamChunk* ch) {
  const int64_t arrivals = static_cast<int64_t>(kept.size());
  int64_t first = 0, near = 0, total = 0;
  for (int64_t a = 0; a < arrivals; ++a) {
    total += kept[a];
    if (a < kKeptFirstTokens) {
      first += kept[a];
    } else if (arrivals - 1 - a < window) {
      near += kept[a];
    }
  }
  if (total == 0) return;
  ch->kept_first = static_cast<double>(first) / static_cast<double>(total);
  ch->kept_window = static_cast<double>(near) / static_cast<double>(total);
  ch->kept_older = static_cast<double>(total - first - near) / static_cast<double>(total);
}

}  // namespace

// The scored caches say which tokens each (layer, kv head) keeps; the others keep contiguous runs
// (dense: all; window: the most recent size(); sink: the first n_sink and the most recent
// size() - n_sink), the same for every head.
std::vector<int64_t> KeptTokenCounts(const KvCache& cache, const StreamingCacheConfig& sc,
                                     const ModelConfig& c, int64_t arrivals) {
  std::vector<int64_t> kept(std::max<int64_t>(0, arrivals), 0);
  if (const auto* scored = dynamic_cast<const ScoredKvCache*>(&cache)) {
    for (int64_t l = 0; l < c.n_layer; ++l) {
      for (int64_t g = 0; g < c.kv_heads(); ++g) {
        for (int64_t a : scored->RetainedTokens(l, g)) {
          if (a >= 0 && a < arrivals) ++kept[a];
        }
      }
    }
    return kept;
  }
  const int64_t slots = c.n_layer * c.kv_heads();
  const int64_t held = std::min(cache.size(), arrivals);
  const int64_t pinned = sc.policy == CachePolicy::kSinkWindow ? std::min(sc.n_sink, held) : 0;
  const int64_t from = sc.policy == CachePolicy::kDense ? 0 : arrivals - (held - pinned);
  for (int64_t a = 0; a < pinned; ++a) kept[a] = slots;
  for (int64_t a = std::max(from, pinned); a < arrivals; ++a) kept[a] = slots;
  return kept;
}

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
  if (o.ranks < 1 || o.rank < 0 || o.rank >= o.ranks ||
      (o.ranks > 1 && o.cache.policy != CachePolicy::kRecompute)) {
    return Status::InvalidArgument("stream: rank " + std::to_string(o.rank) + " of " +
                                   std::to_string(o.ranks) +
                                   " (only recompute shares its tokens between ranks)");
  }
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
    cache = MakeBoundedKvCache(o.cache, c);
  }
  StreamEvalResult r;
  r.policy = CachePolicyName(policy);
  r.token_nll.reserve(n - 1);
  const auto t_start = std::chrono::steady_clock::now();
  auto t_chunk = t_start;
  double total = 0, chunk_total = 0;
  int64_t chunk_count = 0;
  std::vector<int32_t> window;
  const int64_t W = o.cache.window;
  for (int64_t t = 0; t + 1 < n; ++t) {
    // Logits after reading stream[0..t]; they score stream[t + 1].
    const float* logits = nullptr;
    bool evicted = false;
    const bool mine = t % o.ranks == o.rank;
    if (cache) {
      const int64_t held_before = cache->size();
      ATTNLAB_RETURN_IF_ERROR(model.Forward(&stream[t], nullptr, 1, 1, nullptr, cache.get()));
      // The last row: a sink-token model's first step returns two (the sink token, then t).
      logits = model.logits() + (model.last_len() - 1) * V;
      const int64_t held = cache->size();
      evicted = held <= held_before;  // a token came in and the cache did not grow
      r.max_cache_tokens = std::max(r.max_cache_tokens, held);
      if (held > c.context && r.beyond_context_from < 0) r.beyond_context_from = r.tokens;
    } else {
      // Recompute: re-encode the last W tokens ending at t (BOS first when the model uses one).
      window.clear();
      const int64_t keep = o.bos >= 0 ? W - 1 : W;
      const int64_t start = std::max<int64_t>(o.bos >= 0 ? 1 : 0, t + 1 - keep);
      if (o.bos >= 0) window.push_back(o.bos);
      for (int64_t i = start; i <= t; ++i) window.push_back(stream[i]);
      evicted = start > (o.bos >= 0 ? 1 : 0);
      if (mine) {
        ATTNLAB_RETURN_IF_ERROR(
            model.Forward(window.data(), nullptr, 1, static_cast<int64_t>(window.size()), nullptr));
        logits = model.logits() + (model.last_len() - 1) * V;
      }
    }
    const double nll = mine ? Nll(logits, V, stream[t + 1]) : 0.0;
    if (!std::isfinite(nll)) {
      return Status::Internal("non-finite loss at token " + std::to_string(t + 1));
    }
    if (evicted && r.eviction_from < 0) r.eviction_from = r.tokens;
    r.token_nll.push_back(nll);
    total += nll;
    chunk_total += nll;
    chunk_count += mine;
    ++r.tokens;
    if (r.tokens % o.chunk == 0 || t + 2 == n) {
      const auto now = std::chrono::steady_clock::now();
      StreamChunk ch;
      ch.end = r.tokens;
      ch.chunk_loss = chunk_count > 0 ? chunk_total / chunk_count : 0.0;
      ch.mean_loss = total / r.tokens;
      const double dt = std::chrono::duration<double>(now - t_chunk).count();
      ch.tokens_per_s = dt > 0 ? chunk_count / dt : 0;
      ch.cache_tokens = cache ? cache->size() : 0;
      ch.cache_bytes = cache ? cache->bytes() : 0;
      ch.rss_bytes = ResidentBytes();
      if (cache) {
        // Arrivals so far: the stream's tokens read (and a dedicated sink token's row).
        const std::vector<int64_t> kept =
            KeptTokenCounts(*cache, o.cache, c, t + 1 + (c.sink_token ? 1 : 0));
        KeptShares(kept, o.cache.window, &ch);
        if (o.on_kept) o.on_kept(kept);
      }
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

void RecomputeStreamLosses(StreamEvalResult& r) {
  double total = 0, chunk_total = 0;
  int64_t chunk_count = 0, scored = 0;
  size_t c = 0;
  for (double nll : r.token_nll) {
    total += nll;
    chunk_total += nll;
    ++chunk_count;
    ++scored;
    if (c < r.chunks.size() && r.chunks[c].end == scored) {
      r.chunks[c].chunk_loss = chunk_total / chunk_count;
      r.chunks[c].mean_loss = total / scored;
      ++c;
      chunk_total = 0;
      chunk_count = 0;
    }
  }
  r.mean_loss = scored > 0 ? total / scored : 0.0;
  r.perplexity = std::exp(r.mean_loss);
}

namespace {

const StreamEvalResult* FindPolicy(const std::vector<StreamEvalResult>& rs, const char* name) {
  for (const StreamEvalResult& r : rs) {
    if (r.policy == name) return &r;
  }
  return nullptr;
}

std::string Printf(const char* f, double x) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, x);
  return buf;
}

std::string Ppl(double p) { return Printf(p >= 100 ? "%.1f" : "%.2f", p); }

std::string Bytes(int64_t b) {
  if (b < 1048576) return Printf("%.1f KiB", b / 1024.0);
  return Printf("%.1f MiB", b / 1048576.0);
}

std::string Int(int64_t v) { return std::to_string(v); }

// Scored tokens [from, to) as 1-based positions for sentences.
std::string Range(int64_t from, int64_t to) { return "tokens " + Int(from + 1) + "-" + Int(to); }

StreamPairStat Pair(const StreamEvalResult& p, const StreamEvalResult& ref, int64_t from,
                    int64_t to, double tol) {
  StreamPairStat s;
  s.policy = p.policy;
  s.reference = ref.policy;
  to = std::min<int64_t>({to, static_cast<int64_t>(p.token_nll.size()),
                          static_cast<int64_t>(ref.token_nll.size())});
  s.from = from;
  s.to = to;
  const int64_t n = to - from;
  if (n <= 0) return s;
  double sa = 0, sb = 0, sd = 0;
  for (int64_t i = from; i < to; ++i) {
    sa += p.token_nll[i];
    sb += ref.token_nll[i];
    sd += p.token_nll[i] - ref.token_nll[i];
  }
  const double md = sd / n;
  double var = 0;
  for (int64_t i = from; i < to; ++i) {
    const double e = p.token_nll[i] - ref.token_nll[i] - md;
    var += e * e;
  }
  const double se = n > 1 ? std::sqrt(var / (n - 1) / n) : std::numeric_limits<double>::infinity();
  s.perplexity = std::exp(sa / n);
  s.reference_perplexity = std::exp(sb / n);
  s.relative = std::expm1(md);
  s.noise = std::expm1(2 * se);
  const bool measurable = std::fabs(s.relative) > tol && std::fabs(md) > 2 * se;
  s.verdict = measurable ? (md > 0 ? 1 : -1) : 0;
  return s;
}

// "is 12.3% worse (perplexity 45.6)" / "agrees within 1% (...)" / "differs by 1.4%, within the
// noise (...)": how `s.policy` compares with its reference, for lists of policies.
// note: appended inside the parentheses.
std::string Phrase(const StreamPairStat& s, double tol, const std::string& note = "") {
  const std::string ppl = " (perplexity " + Ppl(s.perplexity) + note + ")";
  if (s.verdict > 0) return s.policy + " is " + FormatPercent(s.relative) + " worse" + ppl;
  if (s.verdict < 0) return s.policy + " is " + FormatPercent(s.relative) + " better" + ppl;
  if (std::fabs(s.relative) <= tol) {
    return s.policy + " agrees within " + FormatTolerance(tol) + " (perplexity " +
           Ppl(s.perplexity) + ", " + FormatPercent(s.relative) + " apart" + note + ")";
  }
  return s.policy + " differs by " + FormatPercent(s.relative) + ", within the noise of " +
         Int(s.to - s.from) + " tokens" + ppl;
}

// The same, without the numbers, for the summary.
std::string ShortPhrase(const StreamPairStat& s, double tol) {
  if (s.verdict > 0) return s.policy + " is " + FormatPercent(s.relative) + " worse";
  if (s.verdict < 0) return s.policy + " is " + FormatPercent(s.relative) + " better";
  if (std::fabs(s.relative) <= tol) return s.policy + " agrees within " + FormatTolerance(tol);
  return s.policy + " shows no measurable difference";
}

// `first` (nulls included, skipped by the callers), then every other result that is not one of
// them nor a reference (the attention-scored policies), in results' order.
std::vector<const StreamEvalResult*> Listed(std::vector<const StreamEvalResult*> first,
                                            const std::vector<StreamEvalResult>& results,
                                            const StreamEvalResult* ref1,
                                            const StreamEvalResult* ref2) {
  std::vector<const StreamEvalResult*> out = first;
  for (const StreamEvalResult& r : results) {
    if (&r == ref1 || &r == ref2 || std::find(first.begin(), first.end(), &r) != first.end()) {
      continue;
    }
    out.push_back(&r);
  }
  return out;
}

std::string JoinList(const std::vector<std::string>& items) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (i) out += i + 1 == items.size() ? (items.size() > 2 ? ", and " : " and ") : ", ";
    out += items[i];
  }
  return out;
}

}  // namespace

std::string FormatPercent(double fraction) {
  const double a = std::fabs(fraction) * 100;
  if (!std::isfinite(a)) return "n/a";
  if (a == 0) return "0%";
  if (a < 0.001) return "<0.001%";
  if (a < 0.01) return Printf("%.3f%%", a);
  if (a < 10) return Printf("%.2f%%", a);
  return Printf("%.1f%%", a);
}

std::string FormatTolerance(double fraction) { return Printf("%g%%", 100 * fraction); }

StreamComparison CompareStreamPolicies(const std::vector<StreamEvalResult>& results,
                                       int64_t context, int64_t window, int64_t sinks,
                                       double tolerance) {
  StreamComparison c;
  c.tolerance = tolerance;
  c.context = context;
  c.window = window;
  c.sinks = sinks;
  if (results.empty()) return c;
  c.tokens = results[0].tokens;
  for (const StreamEvalResult& r : results) c.tokens = std::min(c.tokens, r.tokens);
  const StreamEvalResult* dense = FindPolicy(results, "dense");
  const StreamEvalResult* win = FindPolicy(results, "window");
  const StreamEvalResult* sink = FindPolicy(results, "sink");
  const StreamEvalResult* rec = FindPolicy(results, "recompute");
  const std::string tol = FormatTolerance(tolerance);

  // Where the dense model leaves its trained positions (measured by the evaluator when dense
  // ran; else the context).
  c.context_end = std::min(c.tokens, context);
  if (dense) c.context_end = dense->beyond_context_from < 0 ? c.tokens : dense->beyond_context_from;

  // Window against sink, after eviction starts.
  if (win && sink) {
    c.eviction_from = win->eviction_from;
    if (c.eviction_from < 0 || c.eviction_from >= c.tokens) {
      c.eviction_from = -1;
      c.window_vs_sink_text =
          "No token was evicted: the text's " + Int(c.tokens) + " scored tokens fit in the " +
          Int(window) + "-token window, so window and sink held the same tokens as dense and "
          "their perplexities agree (window " + Ppl(win->perplexity) + ", sink " +
          Ppl(sink->perplexity) + "); give a longer text or a smaller --window to compare them.";
    } else {
      c.has_window_vs_sink = true;
      const StreamPairStat& ws = c.window_vs_sink =
          Pair(*win, *sink, c.eviction_from, c.tokens, tolerance);
      const std::string nums = "perplexity " + Ppl(ws.perplexity) + " vs " +
                               Ppl(ws.reference_perplexity) + " over " +
                               Range(ws.from, ws.to);
      if (ws.verdict > 0) {
        c.window_vs_sink_text = "Window-only attention is " + FormatPercent(ws.relative) +
                                " worse than sink after eviction starts (" + nums +
                                "): keeping the first " + Int(sinks) + " tokens helps";
        if (rec) {
          const StreamPairStat sr = Pair(*sink, *rec, ws.from, ws.to, tolerance);
          const StreamPairStat wr = Pair(*win, *rec, ws.from, ws.to, tolerance);
          const std::string vs = " over the same tokens (perplexity " + Ppl(sr.perplexity) +
                                 " vs " + Ppl(sr.reference_perplexity) + ")";
          if (sr.verdict < 0) {
            c.window_vs_sink_text += ", and sink is even " + FormatPercent(sr.relative) +
                                     " better than the recompute baseline" + vs;
          } else if (sr.verdict == 0) {
            c.window_vs_sink_text += ", and sink shows no measurable difference to the "
                                     "recompute baseline" + vs;
          } else if (wr.relative > sr.relative) {
            c.window_vs_sink_text +=
                ", closing " +
                Printf("%.0f", 100 * (wr.relative - sr.relative) / wr.relative) +
                "% of the gap between window-only and the recompute baseline (perplexity " +
                Ppl(sr.reference_perplexity) + ")";
          }
        }
        c.window_vs_sink_text += ".";
      } else if (ws.verdict < 0) {
        // Sink against window (ws is window against sink).
        c.window_vs_sink_text = "Sink is " + FormatPercent(1 / (1 + ws.relative) - 1) +
                                " worse than window-only after eviction starts (" + nums +
                                "): keeping the first " + Int(sinks) +
                                " tokens does not help this model on this text.";
      } else if (std::fabs(ws.relative) <= tolerance) {
        c.window_vs_sink_text = "No measurable difference on this text: after eviction starts "
                                "(token " + Int(ws.from + 1) + "), window-only and sink agree "
                                "within " + tol + " (" + nums + ", " +
                                FormatPercent(ws.relative) + " apart).";
      } else {
        c.window_vs_sink_text = "No measurable difference on this text: after eviction starts, "
                                "window-only and sink differ by " + FormatPercent(ws.relative) +
                                " (" + nums + "), within the noise of " + Int(ws.to - ws.from) +
                                " tokens (2 standard errors: " + FormatPercent(ws.noise) + ").";
      }
      // The largest chunk-to-chunk difference after eviction (for the figure's caption).
      for (size_t k = 0; k < win->chunks.size() && k < sink->chunks.size(); ++k) {
        if (win->chunks[k].end <= c.eviction_from) continue;
        c.max_chunk_window_vs_sink =
            std::max(c.max_chunk_window_vs_sink,
                     std::fabs(std::expm1(win->chunks[k].chunk_loss - sink->chunks[k].chunk_loss)));
      }
    }
  }

  // The sink question for the attention-scored policies: each with its first tokens pinned
  // ("<name>+sinks") against itself without, after eviction starts.
  for (const StreamEvalResult& pinned : results) {
    const std::string& name = pinned.policy;
    const size_t plus = name.find("+sinks");
    if (plus == std::string::npos || plus + 6 != name.size()) continue;
    const StreamEvalResult* bare = FindPolicy(results, name.substr(0, plus).c_str());
    if (!bare || bare->eviction_from < 0 || bare->eviction_from >= c.tokens) continue;
    c.pinning.push_back(Pair(*bare, pinned, bare->eviction_from, c.tokens, tolerance));
    const StreamPairStat& s = c.pinning.back();
    const std::string ppl = "perplexity " + Ppl(s.perplexity) + " without, " +
                            Ppl(s.reference_perplexity) + " with, over " + Range(s.from, s.to);
    const std::string nums = " (" + ppl + ")";
    std::string t = "Pinning the first " + Int(sinks) + " tokens ";
    if (s.verdict > 0) {
      t += "helps " + bare->policy + ": without them it is " +
           FormatPercent(s.relative) + " worse" + nums;
    } else if (s.verdict < 0) {
      t += "hurts " + bare->policy + ": without them it is " +
           FormatPercent(s.relative) + " better" + nums;
    } else {
      t += "makes no measurable difference to " + bare->policy + " (" +
           FormatPercent(s.relative) + " apart, within the noise of " +
           FormatPercent(s.noise) + "; " + ppl + ")";
    }
    c.pinning_text += (c.pinning_text.empty() ? "" : " ") + t + ".";
  }

  std::string in_context_short, beyond_short, memory_short;
  // Each policy against dense, within the dense model's range.
  if (dense && c.context_end > 0) {
    std::vector<std::string> parts;
    bool all_agree = true;
    double largest = 0;
    for (const StreamEvalResult* r : Listed({win, sink, rec}, results, dense, rec)) {
      if (!r) continue;
      c.in_context.push_back(Pair(*r, *dense, 0, c.context_end, tolerance));
      const StreamPairStat& s = c.in_context.back();
      parts.push_back(Phrase(s, tolerance));
      all_agree = all_agree && s.verdict == 0 && std::fabs(s.relative) <= tolerance;
      largest = std::max(largest, std::fabs(s.relative));
    }
    if (!c.in_context.empty()) {
      std::vector<std::string> names;
      for (const StreamPairStat& s : c.in_context) names.push_back(s.policy);
      const std::string where = "Within the model's context (" + Range(0, c.context_end) +
                                ", where dense is in its trained range, perplexity " +
                                Ppl(c.in_context[0].reference_perplexity) + ")";
      const bool evicts_inside = c.eviction_from >= 0 && c.eviction_from < c.context_end;
      if (all_agree) {
        c.in_context_text = where + ", " + JoinList(names) + " agree with dense within " + tol +
                            " (largest difference " + FormatPercent(largest) + ")" +
                            (evicts_inside ? ", although eviction starts at token " +
                                                 Int(c.eviction_from + 1) + ", inside the context"
                                           : ": nothing was evicted there yet") +
                            ".";
      } else {
        std::vector<std::string> shorts;
        for (const StreamPairStat& s : c.in_context) shorts.push_back(ShortPhrase(s, tolerance));
        in_context_short = "Within the model's context (" + Range(0, c.context_end) +
                           "), against dense: " + JoinList(shorts) + ".";
        c.in_context_text = where +
                            (evicts_inside ? " and with eviction starting at token " +
                                                 Int(c.eviction_from + 1)
                                           : "") +
                            ", against dense: " + JoinList(parts) + ".";
      }
    }
  }

  // Each policy against the recompute baseline, past the context.
  if (c.context_end < c.tokens) {
    if (rec) {
      std::vector<std::string> parts, shorts;
      for (const StreamEvalResult* r : Listed({dense, win, sink}, results, dense, rec)) {
        if (!r) continue;
        c.beyond_context.push_back(Pair(*r, *rec, c.context_end, c.tokens, tolerance));
        const StreamPairStat& s = c.beyond_context.back();
        shorts.push_back(ShortPhrase(s, tolerance));
        parts.push_back(Phrase(s, tolerance,
                               r == dense && s.verdict > 0
                                   ? "; its positions run past the trained range"
                                   : ""));
      }
      if (!parts.empty()) {
        c.beyond_context_text = "Past the context (" + Range(c.context_end, c.tokens) +
                                "), against the recompute baseline (perplexity " +
                                Ppl(c.beyond_context[0].reference_perplexity) + "): " +
                                JoinList(parts) + ".";
        beyond_short = "Past the context, against the recompute baseline: " + JoinList(shorts) + ".";
      }
    }
  } else {
    c.beyond_context_text = "The text's " + Int(c.tokens) + " scored tokens do not go past the "
                            "model's context of " + Int(context) + " tokens, so dense never "
                            "leaves its trained range.";
  }

  // Memory, as the caches reported it after each chunk.
  std::vector<std::string> mem;
  for (const StreamEvalResult& r : results) {
    if (r.chunks.empty()) continue;
    StreamMemoryStat m;
    m.policy = r.policy;
    m.first_bytes = r.chunks.front().cache_bytes;
    m.last_bytes = r.chunks.back().cache_bytes;
    m.last_tokens = r.chunks.back().cache_tokens;
    m.max_tokens = r.max_cache_tokens;
    bool flat = true;
    for (const StreamChunk& ch : r.chunks) {
      m.max_bytes = std::max(m.max_bytes, ch.cache_bytes);
      flat = flat && ch.cache_bytes == m.first_bytes;
    }
    m.flat = flat;
    m.grows = m.last_bytes > m.first_bytes;
    c.memory.push_back(m);
  }
  const StreamMemoryStat* md = nullptr;
  const StreamMemoryStat* mw = nullptr;
  const StreamMemoryStat* ms = nullptr;
  for (const StreamMemoryStat& m : c.memory) {
    if (m.policy == "dense") md = &m;
    if (m.policy == "window") mw = &m;
    if (m.policy == "sink") ms = &m;
  }
  if (md) {
    mem.push_back(md->grows ? "dense grew with the text to " + Int(md->last_tokens) +
                                  " tokens and " + Bytes(md->last_bytes) + " (" +
                                  Bytes(md->first_bytes) + " after the first chunk)"
                            : "dense held " + Int(md->last_tokens) + " tokens in " +
                                  Bytes(md->last_bytes) + " (the text is too short for it to grow)");
  }
  auto bounded = [&](const StreamMemoryStat& m) {
    return "at most " + Int(m.max_tokens) + " tokens in " +
           (m.flat ? "a constant " + Bytes(m.last_bytes)
                   : Bytes(m.first_bytes) + " to " + Bytes(m.max_bytes));
  };
  if (mw && ms && mw->max_tokens == ms->max_tokens && mw->flat && ms->flat &&
      mw->last_bytes == ms->last_bytes) {
    mem.push_back("window and sink each held " + bounded(*mw));
  } else {
    if (mw) mem.push_back("window held " + bounded(*mw));
    if (ms) mem.push_back("sink held " + bounded(*ms));
  }
  if (rec) {
    std::string r = "recompute keeps none and re-encodes up to " + Int(window) +
                    " tokens for every token (" + Printf("%.1f", rec->tokens_per_s) + " tokens/s";
    if (sink) r += " against sink's " + Printf("%.1f", sink->tokens_per_s);
    mem.push_back(r + ")");
  }
  if (!mem.empty()) {
    c.memory_text = "KV cache, measured after each chunk: ";
    for (size_t i = 0; i < mem.size(); ++i) c.memory_text += (i ? "; " : "") + mem[i];
    c.memory_text += ".";
  }

  char head[160];
  std::snprintf(head, sizeof head, "%ld scored tokens (%.1fx the model's context of %ld), window %ld, %ld sink tokens.",
                static_cast<long>(c.tokens), c.tokens / static_cast<double>(std::max<int64_t>(1, context)),
                static_cast<long>(context), static_cast<long>(window), static_cast<long>(sinks));
  // Memory in one short sentence.
  std::vector<std::string> ms_parts;
  if (md) {
    ms_parts.push_back(std::string(md->grows ? "dense's KV cache grew to " : "dense's KV cache held ") +
                       Int(md->last_tokens) + " tokens (" + Bytes(md->last_bytes) + ")");
  }
  auto held = [&](const StreamMemoryStat& m) {
    return "at most " + Int(m.max_tokens) + " tokens in " +
           (m.flat ? "a constant " + Bytes(m.last_bytes) : "up to " + Bytes(m.max_bytes));
  };
  if (mw && ms && mw->max_tokens == ms->max_tokens && mw->flat == ms->flat &&
      mw->last_bytes == ms->last_bytes) {
    ms_parts.push_back("window's and sink's held " + held(*mw));
  } else {
    if (mw) ms_parts.push_back("window's held " + held(*mw));
    if (ms) ms_parts.push_back("sink's held " + held(*ms));
  }
  if (!ms_parts.empty()) {
    memory_short = ms_parts[0];
    memory_short[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(memory_short[0])));
    for (size_t i = 1; i < ms_parts.size(); ++i) memory_short += "; " + ms_parts[i];
    memory_short += ".";
  }
  // The summary: the window/sink verdict in full, the rest in short (the full sentences are in
  // the *_text fields).
  c.summary = head;
  const std::string& beyond = beyond_short.empty() ? c.beyond_context_text : beyond_short;
  for (const std::string* t : std::initializer_list<const std::string*>{
           &c.window_vs_sink_text, &c.pinning_text, &beyond, &in_context_short, &memory_short}) {
    if (!t->empty()) c.summary += " " + *t;
  }
  return c;
}

}  // namespace attnlab
