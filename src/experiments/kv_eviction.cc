// kv-eviction: which tokens should a full KV cache keep, and must the first ones be among them?
// StreamingLLM's sinks + window against the attention-scored policies of cache/scored_cache.h
// (H2O, Zhang et al. 2023, arXiv:2306.14048; TOVA, Oren et al. 2024, arXiv:2401.06104; SnapKV,
// Li et al. 2024, arXiv:2404.14469), each with and without the first tokens pinned, at equal
// budgets W (the most keys a query attends to; docs/KV_POLICIES.md), judged two ways:
//
//   1. Recall. The softmax MQAR model `experiment recall` trains (experiments/recall_models.h)
//      answers held-out sequences of its largest kv count n through each cache, read one token at
//      a time as a stream (`attnlab stream`'s protocol: every policy evicts after each step; for
//      SnapKV each step's observation window is its one query): the prompt (BOS and the n pairs,
//      2n + 1 tokens), then the n queries, each scored (greedy over the vocabulary, as recall's
//      accuracy). Budgets: a quarter, a half and three quarters of the prompt, and the whole
//      sequence (no eviction: every policy must give the dense cache's answers). The full cache
//      is the reference. (A prompt compressed once at prefill, SnapKV's own setting, needs the
//      window caches to take steps longer than their budget; not measured here.)
//   2. Perplexity. The model and text of experiments/model_source.h (the default model and
//      data/sample.txt) streamed one token at a time (inference/stream_eval.h) under each policy
//      and under recompute (the last W tokens re-encoded for every token) at each budget.
//      Which tokens each policy keeps over time, at the middle budget, is drawn as a picture.
//
// Pinned tokens: S = min(4, W / 4) (StreamingLLM's 4 where the budget allows; the sink policy
// is the window with them). SnapKV's observation window: max(1, W / 4) rows, pooling kernel 5.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "cache/kv_cache.h"
#include "cache/scored_cache.h"
#include "cache/streaming_cache.h"
#include "core/json_number.h"
#include "experiments/experiment.h"
#include "experiments/experiment_report.h"
#include "experiments/model_source.h"
#include "experiments/mqar.h"
#include "experiments/recall_models.h"
#include "inference/stream_eval.h"
#include "report/svg_plot.h"

