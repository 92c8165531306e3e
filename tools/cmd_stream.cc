// `attnlab stream`: rolling perplexity over a long text, token by token, under a KV cache policy
// (model/stream_eval.h). Prints per-chunk perplexity, tokens/s and memory as it goes.
//
//   attnlab stream [--model M] [--text FILE] [--policy dense|window|sink|recompute] [--sinks 4]
//                  [--window W] [--rope-mode attention|stored] [--max-tokens N] [--chunk 256]
//                  [--compare] [--out DIR]
//
// --compare runs every policy on the same text and writes DIR/stream.json, DIR/stream.csv and
// DIR/report.html (perplexity against position for each policy, and a summary table).
#include <cmath>
#include <filesystem>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "cli_model.h"
#include "commands.h"
#include "core/atomic_file.h"
#include "core/resources.h"
#include "model/stream_eval.h"
#include "report/csv.h"
#include "report/html_report.h"
#include "report/svg_plot.h"

namespace attnlab::cli {
namespace {

struct StreamOptions {
  std::string model, tokenizer, text, policy = "sink", rope_mode = "attention", out;
  int64_t sinks = 4, window = 0, max_tokens = 0, chunk = 256;
  bool compare = false;
};

std::string Mib(int64_t bytes) {
  char buf[32];
  if (bytes < 1048576) {
    std::snprintf(buf, sizeof buf, "%.1f KiB", bytes / 1024.0);
  } else {
    std::snprintf(buf, sizeof buf, "%.1f MiB", bytes / 1048576.0);
  }
  return buf;
}

nlohmann::json ResultJson(const StreamEvalResult& r) {
  nlohmann::json chunks = nlohmann::json::array();
  for (const StreamChunk& c : r.chunks) {
    chunks.push_back({{"end", c.end},
                      {"chunk_perplexity", std::exp(c.chunk_loss)},
                      {"perplexity", std::exp(c.mean_loss)},
                      {"tokens_per_s", c.tokens_per_s},
                      {"cache_bytes", c.cache_bytes},
                      {"rss_bytes", c.rss_bytes}});
  }
  return {{"policy", r.policy},       {"tokens", r.tokens},
          {"loss", r.mean_loss},      {"perplexity", r.perplexity},
          {"seconds", r.seconds},     {"tokens_per_s", r.tokens_per_s},
          {"chunks", chunks}};
}

void WriteCompareReport(const StreamOptions& o, const CliModel& m, int64_t text_tokens,
                        const std::vector<StreamEvalResult>& results, int64_t window) {
  const std::string dir = o.out.empty() ? "stream-report" : o.out;
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw CommandError("cannot create " + dir + ": " + ec.message());
  nlohmann::json j{{"model", m.path},     {"text_tokens", text_tokens}, {"window", window},
                   {"sinks", o.sinks},    {"context", m.gpt->config().context},
                   {"results", nlohmann::json::array()}};
  report::CsvWriter csv({"policy", "end", "chunk_perplexity", "perplexity", "tokens_per_s",
                         "cache_bytes", "rss_bytes"});
  report::XyPlot plot;
  plot.title = "Perplexity of each chunk against position";
  plot.x.label = "tokens read";
  plot.y.label = "chunk perplexity";
  plot.y.scale = report::ScaleType::kLog10;
  std::vector<std::vector<std::string>> rows;
  const StreamEvalResult* recompute = nullptr;
  for (const StreamEvalResult& r : results) {
    if (r.policy == "recompute") recompute = &r;
  }
  for (const StreamEvalResult& r : results) {
    j["results"].push_back(ResultJson(r));
    report::Series s;
    s.name = r.policy;
    for (const StreamChunk& c : r.chunks) {
      s.x.push_back(static_cast<double>(c.end));
      s.y.push_back(std::exp(c.chunk_loss));
      csv.AddRow({r.policy, std::to_string(c.end), std::to_string(std::exp(c.chunk_loss)),
                  std::to_string(std::exp(c.mean_loss)), std::to_string(c.tokens_per_s),
                  std::to_string(c.cache_bytes), std::to_string(c.rss_bytes)});
    }
    plot.series.push_back(std::move(s));
    char ppl[32], tps[32], rel[32];
    std::snprintf(ppl, sizeof ppl, "%.3f", r.perplexity);
    std::snprintf(tps, sizeof tps, "%.1f", r.tokens_per_s);
    std::snprintf(rel, sizeof rel, "%.3f", recompute ? r.perplexity / recompute->perplexity : NAN);
    rows.push_back({r.policy, std::to_string(r.tokens), ppl, rel, tps,
                    Mib(r.chunks.empty() ? 0 : r.chunks.back().cache_bytes)});
  }
  Check(WriteFileAtomically(dir + "/stream.json", j.dump(2) + "\n"));
  Check(csv.WriteTo(dir + "/stream.csv"));
  report::HtmlReport html("Streaming perplexity: " + m.path);
  std::string summary;
  for (const StreamEvalResult& r : results) {
    char buf[96];
    std::snprintf(buf, sizeof buf, "%s %.2f; ", r.policy.c_str(), r.perplexity);
    summary += buf;
  }
  html.SetSummary("Perplexity over " + std::to_string(text_tokens) + " tokens (" +
                  std::to_string(text_tokens / std::max<int64_t>(1, m.gpt->config().context)) +
                  "x the model's context), window " + std::to_string(window) + ", " +
                  std::to_string(o.sinks) + " sink tokens: " + summary);
  html.AddSection("results", "Policies");
  html.AddTable({"policy", "tokens", "perplexity", "vs recompute", "tokens/s", "cache"}, rows);
  html.AddSection("curve", "Perplexity against position");
  html.AddFigure(report::RenderLinePlot(plot),
                 "Each point is one chunk's perplexity. Window-only attention degrades once the "
                 "first tokens are evicted; keeping a few sink tokens restores it.",
                 "fig-stream");
  Check(html.WriteTo(dir + "/report.html"));
  std::printf("wrote %s/report.html, stream.json, stream.csv\n", dir.c_str());
}

void Run(const StreamOptions& o) {
  CliModel m = LoadCliModel(o.model, o.tokenizer, /*need_tokenizer=*/true);
  const ModelConfig& c = m.gpt->config();
  std::string path = o.text;
  if (path.empty()) {
    path = FindResource(kSampleTextPath);
    if (path.empty()) throw CommandError("no --text given and the bundled sample text was not found");
  }
  auto text = ReadTextInput(path, "");
  auto enc = m.tokenizer->Encode(text);
  Check(enc.status());
  std::vector<int32_t> tokens = std::move(enc).value();
  if (o.max_tokens > 0 && static_cast<int64_t>(tokens.size()) > o.max_tokens) tokens.resize(o.max_tokens);
  StreamEvalOptions so;
  so.cache.n_sink = o.sinks;
  so.cache.window = o.window > 0 ? o.window : c.context;
  if (o.rope_mode == "attention") {
    so.cache.rope_mode = RopeCacheMode::kRotateAtAttention;
  } else if (o.rope_mode == "stored") {
    so.cache.rope_mode = RopeCacheMode::kStoreRotated;
  } else {
    throw CommandError("--rope-mode must be attention or stored");
  }
  so.chunk = o.chunk;
  if (TrainedWithBos(m)) so.bos = *m.tokenizer->bos_id();
  std::vector<CachePolicy> policies;
  if (o.compare) {
    policies = {CachePolicy::kDense, CachePolicy::kWindow, CachePolicy::kSinkWindow,
                CachePolicy::kRecompute};
  } else {
    auto p = ParseCachePolicy(o.policy);
    Check(p.status(), "--policy");
    policies = {p.value()};
  }
  // Validate every policy up front (bad flags fail before any work).
  for (CachePolicy p : policies) {
    so.cache.policy = p;
    if (p == CachePolicy::kDense && o.compare && c.position == PositionEncoding::kLearned) continue;
    Check(ValidateStreamingConfig(so.cache, c));
  }
  std::printf("# %s: %zu tokens (%.1fx the context of %ld), window %ld, sinks %ld\n",
              m.path.c_str(), tokens.size(), tokens.size() / static_cast<double>(c.context),
              static_cast<long>(c.context), static_cast<long>(so.cache.window),
              static_cast<long>(o.sinks));
  std::vector<StreamEvalResult> results;
  for (CachePolicy p : policies) {
    so.cache.policy = p;
    if (p == CachePolicy::kDense && c.position == PositionEncoding::kLearned &&
        static_cast<int64_t>(tokens.size()) > c.max_positions()) {
      std::printf("%-9s skipped: learned positions end at %ld tokens\n", CachePolicyName(p),
                  static_cast<long>(c.max_positions()));
      continue;
    }
    std::printf("%-9s %8s %12s %12s %10s %12s %10s\n", CachePolicyName(p), "tokens", "chunk ppl",
                "running ppl", "tokens/s", "cache", "rss");
    auto r = EvaluateStreaming(*m.gpt, tokens, so, [&](const StreamChunk& ch) {
      std::printf("%-9s %8ld %12.3f %12.3f %10.1f %12s %10s\n", "", static_cast<long>(ch.end),
                  std::exp(ch.chunk_loss), std::exp(ch.mean_loss), ch.tokens_per_s,
                  Mib(ch.cache_bytes).c_str(), Mib(ch.rss_bytes).c_str());
      std::fflush(stdout);
    });
    Check(r.status(), CachePolicyName(p));
    std::printf("%-9s done: %ld tokens, perplexity %.3f, %.1f tokens/s, %.1f s\n\n",
                CachePolicyName(p), static_cast<long>(r.value().tokens), r.value().perplexity,
                r.value().tokens_per_s, r.value().seconds);
    results.push_back(std::move(r).value());
  }
  if (o.compare) {
    std::printf("%-10s %12s %14s %12s\n", "policy", "perplexity", "vs recompute", "tokens/s");
    const StreamEvalResult* rc = nullptr;
    for (const auto& r : results) if (r.policy == "recompute") rc = &r;
    for (const auto& r : results) {
      std::printf("%-10s %12.3f %14.3f %12.1f\n", r.policy.c_str(), r.perplexity,
                  rc ? r.perplexity / rc->perplexity : NAN, r.tokens_per_s);
    }
    WriteCompareReport(o, m, static_cast<int64_t>(tokens.size()), results, so.cache.window);
  } else if (!o.out.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(o.out, ec);
    Check(WriteFileAtomically(o.out + "/stream.json", ResultJson(results[0]).dump(2) + "\n"));
  }
}

}  // namespace

void RegisterStreamCommand(CLI::App& app) {
  auto o = std::make_shared<StreamOptions>();
  CLI::App* cmd = app.add_subcommand(
      "stream", "Rolling perplexity over a long text under a KV cache policy (StreamingLLM)");
  cmd->add_option("--model", o->model, "model (default: embedded)");
  cmd->add_option("--tokenizer", o->tokenizer, "override: byte, gpt2, or a vocabulary file");
  cmd->add_option("--text", o->text, "text file (default: the bundled sample)");
  cmd->add_option("--policy", o->policy, "dense | window | sink (default) | recompute");
  cmd->add_option("--sinks", o->sinks, "pinned first tokens for the sink policy (4)");
  cmd->add_option("--window", o->window, "tokens the cache holds, sinks included (default: context)");
  cmd->add_option("--rope-mode", o->rope_mode,
                  "attention: rotate keys at attention time; stored: keep rotated keys and "
                  "re-rotate them on eviction");
  cmd->add_option("--max-tokens", o->max_tokens, "score at most this many tokens");
  cmd->add_option("--chunk", o->chunk, "tokens per progress line (256)")->check(CLI::Range(1, 1 << 30));
  cmd->add_flag("--compare", o->compare, "run every policy and write a report");
  cmd->add_option("--out", o->out, "report directory (--compare; default stream-report)");
  cmd->callback([o] { Run(*o); });
}

}  // namespace attnlab::cli
