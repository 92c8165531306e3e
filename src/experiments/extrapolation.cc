// extrapolation: a RoPE model trained at context length L, evaluated at 2L, 4L and 8L with no
// scaling, with position interpolation (without and with a short fine-tune), with NTK-aware
// scaling and with YaRN. How far does plain RoPE's perplexity rise past L, and how much of that
// rise does each method recover?
//
// One small pre-LN GPT with RoPE (base 10000, full rotary) is trained at length L on byte tokens
// of the Brown corpus (held-out documents for validation), or on --data DIR made by `attnlab
// prepare`. Its weights are then copied into models with a longer context and another RoPE
// scaling (experiments/extrapolation_eval.h; a RoPE model has no position table, so nothing else
// changes) and scored on the same validation tokens cut into non-overlapping windows of n = L,
// 2L, 4L, 8L tokens, with the loss at every position of the window (where it breaks). For a
// window of n tokens every scaling uses the factor s = n / L (rope.h defines them):
//   none      plain RoPE, positions past L never seen in training;
//   PI        position interpolation, theta_i / s (Chen et al. 2023, arXiv:2306.15595), as is;
//   NTK       NTK-aware base change base * s^(d/(d-2)) (bloc97 2023, reddit r/LocalLLaMA);
//   YaRN      per-frequency ramp between interpolation and extrapolation plus the logit
//             temperature 0.1 ln s + 1 (Peng et al. 2023, arXiv:2309.00071), original context L;
//   PI + FT   PI after a short fine-tune at length n with factor n / L (Chen et al.'s recipe);
//   none + FT the control: the same fine-tune (same batches, steps, learning rate) without
//             interpolation, i.e. plain RoPE trained at n (Chen et al.'s "direct fine-tuning").
// Each fine-tuned model (one per length 2L, 4L, 8L and per kind) is also scored at every other
// length, with its own factor. The recovery of a method at length n is
// (ppl_none(n) - ppl_method(n)) / (ppl_none(n) - ppl_none(L)): 1 = back to the perplexity at the
// training length, 0 = no better than plain RoPE, < 0 = worse.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <numbers>
#include <string>
#include <vector>

#include "experiments/experiment.h"
#include "experiments/experiment_data.h"
#include "experiments/experiment_report.h"
#include "experiments/extrapolation_eval.h"
#include "report/svg_plot.h"
#include "train/trainer.h"

namespace attnlab::experiments {
namespace {

constexpr char kName[] = "extrapolation";
constexpr int64_t kMults[] = {1, 2, 4, 8};  // evaluation lengths in units of L
constexpr int kLens = 4;
// A claim that a fine-tuned PI model keeps its quality at the original length allows this
// relative rise of perplexity at L (Chen et al. report a "minor" degradation; the number is ours).
constexpr double kKeepQuality = 0.05;
// The check that plain RoPE breaks past L: its loss at 4L or 8L exceeds the loss at L by this
// many nats per token.
constexpr double kBreakMargin = 0.05;

struct Method {
  const char* id;
  const char* label;
  RopeScaling scaling;
  bool fine_tuned;
};
const std::vector<Method>& Methods() {
  static const std::vector<Method> m = {
      {"none", "no scaling", RopeScaling::kNone, false},
      {"pi", "PI, no fine-tune", RopeScaling::kLinear, false},
      {"ntk", "NTK-aware", RopeScaling::kNtk, false},
      {"yarn", "YaRN", RopeScaling::kYarn, false},
      {"pi_ft", "PI + fine-tune", RopeScaling::kLinear, true},
      {"none_ft", "no scaling + fine-tune", RopeScaling::kNone, true},
  };
  return m;
}
enum { kNone, kPi, kNtk, kYarn, kPiFt, kNoneFt, kMethods };

struct Sizes {
  int64_t layers, d_model, heads, L, batch, steps, ft_steps, predicted, bin;
  double lr, ft_lr;
};

// One fine-tuned model: trained at length mult * L, scored at every length.
struct FineTuneRun {
  int method = kPiFt;
  int64_t mult = 2;
  double factor = 1;
  std::vector<double> train_loss;  // per step
  WindowLoss at[kLens];            // at length kMults[k] * L, with this model's factor
  double seconds = 0;
};

// ---- What the report stages read: the base model's scores, the fine-tunes, derived numbers.
struct Measured {
  Sizes s;
  int64_t L = 0, predicted = 0;  // training length; validation tokens scored per evaluation
  double unigram = NAN;
  std::string source;
  ModelConfig config;  // the base model's
  RopeConfig rope;     // its RoPE (YaRN's ramp constants)
  std::chrono::steady_clock::time_point t_start;
  std::vector<double> pretrain_loss;
  double pretrain_seconds = 0, ft_seconds = 0;
  WindowLoss table[kMethods][kLens];  // [method][length]; fine-tuned rows: the model tuned there
  std::vector<FineTuneRun> fts;
  double recovery[kMethods][kLens];   // NaN at L and where plain RoPE has no gap to recover
  int ramp_extrapolate = 0, ramp_interpolate = 0, ramp_blend = 0;  // YaRN's pairs at this L

