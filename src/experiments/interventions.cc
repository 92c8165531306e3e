// interventions: what happens to a trained model's loss when the extreme tokens it relies on are
// taken away at inference? Two interventions of the sink literature, on the model and text of
// experiments/model_source.h (the default model and data/sample.txt unless --data):
//
//   1. Remove the BOS (Barbero et al. 2025, "Why do LLMs attend to the first token?",
//      arXiv:2504.02732: the first token lets heads avoid over-mixing; a model trained with it
//      depends on it). Each window is scored twice on exactly the same targets (the text tokens
//      after the first, each predicted from the same text before it): as trained, with the BOS
//      first, and with the BOS removed (positions shift by one; RoPE is relative).
//   2. Ablate the massive activation (Sun et al. 2024, "Massive Activations in Large Language
//      Models", arXiv:2402.17762: setting the massive activations to zero destroys the model,
//      setting them to their mean value leaves it intact, so they act as fixed biases). A
//      calibration pass over the windows records, at every layer's output (the residual stream,
//      blocks.l.hook_resid_post), each channel's largest |h|; the massive dimension (l*, c*) is
//      the one whose largest |h| is largest against its layer's mean |h|. Its massive entries
//      are those with |h| above half that largest value; they are set to 0 (zero ablation) or to
//      their mean over the calibration pass (mean ablation), and the loss is measured again.
//
// Gu et al.'s learnable key bias with a zero value (arXiv:2410.10781) needs training with a new
// attention parameter; it is not here (docs/EXPERIMENTS.md).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <string>
#include <vector>

#include "core/json_number.h"
#include "experiments/experiment.h"
#include "experiments/experiment_report.h"
#include "experiments/model_source.h"
#include "model/forward_hooks.h"
#include "report/svg_plot.h"

namespace attnlab::experiments {
namespace {

constexpr char kName[] = "interventions";

struct Sizes {
  int64_t windows;  // at most
  int64_t window;   // tokens (0: the model's context)
};
Sizes SizesFor(bool quick) { return quick ? Sizes{4, 128} : Sizes{1000, 0}; }

// At every layer's output: records each channel's largest |h| and the layer's sum of |h|, or
// replaces the massive entries of one (layer, channel) by a constant (recording their mean).
class ResidualHook : public ForwardHooks {
 public:
  explicit ResidualHook(int64_t layers, int64_t channels)
      : C_(channels), max_(layers * channels, 0.0), abs_sum_(layers, 0.0), count_(layers, 0) {}

  void Ablate(int64_t layer, int64_t channel, double threshold, float value) {
    ablate_ = true, layer_ = layer, channel_ = channel, threshold_ = threshold, value_ = value;
  }

  bool Wants(HookPoint p, int64_t) const override { return p == HookPoint::kResidPost; }

  Status OnHook(const HookTensor& t) override {
    const int64_t rows = t.size() / C_;
    if (ablate_) {
      if (t.layer != layer_) return Status::Ok();
      for (int64_t r = 0; r < rows; ++r) {
        float& x = t.data[r * C_ + channel_];
        if (std::abs(x) > threshold_) x = value_, ++ablated_;
      }
      return Status::Ok();
    }
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < C_; ++c) {
        const double a = std::abs(static_cast<double>(t.data[r * C_ + c]));
        max_[t.layer * C_ + c] = std::max(max_[t.layer * C_ + c], a);
        abs_sum_[t.layer] += a;
      }
    }
    count_[t.layer] += rows * C_;
    return Status::Ok();
  }

  // After a recording pass: the (layer, channel) with the largest max |h| / layer mean |h|.
  void Massive(int64_t* layer, int64_t* channel, double* max_abs, double* ratio) const {
    *ratio = -1;
    for (size_t l = 0; l < abs_sum_.size(); ++l) {
      const double mean = count_[l] ? abs_sum_[l] / static_cast<double>(count_[l]) : 0.0;
      for (int64_t c = 0; c < C_; ++c) {
        const double r = mean > 0 ? max_[l * C_ + c] / mean : 0.0;
        if (r > *ratio) *ratio = r, *layer = static_cast<int64_t>(l), *channel = c, *max_abs = max_[l * C_ + c];
      }
    }
  }

  int64_t ablated() const { return ablated_; }

 private:
  int64_t C_;
  std::vector<double> max_, abs_sum_;
  std::vector<int64_t> count_;
  bool ablate_ = false;
  int64_t layer_ = 0, channel_ = 0, ablated_ = 0;
  double threshold_ = 0;
  float value_ = 0;
};