namespace attnlab::experiments {
namespace {

constexpr char kName[] = "kv-eviction";
constexpr double kMatchPoints = 0.05;  // "matches the full cache": within 5 accuracy points

struct Sizes {
  int64_t recall_queries;            // MQAR queries per (policy, budget)
  int64_t text_tokens;               // tokens of the text streamed
  std::vector<int64_t> text_budgets;
  int64_t kept_chunk;                // tokens between two rows of the kept-positions picture
};
Sizes SizesFor(bool quick) {
  if (quick) return {128, 320, {16, 32}, 16};
  return {1024, 2048, {32, 64, 128}, 32};
}

struct PolicySpec {
  const char* id;
  const char* label;
  CachePolicy policy;
  bool pinned;
};

const std::vector<PolicySpec>& Policies() {
  static const std::vector<PolicySpec> p = {
      {"window", "window", CachePolicy::kWindow, false},
      {"sink", "sinks + window", CachePolicy::kSinkWindow, true},
      {"h2o", "H2O", CachePolicy::kH2O, false},
      {"h2o+sinks", "H2O, pinned", CachePolicy::kH2O, true},
      {"tova", "TOVA", CachePolicy::kTova, false},
      {"tova+sinks", "TOVA, pinned", CachePolicy::kTova, true},
      {"snapkv", "SnapKV", CachePolicy::kSnapKV, false},
      {"snapkv+sinks", "SnapKV, pinned", CachePolicy::kSnapKV, true},
  };
  return p;
}

int64_t PinnedFor(int64_t W) { return std::max<int64_t>(1, std::min<int64_t>(4, W / 4)); }

StreamingCacheConfig CacheFor(const PolicySpec& p, int64_t W) {
  StreamingCacheConfig sc;
  sc.policy = p.policy;
  sc.window = W;
  sc.n_sink = p.pinned ? PinnedFor(W) : 0;
  sc.snap_window = std::max<int64_t>(1, W / 4);
  sc.snap_kernel = 5;
  return sc;
}

// ---- Recall through a cache.

struct RecallBatch {
  MqarBatch b;
  std::vector<int32_t> forced;  // [queries] teacher-forced argmax (one batched forward)
};

// Answers of every query of `rb` read through a fresh cache per sequence (dense when sc is
// null), one token at a time. Returns the argmax per query.
Result<std::vector<int32_t>> AnswersThroughCache(Gpt& g, const RecallBatch& rb,
                                                 const StreamingCacheConfig* sc) {
  const ModelConfig& c = g.config();
  const MqarBatch& b = rb.b;
  const int64_t V = c.vocab_size, first = Mqar::FirstQuery(b.pairs);
  std::vector<int32_t> out;
  for (int64_t s = 0; s < b.batch; ++s) {
    std::unique_ptr<KvCache> cache = sc ? MakeBoundedKvCache(*sc, c) : MakeKvCache(c);
    const int32_t* tok = b.tokens.data() + s * b.len;
    for (int64_t t = 0; t < b.len; ++t) {
      ATTNLAB_RETURN_IF_ERROR(g.Forward(tok + t, nullptr, 1, 1, nullptr, cache.get()));
      if (t < first) continue;
      const float* z = g.logits() + (g.last_len() - 1) * V;
      out.push_back(static_cast<int32_t>(std::max_element(z, z + V) - z));
    }
  }
  return out;
}

double AccuracyOf(const RecallBatch& rb, const std::vector<int32_t>& answers) {
  int64_t right = 0, k = 0;
  const MqarBatch& b = rb.b;
  for (int64_t s = 0; s < b.batch; ++s) {
    for (int64_t t = Mqar::FirstQuery(b.pairs); t < b.len; ++t, ++k) {
      right += answers[k] == b.targets[s * b.len + t];
    }
  }
  return static_cast<double>(right) / static_cast<double>(k);
}

int64_t Disagreements(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  int64_t d = 0;
  for (size_t i = 0; i < a.size(); ++i) d += a[i] != b[i];
  return d;
}

// ---- What the report stages read.

struct TextRow {  // one policy on the text
  std::vector<double> ppl, rel, tokens_per_s;  // per text budget
  std::vector<double> nll;                     // per scored token, at the smallest budget
};

// Pinned against unpinned on the same tokens (a paired comparison, as `stream --compare`'s):
// d_i = nll_pinned_i - nll_unpinned_i over the scored tokens from index `from` (where eviction
// can start); the perplexity ratio over them is exp(mean d).
struct Paired {
  double ratio = 1, noise = 0;  // exp(mean d) - 1 and exp(2 standard errors) - 1
  int verdict = 0;              // -1: pinned measurably better, +1: worse, 0: neither
};
Paired Compare(const std::vector<double>& pinned, const std::vector<double>& unpinned,
               int64_t from) {
  Paired p;
  const int64_t n = static_cast<int64_t>(std::min(pinned.size(), unpinned.size())) - from;
  if (n < 2) return p;
  double mean = 0, sq = 0;
  for (int64_t i = from; i < from + n; ++i) mean += pinned[i] - unpinned[i];
  mean /= static_cast<double>(n);
  for (int64_t i = from; i < from + n; ++i) {
    const double d = pinned[i] - unpinned[i] - mean;
    sq += d * d;
  }
  const double se = std::sqrt(sq / static_cast<double>(n - 1) / static_cast<double>(n));
  p.ratio = std::exp(mean) - 1;
  p.noise = std::exp(2 * se) - 1;
  p.verdict = mean < -2 * se ? -1 : (mean > 2 * se ? 1 : 0);
  return p;
}

struct Measured {
  // Recall.
  recall_models::Sizes rs;
  int64_t pairs = 0, prompt = 0, len = 0, queries = 0;
  double model_accuracy = 0;  // the trained model's own evaluation (recall's, its largest count)
  double dense = 0, forced = 0;
  int64_t dense_vs_forced = 0;  // queries whose answer differs between the two
  std::vector<int64_t> budgets;  // recall budgets; the last is the whole sequence
  std::vector<std::vector<double>> acc;       // [policy][budget]
  std::vector<int64_t> full_disagreements;    // [policy] at the whole-sequence budget vs dense
  double recall_seconds = 0;
  // Text.
  Source src;
  int64_t text_tokens = 0;
  std::vector<int64_t> text_budgets;
  std::vector<double> recompute;  // [budget] perplexity
  std::vector<TextRow> text;      // [policy]
  int64_t map_budget = 0, map_bin = 0, map_chunk = 0, slots = 0;
  std::vector<std::vector<std::vector<double>>> maps;  // [policy][row][bin] share kept
  bool kept_sums_ok = true;  // every kept count sums to what the cache holds
  double text_seconds = 0;
};

Status MeasureRecall(const ExperimentOptions& o, const Sizes& sz, Measured& m) {
  const auto t0 = std::chrono::steady_clock::now();
  m.rs = recall_models::SizesFor(o.quick);
  ATTNLAB_ASSIGN_OR_RETURN(Mqar task, Mqar::Create({m.rs.keys, m.rs.values}));
  Progress(o, kName, "recall: training recall's softmax MQAR model (%ld steps, kv counts up to %ld)",
           static_cast<long>(m.rs.steps), static_cast<long>(m.rs.pairs.back()));
  ATTNLAB_ASSIGN_OR_RETURN(
      recall_models::ModelRun run,
      recall_models::TrainModel(o, m.rs, task, recall_models::Variants()[0], kName));
  Gpt& g = *run.model;
  m.model_accuracy = run.accuracy.back();
  m.pairs = m.rs.pairs.back();
  m.prompt = Mqar::FirstQuery(m.pairs);
  m.len = Mqar::SequenceLength(m.pairs);
  for (int64_t q : {1, 2, 3}) m.budgets.push_back(std::max<int64_t>(4, m.prompt * q / 4));
  m.budgets.push_back(m.len);
  RecallBatch rb;
  const int64_t B = (sz.recall_queries + m.pairs - 1) / m.pairs;
  // Held-out sequences: purpose 3, never a training (1) or evaluation (2) stream.
  ATTNLAB_ASSIGN_OR_RETURN(rb.b, task.MakeBatch(m.pairs, B, recall_models::StreamSeed(o.seed, 3, 0, 0)));
  m.queries = B * m.pairs;
  ATTNLAB_RETURN_IF_ERROR(g.Forward(rb.b.tokens.data(), nullptr, B, rb.b.len, nullptr));
  const int64_t V = g.config().vocab_size;
  for (int64_t s = 0; s < B; ++s) {
    for (int64_t t = m.prompt; t < m.len; ++t) {
      const float* z = g.logits() + (s * rb.b.len + t) * V;
      rb.forced.push_back(static_cast<int32_t>(std::max_element(z, z + V) - z));
    }
  }
  m.forced = AccuracyOf(rb, rb.forced);
  ATTNLAB_ASSIGN_OR_RETURN(std::vector<int32_t> dense, AnswersThroughCache(g, rb, nullptr));
  m.dense = AccuracyOf(rb, dense);
  m.dense_vs_forced = Disagreements(dense, rb.forced);
  Progress(o, kName, "recall: %ld pairs (prompt %ld tokens), %ld queries; full cache %.3f "
           "(teacher-forced %.3f)", static_cast<long>(m.pairs), static_cast<long>(m.prompt),
           static_cast<long>(m.queries), m.dense, m.forced);
  for (const PolicySpec& p : Policies()) {
    std::vector<double> row;
    for (int64_t W : m.budgets) {
      const StreamingCacheConfig sc = CacheFor(p, W);
      ATTNLAB_RETURN_IF_ERROR(ValidateStreamingConfig(sc, g.config()));
      ATTNLAB_ASSIGN_OR_RETURN(std::vector<int32_t> ans, AnswersThroughCache(g, rb, &sc));
      row.push_back(AccuracyOf(rb, ans));
      if (W == m.len) m.full_disagreements.push_back(Disagreements(ans, dense));
    }
    Progress(o, kName, "recall %-15s accuracy %s at budgets %s", p.label,
             JoinNumbers(row, "%.3f").c_str(), JoinInts(m.budgets).c_str());
    m.acc.push_back(row);
  }
  m.recall_seconds = SecondsSince(t0);
  return Status::Ok();
}

// One row of the kept-positions picture: the share of the slots keeping each bin's tokens
// (NaN for bins not yet read).
std::vector<double> KeptRow(const std::vector<int64_t>& kept, int64_t bins, int64_t bin,
                            int64_t slots) {
  std::vector<double> row(bins, NAN);
  for (int64_t k = 0; k < bins; ++k) {
    const int64_t a0 = k * bin, a1 = std::min<int64_t>((k + 1) * bin, kept.size());
    if (a0 >= a1) continue;
    int64_t sum = 0;
    for (int64_t a = a0; a < a1; ++a) sum += kept[a];
    row[k] = static_cast<double>(sum) / static_cast<double>(slots * (a1 - a0));
  }
  return row;
}

Status MeasureText(const ExperimentOptions& o, const Sizes& sz, Measured& m) {
  const auto t0 = std::chrono::steady_clock::now();
  ATTNLAB_ASSIGN_OR_RETURN(m.src, LoadSource(o));
  Gpt& g = *m.src.g;
  const ModelConfig& c = g.config();
  std::vector<int32_t> ids = m.src.ids;
  if (static_cast<int64_t>(ids.size()) > sz.text_tokens) ids.resize(sz.text_tokens);
  m.text_tokens = static_cast<int64_t>(ids.size());
  for (int64_t W : sz.text_budgets) {
    if (W <= c.context) m.text_budgets.push_back(W);
  }
  if (m.text_budgets.empty()) return Status::InvalidArgument("the model's context is below every budget");
  m.map_budget = m.text_budgets[m.text_budgets.size() / 2];
  m.map_chunk = sz.kept_chunk;
  m.slots = c.n_layer * c.kv_heads();
  const int64_t arrivals = m.text_tokens + (m.src.bos >= 0 ? 1 : 0) + (c.sink_token ? 1 : 0);
  m.map_bin = std::max<int64_t>(1, (arrivals + 63) / 64);
  Progress(o, kName, "text: %s (%s), %ld tokens of %s; budgets %s", m.src.model.c_str(),
           m.src.model_kind.c_str(), static_cast<long>(m.text_tokens), m.src.text.c_str(),
           JoinInts(m.text_budgets).c_str());
  auto stream = [&](const StreamingCacheConfig& sc, StreamEvalOptions::KeptCallback on_kept)
      -> Result<StreamEvalResult> {
    StreamEvalOptions so;
    so.cache = sc;
    so.bos = m.src.bos;
    so.chunk = m.map_chunk;
    so.on_kept = std::move(on_kept);
    return EvaluateStreaming(g, ids, so);
  };
  for (int64_t W : m.text_budgets) {
    StreamingCacheConfig rc;
    rc.policy = CachePolicy::kRecompute;
    rc.window = W;
    ATTNLAB_ASSIGN_OR_RETURN(StreamEvalResult r, stream(rc, {}));
    m.recompute.push_back(r.perplexity);
  }
  m.text.resize(Policies().size());
  m.maps.resize(Policies().size());
  for (size_t pi = 0; pi < Policies().size(); ++pi) {
    const PolicySpec& p = Policies()[pi];
    for (size_t bi = 0; bi < m.text_budgets.size(); ++bi) {
      const int64_t W = m.text_budgets[bi];
      const StreamingCacheConfig sc = CacheFor(p, W);
      StreamEvalOptions::KeptCallback on_kept;
      if (W == m.map_budget) {
        on_kept = [&, pi](const std::vector<int64_t>& kept) {
          int64_t sum = 0;
          for (int64_t k : kept) sum += k;
          // Every slot holds the same number of tokens: at most W, at least one.
          m.kept_sums_ok = m.kept_sums_ok && sum % m.slots == 0 && sum / m.slots >= 1 &&
                           sum / m.slots <= W;
          m.maps[pi].push_back(KeptRow(kept, 64, m.map_bin, m.slots));
        };
      }
      ATTNLAB_ASSIGN_OR_RETURN(StreamEvalResult r, stream(sc, on_kept));
      m.text[pi].ppl.push_back(r.perplexity);
      m.text[pi].rel.push_back(r.perplexity / m.recompute[bi] - 1);
      m.text[pi].tokens_per_s.push_back(r.tokens_per_s);
      if (bi == 0) m.text[pi].nll = r.token_nll;
    }
    Progress(o, kName, "text %-15s perplexity %s (recompute %s) at budgets %s", p.label,
             JoinNumbers(m.text[pi].ppl, "%.2f").c_str(), JoinNumbers(m.recompute, "%.2f").c_str(),
             JoinInts(m.text_budgets).c_str());
  }
  m.text_seconds = SecondsSince(t0);
  return Status::Ok();
}

Result<Measured> Measure(const ExperimentOptions& o) {
  Measured m;
  const Sizes sz = SizesFor(o.quick);
  ATTNLAB_RETURN_IF_ERROR(MeasureRecall(o, sz, m));
  ATTNLAB_RETURN_IF_ERROR(MeasureText(o, sz, m));
  return m;
}

int PolicyIndex(const char* id) {
  for (size_t i = 0; i < Policies().size(); ++i) {
    if (std::string(Policies()[i].id) == id) return static_cast<int>(i);
  }
  return -1;
}

bool AllFinite(const std::vector<double>& v) {
  for (double x : v) {
    if (!std::isfinite(x)) return false;
  }
  return true;
}

Status AddChecks(const Measured& m, ExperimentResult& r) {
  const double tol = std::max<double>(2, 0.005 * m.queries);
  r.AddCheck("the full cache read token by token answers as the batched forward does",
             m.dense_vs_forced <= tol,
             std::to_string(m.dense_vs_forced) + " of " + std::to_string(m.queries) +
                 " answers differ (fp32 near-ties allowed up to " + Fmt(tol, "%.0f") + ")");
  int64_t worst = 0;
  for (int64_t d : m.full_disagreements) worst = std::max(worst, d);
  r.AddCheck("with a budget of the whole sequence every policy answers as the full cache",
             worst <= tol && m.full_disagreements.size() == Policies().size(),
             "at most " + std::to_string(worst) + " of " + std::to_string(m.queries) +
                 " answers differ at budget " + std::to_string(m.len));
  bool finite = AllFinite(m.recompute);
  for (const TextRow& t : m.text) finite = finite && AllFinite(t.ppl);
  for (const auto& a : m.acc) finite = finite && AllFinite(a);
  r.AddCheck("every accuracy and perplexity is finite", finite, "");
  r.AddCheck("each cache's kept tokens add up to what it holds (at most the budget per slot)",
             m.kept_sums_ok, "");
  return Status::Ok();
}

Status AddClaims(const Measured& m, ExperimentResult& r) {
  const int h2o = PolicyIndex("h2o"), tova = PolicyIndex("tova"), win = PolicyIndex("window");
  const int snap = PolicyIndex("snapkv");
  if (h2o < 0 || tova < 0 || win < 0 || snap < 0) return Status::Internal("a policy is missing");
  const int64_t small = m.budgets.front();
  const std::string at = "at " + std::to_string(small) + " of " + std::to_string(m.prompt) +
                         " prompt tokens";
  struct Headline {
    int policy;
    const char* name;
    const char* source;
  };
  for (const Headline& h :
       {Headline{h2o, "H2O keeps the full cache's recall with a small budget",
                 "Zhang et al. 2023 (arXiv:2306.14048): 20% heavy hitters match the full cache"},
        Headline{snap, "SnapKV keeps the full cache's recall with a small budget",
                 "Li et al. 2024 (arXiv:2404.14469)"}}) {
    r.AddClaim(h.name, h.source,
               "MQAR accuracy with a quarter of the prompt within " + Fmt(100 * kMatchPoints) +
                   " points of the full cache's",
               at + ": " + Fmt(m.acc[h.policy][0], "%.3f") + " vs " + Fmt(m.dense, "%.3f"),
               m.acc[h.policy][0] >= m.dense - kMatchPoints);
  }
  bool tova_wins = true;
  std::string measured;
  for (size_t b = 0; b < m.text_budgets.size(); ++b) {
    tova_wins = tova_wins && m.text[tova].ppl[b] < m.text[win].ppl[b];
    measured += (measured.empty() ? "" : "; ") + std::string("W ") +
                std::to_string(m.text_budgets[b]) + ": " + Fmt(m.text[tova].ppl[b], "%.2f") +
                " vs " + Fmt(m.text[win].ppl[b], "%.2f");
  }
  for (size_t b = 0; b + 1 < m.budgets.size(); ++b) {
    tova_wins = tova_wins && m.acc[tova][b] >= m.acc[win][b];
  }
  measured += "; recall " + JoinNumbers(std::vector<double>(m.acc[tova].begin(), m.acc[tova].end() - 1), "%.3f") +
              " vs " + JoinNumbers(std::vector<double>(m.acc[win].begin(), m.acc[win].end() - 1), "%.3f");
  r.AddClaim("TOVA beats the window at equal budget", "Oren et al. 2024 (arXiv:2401.06104)",
             "lower perplexity than the window at every text budget and at least its recall at "
             "every budget below the sequence",
             measured, tova_wins);
  // The sink question, per policy: pinned against unpinned at the smallest text budget, paired
  // over the tokens from the budget on.
  const int64_t W0 = m.text_budgets[0];
  for (const char* base : {"window", "h2o", "tova", "snapkv"}) {
    const int u = PolicyIndex(base);
    const int p = PolicyIndex(std::string(base) == "window" ? "sink"
                                                             : (std::string(base) + "+sinks").c_str());
    const Paired c = Compare(m.text[p].nll, m.text[u].nll, W0);
    r.AddClaim(std::string("pinning the first tokens helps ") + Policies()[u].label,
               "Xiao et al. 2023 (arXiv:2309.17453) for the window; the sink question for the "
               "others",
               "with the first min(4, W/4) tokens pinned, perplexity measurably lower (beyond two "
               "standard errors of the paired per-token differences) at the smallest text budget "
               "(" + std::to_string(W0) + "), over the tokens from the budget on",
               Fmt(m.text[p].ppl[0], "%.2f") + " pinned vs " + Fmt(m.text[u].ppl[0], "%.2f") +
                   " over all tokens; paired " + Fmt(100 * c.ratio, "%+.2f") + "% +- " +
                   Fmt(100 * c.noise, "%.2f") + "% (" +
                   (c.verdict < 0 ? "better" : c.verdict > 0 ? "worse" : "no measurable difference") +
                   "); recall at " + std::to_string(small) + ": " + Fmt(m.acc[p][0], "%.3f") +
                   " vs " + Fmt(m.acc[u][0], "%.3f"),
               c.verdict < 0);
  }
  return Status::Ok();
}

Status AddResults(const Measured& m, ExperimentResult& r) {
  nlohmann::json pol = nlohmann::json::array(), text = nlohmann::json::array(),
                 maps = nlohmann::json::array();
  for (size_t i = 0; i < Policies().size(); ++i) {
    const PolicySpec& p = Policies()[i];
    nlohmann::json acc = nlohmann::json::array(), ppl = nlohmann::json::array(),
                   rel = nlohmann::json::array(), tps = nlohmann::json::array();
    for (double a : m.acc[i]) acc.push_back(JsonNumber(a));
    for (size_t b = 0; b < m.text_budgets.size(); ++b) {
      ppl.push_back(JsonNumber(m.text[i].ppl[b]));
      rel.push_back(JsonNumber(m.text[i].rel[b]));
      tps.push_back(JsonNumber(m.text[i].tokens_per_s[b]));
    }
    pol.push_back({{"id", p.id}, {"label", p.label}, {"accuracy", acc},
                   {"disagreements_at_full_budget", m.full_disagreements[i]}});
    nlohmann::json nll = nlohmann::json::array();
    for (double x : m.text[i].nll) nll.push_back(JsonNumber(x));
    text.push_back({{"id", p.id}, {"perplexity", ppl}, {"relative_to_recompute", rel},
                    {"tokens_per_s", tps}, {"token_nll_smallest_budget", nll}});
    nlohmann::json rows = nlohmann::json::array();
    for (const auto& row : m.maps[i]) {
      nlohmann::json jr = nlohmann::json::array();
      for (double v : row) jr.push_back(JsonNumber(v));
      rows.push_back(jr);
    }
    maps.push_back({{"id", p.id}, {"rows", rows}});
  }
  nlohmann::json recompute = nlohmann::json::array();
  for (double x : m.recompute) recompute.push_back(JsonNumber(x));
  r.results = {
      {"recall", {{"pairs", m.pairs}, {"prompt", m.prompt}, {"sequence", m.len},
                  {"queries", m.queries}, {"budgets", m.budgets},
                  {"model_accuracy", JsonNumber(m.model_accuracy)},
                  {"full_cache", JsonNumber(m.dense)}, {"teacher_forced", JsonNumber(m.forced)},
                  {"full_vs_teacher_forced_disagreements", m.dense_vs_forced},
                  {"match_points", kMatchPoints}, {"policies", pol},
                  {"seconds", m.recall_seconds}}},
      {"text", {{"model", m.src.model}, {"model_kind", m.src.model_kind}, {"text", m.src.text},
                {"tokens", m.text_tokens}, {"budgets", m.text_budgets},
                {"recompute", recompute}, {"policies", text}, {"seconds", m.text_seconds}}},
      {"kept_map", {{"budget", m.map_budget}, {"chunk", m.map_chunk}, {"bin", m.map_bin},
                    {"slots", m.slots}, {"policies", maps}}}};
  return Status::Ok();
}

Status AddSummary(const Measured& m, ExperimentResult& r) {
  const int best_text = [&] {
    int b = 0;
    for (size_t i = 1; i < m.text.size(); ++i) {
      if (m.text[i].ppl[0] < m.text[b].ppl[0]) b = static_cast<int>(i);
    }
    return b;
  }();
  const int best_recall = [&] {
    int b = 0;
    for (size_t i = 1; i < m.acc.size(); ++i) {
      if (m.acc[i][0] > m.acc[b][0]) b = static_cast<int>(i);
    }
    return b;
  }();
  r.summary = "Recall (MQAR, " + std::to_string(m.pairs) + " pairs, full cache " +
              Fmt(m.dense, "%.3f") + "): with " + std::to_string(m.budgets.front()) + " of " +
              std::to_string(m.prompt) + " prompt tokens the best policy is " +
              Policies()[best_recall].label + " at " + Fmt(m.acc[best_recall][0], "%.3f") +
              " (window " + Fmt(m.acc[PolicyIndex("window")][0], "%.3f") + "). Text (" +
              std::to_string(m.text_tokens) + " tokens, " + std::to_string(m.text_budgets[0]) +
              " keys): the best is " + Policies()[best_text].label + " at " +
              Fmt(100 * m.text[best_text].rel[0], "%+.2f") + "% perplexity against recompute.";
  return Status::Ok();
}

Status AddHtml(const Measured& m, ExperimentResult& r) {
  r.html = report::HtmlReport("KV-cache eviction: which tokens to keep");
  r.html.SetSubtitle("recall: recall's softmax MQAR model, " + std::to_string(m.pairs) +
                     " pairs; text: " + m.src.model + " on " + m.src.text);
  r.html.AddSummaryFact("MQAR full cache", Fmt(m.dense, "%.3f"));
  for (const char* id : {"sink", "h2o", "tova", "snapkv"}) {
    const int i = PolicyIndex(id);
    r.html.AddSummaryFact(std::string(Policies()[i].label) + ": recall at " +
                              std::to_string(m.budgets.front()) + " / ppl vs recompute at " +
                              std::to_string(m.text_budgets[0]),
                          Fmt(m.acc[i][0], "%.3f") + " / " + Fmt(100 * m.text[i].rel[0], "%+.2f") + "%");
  }
  r.html.AddSection("recall", "Recall through each cache");
  report::XyPlot acc;
  acc.title = "MQAR accuracy vs budget";
  acc.x.label = "budget (keys a query attends to)";
  acc.y.label = "accuracy";
  acc.y.min = 0;
  acc.y.max = 1;
  acc.markers = true;
  std::vector<std::string> cols = {"policy"};
  for (int64_t W : m.budgets) cols.push_back("W " + std::to_string(W));
  std::vector<std::vector<std::string>> rows;
  for (size_t i = 0; i < Policies().size(); ++i) {
    report::Series s{Policies()[i].label, {}, m.acc[i]};
    for (int64_t W : m.budgets) s.x.push_back(static_cast<double>(W));
    acc.series.push_back(s);
    std::vector<std::string> row = {Policies()[i].label};
    for (double a : m.acc[i]) row.push_back(Fmt(a, "%.3f"));
    rows.push_back(row);
  }
  acc.reference_lines = {{m.dense, "full cache"}};
  r.html.AddTable(cols, rows,
                  "Greedy accuracy on " + std::to_string(m.queries) + " held-out queries, every "
                  "token read one at a time (prompt: " + std::to_string(m.prompt) + " tokens). "
                  "The last budget is the whole sequence.");
  r.html.AddFigure(report::RenderLinePlot(acc), "The table's rows.", "fig-recall");
  r.html.AddSection("text", "Perplexity on the text");
  report::XyPlot ppl;
  ppl.title = "Perplexity against recompute vs budget";
  ppl.x.label = "budget (keys)";
  ppl.x.scale = report::ScaleType::kLog10;
  ppl.y.label = "perplexity / recompute's - 1 (%)";
  ppl.markers = true;
  std::vector<std::string> tcols = {"policy"};
  for (int64_t W : m.text_budgets) tcols.push_back("W " + std::to_string(W));
  std::vector<std::vector<std::string>> trows;
  std::vector<std::string> rec = {"recompute (reference)"};
  for (double x : m.recompute) rec.push_back(Fmt(x, "%.2f"));
  trows.push_back(rec);
  for (size_t i = 0; i < Policies().size(); ++i) {
    report::Series s{Policies()[i].label, {}, {}};
    std::vector<std::string> row = {Policies()[i].label};
    for (size_t b = 0; b < m.text_budgets.size(); ++b) {
      s.x.push_back(static_cast<double>(m.text_budgets[b]));
      s.y.push_back(100 * m.text[i].rel[b]);
      row.push_back(Fmt(m.text[i].ppl[b], "%.2f") + " (" + Fmt(100 * m.text[i].rel[b], "%+.2f") +
                    "%)");
    }
    ppl.series.push_back(s);
    trows.push_back(row);
  }
  ppl.reference_lines = {{0, "recompute"}};
  r.html.AddTable(tcols, trows,
                  "Perplexity over " + std::to_string(m.text_tokens) + " tokens read one at a "
                  "time; in brackets against recompute at the same budget.");
  r.html.AddFigure(report::RenderLinePlot(ppl), "The table's relative numbers.", "fig-perplexity");
  r.html.AddSection("kept", "Which tokens each policy keeps over time");
  r.html.AddParagraph("Budget " + std::to_string(m.map_budget) + "; a row every " +
                      std::to_string(m.map_chunk) + " tokens read (time runs down), a column per " +
                      std::to_string(m.map_bin) + " positions; the colour is the share of the " +
                      std::to_string(m.slots) + " (layer, KV head) slots keeping that column's "
                      "tokens; grey: not read yet.");
  for (size_t i = 0; i < Policies().size(); ++i) {
    if (m.maps[i].empty()) continue;
    report::Heatmap h;
    h.title = Policies()[i].label;
    h.rows = static_cast<int64_t>(m.maps[i].size());
    h.cols = 64;
    for (const auto& row : m.maps[i]) h.values.insert(h.values.end(), row.begin(), row.end());
    h.x_label = "position (bins of " + std::to_string(m.map_bin) + ")";
    h.y_label = "tokens read (x" + std::to_string(m.map_chunk) + ")";
    h.value_label = "share kept";
    h.value_min = 0;
    h.value_max = 1;
    h.max_plot_height = 220;
    r.html.AddFigure(report::RenderHeatmap(h), Policies()[i].label,
                     std::string("fig-kept-") + Policies()[i].id);
  }
  AddSetupSection(r.html, {
      "Budget W: the most keys a query attends to (docs/KV_POLICIES.md). Pinned tokens: min(4, "
      "W / 4). SnapKV: observation window max(1, W / 4), pooling kernel 5. H2O: recent window "
      "(W - 1 - pinned) / 2.",
      "Recall: recall's softmax model (2 attention-only layers, d_model 64, 4 heads, RoPE), "
      "trained here with recall's sizes and seed; its own evaluation at " +
          std::to_string(m.pairs) + " pairs: " + Fmt(m.model_accuracy, "%.3f") + ".",
  });
  return Status::Ok();
}

Result<ExperimentResult> RunKvEviction(const ExperimentOptions& o) {
  ATTNLAB_ASSIGN_OR_RETURN(const Measured m, Measure(o));
  return AssembleReport<Measured>(m, {AddChecks, AddClaims, AddResults, AddSummary, AddHtml});
}

}  // namespace

Experiment KvEvictionExperiment() {
  return {kName,
          "which tokens a full KV cache should keep: sinks + window, H2O, TOVA and SnapKV, with "
          "and without pinned first tokens, on MQAR recall and text perplexity",
          RunKvEviction};
}

}  // namespace attnlab::experiments
