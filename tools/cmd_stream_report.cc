// `attnlab stream`'s files (cmd_stream_report.h). Nothing in the report is fixed prose about what
// streaming "does": every caption and the summary are sentences built from the measured numbers,
// and report.json holds those numbers next to each sentence.
#include "cmd_stream_report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <string>
#include <utility>

#include "commands.h"
#include "core/atomic_file.h"
#include "report/csv.h"
#include "report/html_report.h"
#include "report/svg_plot.h"

namespace attnlab::cli {
namespace {

std::string Printf(const char* f, double x) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, x);
  return buf;
}

std::string Bytes(int64_t b) {
  if (b < 1048576) return Printf("%.1f KiB", b / 1024.0);
  return Printf("%.1f MiB", b / 1048576.0);
}

std::string Ppl(double p) { return Printf(p >= 100 ? "%.1f" : "%.2f", p); }

const StreamEvalResult* Find(const std::vector<StreamEvalResult>& rs, const std::string& name) {
  for (const StreamEvalResult& r : rs) {
    if (r.policy == name) return &r;
  }
  return nullptr;
}

// Mean NLL over scored tokens [from, to) as a perplexity; NaN for an empty range.
double RangePerplexity(const StreamEvalResult& r, int64_t from, int64_t to) {
  to = std::min<int64_t>(to, static_cast<int64_t>(r.token_nll.size()));
  if (from < 0 || to <= from) return NAN;
  double s = 0;
  for (int64_t i = from; i < to; ++i) s += r.token_nll[i];
  return std::exp(s / (to - from));
}

// Line styles per policy. svg_plot colours series i with SeriesColor(i) (8 colours) and dashes
// it with SeriesDash(i) (solid for i < 8, dashed for 8..15, dotted for 16..23); placing each
// policy at a fixed index gives it its own colour AND dash, so a dotted line drawn over a solid
// one stays visible where the two coincide. The gaps are filled with unnamed empty series,
// which draw nothing and are not in the legend. Drawn in index order: solid first.
size_t StyleIndex(const std::string& policy) {
  if (policy == "recompute") return 0;  // solid, colour 0
  if (policy == "dense") return 1;      // solid, colour 1
  if (policy == "sink") return 10;      // dashed, colour 2
  if (policy == "window") return 19;    // dotted, colour 3
  // The attention-scored policies (scored_cache.h): one colour each, dashed with pinned sinks.
  if (policy == "h2o") return 4;
  if (policy == "h2o+sinks") return 12;
  if (policy == "tova") return 5;
  if (policy == "tova+sinks") return 13;
  if (policy == "snapkv") return 6;
  if (policy == "snapkv+sinks") return 14;
  return 7;
}

const char* StyleName(const std::string& policy) {
  const size_t i = StyleIndex(policy);
  return i >= 16 ? "dotted" : i >= 8 ? "dashed" : "solid";
}

void AddStyledSeries(report::XyPlot* plot, std::vector<report::Series> series) {
  std::stable_sort(series.begin(), series.end(), [](const auto& a, const auto& b) {
    return StyleIndex(a.name) < StyleIndex(b.name);
  });
  for (report::Series& s : series) {
    const size_t idx = StyleIndex(s.name);
    while (plot->series.size() < idx) plot->series.push_back({});
    plot->series.push_back(std::move(s));
  }
}

std::string StyleLegend(const std::vector<StreamEvalResult>& results) {
  std::vector<std::pair<size_t, std::string>> v;
  for (const StreamEvalResult& r : results) {
    v.push_back({StyleIndex(r.policy), r.policy + " " + StyleName(r.policy)});
  }
  std::sort(v.begin(), v.end());
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + v[i].second;
  return out;
}

