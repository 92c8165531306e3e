// `attnlab stream`: rolling perplexity over a long text, token by token, under a KV cache policy
// (inference/stream_eval.h). Prints per-chunk perplexity, tokens/s and memory as it goes.
//
//   attnlab stream [--model M] [--text FILE | --prompt STR] [--policy dense|window|sink|recompute]
//                  [--sinks 4] [--window W] [--rope-mode attention|stored] [--max-tokens N]
//                  [--chunk 256] [--compare] [--out DIR] [--json]
//
// --compare runs every policy on the same text and writes DIR/report.html, report.json,
// stream.json and stream.csv (default DIR: stream-report): perplexity against position for each
// policy, its difference to the recompute baseline, the KV cache's tokens and bytes against
// position, and verdicts computed from the numbers (CompareStreamPolicies). Without --compare,
// --out DIR writes DIR/stream.json. --json prints the same JSON document on stdout (progress goes
// to stderr).
//
// Options that do not apply to the chosen policy are usage errors (exit 2), never silently
// ignored: --window with --policy dense (which keeps every token), --sinks with a policy other
// than sink, --rope-mode with dense or recompute (they never re-position keys), --policy with
// --compare (which runs them all).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "cli_model.h"
#include "cmd_stream_report.h"
#include "commands.h"
#include "core/atomic_file.h"
#include "core/resources.h"
#include "cache/scored_cache.h"
#include "dist/comm.h"
#include "inference/stream_eval.h"
#include "stream_ranks.h"

