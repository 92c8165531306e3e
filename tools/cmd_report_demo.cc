// `attnlab report-demo --out DIR [--date TEXT]`: a hidden command that writes a sample report
// with every element the report layer offers, from synthetic (made-up, deterministic) data:
//   DIR/report.html   summary box, sections, tables, line plots (log axes), heatmaps (small, as
//                     rects with tooltips; 256 x 256, as an embedded PNG), grouped bars, scatter,
//                     and model-like text that needs escaping (markup, invalid UTF-8)
//   DIR/report.json   the report's outline (section and figure ids) and the demo's key numbers
//   DIR/sink_map.csv  the layer x head table behind the first heatmap
// tests/report_chromium_test.py renders it in headless Chromium. --date fixes the footer's date
// so that two runs give the same bytes.
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "commands.h"
#include "report/csv.h"
#include "report/escape.h"
#include "report/format_number.h"
#include "report/html_report.h"
#include "report/json_file.h"
#include "report/svg_plot.h"

namespace attnlab::cli {
namespace {

using namespace attnlab::report;  // NOLINT: this file is all about the report layer

struct DemoOptions {
  std::string out, date;
};

// A uniform double in [0, 1) from (a, b): splitmix64 of the pair. Platform-independent, unlike
// std::uniform_real_distribution.
double Hash01(uint64_t a, uint64_t b) {
  uint64_t z = a * 0x9E3779B97F4A7C15ull + b + 0x632BE59BD9B4E5ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return static_cast<double>(z >> 11) * 0x1.0p-53;
}

constexpr int kLayers = 12, kHeads = 12;

// Made-up "last query's attention on token 0" per (layer, head): layers 0-1 spread their
// attention, later layers mostly sink into token 0, a few heads stay local.
std::vector<double> SinkValues() {
  std::vector<double> v(kLayers * kHeads);
  for (int l = 0; l < kLayers; ++l) {
    for (int h = 0; h < kHeads; ++h) {
      const double u = Hash01(l, h);
      v[l * kHeads + h] = l < 2 ? 0.01 + 0.08 * u : (u < 0.12 ? 0.05 * u : 0.45 + 0.5 * u);
    }
  }
  return v;
}

void Run(const DemoOptions& o) {
  std::error_code ec;
  std::filesystem::create_directories(o.out, ec);
  if (ec) throw CommandError("cannot create " + o.out + ": " + ec.message());

  HtmlReport r("attnlab report demo: attention sinks in a made-up model");
  if (!o.date.empty()) r.SetDate(o.date);
  r.SetSubtitle(
      "Synthetic data, generated to exercise every element of the report layer. "
      "No model was run.");

  const std::vector<double> sinks = SinkValues();
  int sink_heads = 0;
  double last_layer_mean = 0;
  for (int i = 0; i < kLayers * kHeads; ++i) sink_heads += sinks[i] > 0.3;
  for (int h = 0; h < kHeads; ++h) last_layer_mean += sinks[(kLayers - 1) * kHeads + h] / kHeads;
  const int context = 1024;

  r.SetSummary(
      "Most heads from layer 2 on send most of the last query's attention to token 0 "
      "(an attention sink); layers 0 and 1 do not.");
  r.AddSummaryFact("heads with a sink (A[T-1, 0] > 0.3)",
                   std::to_string(sink_heads) + " / " + std::to_string(kLayers * kHeads));
  r.AddSummaryFact("Sink rate",
                   FormatFixed(static_cast<double>(sink_heads) / (kLayers * kHeads), 2));
  r.AddSummaryFact("mean A[T-1, 0], last layer", FormatPercent(last_layer_mean));
  r.AddSummaryFact("uniform would be", FormatPercent(1.0 / context, 2));

  // --- overview ---
  r.AddSection("overview", "Setup");
  r.AddParagraph("A 12-layer, 12-head model reads a " + std::to_string(context) +
                 "-token text; the numbers below are invented for this demo.");
  r.AddKeyValueTable({{"model", "demo-gpt (synthetic)"},
                      {"layers x heads", "12 x 12"},
                      {"context", std::to_string(context) + " tokens"},
                      {"eps for Sink_1", "0.3"},
                      {"tokenizer", "GPT-2 BPE"}});
  r.AddNote(
      "Model text is shown as text: <script>alert(\"not run\")</script>, & and a "
      "half character \xE2\x82 and a stray byte \xFF are all escaped or replaced.");

  // --- sink map ---
  r.AddSection("sink-map", "Attention on the first token, by layer and head");
  Heatmap map;
  map.title = "A[T-1, 0]: the last query's attention on token 0";
  map.rows = kLayers;
  map.cols = kHeads;
  map.values = sinks;
  map.x_label = "head";
  map.y_label = "layer";
  map.value_label = "attention on token 0";
  for (int l = 0; l < kLayers; ++l) map.row_labels.push_back("L" + std::to_string(l));
  map.value_min = 0;
  map.value_max = 1;
  r.AddFigure(RenderHeatmap(map),
              "Each cell is one head; hover for its value. Sinks are yellow (colour map: viridis).",
              "fig-sink-map");
  CsvWriter csv({"layer", "head", "attention_on_token0"});
  for (int l = 0; l < kLayers; ++l) {
    for (int h = 0; h < kHeads; ++h) {
      csv.AddRow({std::to_string(l), std::to_string(h), FormatShortest(sinks[l * kHeads + h])});
    }
  }
  Check(csv.WriteTo(o.out + "/sink_map.csv"));

  // --- entropy and length ---
  r.AddSection("entropy", "Attention entropy and context length");
  XyPlot entropy;
  entropy.title = "Normalised attention entropy by query position";
  entropy.x = {"query position", ScaleType::kLog10, {}, {}};
  entropy.y = {"normalised entropy", ScaleType::kLinear, 0.0, 1.05};
  for (int layer : {0, 3, 6, 11}) {
    Series s;
    s.name = "layer " + std::to_string(layer);
    for (int i = 0; i <= 120; ++i) {
      const double t = std::round(std::pow(2.0, 12.0 * i / 120));
      const double depth = layer / 11.0;
      s.x.push_back(t);
      s.y.push_back(0.95 - depth * 0.8 * std::log2(t) / 12 + 0.02 * (Hash01(layer, i) - 0.5));
    }
    if (layer == 6) s.y[60] = std::numeric_limits<double>::quiet_NaN();  // shows the NaN note
    entropy.series.push_back(std::move(s));
  }
  entropy.reference_lines.push_back({1.0, "uniform"});
  r.AddFigure(RenderLinePlot(entropy),
              "1 = uniform attention over the visible keys, 0 = all attention on one key.",
              "fig-entropy");

  XyPlot length;
  length.title = "Attention on token 0 against context length";
  length.x = {"context length (tokens)", ScaleType::kLog10, {}, {}};
  length.y = {"A[T-1, 0]", ScaleType::kLog10, {}, {}};
  length.markers = true;
  Series sink{"with a sink (layer 6)", {}, {}}, none{"softmax1, no sink (layer 6)", {}, {}},
      uniform{"uniform, 1/N", {}, {}};
  for (int k = 4; k <= 15; ++k) {
    const double n = std::pow(2.0, k);
    sink.x.push_back(n);
    sink.y.push_back(0.62 - 0.01 * (k - 4));
    none.x.push_back(n);
    none.y.push_back(2.0 / std::pow(n, 0.9));
    uniform.x.push_back(n);
    uniform.y.push_back(1.0 / n);
  }
  length.series = {sink, none, uniform};
  r.AddFigure(RenderLinePlot(length), "Both axes are logarithmic.", "fig-sink-vs-length");

  // --- a full attention map ---
  r.AddSection("attention-map", "One head's attention map");
  const int n = 256;
  Heatmap att;
  att.title = "Layer 6, head 3: A[t, k] (causal)";
  att.rows = att.cols = n;
  att.x_label = "key position k";
  att.y_label = "query position t";
  att.value_label = "attention weight (log scale)";
  att.color_scale = ScaleType::kLog10;
  att.values.assign(n * n, 0.0);
  for (int t = 0; t < n; ++t) {
    double sum = 0;
    for (int k = 0; k <= t; ++k) {
      const double w =
          (k == 0 ? 40.0 : 0.0) + (t - k < 4 ? 8.0 / (1 + t - k) : 0.0) + 0.2 + 0.1 * Hash01(t, k);
      att.values[t * n + k] = w;
      sum += w;
    }
    for (int k = 0; k <= t; ++k) att.values[t * n + k] /= sum;
  }
  r.AddFigure(RenderHeatmap(att),
              "256 x 256 weights drawn as one embedded image. Grey: masked (future) keys. The "
              "bright first column is the sink, the bright diagonal local attention.",
              "fig-attention-map");

  // --- cache policies ---
  r.AddSection("cache-policies", "KV cache policies on long inputs");
  BarChart bars;
  bars.title = "Perplexity by cache policy and input length";
  bars.categories = {"full cache", "window 1024", "4 sinks + window 1020", "window + recompute"};
  bars.series = {{"2k tokens", {18.2, 19.0, 18.4, 18.3}},
                 {"8k tokens", {17.9, 210.5, 18.1, 18.0}},
                 {"32k tokens", {std::numeric_limits<double>::quiet_NaN(), 540.0, 18.3, 18.1}}};
  bars.x_label = "policy";
  bars.y = {"perplexity", ScaleType::kLog10, {}, {}};
  r.AddFigure(RenderBarChart(bars),
              "Log scale. The full cache did not fit in memory at 32k tokens (no bar).",
              "fig-policies");
  r.AddTable({"policy", "2k tokens", "8k tokens", "32k tokens", "memory at 32k"},
             {{"full cache", "18.2", "17.9", "n/a", "4.5 GiB"},
              {"window 1024", "19.0", "210.5", "540.0", "144 MiB"},
              {"4 sinks + window 1020", "18.4", "18.1", "18.3", "144 MiB"},
              {"window + recompute", "18.3", "18.0", "18.1", "144 MiB"}},
             "Perplexity (lower is better).");

  // --- scatter ---
  r.AddSection("scatter", "Key norm of token 0 against its attention");
  XyPlot scatter;
  scatter.title = "|k_0| and attention on token 0, one point per head";
  scatter.x = {"|k_0| / mean |k|", ScaleType::kLinear, {}, {}};
  scatter.y = {"A[T-1, 0]", ScaleType::kLinear, 0.0, 1.0};
  Series early{"layers 0-1", {}, {}}, late{"layers 2-11", {}, {}};
  for (int l = 0; l < kLayers; ++l) {
    for (int h = 0; h < kHeads; ++h) {
      const double a = sinks[l * kHeads + h];
      Series& s = l < 2 ? early : late;
      s.x.push_back(0.8 + 2.5 * a + 0.4 * Hash01(h, l + 100));
      s.y.push_back(a);
    }
  }
  scatter.series = {early, late};
  scatter.reference_lines.push_back({0.3, "eps = 0.3"});
  r.AddFigure(RenderScatterPlot(scatter), "Heads above the dashed line count as sinks.",
              "fig-scatter");

  // --- tokens ---
  r.AddSection("tokens", "Tokens that receive the most attention");
  r.AddParagraph(
      "Token text is shown exactly, escaped; bytes that are not UTF-8 appear as \xEF\xBF\xBD.");
  const std::vector<std::vector<std::string>> tokens = {
      {"0", "<|endoftext|>", "0.6120", "61.2%"},
      {"17", "\n", "0.0410", "4.1%"},
      {"3", " the", "0.0220", "2.2%"},
      {"42", "<script>alert('x')</script>", "0.0100", "1.0%"},
      {"88", "half a character: \xE2\x82", "0.0050", "0.5%"},
      {"120", "caf\xC3\xA9 \xF0\x9F\x98\x80", "0.0040", "0.4%"}};
  std::vector<std::vector<std::string>> shown = tokens;
  for (auto& row : shown) row[1] = VisibleToken(row[1]);
  r.AddTable({"position", "token", "attention received", "share"}, shown,
             "Whitespace made visible: \u2423 space, \u21B5 newline.");
  r.AddCode("attnlab report-demo --out " + o.out);

  Check(r.WriteTo(o.out + "/report.html"));
  nlohmann::json j = {{"report", r.Outline()},
                      {"files", {"report.html", "report.json", "sink_map.csv"}},
                      {"demo",
                       {{"sink_heads", sink_heads},
                        {"heads", kLayers * kHeads},
                        {"last_layer_mean", last_layer_mean}}}};
  Check(WriteJsonFile(o.out + "/report.json", j));
  std::printf("wrote %s/report.html, report.json, sink_map.csv\n", o.out.c_str());
}

}  // namespace

void RegisterReportDemoCommand(CLI::App& app) {
  auto o = std::make_shared<DemoOptions>();
  CLI::App* cmd = app.add_subcommand("report-demo", "Write a sample report (for tests)");
  cmd->group("");  // hidden from --help
  cmd->add_option("--out", o->out, "output directory")->required();
  cmd->add_option("--date", o->date, "date shown in the footer (default: now, UTC)");
  cmd->callback([o] { Run(*o); });
}

}  // namespace attnlab::cli