nlohmann::json PairJson(const StreamPairStat& s) {
  return {{"policy", s.policy},
          {"reference", s.reference},
          {"from_token", s.from + 1},
          {"to_token", s.to},
          {"perplexity", s.perplexity},
          {"reference_perplexity", s.reference_perplexity},
          {"relative", s.relative},
          {"noise_2se", s.noise},
          {"verdict", s.verdict > 0 ? "worse" : s.verdict < 0 ? "better" : "no measurable difference"}};
}

}  // namespace

std::string DumpJson(const nlohmann::json& j, int indent) {
  return j.dump(indent, ' ', false, nlohmann::json::error_handler_t::replace);
}

// A kept share (StreamChunk), null where it was not measured.
nlohmann::json Share(double x) { return x < 0 ? nlohmann::json() : nlohmann::json(x); }

nlohmann::json StreamResultJson(const StreamEvalResult& r) {
  nlohmann::json chunks = nlohmann::json::array();
  for (const StreamChunk& c : r.chunks) {
    chunks.push_back({{"end", c.end},
                      {"chunk_perplexity", std::exp(c.chunk_loss)},
                      {"perplexity", std::exp(c.mean_loss)},
                      {"tokens_per_s", c.tokens_per_s},
                      {"cache_tokens", c.cache_tokens},
                      {"cache_bytes", c.cache_bytes},
                      {"rss_bytes", c.rss_bytes},
                      {"kept_first", Share(c.kept_first)},
                      {"kept_window", Share(c.kept_window)},
                      {"kept_older", Share(c.kept_older)}});
  }
  return {{"policy", r.policy},
          {"tokens", r.tokens},
          {"loss", r.mean_loss},
          {"perplexity", r.perplexity},
          {"seconds", r.seconds},
          {"tokens_per_s", r.tokens_per_s},
          {"eviction_from_token", r.eviction_from < 0 ? nlohmann::json() : nlohmann::json(r.eviction_from + 1)},
          {"beyond_context_from_token",
           r.beyond_context_from < 0 ? nlohmann::json() : nlohmann::json(r.beyond_context_from + 1)},
          {"max_cache_tokens", r.max_cache_tokens},
          {"chunks", chunks}};
}

nlohmann::json StreamRunJson(const StreamRunInfo& info, const std::vector<StreamEvalResult>& results) {
  nlohmann::json j{{"model", info.model},       {"text", info.text},
                   {"text_tokens", info.text_tokens}, {"context", info.context},
                   {"window", info.window},     {"sinks", info.sinks},
                   {"chunk", info.chunk},       {"rope_mode", info.rope_mode},
                   {"ranks", info.ranks},       {"results", nlohmann::json::array()}};
  for (const StreamEvalResult& r : results) j["results"].push_back(StreamResultJson(r));
  return j;
}

nlohmann::json StreamComparisonJson(const StreamComparison& c) {
  nlohmann::json j{{"tolerance", c.tolerance},
                   {"rule", "a difference is measurable when the perplexities differ by more than "
                            "the tolerance and the mean per-token NLL difference is more than "
                            "twice its standard error"},
                   {"tokens", c.tokens},
                   {"context", c.context},
                   {"window", c.window},
                   {"sinks", c.sinks},
                   {"eviction_from_token", c.eviction_from < 0 ? nlohmann::json() : nlohmann::json(c.eviction_from + 1)},
                   {"context_end_token", c.context_end},
                   {"window_vs_sink", c.has_window_vs_sink ? PairJson(c.window_vs_sink) : nlohmann::json()},
                   {"max_chunk_window_vs_sink", c.max_chunk_window_vs_sink},
                   {"in_context", nlohmann::json::array()},
                   {"beyond_context", nlohmann::json::array()},
                   {"memory", nlohmann::json::array()},
                   {"pinning", nlohmann::json::array()},
                   {"sentences",
                    {{"window_vs_sink", c.window_vs_sink_text},
                     {"pinning", c.pinning_text},
                     {"in_context", c.in_context_text},
                     {"beyond_context", c.beyond_context_text},
                     {"memory", c.memory_text}}},
                   {"summary", c.summary}};
  for (const StreamPairStat& s : c.in_context) j["in_context"].push_back(PairJson(s));
  for (const StreamPairStat& s : c.beyond_context) j["beyond_context"].push_back(PairJson(s));
  for (const StreamPairStat& s : c.pinning) j["pinning"].push_back(PairJson(s));
  for (const StreamMemoryStat& m : c.memory) {
    j["memory"].push_back({{"policy", m.policy},
                           {"max_tokens", m.max_tokens},
                           {"last_tokens", m.last_tokens},
                           {"first_bytes", m.first_bytes},
                           {"last_bytes", m.last_bytes},
                           {"max_bytes", m.max_bytes},
                           {"grows", m.grows},
                           {"flat", m.flat}});
  }
  return j;
}