// Records the mean of the massive entries of (layer, channel) (|h| > threshold) without changing
// anything.
class EntryMeanHook : public ForwardHooks {
 public:
  EntryMeanHook(int64_t channels, int64_t layer, int64_t channel, double threshold)
      : C_(channels), layer_(layer), channel_(channel), threshold_(threshold) {}
  bool Wants(HookPoint p, int64_t l) const override { return p == HookPoint::kResidPost && l == layer_; }
  Status OnHook(const HookTensor& t) override {
    const int64_t Tm = t.shape[1];  // [B, Tm, C]
    for (int64_t r = 0; r < t.size() / C_; ++r) {
      const double x = t.data[r * C_ + channel_];
      if (std::abs(x) > threshold_) sum_ += x, ++n_, n_first_ += r % Tm == 0;
    }
    return Status::Ok();
  }
  double mean() const { return n_ ? sum_ / static_cast<double>(n_) : 0.0; }
  int64_t count() const { return n_; }
  int64_t on_first() const { return n_first_; }  // of them at position 0

 private:
  int64_t C_, layer_, channel_;
  double threshold_, sum_ = 0;
  int64_t n_ = 0, n_first_ = 0;
};

struct Measured {
  Source src;
  int64_t T = 0, windows = 0;
  double base = NAN, base_hooked = NAN;  // as trained; with a recording hook (must be equal)
  double no_bos = NAN;                   // NaN when the model has no BOS
  int64_t layer = -1, channel = -1, entries = 0, entries_first = 0;
  double max_abs = 0, ratio = 0, entry_mean = 0;
  double zero = NAN, mean = NAN;
  double seconds_per_pass = 0;
};

// The same windows scored with the BOS (target 0, the first text token, not scored: without the
// BOS it has no context) and without it.
void WithAndWithoutBos(const std::vector<Window>& ws, std::vector<Window>* with,
                       std::vector<Window>* without) {
  for (const Window& w : ws) {
    Window a = w;
    a.y[0] = -1;
    with->push_back(a);
    Window b;
    b.x.assign(w.x.begin() + 1, w.x.end());
    b.y.assign(w.y.begin() + 1, w.y.end());
    without->push_back(std::move(b));
  }
}

Result<Measured> Measure(const ExperimentOptions& o) {
  Measured m;
  const Sizes sz = SizesFor(o.quick);
  ATTNLAB_ASSIGN_OR_RETURN(m.src, LoadSource(o));
  Gpt& g = *m.src.g;
  const ModelConfig& c = g.config();
  m.T = sz.window > 0 ? std::min<int64_t>(sz.window, c.context) : c.context;
  std::vector<Window> ws = MakeWindows(m.src.ids, m.src.bos, m.T);
  if (static_cast<int64_t>(ws.size()) > sz.windows) ws.resize(sz.windows);
  if (ws.empty()) return Status::InvalidArgument("the text is shorter than one window");
  m.windows = static_cast<int64_t>(ws.size());
  Progress(o, kName, "model %s (%s): %lld layers; %s: %lld windows of %lld tokens",
           m.src.model.c_str(), m.src.model_kind.c_str(), static_cast<long long>(c.n_layer),
           m.src.text.c_str(), static_cast<long long>(m.windows), static_cast<long long>(m.T));
  std::vector<Window> with = ws, without;
  if (m.src.bos >= 0) {
    with.clear();
    WithAndWithoutBos(ws, &with, &without);
  }
  const auto t0 = std::chrono::steady_clock::now();
  ATTNLAB_ASSIGN_OR_RETURN(m.base, MeanLoss(g, with));
  m.seconds_per_pass = SecondsSince(t0);
  if (m.src.bos >= 0) {
    ATTNLAB_ASSIGN_OR_RETURN(m.no_bos, MeanLoss(g, without));
    Progress(o, kName, "BOS: loss %.4f with, %.4f without (%+.4f)", m.base, m.no_bos, m.no_bos - m.base);
  }
  // Calibration: the massive dimension, then its entries' mean.
  ResidualHook rec(c.n_layer, c.d_model);
  g.set_hooks(&rec);
  Result<double> hooked = MeanLoss(g, with);
  g.set_hooks(nullptr);
  ATTNLAB_RETURN_IF_ERROR(hooked.status());
  m.base_hooked = hooked.value();
  rec.Massive(&m.layer, &m.channel, &m.max_abs, &m.ratio);
  const double threshold = 0.5 * m.max_abs;
  EntryMeanHook em(c.d_model, m.layer, m.channel, threshold);
  g.set_hooks(&em);
  hooked = MeanLoss(g, with);
  g.set_hooks(nullptr);
  ATTNLAB_RETURN_IF_ERROR(hooked.status());
  m.entry_mean = em.mean();
  m.entries = em.count();
  m.entries_first = em.on_first();
  Progress(o, kName, "massive dimension: layer %lld channel %lld, max |h| %.2f = %.1fx the layer's "
           "mean |h|; %lld entries above %.2f (%lld at position 0), mean %.3f",
           static_cast<long long>(m.layer), static_cast<long long>(m.channel), m.max_abs, m.ratio,
           static_cast<long long>(m.entries), threshold, static_cast<long long>(m.entries_first),
           m.entry_mean);
  for (const bool zero : {true, false}) {
    ResidualHook ab(c.n_layer, c.d_model);
    ab.Ablate(m.layer, m.channel, threshold, zero ? 0.0f : static_cast<float>(m.entry_mean));
    g.set_hooks(&ab);
    hooked = MeanLoss(g, with);
    g.set_hooks(nullptr);
    ATTNLAB_RETURN_IF_ERROR(hooked.status());
    (zero ? m.zero : m.mean) = hooked.value();
    Progress(o, kName, "%s ablation: loss %.4f (%+.4f), %lld entries", zero ? "zero" : "mean",
             hooked.value(), hooked.value() - m.base, static_cast<long long>(ab.ablated()));
  }
  return m;
}