  double Ppl(int m, int k) const { return std::exp(table[m][k].loss); }
  double PplL() const { return Ppl(kNone, 0); }
  // "a / b / c / d": method m's perplexity at L, 2L, 4L, 8L.
  std::string Row(int m) const {
    std::string t;
    for (int k = 0; k < kLens; ++k) t += std::string(k ? " / " : "") + Fmt(Ppl(m, k), "%.3f");
    return t;
  }
  // Recovery at 2L, 4L, 8L.
  std::string RecoveryRow(int m) const {
    std::string t;
    for (int k = 1; k < kLens; ++k) t += std::string(k > 1 ? " / " : "") + Fmt(recovery[m][k], "%.2f");
    return t;
  }
};

constexpr int kLast = kLens - 1;
const char kLensText[] = "L / 2L / 4L / 8L";
constexpr int64_t kBatchTokens = 4096;  // tokens per scoring batch

std::string Lab(int64_t mult) { return mult == 1 ? std::string("L") : std::to_string(mult) + "L"; }

// Mean loss of a window over position range r: [0, L), [L, 2L), [2L, 4L), [4L, 8L).
double RangeLoss(const WindowLoss& w, int r, int64_t L) {
  const int64_t lo = r == 0 ? 0 : kMults[r - 1] * L, hi = kMults[r] * L;
  double sum = 0;
  for (int64_t t = lo; t < hi; ++t) sum += w.by_position[t];
  return sum / static_cast<double>(hi - lo);
}

// The base model, trained at L (a progress line per eighth).
Result<std::unique_ptr<Gpt>> TrainBase(const ExperimentOptions& o, const TokenData& data, Measured& m) {
  const Sizes& s = m.s;
  ModelConfig& c = m.config;
  c.vocab_size = data.vocab;
  c.context = m.L;
  c.d_model = s.d_model;
  c.n_layer = s.layers;
  c.n_head = s.heads;
  c.position = PositionEncoding::kRope;  // base 10000, rotary_dim = head_dim, no scaling
  ATTNLAB_ASSIGN_OR_RETURN(std::unique_ptr<Gpt> base, Gpt::Create(c));
  base->params().Initialize(c, o.seed);
  ATTNLAB_ASSIGN_OR_RETURN(TrainOptions to, ScheduledTrainOptions({.batch = s.batch,
                                                                    .seq_len = m.L,
                                                                    .steps = s.steps,
                                                                    .seed = o.seed,
                                                                    .lr = s.lr,
                                                                    .min_lr = s.lr / 10,
                                                                    .warmup_steps = s.steps / 20,
                                                                    .eval_batches = 4}));
  Trainer trainer(base.get(), to, data.train, data.val);
  for (int seg = 1; seg <= 8; ++seg) {  // a progress line per segment
    ATTNLAB_RETURN_IF_ERROR(trainer.Run(s.steps * seg / 8));
    const TrainRecord& last = trainer.history().back();
    Progress(o, kName, "base model step %ld/%ld | loss %.3f | val %.3f | %.0f s",
             static_cast<long>(trainer.step()), static_cast<long>(s.steps), last.loss,
             last.val_loss, SecondsSince(m.t_start));
  }
  for (const TrainRecord& rec : trainer.history()) m.pretrain_loss.push_back(rec.loss);
  m.pretrain_seconds = SecondsSince(m.t_start);
  return base;
}

// Zero-shot: every method (fine-tuned ones excepted) at every length, factor n / L.
Status ScoreZeroShot(const ExperimentOptions& o, const Gpt& base, const TokenData& data, Measured& m) {
  for (int k = 0; k < kLens; ++k) {
    const int64_t n = kMults[k] * m.L;
    for (int me = kNone; me <= kYarn; ++me) {
      ATTNLAB_ASSIGN_OR_RETURN(
          std::unique_ptr<Gpt> g,
          WithRopeScaling(base, n, Methods()[me].scaling, static_cast<double>(kMults[k]), m.L));
      ATTNLAB_ASSIGN_OR_RETURN(m.table[me][k], ScoreWindows(*g, data.val, n, m.predicted, kBatchTokens));
    }
    Progress(o, kName, "length %4ld (s = %ld): ppl none %.3f | PI %.3f | NTK %.3f | YaRN %.3f | %.0f s",
             static_cast<long>(n), static_cast<long>(kMults[k]), m.Ppl(kNone, k), m.Ppl(kPi, k),
             m.Ppl(kNtk, k), m.Ppl(kYarn, k), SecondsSince(m.t_start));
  }
  // At L both fine-tuned rows are the base model itself (factor 1, nothing to fine-tune).
  m.table[kPiFt][0] = m.table[kNoneFt][0] = m.table[kNone][0];
  return Status::Ok();
}

// Fine-tunes at 2L, 4L, 8L: PI with factor n / L, and the control without scaling. The same
// batches (seed per length), steps and schedule for both; as many tokens per step as in
// pre-training (batch * L / n sequences of n tokens).
Status FineTuneAll(const ExperimentOptions& o, const Gpt& base, const TokenData& data, Measured& m) {
  const Sizes& s = m.s;
  const int64_t L = m.L, Lmax = kMults[kLast] * L;
  const auto t_ft = std::chrono::steady_clock::now();
  for (int k = 1; k < kLens; ++k) {
    for (int me : {kPiFt, kNoneFt}) {
      const auto t0 = std::chrono::steady_clock::now();
      FineTuneRun ft;
      ft.method = me;
      ft.mult = kMults[k];
      ft.factor = me == kPiFt ? static_cast<double>(kMults[k]) : 1.0;
      // Context 8L so that the model can also be scored at every longer length.
      ATTNLAB_ASSIGN_OR_RETURN(std::unique_ptr<Gpt> g,
                               WithRopeScaling(base, Lmax, Methods()[me].scaling, ft.factor, L));
      ATTNLAB_ASSIGN_OR_RETURN(
          TrainOptions to, ScheduledTrainOptions({.batch = std::max<int64_t>(1, s.batch * L / (kMults[k] * L)),
                                                  .seq_len = kMults[k] * L,
                                                  .steps = s.ft_steps,
                                                  .seed = o.seed + 1000 * static_cast<uint64_t>(kMults[k]),
                                                  .lr = s.ft_lr,
                                                  .min_lr = s.ft_lr / 10,
                                                  .warmup_steps = std::max<int64_t>(1, s.ft_steps / 10),
                                                  .eval_batches = 1}));
      Trainer trainer(g.get(), to, data.train, data.val);
      ATTNLAB_RETURN_IF_ERROR(trainer.Run());
      for (const TrainRecord& rec : trainer.history()) ft.train_loss.push_back(rec.loss);
      for (int j = 0; j < kLens; ++j) {
        ATTNLAB_ASSIGN_OR_RETURN(ft.at[j], ScoreWindows(*g, data.val, kMults[j] * L, m.predicted, kBatchTokens));
      }
      m.table[me][k] = ft.at[k];
      ft.seconds = SecondsSince(t0);
      Progress(o, kName,
               "%-22s at %4ld: %ld steps, train loss %.3f -> %.3f | ppl at %ld %.3f, at L %.3f | %.0f s",
               Methods()[me].label, static_cast<long>(kMults[k] * L), static_cast<long>(s.ft_steps),
               ft.train_loss.front(), ft.train_loss.back(), static_cast<long>(kMults[k] * L),
               std::exp(ft.at[k].loss), std::exp(ft.at[0].loss), SecondsSince(m.t_start));
      m.fts.push_back(std::move(ft));
    }
  }
  m.ft_seconds = SecondsSince(t_ft);
  return Status::Ok();
}

// Recovery per method and length, and YaRN's ramp at this L: how many frequency pairs
// extrapolate, interpolate, or blend.
void Derive(const Gpt& base, Measured& m) {
  for (int me = 0; me < kMethods; ++me) {
    for (int k = 0; k < kLens; ++k) {
      const double gap = m.Ppl(kNone, k) - m.PplL();
      m.recovery[me][k] = k > 0 && gap > 0 ? (m.Ppl(kNone, k) - m.Ppl(me, k)) / gap : NAN;
    }
  }
  m.rope = base.rope()->config();
  for (double theta : base.rope()->Frequencies()) {
    const double r = static_cast<double>(m.L) * theta / (2.0 * std::numbers::pi);  // rotations within L
    (r > m.rope.yarn_beta ? m.ramp_extrapolate : r < m.rope.yarn_alpha ? m.ramp_interpolate : m.ramp_blend)++;
  }
}

// ---- Checks.
Status AddChecks(const Measured& m, ExperimentResult& r) {
  const double base_loss = m.table[kNone][0].loss;
  r.AddCheck("the base model learned", base_loss < m.unigram - 0.3,
             "validation loss at L " + Fmt(base_loss, "%.3f") + " vs unigram " + Fmt(m.unigram, "%.3f"));
  bool finite = true;
  for (int me = 0; me < kMethods; ++me) {
    for (int k = 0; k < kLens; ++k) {
      finite &= std::isfinite(m.table[me][k].loss);
      for (double v : m.table[me][k].by_position) finite &= std::isfinite(v);
    }
  }
  for (const FineTuneRun& ft : m.fts) {
    for (double v : ft.train_loss) finite &= std::isfinite(v);
    for (const WindowLoss& w : ft.at) finite &= std::isfinite(w.loss);
  }
  for (double v : m.pretrain_loss) finite &= std::isfinite(v);
  r.AddCheck("every loss is finite", finite,
             "training, fine-tuning and every evaluation (" + std::to_string(m.predicted) + " tokens per evaluation)");
  double max_diff = 0;
  for (int me : {kPi, kNtk, kYarn}) max_diff = std::max(max_diff, std::fabs(m.table[me][0].loss - base_loss));
  r.AddCheck("factor 1 is no scaling", max_diff <= 1e-6,
             "at L (s = 1) PI, NTK and YaRN differ from plain RoPE by at most " + Fmt(max_diff, "%.2g") + " nats");
  const double rise = std::max(m.table[kNone][2].loss, m.table[kNone][3].loss) - base_loss;
  r.AddCheck("plain RoPE breaks past L", rise > kBreakMargin,
             "loss at L " + Fmt(base_loss, "%.3f") + ", at 4L " + Fmt(m.table[kNone][2].loss, "%.3f") + ", at 8L " +
                 Fmt(m.table[kNone][3].loss, "%.3f") + " (margin " + Fmt(kBreakMargin, "%g") + ")");
  const WindowLoss& w8 = m.table[kNone][kLast];
  r.AddCheck("in 8L windows, plain RoPE's loss past position 4L is above its loss before L",
             RangeLoss(w8, 3, m.L) > RangeLoss(w8, 0, m.L),
             "mean loss at positions [0, L) " + Fmt(RangeLoss(w8, 0, m.L), "%.3f") + ", [4L, 8L) " +
                 Fmt(RangeLoss(w8, 3, m.L), "%.3f"));
  return Status::Ok();
}

// ---- Claims (every length past L must satisfy the rule).
Status AddClaims(const Measured& m, ExperimentResult& r) {
  auto all_long = [](auto pred) {
    bool ok = true;
    for (int k = 1; k < kLens; ++k) ok &= pred(k);
    return ok;
  };
  auto ppl = [&](int me, int k) { return m.Ppl(me, k); };
  const std::string lens_txt = kLensText;
  r.AddClaim("plain RoPE does not extrapolate: perplexity rises at every length past L",
             "Press et al. 2022 (ALiBi, arXiv:2108.12409); Chen et al. 2023",
             "ppl(L) < ppl(2L) < ppl(4L) < ppl(8L) without scaling", "ppl at " + lens_txt + ": " + m.Row(kNone),
             all_long([&](int k) { return ppl(kNone, k) > ppl(kNone, k - 1); }));
  r.AddClaim("PI without fine-tuning is worse than PI after a short fine-tune", "Chen et al. 2023",
             "ppl(PI + FT) < ppl(PI) at 2L, 4L, 8L",
             "PI " + m.Row(kPi) + "; PI + FT " + m.Row(kPiFt) + " (" + lens_txt + ")",
             all_long([&](int k) { return ppl(kPiFt, k) < ppl(kPi, k); }));
  r.AddClaim("after PI + fine-tune the longer window helps", "Chen et al. 2023",
             "ppl(PI + FT at n) <= ppl at L, for n = 2L, 4L, 8L", "PI + FT " + m.Row(kPiFt) + " (" + lens_txt + ")",
             all_long([&](int k) { return ppl(kPiFt, k) <= m.PplL(); }));
  r.AddClaim("PI + fine-tune beats fine-tuning without interpolation", "Chen et al. 2023",
             "ppl(PI + FT) < ppl(no scaling + FT) at 2L, 4L, 8L, same steps and batches",
             "PI + FT " + m.Row(kPiFt) + "; no scaling + FT " + m.Row(kNoneFt),
             all_long([&](int k) { return ppl(kPiFt, k) < ppl(kNoneFt, k); }));
  std::string measured;
  bool holds = true;
  for (const FineTuneRun& ft : m.fts) {
    if (ft.method != kPiFt) continue;
    const double p = std::exp(ft.at[0].loss);
    holds &= p <= (1 + kKeepQuality) * m.PplL();
    measured += std::string(measured.empty() ? "" : ", ") + "fine-tuned at " + Lab(ft.mult) + ": " + Fmt(p, "%.3f");
  }
  r.AddClaim("PI + fine-tune keeps the quality within the original window", "Chen et al. 2023",
             "ppl at L of each PI + FT model (with its factor) <= " + Fmt(1 + kKeepQuality, "%.2f") +
                 " x the base model's",
             "base " + Fmt(m.PplL(), "%.3f") + "; " + measured, holds);
  r.AddClaim("NTK-aware scaling beats PI without fine-tuning", "bloc97 2023", "ppl(NTK) < ppl(PI) at 2L, 4L, 8L, no training",
             "NTK " + m.Row(kNtk) + "; PI " + m.Row(kPi), all_long([&](int k) { return ppl(kNtk, k) < ppl(kPi, k); }));
  r.AddClaim("NTK-aware scaling recovers most of the gap without fine-tuning", "bloc97 2023",
             "recovery >= 0.5 at 2L, 4L, 8L", "recovery at 2L / 4L / 8L: " + m.RecoveryRow(kNtk),
             all_long([&](int k) { return m.recovery[kNtk][k] >= 0.5; }));
  r.AddClaim("YaRN recovers most of the gap without fine-tuning", "Peng et al. 2023", "recovery >= 0.5 at 2L, 4L, 8L",
             "recovery at 2L / 4L / 8L: " + m.RecoveryRow(kYarn),
             all_long([&](int k) { return m.recovery[kYarn][k] >= 0.5; }));
  r.AddClaim("YaRN is at least as good as NTK-aware scaling",
             "Peng et al. 2023 (their comparison is after fine-tuning; this one is not)",
             "ppl(YaRN) <= ppl(NTK) at 2L, 4L, 8L", "YaRN " + m.Row(kYarn) + "; NTK " + m.Row(kNtk),
             all_long([&](int k) { return ppl(kYarn, k) <= ppl(kNtk, k); }));
  return Status::Ok();
}

// ---- results in report.json.
Status AddResults(const Measured& m, ExperimentResult& r) {
  const Sizes& s = m.s;
  const int64_t L = m.L;
  auto bins_json = [&](const WindowLoss& w) { return BinMeans(w.by_position, s.bin); };
  nlohmann::json methods = nlohmann::json::array();
  for (int me = 0; me < kMethods; ++me) {
    nlohmann::json evals = nlohmann::json::array();
    for (int k = 0; k < kLens; ++k) {
      const bool ft_base = Methods()[me].fine_tuned && k == 0;
      evals.push_back({{"len", kMults[k] * L},
                       {"factor", me == kNone || me == kNoneFt || ft_base ? 1.0 : double(kMults[k])},
                       {"loss", m.table[me][k].loss}, {"ppl", m.Ppl(me, k)},
                       {"recovery", std::isfinite(m.recovery[me][k]) ? nlohmann::json(m.recovery[me][k])
                                                                     : nlohmann::json()},
                       {"loss_by_position", bins_json(m.table[me][k])},
                       {"model", Methods()[me].fine_tuned && !ft_base ? "fine-tuned at this length" : "base"}});
    }
    methods.push_back({{"id", Methods()[me].id}, {"label", Methods()[me].label},
                       {"fine_tuned", Methods()[me].fine_tuned}, {"evals", evals}});
  }
  nlohmann::json jft = nlohmann::json::array();
  for (const FineTuneRun& ft : m.fts) {
    nlohmann::json at = nlohmann::json::array();
    for (int j = 0; j < kLens; ++j) {
      at.push_back({{"len", kMults[j] * L}, {"loss", ft.at[j].loss}, {"ppl", std::exp(ft.at[j].loss)},
                    {"loss_by_position", bins_json(ft.at[j])}});
    }
    jft.push_back({{"method", Methods()[ft.method].id}, {"len", ft.mult * L}, {"factor", ft.factor},
                   {"train_loss", ft.train_loss}, {"evals", at}});
  }
  std::vector<int64_t> lens;
  for (int64_t mult : kMults) lens.push_back(mult * L);
  r.results = {{"layers", s.layers}, {"d_model", s.d_model}, {"heads", s.heads}, {"L", L},
               {"lens", lens}, {"batch", s.batch}, {"steps", s.steps}, {"lr", s.lr},
               {"ft_steps", s.ft_steps}, {"ft_lr", s.ft_lr}, {"predicted_tokens", m.predicted},
               {"bin", s.bin}, {"data", m.source}, {"unigram_val_loss", m.unigram},
               {"rope_base", m.config.rope_base}, {"yarn_alpha", m.rope.yarn_alpha}, {"yarn_beta", m.rope.yarn_beta},
               {"yarn_pairs", {{"extrapolate", m.ramp_extrapolate}, {"blend", m.ramp_blend},
                               {"interpolate", m.ramp_interpolate}}},
               {"pretrain_loss", m.pretrain_loss}, {"methods", methods}, {"fine_tunes", jft},
               {"seconds", {{"pretrain", m.pretrain_seconds}, {"fine_tune", m.ft_seconds},
                            {"total", SecondsSince(m.t_start)}}}};
  return Status::Ok();
}

// ---- Summary.
Status AddSummary(const Measured& m, ExperimentResult& r) {
  std::string sum = "A " + std::to_string(m.s.layers) + "-layer RoPE model trained at L = " + std::to_string(m.L) +
                    " tokens: without scaling its perplexity goes " + m.Row(kNone) + " at " + kLensText +
                    ". Recovery of that rise at 2L / 4L / 8L (1 = back to ppl at L, < 0 = worse than no "
                    "scaling): ";
  for (int me = kPi; me < kMethods; ++me) {
    sum += std::string(me > kPi ? "; " : "") + Methods()[me].label + " " + m.RecoveryRow(me);
  }
  sum += " (fine-tunes: " + std::to_string(m.s.ft_steps) + " steps at each length).";
  r.summary = sum;
  return Status::Ok();
}

// ---- The page.
std::vector<std::string> LengthColumns(int64_t L) {
  std::vector<std::string> cols = {"method"};
  for (int64_t mult : kMults) cols.push_back(Lab(mult) + " = " + std::to_string(mult * L));
  return cols;
}

void AddPerplexitySection(const Measured& m, report::HtmlReport& html) {
  html.AddSection("perplexity", "Perplexity by evaluation length");
  std::vector<std::vector<std::string>> rows;
  for (int me = 0; me < kMethods; ++me) {
    std::vector<std::string> rw = {Methods()[me].label};
    for (int k = 0; k < kLens; ++k) rw.push_back(Fmt(m.Ppl(me, k), "%.3f"));
    rows.push_back(rw);
  }
  html.AddTable(LengthColumns(m.L), rows,
                "Perplexity on the same " + std::to_string(m.predicted) + " validation tokens, cut into "
                "windows of each length; scalings use s = length / L. Fine-tuned rows: the model "
                "fine-tuned at that length (at L: the base model itself).");
  report::XyPlot p;
  p.title = "Perplexity against evaluation length";
  p.x.label = "log2(evaluation length / L)   (L = " + std::to_string(m.L) + ")";
  p.y.label = "perplexity";
  p.y.scale = report::ScaleType::kLog10;
  p.markers = true;
  p.reference_lines = {{m.PplL(), "ppl at L"}};
  for (int me = 0; me < kMethods; ++me) {
    report::Series se;
    se.name = Methods()[me].label;
    for (int k = 0; k < kLens; ++k) se.x.push_back(std::log2(double(kMults[k]))), se.y.push_back(m.Ppl(me, k));
    p.series.push_back(se);
  }
  html.AddFigure(report::RenderLinePlot(p), "Log-log: 0 on the x axis is the training length.", "fig-ppl");
  std::vector<std::vector<std::string>> rrows;
  report::BarChart bc;
  bc.title = "Recovery of the perplexity rise";
  bc.y.label = "(ppl_none - ppl_method) / (ppl_none - ppl at L)";
  bc.y.min = -1.0;
  bc.y.max = 1.5;
  bc.reference_lines = {{1.0, "full"}, {0.0, "none"}};
  for (int k = 1; k < kLens; ++k) bc.categories.push_back(Lab(kMults[k]));
  bool clipped = false;
  for (int me = kPi; me < kMethods; ++me) {
    std::vector<std::string> rw = {Methods()[me].label};
    report::BarSeries bs;
    bs.name = Methods()[me].label;
    for (int k = 1; k < kLens; ++k) {
      rw.push_back(Fmt(m.recovery[me][k], "%.2f"));
      bs.values.push_back(std::clamp(m.recovery[me][k], -1.0, 1.5));
      clipped |= m.recovery[me][k] < -1.0 || m.recovery[me][k] > 1.5;
    }
    rrows.push_back(rw);
    bc.series.push_back(bs);
  }
  html.AddTable({"method", "recovery at 2L", "4L", "8L"}, rrows,
                "Recovery = (ppl_none - ppl_method) / (ppl_none - ppl_none at L): 1 = the perplexity "
                "at L, 0 = plain RoPE's, < 0 = worse than plain RoPE; n/a where plain RoPE has no gap.");
  html.AddFigure(report::RenderBarChart(bc),
                 clipped ? "Bars are clipped to [-1, 1.5]; the table has the values." : "Recovery per method.",
                 "fig-recovery");
}

report::SvgImage PositionPlot(const Measured& m, const std::string& title,
                              const std::vector<std::pair<std::string, const WindowLoss*>>& ws) {
  const int64_t bin = m.s.bin;
  report::XyPlot p;
  p.title = title;
  p.x.label = "position in the window (bins of " + std::to_string(bin) + ")";
  p.y.label = "loss (nats/token)";
  p.reference_lines = {{m.table[kNone][0].loss, "mean at L"}};
  double lo = INFINITY, hi = -INFINITY;
  for (auto& [name, w] : ws) {
    report::Series se;
    se.name = name;
    const std::vector<double> b = BinMeans(w->by_position, bin);
    for (size_t i = 0; i < b.size(); ++i) {
      se.x.push_back(static_cast<double>(i * bin) + 0.5 * static_cast<double>(bin));
      se.y.push_back(b[i]);
      if (std::isfinite(b[i])) lo = std::min(lo, b[i]), hi = std::max(hi, b[i]);
    }
    p.series.push_back(se);
  }
  p.series.push_back({"position L (training length)", {double(m.L), double(m.L)}, {lo, hi}});
  return report::RenderLinePlot(p);
}

void AddPositionsSection(const Measured& m, report::HtmlReport& html) {
  html.AddSection("positions", "Where it breaks: loss by position in the window");
  std::vector<std::vector<std::string>> rows;
  for (int me = 0; me < kMethods; ++me) {
    std::vector<std::string> rw = {Methods()[me].label};
    for (int q = 0; q < kLens; ++q) rw.push_back(Fmt(RangeLoss(m.table[me][kLast], q, m.L), "%.3f"));
    rows.push_back(rw);
  }
  html.AddTable({"method (8L windows)", "positions [0, L)", "[L, 2L)", "[2L, 4L)", "[4L, 8L)"}, rows,
                "Mean loss (nats/token) over position ranges of the 8L windows, factor 8.");
  std::vector<std::pair<std::string, const WindowLoss*>> at8, none;
  for (int me = 0; me < kMethods; ++me) at8.push_back({Methods()[me].label, &m.table[me][kLast]});
  html.AddFigure(PositionPlot(m, "Loss by position, 8L windows", at8),
                 "Every method at 8L (scalings with factor 8; fine-tuned rows: the models "
                 "fine-tuned at 8L).",
                 "fig-position");
  for (int k = 0; k < kLens; ++k) none.push_back({Lab(kMults[k]) + " windows", &m.table[kNone][k]});
  html.AddFigure(PositionPlot(m, "Plain RoPE: loss by position for each window length", none),
                 "Without scaling the loss at a position does not depend on the window length "
                 "(causal attention); it rises where positions pass L.",
                 "fig-position-none");
}

void AddFineTuneSection(const Measured& m, report::HtmlReport& html) {
  html.AddSection("fine-tunes", "Fine-tuned models at every length");
  std::vector<std::vector<std::string>> rows;
  for (const FineTuneRun& ft : m.fts) {
    std::vector<std::string> rw = {std::string(Methods()[ft.method].label) + " at " + Lab(ft.mult) + " (factor " +
                                   Fmt(ft.factor, "%g") + ")"};
    for (int j = 0; j < kLens; ++j) rw.push_back(Fmt(std::exp(ft.at[j].loss), "%.3f"));
    rows.push_back(rw);
  }
  std::vector<std::string> fcols = LengthColumns(m.L);
  fcols[0] = "model (fine-tuned at)";
  html.AddTable(fcols, rows, "Perplexity of each fine-tuned model at every length, always with the "
                             "factor it was fine-tuned with. Base model at L: " + Fmt(m.PplL(), "%.3f") + ".");
  report::XyPlot p;
  p.title = "Fine-tuning loss";
  p.x.label = "fine-tuning step";
  p.y.label = "training loss (nats/token)";
  for (const FineTuneRun& ft : m.fts) {
    report::Series se;
    se.name = std::string(Methods()[ft.method].label) + " at " + Lab(ft.mult);
    for (size_t i = 0; i < ft.train_loss.size(); ++i) {
      se.x.push_back(double(i + 1));
      se.y.push_back(ft.train_loss[i]);
    }
    p.series.push_back(se);
  }
  html.AddFigure(report::RenderLinePlot(p), "Per step (one batch each).", "fig-ft-loss");
}

void AddSetup(const Measured& m, report::HtmlReport& html) {
  const Sizes& s = m.s;
  const int64_t L = m.L;
  const ModelConfig& c = m.config;
  const RopeConfig& rc = m.rope;
  html.AddSection("setup", "Setup");
  report::XyPlot p;
  p.title = "Training loss of the base model at L";
  p.x.label = "step";
  p.y.label = "training loss (nats/token)";
  p.reference_lines = {{m.unigram, "unigram"}};
  report::Series se;
  se.name = "base";
  for (size_t i = 0; i < m.pretrain_loss.size(); ++i) {
    se.x.push_back(double(i + 1));
    se.y.push_back(m.pretrain_loss[i]);
  }
  p.series.push_back(se);
  html.AddFigure(report::RenderLinePlot(p), "Pre-training at L.", "fig-train");
  html.AddBulletList({
      "Model: " + std::to_string(s.layers) + " layers, d_model " + std::to_string(s.d_model) + ", " +
          std::to_string(s.heads) + " heads (head_dim " + std::to_string(c.head_dim()) +
          "), pre-LN, MLP 4 d_model, RoPE base " + Fmt(c.rope_base, "%g") + " on every dimension, GPT-2 init.",
      "Pre-training: " + std::to_string(s.steps) + " steps of " + std::to_string(s.batch) + " x " +
          std::to_string(L) + " tokens, AdamW lr " + Fmt(s.lr, "%g") + " (warmup " +
          std::to_string(s.steps / 20) + " steps, cosine to lr / 10), weight decay 0.1, clip 1.0.",
      "Fine-tunes: " + std::to_string(s.ft_steps) + " steps at each of 2L, 4L, 8L, " +
          std::to_string(s.batch * L) + " tokens per step (" + std::to_string(s.batch) +
          " x L / n sequences of n tokens), lr " + Fmt(s.ft_lr, "%g") + " (warmup 10%, cosine to lr / 10), "
          "fresh AdamW state; PI with factor n / L and the control without scaling see the same batches.",
      "Evaluation: the first " + std::to_string(m.predicted) + " validation tokens (+1) in non-overlapping "
          "windows of n tokens, every token predicted exactly once at every n.",
      "YaRN: original context L, ramp alpha " + Fmt(rc.yarn_alpha, "%g") + ", beta " + Fmt(rc.yarn_beta, "%g") +
          " (the paper's Llama values), temperature 0.1 ln s + 1. At L = " + std::to_string(L) +
          " a pair completes r = L theta / 2 pi <= " + Fmt(double(L) / (2 * std::numbers::pi), "%.1f") +
          " rotations, so " + std::to_string(m.ramp_extrapolate) + " of " + std::to_string(rc.rotary_dim / 2) +
          " pairs keep their frequency (r > beta), " + std::to_string(m.ramp_blend) + " blend and " +
          std::to_string(m.ramp_interpolate) + " are interpolated like PI (r < alpha).",
  });
  html.AddNote("One seed and a small byte-level model trained for minutes: the numbers show the "
               "mechanisms at this scale, not what they do in billion-parameter models trained at "
               "thousands of tokens. YaRN's ramp constants were chosen for L = 2048-4096.");
}

Status AddHtml(const Measured& m, ExperimentResult& r) {
  const Sizes& s = m.s;
  r.html = report::HtmlReport("Context extrapolation of RoPE: no scaling, PI, NTK, YaRN");
  r.html.SetSubtitle(std::to_string(s.layers) + " layers, d_model " + std::to_string(s.d_model) + ", " +
                     std::to_string(s.heads) + " heads, trained at L = " + std::to_string(m.L) + " for " +
                     std::to_string(s.steps) + " steps; " + m.source);
  r.html.AddSummaryFact(std::string("ppl without scaling, ") + kLensText, m.Row(kNone));
  int best = kNone;
  for (int me = 0; me < kMethods; ++me) best = m.Ppl(me, kLast) < m.Ppl(best, kLast) ? me : best;
  r.html.AddSummaryFact("best at 8L", std::string(Methods()[best].label) + ": " + Fmt(m.Ppl(best, kLast), "%.3f"));
  AddPerplexitySection(m, r.html);
  AddPositionsSection(m, r.html);
  AddFineTuneSection(m, r.html);
  AddSetup(m, r.html);
  return Status::Ok();
}

// configure -> train the base model -> score every method zero-shot -> fine-tune -> report.
Result<ExperimentResult> RunExtrapolation(const ExperimentOptions& o) {
  // quick: ~20 s on 2 threads; default: ~4 min on 2 idle cores (more under contention).
  auto m = std::make_unique<Measured>();
  m->s = o.quick ? Sizes{2, 64, 4, 32, 16, 300, 40, 16 * 256, 8, 2e-3, 5e-4}
                 : Sizes{4, 128, 4, 64, 16, 2000, 150, 64 * 512, 16, 1e-3, 3e-4};
  const Sizes& s = m->s;
  const int64_t L = m->L = s.L, Lmax = kMults[kLast] * L;
  ATTNLAB_ASSIGN_OR_RETURN(TokenData data, LoadTextData(o));
  // Score as many validation tokens as there are, up to s.predicted, in whole windows of 8L.
  m->predicted = std::min(s.predicted, (static_cast<int64_t>(data.val.size()) - 1) / Lmax * Lmax);
  if (m->predicted < 2 * Lmax || static_cast<int64_t>(data.train.size()) < 4 * (Lmax + 1)) {
    return Status::InvalidArgument(
        "the data is too small: need at least " + std::to_string(2 * Lmax + 1) +
        " validation tokens and " + std::to_string(4 * (Lmax + 1)) + " training tokens");
  }
  ATTNLAB_ASSIGN_OR_RETURN(m->unigram, UnigramValLoss(data));
  m->source = data.source;
  m->t_start = std::chrono::steady_clock::now();
  Progress(o, kName, "%ld layers, d_model %ld, %ld heads, trained at L = %ld for %ld steps; "
           "scoring %ld validation tokens at %ld..%ld; %s",
           static_cast<long>(s.layers), static_cast<long>(s.d_model), static_cast<long>(s.heads),
           static_cast<long>(L), static_cast<long>(s.steps), static_cast<long>(m->predicted),
           static_cast<long>(L), static_cast<long>(Lmax), data.source.c_str());
  ATTNLAB_ASSIGN_OR_RETURN(std::unique_ptr<Gpt> base, TrainBase(o, data, *m));
  ATTNLAB_RETURN_IF_ERROR(ScoreZeroShot(o, *base, data, *m));
  ATTNLAB_RETURN_IF_ERROR(FineTuneAll(o, *base, data, *m));
  Derive(*base, *m);
  return AssembleReport<Measured>(*m, {AddChecks, AddClaims, AddResults, AddSummary, AddHtml});
}

}  // namespace

Experiment ExtrapolationExperiment() {
  return {kName,
          "a RoPE model trained at length L, evaluated at 2L-8L with no scaling, position interpolation "
          "(with and without a short fine-tune), NTK and YaRN: perplexity table and recovery",
          RunExtrapolation};
}

}  // namespace attnlab::experiments