std::vector<std::string> WriteStreamReport(const std::string& dir, const StreamRunInfo& info,
                                           const std::vector<StreamEvalResult>& results,
                                           const StreamComparison& c) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw CommandError("--out " + dir + ": cannot create the directory: " + ec.message());
  const std::string tol = FormatTolerance(c.tolerance);
  const StreamEvalResult* rec = Find(results, "recompute");
  const StreamEvalResult* dense = Find(results, "dense");
  const StreamEvalResult* win = Find(results, "window");
  const StreamEvalResult* sink = Find(results, "sink");
  const StreamEvalResult* ref = rec ? rec : dense;  // the difference plot's baseline
  nlohmann::json figures = nlohmann::json::object();

  // CSV: one row per policy and chunk.
  report::CsvWriter csv({"policy", "end", "chunk_perplexity", "perplexity", "tokens_per_s",
                         "cache_tokens", "cache_bytes", "rss_bytes", "kept_first", "kept_window",
                         "kept_older"});
  auto share_cell = [](double x) { return x < 0 ? std::string() : std::to_string(x); };
  for (const StreamEvalResult& r : results) {
    for (const StreamChunk& ch : r.chunks) {
      csv.AddRow({r.policy, std::to_string(ch.end), std::to_string(std::exp(ch.chunk_loss)),
                  std::to_string(std::exp(ch.mean_loss)), std::to_string(ch.tokens_per_s),
                  std::to_string(ch.cache_tokens), std::to_string(ch.cache_bytes),
                  std::to_string(ch.rss_bytes), share_cell(ch.kept_first),
                  share_cell(ch.kept_window), share_cell(ch.kept_older)});
    }
  }

  // The table: totals and the ranges the verdicts use.
  const int64_t evict = c.eviction_from;
  std::vector<std::vector<std::string>> rows;
  nlohmann::json table = nlohmann::json::array();
  for (const StreamEvalResult& r : results) {
    const double in_ctx = RangePerplexity(r, 0, c.context_end);
    const double past = RangePerplexity(r, c.context_end, c.tokens);
    const double after = evict >= 0 ? RangePerplexity(r, evict, c.tokens) : NAN;
    const double vs = rec ? r.perplexity / rec->perplexity : NAN;  // report.json only
    const int64_t bytes = r.chunks.empty() ? 0 : r.chunks.back().cache_bytes;
    auto cell = [](double v) { return std::isfinite(v) ? Ppl(v) : std::string("-"); };
    rows.push_back({r.policy, cell(r.perplexity), cell(in_ctx),
                    cell(past), cell(after), Printf("%.1f", r.tokens_per_s), std::to_string(r.max_cache_tokens),
                    Bytes(bytes)});
    table.push_back({{"policy", r.policy},
                     {"tokens", r.tokens},
                     {"perplexity", r.perplexity},
                     {"perplexity_in_context", in_ctx},
                     {"perplexity_past_context", past},
                     {"perplexity_after_eviction", after},
                     {"vs_recompute", vs},
                     {"tokens_per_s", r.tokens_per_s},
                     {"max_cache_tokens", r.max_cache_tokens},
                     {"cache_bytes_at_end", bytes}});
  }
  const std::string ctx_cols = "in context = " + (c.context_end > 0 ? "tokens 1-" + std::to_string(c.context_end) : std::string("none")) +
                               "; past context = " + (c.context_end < c.tokens ? "tokens " + std::to_string(c.context_end + 1) + "-" + std::to_string(c.tokens) : std::string("none")) +
                               "; after eviction = " + (evict >= 0 ? "tokens " + std::to_string(evict + 1) + "-" + std::to_string(c.tokens) : std::string("none (nothing was evicted)")) + ".";
  const std::string table_caption =
      "Perplexity over all " + std::to_string(c.tokens) +
      " scored tokens and over the ranges the verdicts use (" + ctx_cols +
      ") The KV columns are the most tokens the KV cache held and its bytes at the end.";

  // Figure 1: chunk perplexity against position, every policy in its own colour and dash.
  report::XyPlot ppl;
  ppl.title = "Perplexity of each chunk against position";
  ppl.x.label = "tokens read";
  ppl.y.label = "chunk perplexity";
  ppl.y.scale = report::ScaleType::kLog10;
  {
    std::vector<report::Series> ss;
    for (const StreamEvalResult& r : results) {
      report::Series s;
      s.name = r.policy;
      for (const StreamChunk& ch : r.chunks) {
        s.x.push_back(static_cast<double>(ch.end));
        s.y.push_back(std::exp(ch.chunk_loss));
      }
      ss.push_back(std::move(s));
    }
    AddStyledSeries(&ppl, std::move(ss));
  }
  std::string ppl_caption = "Each point is one chunk's perplexity (" + std::to_string(info.chunk) +
                            " tokens per chunk, log scale); line styles: " + StyleLegend(results) +
                            ", so a line drawn over another stays visible.";
  if (win && sink) {
    if (evict >= 0) {
      ppl_caption += " After eviction starts (token " + std::to_string(evict + 1) +
                     "), window and sink differ by at most " +
                     FormatPercent(c.max_chunk_window_vs_sink) + " in any chunk" +
                     (c.max_chunk_window_vs_sink <= c.tolerance ? ", so their lines overlap" : "") + ".";
    } else {
      ppl_caption += " Nothing was evicted, so window and sink computed the same thing as dense.";
    }
  }
  int64_t dense_departs = -1;
  double dense_worst = 0;
  if (dense && rec) {
    for (size_t k = 0; k < dense->chunks.size() && k < rec->chunks.size(); ++k) {
      const double d = std::expm1(dense->chunks[k].chunk_loss - rec->chunks[k].chunk_loss);
      dense_worst = std::max(dense_worst, d);
      if (dense_departs < 0 && std::fabs(d) > c.tolerance) dense_departs = dense->chunks[k].end;
    }
    ppl_caption += dense_departs < 0
                       ? " Dense stays within " + tol + " of recompute in every chunk."
                       : " Dense departs from recompute by more than " + tol +
                             " from the chunk ending at token " + std::to_string(dense_departs) +
                             " on (at worst " + FormatPercent(dense_worst) + " worse).";
  }
  figures["fig-stream"] = {{"caption", ppl_caption},
                           {"max_chunk_window_vs_sink", c.max_chunk_window_vs_sink},
                           {"dense_departs_at_token", dense_departs < 0 ? nlohmann::json() : nlohmann::json(dense_departs)},
                           {"dense_worst_chunk_vs_recompute", dense_worst}};

  // Figure 2: each chunk's perplexity relative to the baseline, in percent.
  report::XyPlot diff;
  std::string diff_caption;
  if (ref) {
    diff.title = "Window and sink: chunk perplexity relative to " + ref->policy;
    diff.x.label = "tokens read";
    diff.y.label = "% above " + ref->policy;
    diff.reference_lines.push_back({0.0, ref->policy});
    diff.reference_lines.push_back({100 * c.tolerance, "+" + tol});
    diff.reference_lines.push_back({-100 * c.tolerance, "-" + tol});
    std::vector<report::Series> ss;
    std::vector<std::string> worst;
    nlohmann::json worst_json = nlohmann::json::object();
    for (const StreamEvalResult& r : results) {
      // Dense is left out: past the context it is off by orders of magnitude more (figure
      // above), which would flatten the differences this plot is for.
      if (&r == ref || r.policy == "dense") continue;
      report::Series s;
      s.name = r.policy;
      double w = 0;
      int64_t at = 0;
      for (size_t k = 0; k < r.chunks.size() && k < ref->chunks.size(); ++k) {
        const double d = 100 * std::expm1(r.chunks[k].chunk_loss - ref->chunks[k].chunk_loss);
        s.x.push_back(static_cast<double>(r.chunks[k].end));
        s.y.push_back(d);
        if (std::fabs(d) > std::fabs(w)) w = d, at = r.chunks[k].end;
      }
      worst.push_back(r.policy + " " + (w >= 0 ? "+" : "-") + FormatPercent(w / 100) +
                      (at > 0 ? " (chunk ending at token " + std::to_string(at) + ")" : ""));
      worst_json[r.policy] = {{"largest_percent", w}, {"at_token", at}};
      ss.push_back(std::move(s));
    }
    AddStyledSeries(&diff, std::move(ss));
    diff_caption = "The same chunks as above for the bounded caches, as each one's chunk "
                   "perplexity relative to " + ref->policy + "'s (0 = equal; dashed lines: the " +
                   tol + " tolerance); this scale shows differences the log plot cannot. Largest "
                   "difference in any chunk: " +
                   (worst.empty() ? std::string("none") : [&] {
                     std::string s;
                     for (size_t i = 0; i < worst.size(); ++i) s += (i ? "; " : "") + worst[i];
                     return s;
                   }()) +
                   ".";
    figures["fig-stream-relative"] = {{"caption", diff_caption}, {"reference", ref->policy},
                                      {"largest", worst_json}};
  }

  // Figures 3 and 4: what each cache held, as it reported after each chunk.
  report::XyPlot tok, mem;
  tok.title = "KV-cache tokens held against position";
  tok.x.label = "tokens read";
  tok.y.label = "tokens in the KV cache";
  tok.y.scale = report::ScaleType::kLog10;
  mem.title = "KV-cache memory against position";
  mem.x.label = "tokens read";
  mem.y.label = "KV-cache MiB";
  mem.y.scale = report::ScaleType::kLog10;
  {
    std::vector<report::Series> st, sm;
    for (const StreamEvalResult& r : results) {
      if (r.policy == "recompute") continue;  // no cache: nothing to draw on a log scale
      report::Series a, b;
      a.name = b.name = r.policy;
      for (const StreamChunk& ch : r.chunks) {
        a.x.push_back(static_cast<double>(ch.end));
        a.y.push_back(static_cast<double>(ch.cache_tokens));
        b.x.push_back(static_cast<double>(ch.end));
        b.y.push_back(ch.cache_bytes / 1048576.0);
      }
      st.push_back(std::move(a));
      sm.push_back(std::move(b));
    }
    AddStyledSeries(&tok, std::move(st));
    AddStyledSeries(&mem, std::move(sm));
  }
  std::vector<std::string> tok_parts, mem_parts;
  for (const StreamMemoryStat& m : c.memory) {
    if (m.policy == "recompute") {
      tok_parts.push_back("recompute keeps no cache (not drawn: it re-encodes up to " +
                          std::to_string(c.window) + " tokens for every token)");
      mem_parts.push_back("recompute keeps none (not drawn)");
    } else if (m.policy == "dense") {
      tok_parts.push_back("dense grows with the text to " + std::to_string(m.last_tokens));
      mem_parts.push_back(m.grows ? "dense grows in steps as its buffers are enlarged, from " +
                                        Bytes(m.first_bytes) + " to " + Bytes(m.last_bytes)
                                  : "dense holds " + Bytes(m.last_bytes));
    } else {
      tok_parts.push_back(m.policy + " stops at " + std::to_string(m.max_tokens));
      mem_parts.push_back(m.policy + (m.flat ? " is constant at " + Bytes(m.last_bytes)
                                             : " ranges from " + Bytes(m.first_bytes) + " to " +
                                                   Bytes(m.max_bytes)));
    }
  }
  auto join = [](const std::vector<std::string>& v) {
    std::string s;
    for (size_t i = 0; i < v.size(); ++i) s += (i ? "; " : "") + v[i];
    return s;
  };
  std::string same;
  if (win && sink && win->chunks.size() == sink->chunks.size()) {
    bool t = true, b = true;
    for (size_t k = 0; k < win->chunks.size(); ++k) {
      t = t && win->chunks[k].cache_tokens == sink->chunks[k].cache_tokens;
      b = b && win->chunks[k].cache_bytes == sink->chunks[k].cache_bytes;
    }
    if (t) tok_parts.push_back("window and sink hold the same number at every chunk, so their lines coincide");
    if (b) mem_parts.push_back("window and sink hold the same bytes at every chunk, so their lines coincide");
  }
  const std::string tok_caption =
      "Tokens in each policy's KV cache after each chunk, as the cache reports them (log scale; "
      "line styles as above): " + join(tok_parts) + ".";
  const std::string mem_caption =
      "Bytes each KV cache holds after each chunk (log scale; its allocated fp32 buffers, as it "
      "reports them; the window and sink caches allocate their ring buffer and RoPE scratch up "
      "front): " +
      join(mem_parts) + ".";
  figures["fig-cache-tokens"] = {{"caption", tok_caption}};
  figures["fig-cache-bytes"] = {{"caption", mem_caption}};

  // Figure 5: how far back each bounded cache reaches (the attention-scored policies keep tokens
  // a window would have dropped), and what it keeps of the first tokens.
  report::XyPlot kept;
  kept.title = "KV-cache slots holding tokens older than the window";
  kept.x.label = "tokens read";
  kept.y.label = "% of the cache's slots";
  std::vector<std::string> kept_parts;
  nlohmann::json kept_json = nlohmann::json::object();
  {
    std::vector<report::Series> sk;
    for (const StreamEvalResult& r : results) {
      if (r.policy == "recompute" || r.policy == "dense" || r.chunks.empty() ||
          r.chunks.back().kept_older < 0) {
        continue;  // no cache, or one that keeps everything
      }
      report::Series a;
      a.name = r.policy;
      for (const StreamChunk& ch : r.chunks) {
        a.x.push_back(static_cast<double>(ch.end));
        a.y.push_back(100 * ch.kept_older);
      }
      sk.push_back(std::move(a));
      const StreamChunk& end = r.chunks.back();
      kept_parts.push_back(r.policy + " " + Printf("%.1f%%", 100 * end.kept_older) + " older, " +
                           Printf("%.1f%%", 100 * end.kept_first) + " first tokens");
      kept_json[r.policy] = {{"kept_first", end.kept_first}, {"kept_window", end.kept_window},
                             {"kept_older", end.kept_older}};
    }
    AddStyledSeries(&kept, std::move(sk));
  }
  const std::string kept_caption =
      "Share of each bounded cache's slots (over layers and KV heads) holding a token older than "
      "the last " + std::to_string(c.window) + " tokens read and not among the first " +
      std::to_string(kKeptFirstTokens) + ": what a policy keeps from beyond a window's reach "
      "(a window keeps none; sink + window none beyond pinned tokens past the first " +
      std::to_string(kKeptFirstTokens) + "). At the end of the text: " +
      (kept_parts.empty() ? std::string("no bounded cache ran") : join(kept_parts)) + ".";
  figures["fig-kept"] = {{"caption", kept_caption}, {"at_end", kept_json}};

  // The page.
  report::HtmlReport html("Streaming perplexity: " + info.model);
  html.SetSubtitle(std::to_string(info.text_tokens) + " tokens of " + info.text + "; window " +
                   std::to_string(info.window) + ", " + std::to_string(info.sinks) +
                   " sink tokens, model context " + std::to_string(info.context) + ", RoPE mode " +
                   info.rope_mode);
  html.SetSummary(c.summary);
  if (c.has_window_vs_sink) {
    html.AddSummaryFact("window vs sink after eviction",
                        (c.window_vs_sink.relative >= 0 ? "+" : "-") +
                            FormatPercent(c.window_vs_sink.relative) +
                            (c.window_vs_sink.verdict == 0 ? " (no measurable difference)" : ""));
  }
  for (const StreamPairStat& s : c.beyond_context) {
    if (s.policy == "sink" || s.policy == "dense") {
      html.AddSummaryFact(s.policy + " vs recompute past the context",
                          (s.relative >= 0 ? "+" : "-") + FormatPercent(s.relative));
    }
  }
  for (const StreamMemoryStat& m : c.memory) {
    if (m.policy == "dense" || m.policy == "sink") {
      html.AddSummaryFact(m.policy + " KV cache at the end",
                          std::to_string(m.last_tokens) + " tokens, " + Bytes(m.last_bytes));
    }
  }
  html.AddSection("results", "Policies");
  html.AddTable({"policy", "perplexity", "in context", "past context", "after eviction",
                 "tokens/s", "max KV tokens", "KV at end"},
                rows, table_caption);
  html.AddSection("verdicts", "What the numbers say");
  std::vector<std::string> bullets;
  for (const std::string* t : {&c.window_vs_sink_text, &c.pinning_text, &c.in_context_text,
                               &c.beyond_context_text, &c.memory_text}) {
    if (!t->empty()) bullets.push_back(*t);
  }
  html.AddBulletList(bullets);
  html.AddNote("A difference counts as measurable when two policies' perplexities over the same "
               "tokens differ by more than " + tol + " and the mean per-token loss difference is "
               "more than twice its standard error (a paired comparison); anything smaller is "
               "reported as no measurable difference.");
  html.AddSection("curve", "Perplexity against position");
  html.AddFigure(report::RenderLinePlot(ppl), ppl_caption, "fig-stream");
  if (ref) html.AddFigure(report::RenderLinePlot(diff), diff_caption, "fig-stream-relative");
  html.AddSection("memory", "KV cache against position");
  html.AddFigure(report::RenderLinePlot(tok), tok_caption, "fig-cache-tokens");
  html.AddFigure(report::RenderLinePlot(mem), mem_caption, "fig-cache-bytes");
  if (!kept_parts.empty()) {
    html.AddSection("kept", "What each cache keeps");
    html.AddFigure(report::RenderLinePlot(kept), kept_caption, "fig-kept");
  }

  nlohmann::json rep = StreamRunJson(info, {});
  rep.erase("results");
  rep["summary"] = c.summary;
  rep["comparison"] = StreamComparisonJson(c);
  rep["table"] = {{"caption", table_caption}, {"rows", table}};
  rep["figures"] = figures;
  rep["outline"] = html.Outline();

  std::vector<std::string> paths{dir + "/report.html", dir + "/report.json", dir + "/stream.json",
                                 dir + "/stream.csv"};
  Check(html.WriteTo(paths[0]));
  Check(WriteFileAtomically(paths[1], DumpJson(rep) + "\n"));
  Check(WriteFileAtomically(paths[2], DumpJson(StreamRunJson(info, results)) + "\n"));
  Check(csv.WriteTo(paths[3]));
  return paths;
}

}  // namespace attnlab::cli