Status AddChecks(const Measured& m, ExperimentResult& r) {
  const bool finite = std::isfinite(m.base) && std::isfinite(m.zero) && std::isfinite(m.mean) &&
                      (m.src.bos < 0 || std::isfinite(m.no_bos));
  r.AddCheck("every loss is finite", finite,
             "base " + Fmt(m.base, "%.4f") + ", no BOS " + Fmt(m.no_bos, "%.4f") + ", zero " +
                 Fmt(m.zero, "%.4f") + ", mean " + Fmt(m.mean, "%.4f"));
  r.AddCheck("a hook that changes nothing leaves the loss bit-identical", m.base_hooked == m.base,
             Fmt(m.base_hooked, "%.9f") + " vs " + Fmt(m.base, "%.9f"));
  r.AddCheck("the massive dimension has entries to ablate", m.entries > 0,
             std::to_string(m.entries) + " entries above half of max |h| = " + Fmt(m.max_abs, "%.3f"));
  return Status::Ok();
}

Status AddClaims(const Measured& m, ExperimentResult& r) {
  if (m.src.bos >= 0) {
    r.AddClaim("removing the BOS at inference hurts a model trained with it",
               "Barbero et al. 2025 (arXiv:2504.02732)",
               "the loss on the same targets rises without the BOS",
               "loss " + Fmt(m.base, "%.4f") + " with, " + Fmt(m.no_bos, "%.4f") + " without (" +
                   Fmt(m.no_bos - m.base, "%+.4f") + " nats)",
               m.no_bos > m.base);
  }
  const double dz = m.zero - m.base, dm = m.mean - m.base;
  r.AddClaim("zeroing the massive activation breaks the model; its mean does not",
             "Sun et al. 2024 (arXiv:2402.17762)",
             "zero ablation raises the loss by >= 0.1 nats, mean ablation by at most a tenth of that",
             "layer " + std::to_string(m.layer) + " channel " + std::to_string(m.channel) + " (" +
                 Fmt(m.ratio, "%.1f") + "x the layer's mean |h|): zero " + Fmt(dz, "%+.4f") +
                 ", mean " + Fmt(dm, "%+.4f") + " nats",
             dz >= 0.1 && std::abs(dm) <= 0.1 * dz);
  return Status::Ok();
}

Status AddResults(const Measured& m, ExperimentResult& r) {
  r.results = {{"model", m.src.model}, {"model_kind", m.src.model_kind}, {"text", m.src.text},
               {"windows", m.windows}, {"window", m.T}, {"bos", m.src.bos},
               {"loss", JsonNumber(m.base)},
               {"loss_without_bos", m.src.bos >= 0 ? JsonNumber(m.no_bos) : nlohmann::json(nullptr)},
               {"massive", {{"layer", m.layer}, {"channel", m.channel}, {"max_abs", JsonNumber(m.max_abs)},
                            {"ratio_to_layer_mean", JsonNumber(m.ratio)}, {"entries", m.entries}, {"entries_at_position_0", m.entries_first},
                            {"entry_mean", JsonNumber(m.entry_mean)}}},
               {"loss_zero_ablation", JsonNumber(m.zero)},
               {"loss_mean_ablation", JsonNumber(m.mean)}};
  return Status::Ok();
}

