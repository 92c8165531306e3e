// `attnlab analyze`: where are this model's attention sinks, and is its attention collapsing with
// depth? One command, any text length, no len x len map (diagnostics/analysis.h).
//
//   attnlab analyze [--model M] [--text FILE | --prompt STR] [--out DIR] [--window W]
//                   [--max-tokens N] [--plot-heads L.H,L.H] [--plot-max 512] [--eps 0.3]
//
// Writes DIR/report.json (schema: docs/ANALYZE.md), DIR/heads.csv (one row per layer x head),
// DIR/token_classes.csv (layer x head x token class: attention received against uniform),
// DIR/layers.csv (one row per depth) and DIR/report.html (self-contained, plots inline), then
// prints the answer, the time and the peak memory.
#include <charconv>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <span>
#include <string>

#include "cli_model.h"
#include "commands.h"
#include "core/atomic_file.h"
#include "core/json_number.h"
#include "core/resources.h"
#include "diagnostics/analysis.h"
#include "diagnostics/probe_curve.h"
#include "dist/comm.h"
#include "report/attention_view.h"
#include "report/csv.h"
#include "report/html_report.h"
#include "report/svg_plot.h"

namespace attnlab::cli {
namespace {

struct AnalyzeOptions {
  std::string model, tokenizer, text, prompt, out = "analysis", plot_heads;
  int64_t window = 0, max_tokens = 0, plot_max = 512;
  int64_t view_tokens = 256, view_top_k = 8;  // the attention view (0 tokens: none)
  int64_t class_rows = 512, class_recent = 4;  // attention by token class (0 rows: none)
  double eps = 0.3;
  std::string stream_budget = "auto";  // MiB, or auto: a quarter of the weights, at least 128
  bool json = false, sequence_parallel = false;
};

std::string Fmt(double x, const char* f = "%.3f") {
  if (!std::isfinite(x)) return "n/a";
  char buf[48];
  std::snprintf(buf, sizeof buf, f, x);
  return buf;
}

// --stream-budget: MiB the per-layer streams of a window may take (0: one pass, no limit); auto
// = a quarter of the model's weight bytes, at least 128 MiB: passes hand the residual stream on,
// so more passes cost almost nothing, and analysing a released model stays near its weights'
// size (a 0.5B BF16 model at 8k tokens: 1.25x the weights at 128 MiB, 1.64x at half the weights;
// docs/PERFORMANCE.md). One layer's streams are the floor (a pass holds at least one layer).
int64_t StreamBudget(const std::string& flag, const Gpt& g) {
  if (flag == "auto") {
    int64_t weights = g.params().size() * 4;
    if (g.matrices()) weights += g.matrices()->bytes();
    return std::max<int64_t>(weights / 4, int64_t{128} << 20);
  }
  int64_t mib = -1;
  const auto [end, ec] = std::from_chars(flag.data(), flag.data() + flag.size(), mib);
  if (ec != std::errc() || end != flag.data() + flag.size() || mib < 0 || mib > (int64_t{1} << 30)) {
    throw CommandError("--stream-budget must be auto or a number of MiB >= 0 (0: no limit), got '" +
                       flag + "'");
  }
  return mib << 20;
}

std::vector<std::pair<int64_t, int64_t>> ParseHeads(const std::string& s, const ModelConfig& c) {
  std::vector<std::pair<int64_t, int64_t>> out;
  size_t pos = 0;
  while (!s.empty() && pos <= s.size()) {
    size_t end = s.find(',', pos);
    if (end == std::string::npos) end = s.size();
    const std::string item = s.substr(pos, end - pos);
    long l = -1, h = -1;
    char extra;
    if (std::sscanf(item.c_str(), "%ld.%ld%c", &l, &h, &extra) != 2 || l < 0 || h < 0 ||
        l >= c.n_layer || h >= c.n_head) {
      throw CommandError("--plot-heads: expected LAYER.HEAD pairs inside the model (" +
                         std::to_string(c.n_layer) + " layers, " + std::to_string(c.n_head) +
                         " heads), got '" + item + "'");
    }
    out.push_back({l, h});
    pos = end + 1;
  }
  return out;
}

// Layer x head matrix of one per-head statistic.
report::Heatmap HeadMap(const AnalysisResult& r, const std::string& title, const std::string& label,
                        const std::function<double(const LayerAnalysis&, int64_t)>& f) {
  report::Heatmap m;
  m.title = title;
  m.rows = r.config.n_layer;
  m.cols = r.config.n_head;
  m.x_label = "head";
  m.y_label = "layer";
  m.value_label = label;
  for (int64_t l = 0; l < m.rows; ++l) {
    for (int64_t h = 0; h < m.cols; ++h) m.values.push_back(f(r.layers[l], h));
  }
  return m;
}

report::Series DepthSeries(const AnalysisResult& r, const std::string& name,
                           const std::function<double(const StreamMetrics&)>& f) {
  report::Series s;
  s.name = name;
  s.x.push_back(0);
  s.y.push_back(f(r.embedding));
  for (int64_t l = 0; l < r.config.n_layer; ++l) {
    s.x.push_back(static_cast<double>(l + 1));
    s.y.push_back(f(r.layers[l].output));
  }
  return s;
}

// Adds "text" (the token's bytes, escaped as JSON does) and "kind" (bos, first_token, newline,
// period, other) to each entry of report.json's sinks.sink_keys, and returns one sentence that
// says where the sinks sit ("" when no head is a sink).
std::string LabelSinkKeys(const CliModel& m, const AnalysisResult& r, nlohmann::json* keys) {
  std::string said;
  for (nlohmann::json& e : *keys) {
    std::string text, kind = "other";
    const int64_t key = e["key"].get<int64_t>();
    if (e["token"].is_number_integer() && m.tokenizer) {
      auto b = m.tokenizer->TokenBytes(e["token"].get<int32_t>());
      if (b.ok()) text = b.value();
    }
    const bool bos = r.bos >= 0;
    if (bos && key == 0) kind = "bos";
    else if (key == (bos ? 1 : 0)) kind = "first_token";
    else if (text.find('\n') != std::string::npos) kind = "newline";
    else if (!text.empty() && (text.back() == '.' || text.find(". ") != std::string::npos)) kind = "period";
    e["text"] = text;
    e["kind"] = kind;
    if (said.size() < 300) {
      said += std::string(said.empty() ? "" : "; ") + "key " + std::to_string(key) + " (" + kind +
              (text.empty() ? "" : " " + nlohmann::json(text).dump()) + "): " +
              std::to_string(e["heads"].get<int64_t>()) + " heads";
    }
  }
  return said.empty() ? "" : "Sink heads sit on " + said + ".";
}

// The embedded default model's first-token probe over its training (issue 35): its train log's
// probe lines (diagnostics/probe_curve.h). Empty for any other model, or when the log is
// missing or has no probe line.
ProbeCurve DefaultModelCurve(const AnalyzeOptions& o, const CliModel& m) {
  if (!o.model.empty()) return {};
  Result<ProbeCurve> c = ReadProbeCurve(m.path + "/train_log.jsonl");
  return c.ok() ? std::move(c).value() : ProbeCurve{};
}

nlohmann::json ProbeCurveJson(const ProbeCurve& c, const std::string& log) {
  nlohmann::json pts = nlohmann::json::array();
  for (const ProbePoint& p : c.points) {
    pts.push_back({{"step", p.step}, {"max_alpha_1", p.max_alpha1}, {"layer", p.max_layer},
                   {"head", p.max_head}, {"layer_mean_alpha_1", p.layer_mean}});
  }
  return {{"train_log", log}, {"probe", pts}, {"skipped_lines", c.skipped}};
}

// The report's note on the default model: how its sink emerged during training.
void AddDefaultModelNote(report::HtmlReport& html, const ProbeCurve& c) {
  if (c.points.empty()) return;
  report::XyPlot p;
  p.title = "The default model's first-token probe during training";
  p.x.label = "training step";
  p.y.label = "alpha_1 on the probe batch";
  report::Series best{"strongest head", {}, {}};
  std::vector<report::Series> layers(c.points.front().layer_mean.size());
  for (size_t l = 0; l < layers.size(); ++l) layers[l].name = "layer " + std::to_string(l) + " mean";
  for (const ProbePoint& q : c.points) {
    best.x.push_back(static_cast<double>(q.step));
    best.y.push_back(q.max_alpha1);
    for (size_t l = 0; l < layers.size(); ++l) {
      layers[l].x.push_back(static_cast<double>(q.step));
      layers[l].y.push_back(l < q.layer_mean.size() ? q.layer_mean[l] : NAN);
    }
  }
  p.series.push_back(best);
  for (auto& s : layers) p.series.push_back(std::move(s));
  p.reference_lines.push_back({0.3, "eps = 0.3"});
  p.markers = true;
  const ProbePoint& last = c.points.back();
  html.AddParagraph(
      "About the embedded default model: its training log (train_log.jsonl) probed every head's "
      "alpha_1 on a fixed validation batch of 256-token windows as it trained, " +
      std::to_string(c.points.size()) + " times. At step " + std::to_string(last.step) +
      " the strongest head (layer " + std::to_string(last.max_layer) + " head " +
      std::to_string(last.max_head) + ") gave token 0 " + Fmt(last.max_alpha1) +
      " of its attention; docs/DEFAULT_MODEL.md tells how each stage of training moved it.");
  html.AddFigure(report::RenderLinePlot(p),
                 "The sink's emergence: the strongest head's alpha_1 and each layer's mean over "
                 "training (uniform attention over 256 positions gives 0.024).",
                 "fig-default-model-probe");
}

// DIR/attention.html (report/attention_view.h), and report.json's attention_view saying what it
// holds (null without a view).
void WriteAttentionView(const AnalyzeOptions& o, const report::AttentionViewBuilder* view,
                        nlohmann::json& j) {
  j["attention_view"] = nullptr;
  if (!view || view->layers() == 0) return;
  const int64_t n = view->tokens();
  auto page = view->Render("Attention view: the first " + std::to_string(n) + " tokens", 256);
  Check(page.status());
  Check(WriteFileAtomically(o.out + "/attention.html", page.value()));
  j["attention_view"] = {{"file", "attention.html"}, {"tokens", n}, {"layers", view->layers()},
                         {"top_k", std::min(o.view_top_k, n)}};
}

// report.html's section linking the view.
void AddAttentionViewSection(const nlohmann::json& v, const AnalysisResult& r,
                             report::HtmlReport& html) {
  if (v.is_null()) return;
  html.AddSection("view", "Attention view");
  html.AddLinkParagraph(
      "Every head's attention over the first " + std::to_string(v["tokens"].get<int64_t>()) +
          " tokens of the first window" + (r.bos >= 0 ? " (BOS first)" : "") + ", interactive: ",
      "attention.html", "attention.html",
      " (pick a layer and a head; hover a token to see what it attends to and what attends to "
      "it; the first-token column of the chosen head is plotted under the text). It keeps each "
      "query's " + std::to_string(v["top_k"].get<int64_t>()) + " strongest keys and at most "
      "64 x 64 block means per head, never an N x N table (--view-tokens, --view-top-k; "
      "--view-tokens 0: no view).");
}

// Who draws attention, by token class: the mean over heads of each class's ratio (a table)
// and every head's log2 ratio (a heatmap: rows the classes, columns layer.head).
void AddTokenClassSection(const AnalysisResult& r, const AnalysisOptions& ao,
                          report::HtmlReport& html) {
  html.AddSection("classes", "Who draws attention");
  if (!r.token_classes) {
    html.AddParagraph("Attention by token class was not computed: " + r.token_classes_note + ".");
    return;
  }
  const int64_t L = r.config.n_layer, H = r.config.n_head;
  html.AddParagraph(
      "The attention each class of keys receives (mean over up to " +
      std::to_string(ao.class_rows) + " sampled query rows per window and layer) divided by "
      "what uniform attention over the same visible keys would give it: 1 means as uniform, 2 "
      "twice as much. first: the first " + std::to_string(ao.first_k) + " positions; recent: "
      "the last " + std::to_string(ao.class_recent) + " positions up to the query; delimiter: "
      "punctuation-only tokens; special: BOS and the tokenizer's specials; freq_d1: the most "
      "frequent tokens of this text (the first 10% of its occurrences) .. freq_d10 the rarest. "
      "token_classes.csv has every number.");
  report::Heatmap hm;
  hm.title = "log2(attention received / uniform share)";
  hm.rows = kNumTokenClasses, hm.cols = L * H;
  hm.x_label = "layer.head", hm.y_label = "token class", hm.value_label = "log2 ratio";
  hm.color_map = report::ColorMap::kBlueOrange;
  for (int c = 0; c < kNumTokenClasses; ++c) hm.row_labels.push_back(TokenClassName(c));
  for (int64_t l = 0; l < L; ++l) {
    for (int64_t h = 0; h < H; ++h) hm.col_labels.push_back(std::to_string(l) + "." + std::to_string(h));
  }
  hm.values.assign(hm.rows * hm.cols, NAN);
  std::vector<std::vector<std::string>> rows;
  double span = 0;
  for (int c = 0; c < kNumTokenClasses; ++c) {
    double mean = 0, n = 0, top = 0;
    std::string top_at = "-";
    for (int64_t l = 0; l < L; ++l) {
      for (int64_t h = 0; h < H; ++h) {
        const double m = r.layers[l].token_classes.mass[h][c];
        const double u = r.layers[l].token_classes.uniform[h][c];
        if (!(u > 0) || !std::isfinite(m)) continue;
        const double q = m / u;
        hm.values[c * hm.cols + l * H + h] = q > 0 ? std::log2(q) : NAN;
        mean += q, n += 1;
        if (q > 0) span = std::max(span, std::abs(std::log2(q)));
        if (q > top) top = q, top_at = hm.col_labels[l * H + h];
      }
    }
    rows.push_back({TokenClassName(c), n > 0 ? Fmt(mean / n, "%.2f") : "n/a",
                    n > 0 ? Fmt(top, "%.2f") : "n/a", top_at});
  }
  span = std::clamp(span, 1.0, 8.0);
  hm.value_min = -span, hm.value_max = span;  // centred: blue under-, orange over-attended
  html.AddTable({"class", "mean ratio over heads", "largest ratio", "at head (layer.head)"}, rows,
                "Attention received / uniform share, by token class.");
  html.AddFigure(report::RenderHeatmap(hm),
                 "Every head's ratio on a log2 scale (0: as uniform; blue: less, orange: more).");
}

void WriteReport(const AnalyzeOptions& o, const CliModel& m, const std::string& text_name,
                 const AnalysisResult& r, const AnalysisOptions& ao,
                 const report::AttentionViewBuilder* view) {
  const ModelConfig& c = r.config;
  const int64_t L = c.n_layer, H = c.n_head;
  std::error_code ec;
  std::filesystem::create_directories(o.out, ec);
  if (ec) throw CommandError("cannot create " + o.out + ": " + ec.message());
  nlohmann::json j = AnalysisToJson(r, ao);
  const std::string sinks_on = LabelSinkKeys(m, r, &j["sinks"]["sink_keys"]);
  const ProbeCurve curve = DefaultModelCurve(o, m);
  if (!curve.points.empty()) j["default_model"] = ProbeCurveJson(curve, m.path + "/train_log.jsonl");
  WriteAttentionView(o, view, j);
  Check(WriteFileAtomically(o.out + "/report.json", j.dump(2) + "\n"));

  // CSV tables.
  report::CsvWriter heads({"layer", "head", "alpha_1", "first_mass_1", "last_key0", "uniform_last",
                           "entropy", "distance", "sink_mass", "previous_token", "induction",
                           "duplicate_token", "key_norm_ratio", "cos_q_key0", "sink_key",
                           "sink_key_excess", "gate_mean", "gate_std", "gate_share_closed",
                           "dormant_share", "output_norm_ratio", "gate_first_mass"});
  for (int64_t l = 0; l < L; ++l) {
    for (int64_t h = 0; h < H; ++h) {
      const AttentionHeadStats& s = r.layers[l].attention.heads[h];
      const auto& pat = r.layers[l].patterns.heads;
      auto d = [&](int i) { return pat.empty() ? NAN : pat[h].diagonal[i]; };
      const auto& gates = r.layers[l].gate;  // empty without an output gate: NaN columns
      auto gate = [&](double GateHeadStats::*f) { return gates.empty() ? NAN : gates[h].*f; };
      const auto& acts = r.layers[l].extreme.heads;  // empty when no window had 2 tokens
      auto act = [&](double HeadActivityStats::*f) { return acts.empty() ? NAN : acts[h].*f; };
      heads.AddNumericRow({double(l), double(h), s.alpha.empty() ? NAN : s.alpha[0],
                           s.first_mass.empty() ? NAN : s.first_mass[0], s.last_key0,
                           s.last_visible ? 1.0 / s.last_visible : NAN, s.entropy, s.distance,
                           s.sink_mass, d(0), d(2), d(1), r.layers[l].geometry[h].key_norm_ratio,
                           r.layers[l].geometry[h].cos_key0, double(r.sink_key[l][h]),
                           r.sink_key_excess[l][h], gate(&GateHeadStats::mean),
                           gate(&GateHeadStats::std), gate(&GateHeadStats::share_closed),
                           act(&HeadActivityStats::dormant_share),
                           act(&HeadActivityStats::output_norm_ratio),
                           gates.empty() ? NAN : act(&HeadActivityStats::gated_first_mass)});
    }
  }
  Check(heads.WriteTo(o.out + "/heads.csv"));
  report::CsvWriter layers({"depth", "relative_residual", "mean_cosine", "mad", "dirichlet_relative",
                            "effective_rank", "massive_ratio", "residual_peak_ratio",
                            "value_drain_mean"});
  auto add_depth = [&](int64_t d, const StreamMetrics& s, const ExtremeTokens* x) {
    double drain = NAN;
    if (x && x->windows > 0) {
      drain = 0;
      for (double v : x->value_drain) drain += v / static_cast<double>(x->value_drain.size());
    }
    layers.AddNumericRow({double(d), s.relative_residual, s.mean_cosine, s.mad,
                          s.dirichlet_relative, s.erank, s.massive.ratio,
                          x && x->windows > 0 ? x->residual_peak.ratio : NAN, drain});
  };
  add_depth(0, r.embedding, nullptr);
  for (int64_t l = 0; l < L; ++l) add_depth(l + 1, r.layers[l].output, &r.layers[l].extreme);
  Check(layers.WriteTo(o.out + "/layers.csv"));
  if (r.token_classes) {
    report::CsvWriter cls({"layer", "head", "class", "mass", "uniform", "ratio"});
    for (int64_t l = 0; l < L; ++l) {
      const TokenClassStats& t = r.layers[l].token_classes;
      for (int64_t h = 0; h < static_cast<int64_t>(t.mass.size()); ++h) {
        for (int c = 0; c < kNumTokenClasses; ++c) {
          const double u = t.uniform[h][c];
          cls.AddRow({std::to_string(l), std::to_string(h), TokenClassName(c),
                      Fmt(t.mass[h][c], "%.6g"), Fmt(u, "%.6g"),
                      u > 0 ? Fmt(t.mass[h][c] / u, "%.6g") : std::string("nan")});
        }
      }
    }
    Check(cls.WriteTo(o.out + "/token_classes.csv"));
  }

  // The answer at a glance (the verdict's wording lives with its rule, in analysis.cc).
  const double last_mean = MeanLastKey0(r), uniform = MeanLastUniform(r);
  const std::string sink_text = SinkVerdictText(r, ao.sink_eps);
  const double res0 = r.embedding.relative_residual, resL = r.layers.back().output.relative_residual;
  const double cos0 = r.embedding.mean_cosine, cosL = r.layers.back().output.mean_cosine;
  const std::string collapse_text =
      "Token uniformity: relative residual " + Fmt(res0) + " at the embedding, " + Fmt(resL) +
      " after the last layer; mean token cosine " + Fmt(cos0) + " -> " + Fmt(cosL) +
      (resL < 0.05 ? " (collapsed: the tokens' representations are nearly identical)." : " (no rank collapse).");

  report::HtmlReport html("Attention analysis: " + m.path);
  html.SetSubtitle(std::to_string(r.text_tokens) + " tokens of " + text_name + " in " +
                   std::to_string(r.windows) + " window(s) of " + std::to_string(r.window) +
                   "; " + std::to_string(L) + " layers x " + std::to_string(H) + " heads");
  html.SetSummary(sink_text + (sinks_on.empty() ? "" : " " + sinks_on) + " " + collapse_text);
  {
    const AttentionHeadStats* best = StrongestHead(r, nullptr, nullptr);
    html.AddSummaryFact("sink heads (excess > " + Fmt(ao.sink_eps, "%.2f") + ")",
                        r.sink_verdict ? std::to_string(r.sink_heads.size()) + " of " +
                                             std::to_string(L * H)
                                       : "text too short");
    html.AddSummaryFact("max alpha_1", (best ? Fmt(best->alpha[0]) : "n/a") + " vs uniform " +
                                           Fmt(r.alpha_1_uniform));
  }
  html.AddSummaryFact("last query on token 0", Fmt(last_mean) + " vs uniform " + Fmt(uniform, "%.4f"));
  html.AddSummaryFact("relative residual (last layer)", Fmt(resL));

  html.AddSection("sinks", "Attention sinks");
  html.AddParagraph(
      "alpha_1 is the average attention every query gives token 0 (Gu et al. 2024). Uniform "
      "attention over the same rows would give alpha_1 = " + Fmt(r.alpha_1_uniform) +
      " (H_T / T for causal windows of T tokens), so a head is called a sink when its excess over "
      "that baseline, (alpha_1 - u) / (1 - u), exceeds eps = " + Fmt(ao.sink_eps, "%.2f") +
      " (Gu et al.'s alpha_1 > eps at long lengths, where u -> 0). Gu et al.'s own Sink_1 (alpha_1 > "
      "eps) is " + Fmt(100 * r.sink_rate_1, "%.1f") + "%. The second map is GPT-2's last-token "
      "attention to token 0 (Xiao et al. 2023; Gu et al. 2024): the last query of the last "
      "full-length window, against the uniform share 1/n.");
  html.AddFigure(report::RenderHeatmap(HeadMap(r, "alpha_1: attention received by token 0", "alpha_1",
                                               [](const LayerAnalysis& la, int64_t h) {
                                                 const auto& a = la.attention.heads[h].alpha;
                                                 return a.empty() ? NAN : a[0];
                                               })),
                 "Layer x head: mean attention on the first token.", "fig-alpha1");
  html.AddFigure(report::RenderHeatmap(HeadMap(r, "Last query's attention on token 0", "probability",
                                               [](const LayerAnalysis& la, int64_t h) {
                                                 return la.attention.heads[h].last_key0;
                                               })),
                 "Layer x head: the last query row (uniform would be " + Fmt(uniform, "%.4f") + ").",
                 "fig-last-row");
  {
    std::vector<std::vector<std::string>> rows;
    std::vector<std::tuple<double, int64_t, int64_t>> order;
    for (int64_t l = 0; l < L; ++l) {
      for (int64_t h = 0; h < H; ++h) {
        const auto& a = r.layers[l].attention.heads[h].alpha;
        order.push_back({a.empty() ? 0 : a[0], l, h});
      }
    }
    std::sort(order.rbegin(), order.rend());
    for (size_t i = 0; i < order.size() && i < 10; ++i) {
      auto [a, l, h] = order[i];
      const AttentionHeadStats& s = r.layers[l].attention.heads[h];
      const HeadGeometry& g = r.layers[l].geometry[h];
      rows.push_back({std::to_string(l), std::to_string(h), Fmt(a), Fmt(SinkExcess(s)),
                      Fmt(s.last_key0), Fmt(s.entropy), Fmt(g.key_norm_ratio), Fmt(g.cos_key0),
                      Fmt(g.cos_key_other)});
    }
    html.AddTable({"layer", "head", "alpha_1", "excess over uniform", "last query on token 0", "entropy",
                   "|k_0| / mean |k|", "cos(q, k_0)", "cos(q, other keys)"},
                  rows, "The ten heads that attend most to token 0.");
  }
  AddDefaultModelNote(html, curve);
  if (!r.layers.empty() && r.layers[0].extreme.windows > 0) {
    html.AddParagraph(
        "Extreme tokens (Guo et al. 2024, active-dormant heads): a head is dormant on a window when "
        "its mean weight on token 0 exceeds eps = " + Fmt(ao.sink_eps, "%.2f") + " and its output "
        "norm is below half the layer's mean head output norm, i.e. it parks its attention on the "
        "sink and adds almost nothing. The sink token's value vectors are typically small (value "
        "drain: |v_0| / mean |v_t|) and its residual stream large (residual peak: |h_0| / mean "
        "|h_t|); both per layer in layers.csv, per kv head in report.json.");
    html.AddFigure(report::RenderHeatmap(HeadMap(r, "Dormant heads: share of windows", "share",
                                                 [](const LayerAnalysis& la, int64_t h) {
                                                   return la.extreme.heads.empty()
                                                              ? NAN
                                                              : la.extreme.heads[h].dormant_share;
                                                 })),
                   "Layer x head: share of windows on which the head is dormant.", "fig-dormant");
    std::vector<std::vector<std::string>> rows;
    for (int64_t l = 0; l < L; ++l) {
      const ExtremeTokens& x = r.layers[l].extreme;
      double drain_min = INFINITY, drain_max = -INFINITY;
      for (double v : x.value_drain) drain_min = std::min(drain_min, v), drain_max = std::max(drain_max, v);
      rows.push_back({std::to_string(l), Fmt(x.residual_peak.norm0), Fmt(x.residual_peak.mean_other),
                      Fmt(x.residual_peak.ratio), Fmt(drain_min) + " - " + Fmt(drain_max)});
    }
    html.AddTable({"layer", "|h_0|", "mean |h_t|, t >= 1", "residual peak", "value drain (kv heads)"},
                  rows, "Token 0's residual norm and value norm against the other tokens', per layer.");
  }
  if (r.config.output_gate) {
    html.AddParagraph(
        std::string("The model gates each head's attention output with sigmoid(X W_g + b_g) (") +
        (r.config.gate_elementwise ? "one gate per channel" : "one gate per head") +
        "; Qiu et al. 2025, G1). A gate near 0 lets a head output nothing without parking its "
        "attention on a sink. Mean gate value per head, and its spread (standard deviation over "
        "tokens" + (r.config.gate_elementwise ? " and channels" : "") +
        "); heads.csv and report.json also give the share of gates below 0.1.");
    html.AddFigure(report::RenderHeatmap(HeadMap(r, "Output gate: mean value", "mean gate",
                                                 [](const LayerAnalysis& la, int64_t h) {
                                                   return la.gate.empty() ? NAN : la.gate[h].mean;
                                                 })),
                   "Layer x head: mean output gate.", "fig-gate-mean");
    html.AddFigure(report::RenderHeatmap(HeadMap(r, "Output gate: spread", "std of the gate",
                                                 [](const LayerAnalysis& la, int64_t h) {
                                                   return la.gate.empty() ? NAN : la.gate[h].std;
                                                 })),
                   "Layer x head: standard deviation of the output gate.", "fig-gate-std");
  }

  AddAttentionViewSection(j["attention_view"], r, html);
  AddTokenClassSection(r, ao, html);
  html.AddSection("collapse", "Collapse with depth");
  html.AddParagraph(collapse_text);
  {
    report::XyPlot p;
    p.title = "Token uniformity of the residual stream";
    p.x.label = "depth (0 = embedding)";
    p.y.label = "value";
    p.series = {DepthSeries(r, "relative residual", [](const StreamMetrics& s) { return s.relative_residual; }),
                DepthSeries(r, "mean token cosine", [](const StreamMetrics& s) { return s.mean_cosine; }),
                DepthSeries(r, "MAD", [](const StreamMetrics& s) { return s.mad; }),
                DepthSeries(r, "Dirichlet energy (relative)", [](const StreamMetrics& s) { return s.dirichlet_relative; })};
    p.markers = true;
    html.AddFigure(report::RenderLinePlot(p), "Relative residual (Dong et al. 2021), mean pairwise "
                   "cosine, MAD and relative Dirichlet energy per depth.", "fig-collapse");
    report::XyPlot e;
    e.title = "Effective rank of the residual stream";
    e.x.label = "depth (0 = embedding)";
    e.y.label = "effective rank";
    e.series = {DepthSeries(r, "uncentred", [](const StreamMetrics& s) { return s.erank; }),
                DepthSeries(r, "centred", [](const StreamMetrics& s) { return s.erank_centred; })};
    e.markers = true;
    html.AddFigure(report::RenderLinePlot(e), "Roy & Vetterli's effective rank per depth.", "fig-erank");
  }
  html.AddFigure(report::RenderHeatmap(HeadMap(r, "Normalised attention entropy", "entropy (1 = uniform)",
                                               [](const LayerAnalysis& la, int64_t h) {
                                                 return la.attention.heads[h].entropy;
                                               })),
                 "Layer x head: 1 = uniform attention (collapse), 0 = one key.", "fig-entropy");
  html.AddFigure(report::RenderHeatmap(HeadMap(r, "Mean attention distance", "tokens",
                                               [](const LayerAnalysis& la, int64_t h) {
                                                 return la.attention.heads[h].distance;
                                               })),
                 "Layer x head: how far back each head looks.", "fig-distance");

  html.AddSection("heads", "What the heads do");
  if (!r.layers.empty() && !r.layers[0].patterns.heads.empty()) {
    const char* names[3] = {"previous-token score", "duplicate-token score", "induction score"};
    const char* ids[3] = {"fig-prev", "fig-dup", "fig-induction"};
    for (int i = 0; i < 3; ++i) {
      html.AddFigure(report::RenderHeatmap(HeadMap(r, names[i], "score",
                                                   [i](const LayerAnalysis& la, int64_t h) {
                                                     return la.patterns.heads[h].diagonal[i];
                                                   })),
                     std::string(names[i]) + " on " + std::to_string(ao.pattern_sequences) +
                         " random sequences of " + std::to_string(r.pattern_len) +
                         " tokens repeated twice (TransformerLens' head detector).",
                     ids[i]);
    }
  }
  {
    report::XyPlot p;
    p.title = "Diversity between the heads of each layer";
    p.x.label = "layer";
    p.y.label = "mean over head pairs";
    report::Series jsd{"Jensen-Shannon distance", {}, {}}, cka{"linear CKA of head outputs", {}, {}};
    for (int64_t l = 0; l < L; ++l) {
      double sj = 0, sc = 0;
      int64_t n = 0;
      for (int64_t a = 0; a < H; ++a) {
        for (int64_t b = a + 1; b < H; ++b) {
          const double x = r.layers[l].attention.jsd[a * H + b];
          if (std::isfinite(x)) sj += x;
          sc += r.layers[l].head_cka[a * H + b];
          ++n;
        }
      }
      jsd.x.push_back(l), jsd.y.push_back(n ? sj / n : NAN);
      cka.x.push_back(l), cka.y.push_back(n ? sc / n : NAN);
    }
    p.series = {jsd, cka};
    p.markers = true;
    html.AddFigure(report::RenderLinePlot(p), "High JSD and low CKA: diverse heads; JSD near 0 and "
                   "CKA near 1: redundant heads.", "fig-diversity");
  }

  html.AddSection("massive", "Massive activations");
  {
    std::vector<std::vector<std::string>> rows;
    auto row = [&](const std::string& name, const StreamMetrics& s) {
      rows.push_back({name, Fmt(s.massive.ratio, "%.1f"), Fmt(s.massive.max_abs, "%.2f"),
                      std::to_string(s.massive.max.token), std::to_string(s.massive.max.channel),
                      std::to_string(s.massive.massive_count)});
    };
    row("embedding", r.embedding);
    for (int64_t l = 0; l < L; ++l) row("layer " + std::to_string(l), r.layers[l].output);
    html.AddTable({"residual stream", "max / median", "max |h|", "token", "channel",
                   "massive (Sun et al.)"},
                  rows, "The largest activation of each layer's output and where it sits.");
  }

  if (!r.maps.empty()) {
    html.AddSection("maps", "Attention maps");
    for (const AttentionMap& mp : r.maps) {
      report::Heatmap hm;
      hm.title = "Layer " + std::to_string(mp.layer) + " head " + std::to_string(mp.head);
      hm.rows = mp.len;
      hm.cols = mp.keys;  // one more with a dedicated sink token (key 0)
      hm.values.assign(mp.probs.begin(), mp.probs.end());
      hm.x_label = "key";
      hm.y_label = "query";
      hm.value_label = "attention";
      html.AddFigure(report::RenderHeatmap(hm), "First window, " + std::to_string(mp.len) + " tokens.");
    }
  }

  html.AddSection("run", "Run");
  html.AddKeyValueTable({{"model", m.path + " (" + m.format + ")"},
                         {"text", text_name},
                         {"tokens analysed", std::to_string(r.text_tokens)},
                         {"windows", std::to_string(r.windows) + " x " + std::to_string(r.window) +
                                         (r.bos >= 0 ? " (BOS first)" : "") +
                                         (r.passes > 1 ? ", " + std::to_string(r.passes) +
                                                             " passes each (--stream-budget)"
                                                       : "") +
                                         (r.ranks > 1 ? ", shared by " + std::to_string(r.ranks) +
                                                            " ranks (mpirun)"
                                                      : "")},
                         {"time", Fmt(r.seconds, "%.1f") + " s" + (r.ranks > 1 ? " (the slowest rank)" : "")},
                         {"peak memory", Fmt(r.peak_rss_bytes / 1048576.0, "%.0f") + " MiB" +
                                             (r.ranks > 1 ? " (the largest rank)" : "")},
                         {"definitions", "docs/METRICS.md; JSON schema docs/ANALYZE.md"}});
  Check(html.WriteTo(o.out + "/report.html"));
  if (o.json) {
    nlohmann::ordered_json s;
    s["report"] = o.out + "/report.html";
    s["report_json"] = o.out + "/report.json";
    s["text_tokens"] = r.text_tokens;
    s["sinks_verdict"] = sink_text;
    s["collapse_verdict"] = collapse_text;
    s["sinks"] = j["sinks"];
    s["relative_residual_last_layer"] = JsonNumber(resL);
    s["seconds"] = r.seconds;
    s["peak_rss_bytes"] = r.peak_rss_bytes;
    std::printf("%s\n", s.dump(2).c_str());
  } else {
    std::printf("%s\n%s\n", sink_text.c_str(), collapse_text.c_str());
  }
}

void Run(const AnalyzeOptions& o) {
  CliModel m = LoadCliModel(o.model, o.tokenizer, /*need_tokenizer=*/true);
  const ModelConfig& c = m.gpt->config();
  std::string text_name = "the prompt", text;
  if (!o.prompt.empty() && !o.text.empty()) throw UsageError("give --text or --prompt, not both");
  if (o.prompt.empty()) {
    std::string path = o.text;
    if (path.empty()) {
      path = FindResource(kSampleTextPath);
      if (path.empty()) throw CommandError("no --text given and the bundled sample text was not found");
    }
    text = ReadTextInput(path, "");
    text_name = path;
  } else {
    text = ReadTextInput("", o.prompt);
  }
  auto enc = m.tokenizer->Encode(text);
  Check(enc.status());
  if (enc.value().empty()) throw CommandError("the text has no tokens");
  AnalysisOptions ao;
  ao.window = o.window;
  ao.max_tokens = o.max_tokens;
  ao.plot_max = o.plot_max;
  ao.sink_eps = o.eps;
  ao.plot_heads = ParseHeads(o.plot_heads, c);
  if (TrainedWithBos(m)) ao.bos = *m.tokenizer->bos_id();
  ao.stream_budget_bytes = StreamBudget(o.stream_budget, *m.gpt);
  const int64_t window = o.window > 0 ? o.window : c.context;
  if (!o.prompt.empty() && c.position == PositionEncoding::kLearned &&
      static_cast<int64_t>(enc.value().size()) + (ao.bos >= 0) > c.max_positions()) {
    throw CommandError("the prompt is " + std::to_string(enc.value().size()) +
                       " tokens, longer than the model's " + std::to_string(c.max_positions()) +
                       " learned positions");
  }
  if (window > c.context && c.position != PositionEncoding::kLearned) {
    std::fprintf(stderr, "note: windows of %ld tokens exceed the model's training context of %ld\n",
                 static_cast<long>(window), static_cast<long>(c.context));
  }
  std::optional<report::AttentionViewBuilder> view;
  ao.view_tokens = o.view_tokens;
  ao.classes = o.class_rows > 0;
  ao.class_rows = std::max<int64_t>(1, o.class_rows);
  ao.class_recent = o.class_recent;
  if (ao.classes) {  // each id's text classes, decoded once; the specials
    ao.token_classes.assign(m.tokenizer->vocab_size(), 0);
    for (int32_t id = 0; id < m.tokenizer->vocab_size(); ++id) {
      auto t = m.tokenizer->TokenBytes(id);
      if (t.ok()) ao.token_classes[id] = TokenTextClasses(t.value());
    }
    for (const SpecialToken& sp : m.tokenizer->special_tokens()) {
      if (sp.id >= 0 && sp.id < m.tokenizer->vocab_size()) ao.token_classes[sp.id] = 1u << kClassSpecial;
    }
  }
  ao.view_layer = [&](int64_t l, std::span<const int32_t> ids, std::span<const float> probs) {
    if (!view) {
      std::vector<std::string> texts;
      for (int32_t id : ids) {
        auto t = m.tokenizer->TokenBytes(id);
        texts.push_back(t.ok() ? t.value() : "<" + std::to_string(id) + ">");
      }
      ATTNLAB_ASSIGN_OR_RETURN(auto b, report::AttentionViewBuilder::Create(
                                           std::move(texts), c.n_head, o.view_top_k));
      view.emplace(std::move(b));
    }
    return view->AddLayer(l, probs);
  };
  // Distributed (`mpirun -np P attnlab analyze`, docs/DISTRIBUTED.md): the ranks share the
  // windows and merge their sums; rank 0 writes the report.
  // With --sequence-parallel every window is split across the ranks instead (ring attention;
  // analysis_striped.h).
  dist::Comm& comm = dist::World();
  ao.comm = &comm;
  ao.sequence_parallel = o.sequence_parallel;
  auto r = AnalyzeModel(*m.gpt, enc.value(), ao, /*progress=*/true);
  Check(r.status());
  if (!comm.root()) return;
  WriteReport(o, m, text_name, r.value(), ao, view ? &*view : nullptr);
  if (o.json) return;
  std::printf("analysed %ld tokens in %.1f s, peak memory %.0f MiB\nreport: %s/report.html\n",
              static_cast<long>(r.value().text_tokens), r.value().seconds,
              r.value().peak_rss_bytes / 1048576.0, o.out.c_str());
}

}  // namespace

void RegisterAnalyzeCommand(CLI::App& app) {
  auto o = std::make_shared<AnalyzeOptions>();
  CLI::App* cmd = app.add_subcommand(
      "analyze", "Attention sinks and collapse of a model on a text, with a report (no N x N maps)");
  AddModelOptions(cmd, &o->model, &o->tokenizer);
  cmd->add_option("--text", o->text, "text file (default: the bundled sample)");
  cmd->add_option("--prompt", o->prompt, "a text given on the command line instead");
  cmd->add_option("--out", o->out, "report directory (analysis)");
  cmd->add_option("--window", o->window, "tokens per window (default: the model's context)")
      ->check(CLI::Range(int64_t{2}, int64_t{1} << 24));
  cmd->add_option("--max-tokens", o->max_tokens, "analyse at most the first N tokens (default: all)")
      ->check(CLI::PositiveNumber);
  cmd->add_flag("--json", o->json, "print the verdicts and the sink numbers as JSON");
  cmd->add_flag("--sequence-parallel", o->sequence_parallel,
                "under mpirun: split every window across the ranks (ring attention, token t on "
                "rank t mod P) instead of sharing the windows; the same report (docs/DISTRIBUTED.md)");
  cmd->add_option("--stream-budget", o->stream_budget,
                  "MiB for one window's per-layer streams; more layers cost extra passes over "
                  "the window (auto: a quarter of the weights' bytes, at least 128; 0: one pass)");
  cmd->add_option("--plot-heads", o->plot_heads, "full attention maps for LAYER.HEAD,...");
  cmd->add_option("--plot-max", o->plot_max, "largest window for full maps (512)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--view-tokens", o->view_tokens,
                  "tokens of the first window in the attention view, DIR/attention.html (256; "
                  "0: no view; at most 2048: each layer's H x N x N map is built in memory)")
      ->check(CLI::Range(int64_t{0}, int64_t{2048}));
  cmd->add_option("--view-top-k", o->view_top_k, "strongest keys per query kept in the view (8)")
      ->check(CLI::Range(int64_t{1}, int64_t{64}));
  cmd->add_option("--class-rows", o->class_rows,
                  "query rows sampled per window and layer for attention by token class "
                  "(512; 0: not computed)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 24));
  cmd->add_option("--class-recent", o->class_recent,
                  "positions up to the query that count as recent (4)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  cmd->add_option("--eps", o->eps, "sink threshold on alpha_1's excess over uniform attention (0.3, Gu et al.)")
      ->check(CLI::Range(0.0, 1.0));
  cmd->callback([o] { Run(*o); });
}

}  // namespace attnlab::cli