namespace attnlab::cli {
namespace {

struct StreamOptions {
  std::string model, tokenizer, text, prompt, policy = "sink", rope_mode = "attention", out;
  std::string positions = "distance";  // h2o, tova: distance | rank (scored_cache.h)
  int64_t sinks = 4, window = 0, max_tokens = 0, chunk = 256, recent = -1;
  int64_t snap_window = 32, snap_kernel = 5;  // snapkv (scored_cache.h)
  bool compare = false, json = false;
  // Which options the command line gave (CLI11 fills count()).
  CLI::Option *policy_opt = nullptr, *window_opt = nullptr, *sinks_opt = nullptr,
              *rope_opt = nullptr, *max_tokens_opt = nullptr, *recent_opt = nullptr,
              *positions_opt = nullptr, *snap_window_opt = nullptr, *snap_kernel_opt = nullptr;
};

// h2o, tova, snapkv: the attention-scored policies (scored_cache.h); false for bad names.
bool ScoredName(const std::string& policy) {
  auto p = ParseCachePolicy(policy);
  return p.ok() && IsScoredPolicy(p.value());
}

std::string Mib(int64_t bytes) {
  char buf[32];
  if (bytes < 1048576) {
    std::snprintf(buf, sizeof buf, "%.1f KiB", bytes / 1024.0);
  } else {
    std::snprintf(buf, sizeof buf, "%.1f MiB", bytes / 1048576.0);
  }
  return buf;
}

// Usage errors (exit 2), before any work: values out of range, then options that do not apply
// to the chosen policy.
void CheckOptions(const StreamOptions& o) {
  CheckWindowAndSinks(o.window_opt->count() > 0, o.window, o.sinks_opt->count() > 0, o.sinks,
                      ScoredName(o.policy) ? 0 : 1);
  if (o.max_tokens_opt->count() > 0 && o.max_tokens < 1) {
    throw UsageError("--max-tokens must be >= 1, got " + std::to_string(o.max_tokens) +
                     " (omit --max-tokens for every token)");
  }
  if (o.chunk < 1) throw UsageError("--chunk must be >= 1, got " + std::to_string(o.chunk));
  if (o.rope_mode != "attention" && o.rope_mode != "stored") {
    throw UsageError("--rope-mode must be attention or stored, got '" + o.rope_mode + "'");
  }
  if (auto p = ParseCachePolicy(o.policy); !p.ok()) throw UsageError("--policy: " + p.status().message());
  if (o.positions != "distance" && o.positions != "rank") {
    throw UsageError("--positions must be distance or rank, got '" + o.positions + "'");
  }
  const bool window_given = o.window_opt->count() > 0, sinks_given = o.sinks_opt->count() > 0,
             rope_given = o.rope_opt->count() > 0;
  if (o.compare) {
    if (o.policy_opt->count() > 0) {
      throw UsageError("--compare runs every policy (dense, window, sink, recompute, h2o, tova "
                       "and snapkv with and without sinks); drop --policy " + o.policy +
                       " or drop --compare");
    }
    return;
  }
  const bool scored = ScoredName(o.policy);
  if ((o.snap_window_opt->count() > 0 || o.snap_kernel_opt->count() > 0) && o.policy != "snapkv") {
    throw UsageError("--snap-window and --snap-kernel apply to --policy snapkv only");
  }
  if (o.recent_opt->count() > 0 && o.policy != "h2o") {
    throw UsageError("--recent applies to --policy h2o only (its local window)");
  }
  if (o.positions_opt->count() > 0 && !scored) {
    throw UsageError("--positions applies to --policy h2o, tova and snapkv (the others keep contiguous "
                     "tokens at cache-index positions)");
  }
  if (o.policy == "dense" && window_given) {
    throw UsageError("--window applies to the window, sink and recompute policies; --policy "
                     "dense keeps every token (use --policy sink --window " +
                     std::to_string(o.window) + " for a bounded cache)");
  }
  if (o.policy != "sink" && !scored && sinks_given) {
    throw UsageError("--sinks applies to the sink, h2o, tova and snapkv policies (the " + o.policy +
                     " policy pins no tokens)");
  }
  if ((o.policy == "dense" || o.policy == "recompute" || scored) && rope_given) {
    throw UsageError("--rope-mode applies to the window and sink policies (they re-position "
                     "cached keys as tokens are evicted); --policy " + o.policy + " does not" +
                     (scored ? " (it always rotates keys at attention time)" : ""));
  }
}

void Run(const StreamOptions& o) {
  CheckOptions(o);
  CliModel m = LoadCliModel(o.model, o.tokenizer, /*need_tokenizer=*/true);
  const ModelConfig& c = m.gpt->config();
  std::string path = o.text;
  if (path.empty() && o.prompt.empty()) {
    path = FindResource(kSampleTextPath);
    if (path.empty()) throw CommandError("no --text given and the bundled sample text was not found");
  }
  auto text = ReadTextInput(path, o.prompt);
  auto enc = m.tokenizer->Encode(text);
  Check(enc.status());
  std::vector<int32_t> tokens = std::move(enc).value();
  if (o.max_tokens > 0 && static_cast<int64_t>(tokens.size()) > o.max_tokens) tokens.resize(o.max_tokens);
  StreamEvalOptions so;
  so.cache.n_sink = o.sinks;
  so.cache.window = o.window_opt->count() > 0 ? o.window : c.context;
  so.cache.rope_mode = o.rope_mode == "stored" ? RopeCacheMode::kStoreRotated
                                               : RopeCacheMode::kRotateAtAttention;
  so.chunk = o.chunk;
  if (TrainedWithBos(m)) so.bos = *m.tokenizer->bos_id();
  so.cache.recent = o.recent;
  so.cache.snap_window = o.snap_window;
  so.cache.snap_kernel = o.snap_kernel;
  so.cache.scored_positions = o.positions == "rank" ? StreamingCacheConfig::ScoredPositions::kRank
                                                    : StreamingCacheConfig::ScoredPositions::kDistance;
  // The runs: a policy and its pinned tokens. The attention-scored policies (h2o, tova, snapkv) run
  // without pinned tokens and, in --compare, also with --sinks of them ("h2o+sinks").
  struct PolicyRun {
    CachePolicy policy;
    int64_t sinks;
    std::string label;
  };
  std::vector<PolicyRun> runs;
  auto add = [&](CachePolicy p, int64_t sinks) {
    const bool pinned = IsScoredPolicy(p) && sinks > 0;
    runs.push_back({p, sinks, std::string(CachePolicyName(p)) + (pinned ? "+sinks" : "")});
  };
  if (o.compare) {
    for (CachePolicy p : {CachePolicy::kDense, CachePolicy::kWindow, CachePolicy::kSinkWindow,
                          CachePolicy::kRecompute}) {
      add(p, o.sinks);
    }
    // The scored ones only where the model allows them (plain softmax attention).
    StreamingCacheConfig probe = so.cache;
    probe.policy = CachePolicy::kTova, probe.n_sink = o.sinks;
    if (const Status allowed = ValidateStreamingConfig(probe, c); allowed.ok()) {
      for (CachePolicy p : {CachePolicy::kH2O, CachePolicy::kTova, CachePolicy::kSnapKV}) {
        add(p, 0);
        add(p, o.sinks);
      }
    } else {
      std::fprintf(stderr, "note: h2o, tova and snapkv left out: %s\n", allowed.message().c_str());
    }
  } else {
    const CachePolicy p = ParseCachePolicy(o.policy).value();  // checked in CheckOptions
    add(p, IsScoredPolicy(p) && o.sinks_opt->count() == 0 ? 0 : o.sinks);
  }
  std::vector<CachePolicy> policies;
  for (const PolicyRun& r : runs) policies.push_back(r.policy);
  // Validate every policy up front (bad flags fail before any work): the window and sinks
  // against this model are usage errors (the command line asks for what the model cannot do).
  for (const PolicyRun& r : runs) {
    so.cache.policy = r.policy;
    so.cache.n_sink = r.sinks;
    if (r.policy == CachePolicy::kDense && o.compare && c.position == PositionEncoding::kLearned) continue;
    if (Status st = ValidateStreamingConfig(so.cache, c); !st.ok()) throw UsageError(st.message());
  }
  // Human-readable progress: stdout, or stderr when stdout carries the JSON document.
  FILE* out = o.json ? stderr : stdout;
  const std::string text_name = path.empty() ? "--prompt" : path;
  std::fprintf(out, "# %s: %zu tokens of %s (%.1fx the context of %ld), window %ld, sinks %ld\n",
               m.path.c_str(), tokens.size(), text_name.c_str(),
               tokens.size() / static_cast<double>(c.context), static_cast<long>(c.context),
               static_cast<long>(so.cache.window), static_cast<long>(o.sinks));
  const bool recompute = std::find(policies.begin(), policies.end(), CachePolicy::kRecompute) !=
                         policies.end();
  if (recompute && tokens.size() > 2000 && o.max_tokens == 0) {
    std::fprintf(stderr,
                 "note: recompute re-encodes up to %ld tokens for each of the %zu tokens (the "
                 "slowest policy by far: expect minutes); --max-tokens 2000 gives a quick look\n",
                 static_cast<long>(so.cache.window), tokens.size());
  }
  // Distributed (`mpirun -np P attnlab stream`, stream_ranks.h): whole policies on one rank
  // each, recompute's tokens shared; every rank ends with the merged results, rank 0 writes.
  dist::Comm& comm = dist::World();
  std::vector<PolicyRun> runnable;
  for (const PolicyRun& run : runs) {
    if (run.policy == CachePolicy::kDense && c.position == PositionEncoding::kLearned &&
        static_cast<int64_t>(tokens.size()) > c.max_positions()) {
      std::fprintf(out, "%-10s skipped: learned positions end at %ld tokens\n", run.label.c_str(),
                   static_cast<long>(c.max_positions()));
      continue;
    }
    runnable.push_back(run);
  }
  std::vector<CachePolicy> runnable_policies;
  for (const PolicyRun& run : runnable) runnable_policies.push_back(run.policy);
  const std::vector<int> owners = StreamPolicyOwners(runnable_policies, comm.size());
  std::vector<StreamEvalResult> results;
  for (size_t k = 0; k < runnable.size(); ++k) {
    const PolicyRun& run = runnable[k];
    const char* name = run.label.c_str();
    so.cache.policy = run.policy;
    so.cache.n_sink = run.sinks;
    const bool shared = owners[k] == kSharedPolicy;
    so.rank = shared ? comm.rank() : 0;
    so.ranks = shared ? comm.size() : 1;
    if (!shared && owners[k] != comm.rank()) {  // another rank's policy
      results.emplace_back().policy = run.label;
      continue;
    }
    std::fprintf(out, "%-10s %8s %12s %12s %10s %12s %12s %10s\n", name, "tokens",
                 "chunk ppl", "running ppl", "tokens/s", "cache tokens", "cache", "rss");
    auto r = EvaluateStreaming(*m.gpt, tokens, so, [&](const StreamChunk& ch) {
      std::fprintf(out, "%-10s %8ld %12.3f %12.3f %10.1f %12ld %12s %10s\n", "",
                   static_cast<long>(ch.end), std::exp(ch.chunk_loss), std::exp(ch.mean_loss),
                   ch.tokens_per_s, static_cast<long>(ch.cache_tokens),
                   Mib(ch.cache_bytes).c_str(), Mib(ch.rss_bytes).c_str());
      std::fflush(out);
    });
    Check(r.status(), name);
    r.value().policy = run.label;
    std::fprintf(out, "%-10s done: %ld tokens, perplexity %.3f, %.1f tokens/s, %.1f s\n\n",
                 name, static_cast<long>(r.value().tokens), r.value().perplexity,
                 r.value().tokens_per_s, r.value().seconds);
    results.push_back(std::move(r).value());
  }
  if (comm.distributed()) {
    const int64_t scored = static_cast<int64_t>(tokens.size()) + (so.bos >= 0 ? 1 : 0) - 1;
    Check(MergeStreamRanks(comm, owners, scored, so.chunk, results));
    if (!comm.root()) return;
    std::fprintf(out, "merged over %d ranks\n", comm.size());
  }
  StreamRunInfo info;
  info.model = m.path;
  info.text = text_name;
  info.text_tokens = static_cast<int64_t>(tokens.size());
  info.context = c.context;
  info.window = so.cache.window;
  info.sinks = o.sinks;
  info.chunk = o.chunk;
  info.rope_mode = o.rope_mode;
  info.ranks = comm.size();
  nlohmann::json doc = StreamRunJson(info, results);
  std::vector<std::string> written;
  if (o.compare) {
    const StreamComparison cmp = CompareStreamPolicies(results, c.context, so.cache.window, o.sinks);
    std::fprintf(out, "%-10s %12s %14s %12s\n", "policy", "perplexity", "vs recompute", "tokens/s");
    const StreamEvalResult* rc = nullptr;
    for (const auto& r : results) if (r.policy == "recompute") rc = &r;
    for (const auto& r : results) {
      std::fprintf(out, "%-10s %12.3f %14.3f %12.1f\n", r.policy.c_str(), r.perplexity,
                   rc ? r.perplexity / rc->perplexity : NAN, r.tokens_per_s);
    }
    std::fprintf(out, "\n%s\n", cmp.summary.c_str());
    doc["comparison"] = StreamComparisonJson(cmp);
    written = WriteStreamReport(o.out.empty() ? "stream-report" : o.out, info, results, cmp);
  } else if (!o.out.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(o.out, ec);
    if (ec) throw CommandError("--out " + o.out + ": cannot create the directory: " + ec.message());
    written.push_back(o.out + "/stream.json");
    Check(WriteFileAtomically(written.back(), DumpJson(doc) + "\n"));
  }
  if (!written.empty()) doc["files"] = written;
  for (const std::string& f : written) std::fprintf(out, "wrote %s\n", f.c_str());
  if (o.json) std::printf("%s\n", DumpJson(doc).c_str());
}

}  // namespace

void RegisterStreamCommand(CLI::App& app) {
  auto o = std::make_shared<StreamOptions>();
  CLI::App* cmd = app.add_subcommand(
      "stream", "Rolling perplexity over a long text under a KV cache policy (StreamingLLM)");
  AddModelOptions(cmd, &o->model, &o->tokenizer);
  CLI::Option* text = cmd->add_option("--text", o->text, "text file (default: the bundled sample)");
  cmd->add_option("--prompt", o->prompt, "literal text to score instead of a file")
      ->excludes(text);
  o->policy_opt = cmd->add_option(
      "--policy", o->policy, "dense | window | sink (default) | recompute | h2o | tova | snapkv");
  o->sinks_opt = cmd->add_option("--sinks", o->sinks,
                                 "pinned first tokens: --policy sink (4), h2o, tova and snapkv "
                                 "(0); --compare runs those three with 0 and with this many (4)");
  o->snap_window_opt = cmd->add_option("--snap-window", o->snap_window,
                                       "snapkv: the observation window, the step's last queries "
                                       "that vote (32)");
  o->snap_kernel_opt = cmd->add_option("--snap-kernel", o->snap_kernel,
                                       "snapkv: the average-pooling kernel over the votes, odd (5)");
  o->positions_opt = cmd->add_option(
      "--positions", o->positions,
      "h2o, tova, snapkv: where kept keys sit: distance (default: their distance to the newest token, "
      "as far as the context reaches) or rank (the i-th kept token at position i)");
  o->recent_opt = cmd->add_option("--recent", o->recent,
                                  "h2o: the most recent tokens that always stay (default: half "
                                  "of window - 1 - sinks)");
  o->window_opt = cmd->add_option("--window", o->window,
                                  "tokens the window, sink and recompute policies hold, sinks "
                                  "included, >= 1 (default: the model's context)");
  o->rope_opt = cmd->add_option("--rope-mode", o->rope_mode,
                                "window and sink policies: attention (default): rotate keys at "
                                "attention time; stored: keep rotated keys and re-rotate them on "
                                "eviction");
  o->max_tokens_opt = cmd->add_option("--max-tokens", o->max_tokens,
                                      "score at most the first N tokens, N >= 1 (default: all)");
  cmd->add_option("--chunk", o->chunk, "tokens per progress line, >= 1 (256)");
  cmd->add_flag("--compare", o->compare, "run every policy and write a report");
  cmd->add_option("--out", o->out,
                  "directory (created if missing): --compare writes report.html, report.json, "
                  "stream.json, stream.csv (default stream-report); else stream.json");
  cmd->add_flag("--json", o->json, "print the results as one JSON document on stdout");
  cmd->callback([o] { Run(*o); });
}

}  // namespace attnlab::cli