Status AddSummary(const Measured& m, ExperimentResult& r) {
  r.summary = "On " + m.src.model + " (" + std::to_string(m.windows) + " windows of " +
              std::to_string(m.T) + " tokens): loss " + Fmt(m.base, "%.4f") +
              (m.src.bos >= 0 ? "; without the BOS " + Fmt(m.no_bos, "%.4f") + " (" +
                                    Fmt(m.no_bos - m.base, "%+.4f") + " nats)"
                              : std::string("; the model has no BOS")) +
              ". Largest activation: layer " + std::to_string(m.layer) + ", channel " +
              std::to_string(m.channel) + ", " + Fmt(m.ratio, "%.1f") +
              "x its layer's mean |h|; zeroing its " + std::to_string(m.entries) +
              " massive entries changes the loss by " + Fmt(m.zero - m.base, "%+.4f") +
              " nats, setting them to their mean by " + Fmt(m.mean - m.base, "%+.4f") + ".";
  return Status::Ok();
}

Status AddHtml(const Measured& m, ExperimentResult& r) {
  r.html = report::HtmlReport("Interventions on extreme tokens");
  r.html.SetSubtitle(m.src.model + " (" + m.src.model_kind + "); " + m.src.text + ": " +
                     std::to_string(m.windows) + " windows of " + std::to_string(m.T) + " tokens");
  r.html.AddSummaryFact("loss as trained", Fmt(m.base, "%.4f"));
  if (m.src.bos >= 0) r.html.AddSummaryFact("without the BOS", Fmt(m.no_bos - m.base, "%+.4f") + " nats");
  r.html.AddSummaryFact("massive entries zeroed / at their mean",
                        Fmt(m.zero - m.base, "%+.4f") + " / " + Fmt(m.mean - m.base, "%+.4f") + " nats");
  r.html.AddSection("interventions", "Loss under each intervention");
  std::vector<std::vector<std::string>> rows = {{"none (as trained)", Fmt(m.base, "%.4f"), "0", ""}};
  if (m.src.bos >= 0) {
    rows.push_back({"BOS removed", Fmt(m.no_bos, "%.4f"), Fmt(m.no_bos - m.base, "%+.4f"),
                    "same targets, the same text before each"});
  }
  const std::string where = "layer " + std::to_string(m.layer) + ", channel " + std::to_string(m.channel) +
                            ": " + std::to_string(m.entries) + " entries with |h| > " + Fmt(0.5 * m.max_abs, "%.3g") +
                            " (" + std::to_string(m.entries_first) + " at position 0)";
  rows.push_back({"massive entries set to 0", Fmt(m.zero, "%.4f"), Fmt(m.zero - m.base, "%+.4f"), where});
  rows.push_back({"massive entries set to their mean (" + Fmt(m.entry_mean, "%.3g") + ")", Fmt(m.mean, "%.4f"),
                  Fmt(m.mean - m.base, "%+.4f"), where});
  r.html.AddTable({"intervention", "loss (nats/token)", "change", "what"}, rows,
                  "Mean cross-entropy over the same scored targets in every row.");
  report::BarChart bc;
  bc.title = "Loss change per intervention";
  bc.y.label = "nats / token against the model as trained";
  report::BarSeries d{"loss change", {}};
  if (m.src.bos >= 0) bc.categories.push_back("BOS removed"), d.values.push_back(m.no_bos - m.base);
  bc.categories.push_back("massive -> 0"), d.values.push_back(m.zero - m.base);
  bc.categories.push_back("massive -> mean"), d.values.push_back(m.mean - m.base);
  bc.series = {d};
  r.html.AddFigure(report::RenderBarChart(bc), "The same numbers as the table.", "fig-loss-change");
  AddSetupSection(r.html, {
      "Scored targets: every text token after the first of each window (the first has no text "
      "before it once the BOS is removed).",
      "Massive dimension: at each layer's output (blocks.l.hook_resid_post), each channel's largest "
      "|h| over the windows against the layer's mean |h|; the largest ratio wins. Its massive "
      "entries: |h| above half that largest value (Sun et al. 2024 ablate the few massive entries, "
      "not the whole channel).",
  });
  return Status::Ok();
}

Result<ExperimentResult> RunInterventions(const ExperimentOptions& o) {
  ATTNLAB_ASSIGN_OR_RETURN(const Measured m, Measure(o));
  return AssembleReport<Measured>(m, {AddChecks, AddClaims, AddResults, AddSummary, AddHtml});
}

}  // namespace

Experiment InterventionsExperiment() {
  return {kName,
          "interventions on extreme tokens: remove the BOS (Barbero et al. 2025), zero vs mean "
          "ablation of the massive activation (Sun et al. 2024)",
          RunInterventions};
}

}  // namespace attnlab::experiments
