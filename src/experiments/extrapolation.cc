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

#include "attnlab/tokenizer.h"
#include "core/resources.h"
#include "experiments/experiment.h"
#include "experiments/extrapolation_eval.h"
#include "model/tokenizer_spec.h"
#include "report/svg_plot.h"
#include "train/corpus.h"
#include "train/token_data.h"
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

struct Data {
  std::vector<int32_t> train, val;
  int64_t vocab = 0;
  std::string source;
};

// --data DIR (attnlab prepare), else the Brown corpus as bytes (every 20th document held out, as
// `attnlab prepare` splits it), tokenised in memory. Same as collapse-training.
Result<Data> LoadData(const ExperimentOptions& o) {
  Data d;
  if (!o.data.empty()) {
    ATTNLAB_ASSIGN_OR_RETURN(TokenFile train, ReadTokenFile(o.data + "/train.tok"));
    ATTNLAB_ASSIGN_OR_RETURN(TokenFile val, ReadTokenFile(o.data + "/val.tok"));
    d.train = std::move(train.tokens);
    d.val = std::move(val.tokens);
    d.vocab = std::max(train.vocab_size, val.vocab_size);
    d.source = o.data;
    return d;
  }
  const std::string dir = FindResource(kBrownCorpusPath);
  if (dir.empty()) {
    return Status::NotFound(std::string("no --data DIR given and the Brown corpus (") +
                            kBrownCorpusPath + ") is not installed: run scripts/setup.sh, or "
                            "make a data directory with `attnlab prepare --text FILE --out DIR`");
  }
  ATTNLAB_ASSIGN_OR_RETURN(std::vector<std::string> docs, LoadBrownCorpus(dir));
  std::unique_ptr<Tokenizer> tok = MakeByteTokenizer();
  for (size_t i = 0; i < docs.size(); ++i) {
    ATTNLAB_ASSIGN_OR_RETURN(std::vector<int32_t> ids, tok->Encode(docs[i]));
    std::vector<int32_t>& dst = i % 20 == 19 ? d.val : d.train;
    dst.insert(dst.end(), ids.begin(), ids.end());
    dst.push_back(*tok->eos_id());
  }
  d.vocab = tok->vocab_size();
  d.source = "the Brown corpus as bytes (" + std::to_string(docs.size()) +
             " documents, every 20th held out)";
  return d;
}

double UnigramValLoss(const Data& d) {  // add-one smoothed training-split unigram, on validation
  std::vector<double> count(d.vocab, 1.0);
  for (int32_t t : d.train) count[t] += 1.0;
  const double total = static_cast<double>(d.train.size() + d.vocab);
  double loss = 0;
  for (int32_t t : d.val) loss -= std::log(count[t] / total);
  return loss / static_cast<double>(d.val.size());
}

double Secs(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// One fine-tuned model: trained at length mult * L, scored at every length.
struct FineTuneRun {
  int method = kPiFt;
  int64_t mult = 2;
  double factor = 1;
  std::vector<double> train_loss;  // per step
  WindowLoss at[kLens];            // at length kMults[k] * L, with this model's factor
  double seconds = 0;
};

Result<ExperimentResult> RunExtrapolation(const ExperimentOptions& o) {
  // quick: ~20 s on 2 threads; default: ~4 min on 2 idle cores (more under contention).
  const Sizes s = o.quick ? Sizes{2, 64, 4, 32, 16, 300, 40, 16 * 256, 8, 2e-3, 5e-4}
                          : Sizes{4, 128, 4, 64, 16, 2000, 150, 64 * 512, 16, 1e-3, 3e-4};
  const int64_t L = s.L, Lmax = kMults[kLens - 1] * L;
  ATTNLAB_ASSIGN_OR_RETURN(Data data, LoadData(o));
  // Score as many validation tokens as there are, up to s.predicted, in whole windows of 8L.
  const int64_t predicted =
      std::min(s.predicted, (static_cast<int64_t>(data.val.size()) - 1) / Lmax * Lmax);
  if (predicted < 2 * Lmax || static_cast<int64_t>(data.train.size()) < 4 * (Lmax + 1)) {
    return Status::InvalidArgument(
        "the data is too small: need at least " + std::to_string(2 * Lmax + 1) +
        " validation tokens and " + std::to_string(4 * (Lmax + 1)) + " training tokens");
  }
  const double unigram = UnigramValLoss(data);
  const auto t_start = std::chrono::steady_clock::now();
  Progress(o, kName, "%ld layers, d_model %ld, %ld heads, trained at L = %ld for %ld steps; "
           "scoring %ld validation tokens at %ld..%ld; %s",
           static_cast<long>(s.layers), static_cast<long>(s.d_model), static_cast<long>(s.heads),
           static_cast<long>(L), static_cast<long>(s.steps), static_cast<long>(predicted),
           static_cast<long>(L), static_cast<long>(Lmax), data.source.c_str());

  // ---- The base model, trained at L.
  ModelConfig c;
  c.vocab_size = data.vocab;
  c.context = L;
  c.d_model = s.d_model;
  c.n_layer = s.layers;
  c.n_head = s.heads;
  c.position = PositionEncoding::kRope;  // base 10000, rotary_dim = head_dim, no scaling
  ATTNLAB_ASSIGN_OR_RETURN(std::unique_ptr<Gpt> base, Gpt::Create(c));
  base->params().Initialize(c, o.seed);
  std::vector<double> pretrain_loss;
  {
    TrainOptions to;
    to.batch = s.batch;
    to.seq_len = L;
    to.steps = s.steps;
    to.seed = o.seed;
    to.opt.lr = static_cast<float>(s.lr);
    to.opt.min_lr = static_cast<float>(s.lr / 10);
    to.opt.warmup_steps = s.steps / 20;
    to.eval_every = 0;
    to.eval_batches = 4;
    to.quiet = true;
    Trainer trainer(base.get(), to, data.train, data.val);
    for (int seg = 1; seg <= 8; ++seg) {  // a progress line per segment
      ATTNLAB_RETURN_IF_ERROR(trainer.Run(s.steps * seg / 8));
      const TrainRecord& last = trainer.history().back();
      Progress(o, kName, "base model step %ld/%ld | loss %.3f | val %.3f | %.0f s",
               static_cast<long>(trainer.step()), static_cast<long>(s.steps), last.loss,
               last.val_loss, Secs(t_start));
    }
    for (const TrainRecord& rec : trainer.history()) pretrain_loss.push_back(rec.loss);
  }
  const double pretrain_seconds = Secs(t_start);

  // ---- Zero-shot: every method (fine-tuned ones excepted) at every length, factor n / L.
  WindowLoss table[kMethods][kLens];  // [method][length]; the fine-tuned rows filled below
  const int64_t batch_tokens = 4096;
  for (int k = 0; k < kLens; ++k) {
    const int64_t n = kMults[k] * L;
    for (int m = kNone; m <= kYarn; ++m) {
      ATTNLAB_ASSIGN_OR_RETURN(
          std::unique_ptr<Gpt> g,
          WithRopeScaling(*base, n, Methods()[m].scaling, static_cast<double>(kMults[k]), L));
      ATTNLAB_ASSIGN_OR_RETURN(table[m][k], ScoreWindows(*g, data.val, n, predicted, batch_tokens));
    }
    Progress(o, kName, "length %4ld (s = %ld): ppl none %.3f | PI %.3f | NTK %.3f | YaRN %.3f | %.0f s",
             static_cast<long>(n), static_cast<long>(kMults[k]), std::exp(table[kNone][k].loss),
             std::exp(table[kPi][k].loss), std::exp(table[kNtk][k].loss),
             std::exp(table[kYarn][k].loss), Secs(t_start));
  }
  // At L both fine-tuned rows are the base model itself (factor 1, nothing to fine-tune).
  table[kPiFt][0] = table[kNoneFt][0] = table[kNone][0];

  // ---- Fine-tunes at 2L, 4L, 8L: PI with factor n / L, and the control without scaling. The
  // same batches (seed per length), steps and schedule for both; as many tokens per step as in
  // pre-training (batch * L / n sequences of n tokens).
  const auto t_ft = std::chrono::steady_clock::now();
  std::vector<FineTuneRun> fts;
  for (int k = 1; k < kLens; ++k) {
    for (int m : {kPiFt, kNoneFt}) {
      const auto t0 = std::chrono::steady_clock::now();
      FineTuneRun ft;
      ft.method = m;
      ft.mult = kMults[k];
      ft.factor = m == kPiFt ? static_cast<double>(kMults[k]) : 1.0;
      // Context 8L so that the model can also be scored at every longer length.
      ATTNLAB_ASSIGN_OR_RETURN(std::unique_ptr<Gpt> g,
                               WithRopeScaling(*base, Lmax, Methods()[m].scaling, ft.factor, L));
      TrainOptions to;
      to.batch = std::max<int64_t>(1, s.batch * L / (kMults[k] * L));
      to.seq_len = kMults[k] * L;
      to.steps = s.ft_steps;
      to.seed = o.seed + 1000 * static_cast<uint64_t>(kMults[k]);
      to.opt.lr = static_cast<float>(s.ft_lr);
      to.opt.min_lr = static_cast<float>(s.ft_lr / 10);
      to.opt.warmup_steps = std::max<int64_t>(1, s.ft_steps / 10);
      to.eval_every = 0;
      to.eval_batches = 1;
      to.quiet = true;
      Trainer trainer(g.get(), to, data.train, data.val);
      ATTNLAB_RETURN_IF_ERROR(trainer.Run());
      for (const TrainRecord& rec : trainer.history()) ft.train_loss.push_back(rec.loss);
      for (int j = 0; j < kLens; ++j) {
        ATTNLAB_ASSIGN_OR_RETURN(ft.at[j],
                                 ScoreWindows(*g, data.val, kMults[j] * L, predicted, batch_tokens));
      }
      table[m][k] = ft.at[k];
      ft.seconds = Secs(t0);
      Progress(o, kName,
               "%-22s at %4ld: %ld steps, train loss %.3f -> %.3f | ppl at %ld %.3f, at L %.3f | %.0f s",
               Methods()[m].label, static_cast<long>(kMults[k] * L), static_cast<long>(s.ft_steps),
               ft.train_loss.front(), ft.train_loss.back(), static_cast<long>(kMults[k] * L),
               std::exp(ft.at[k].loss), std::exp(ft.at[0].loss), Secs(t_start));
      fts.push_back(std::move(ft));
    }
  }
  const double ft_seconds = Secs(t_ft);

  // ---- Derived numbers.
  auto ppl = [&](int m, int k) { return std::exp(table[m][k].loss); };
  const double ppl_L = ppl(kNone, 0);
  double recovery[kMethods][kLens];  // NaN at L and where plain RoPE has no gap to recover
  for (int m = 0; m < kMethods; ++m) {
    for (int k = 0; k < kLens; ++k) {
      const double gap = ppl(kNone, k) - ppl_L;
      recovery[m][k] = k > 0 && gap > 0 ? (ppl(kNone, k) - ppl(m, k)) / gap : NAN;
    }
  }
  // Mean loss of the 8L windows over position ranges [0, L), [L, 2L), [2L, 4L), [4L, 8L).
  auto range_loss = [&](const WindowLoss& w, int r) {
    const int64_t lo = r == 0 ? 0 : kMults[r - 1] * L, hi = kMults[r] * L;
    double sum = 0;
    for (int64_t t = lo; t < hi; ++t) sum += w.by_position[t];
    return sum / static_cast<double>(hi - lo);
  };
  const int kLast = kLens - 1;
  auto lab = [](int64_t mult) { return mult == 1 ? std::string("L") : std::to_string(mult) + "L"; };

  // ---- YaRN's ramp at this L: how many frequency pairs extrapolate, interpolate, or blend.
  int ramp_extrapolate = 0, ramp_interpolate = 0, ramp_blend = 0;
  const RopeConfig& rc = base->rope()->config();
  for (double theta : base->rope()->Frequencies()) {
    const double r = static_cast<double>(L) * theta / (2.0 * std::numbers::pi);  // rotations within L
    (r > rc.yarn_beta ? ramp_extrapolate : r < rc.yarn_alpha ? ramp_interpolate : ramp_blend)++;
  }

  ExperimentResult r;
  // ---- Checks.
  {
    const double base_loss = table[kNone][0].loss;
    r.AddCheck("the base model learned", base_loss < unigram - 0.3,
               "validation loss at L " + Fmt(base_loss, "%.3f") + " vs unigram " + Fmt(unigram, "%.3f"));
    bool finite = true;
    for (int m = 0; m < kMethods; ++m) {
      for (int k = 0; k < kLens; ++k) {
        finite &= std::isfinite(table[m][k].loss);
        for (double v : table[m][k].by_position) finite &= std::isfinite(v);
      }
    }
    for (const FineTuneRun& ft : fts) {
      for (double v : ft.train_loss) finite &= std::isfinite(v);
      for (const WindowLoss& w : ft.at) finite &= std::isfinite(w.loss);
    }
    for (double v : pretrain_loss) finite &= std::isfinite(v);
    r.AddCheck("every loss is finite", finite,
               "training, fine-tuning and every evaluation (" + std::to_string(predicted) +
                   " tokens per evaluation)");
    double max_diff = 0;
    for (int m : {kPi, kNtk, kYarn}) max_diff = std::max(max_diff, std::fabs(table[m][0].loss - base_loss));
    r.AddCheck("factor 1 is no scaling", max_diff <= 1e-6,
               "at L (s = 1) PI, NTK and YaRN differ from plain RoPE by at most " + Fmt(max_diff, "%.2g") +
                   " nats");
    const double rise = std::max(table[kNone][2].loss, table[kNone][3].loss) - base_loss;
    r.AddCheck("plain RoPE breaks past L", rise > kBreakMargin,
               "loss at L " + Fmt(base_loss, "%.3f") + ", at 4L " + Fmt(table[kNone][2].loss, "%.3f") +
                   ", at 8L " + Fmt(table[kNone][3].loss, "%.3f") + " (margin " +
                   Fmt(kBreakMargin, "%g") + ")");
    const WindowLoss& w8 = table[kNone][kLast];
    r.AddCheck("in 8L windows, plain RoPE's loss past position 4L is above its loss before L",
               range_loss(w8, 3) > range_loss(w8, 0),
               "mean loss at positions [0, L) " + Fmt(range_loss(w8, 0), "%.3f") + ", [4L, 8L) " +
                   Fmt(range_loss(w8, 3), "%.3f"));
  }

  // ---- Claims (every length past L must satisfy the rule).
  auto all_long = [&](auto pred) {
    bool ok = true;
    for (int k = 1; k < kLens; ++k) ok &= pred(k);
    return ok;
  };
  auto row = [&](int m) {
    std::string t;
    for (int k = 0; k < kLens; ++k) t += std::string(k ? " / " : "") + Fmt(ppl(m, k), "%.3f");
    return t;
  };
  auto rec_row = [&](int m) {
    std::string t;
    for (int k = 1; k < kLens; ++k) t += std::string(k > 1 ? " / " : "") + Fmt(recovery[m][k], "%.2f");
    return t;
  };
  const std::string lens_txt = "L / 2L / 4L / 8L";
  r.claims.push_back({"plain RoPE does not extrapolate: perplexity rises at every length past L",
                      "Press et al. 2022 (ALiBi, arXiv:2108.12409); Chen et al. 2023",
                      "ppl(L) < ppl(2L) < ppl(4L) < ppl(8L) without scaling",
                      "ppl at " + lens_txt + ": " + row(kNone),
                      all_long([&](int k) { return ppl(kNone, k) > ppl(kNone, k - 1); })});
  r.claims.push_back({"PI without fine-tuning is worse than PI after a short fine-tune", "Chen et al. 2023",
                      "ppl(PI + FT) < ppl(PI) at 2L, 4L, 8L",
                      "PI " + row(kPi) + "; PI + FT " + row(kPiFt) + " (" + lens_txt + ")",
                      all_long([&](int k) { return ppl(kPiFt, k) < ppl(kPi, k); })});
  r.claims.push_back({"after PI + fine-tune the longer window helps", "Chen et al. 2023",
                      "ppl(PI + FT at n) <= ppl at L, for n = 2L, 4L, 8L",
                      "PI + FT " + row(kPiFt) + " (" + lens_txt + ")",
                      all_long([&](int k) { return ppl(kPiFt, k) <= ppl_L; })});
  r.claims.push_back({"PI + fine-tune beats fine-tuning without interpolation", "Chen et al. 2023",
                      "ppl(PI + FT) < ppl(no scaling + FT) at 2L, 4L, 8L, same steps and batches",
                      "PI + FT " + row(kPiFt) + "; no scaling + FT " + row(kNoneFt),
                      all_long([&](int k) { return ppl(kPiFt, k) < ppl(kNoneFt, k); })});
  {
    std::string measured;
    bool holds = true;
    for (const FineTuneRun& ft : fts) {
      if (ft.method != kPiFt) continue;
      const double p = std::exp(ft.at[0].loss);
      holds &= p <= (1 + kKeepQuality) * ppl_L;
      measured += std::string(measured.empty() ? "" : ", ") + "fine-tuned at " + lab(ft.mult) +
                  ": " + Fmt(p, "%.3f");
    }
    r.claims.push_back({"PI + fine-tune keeps the quality within the original window", "Chen et al. 2023",
                        "ppl at L of each PI + FT model (with its factor) <= " +
                            Fmt(1 + kKeepQuality, "%.2f") + " x the base model's",
                        "base " + Fmt(ppl_L, "%.3f") + "; " + measured, holds});
  }
  r.claims.push_back({"NTK-aware scaling beats PI without fine-tuning", "bloc97 2023",
                      "ppl(NTK) < ppl(PI) at 2L, 4L, 8L, no training",
                      "NTK " + row(kNtk) + "; PI " + row(kPi),
                      all_long([&](int k) { return ppl(kNtk, k) < ppl(kPi, k); })});
  r.claims.push_back({"NTK-aware scaling recovers most of the gap without fine-tuning", "bloc97 2023",
                      "recovery >= 0.5 at 2L, 4L, 8L", "recovery at 2L / 4L / 8L: " + rec_row(kNtk),
                      all_long([&](int k) { return recovery[kNtk][k] >= 0.5; })});
  r.claims.push_back({"YaRN recovers most of the gap without fine-tuning", "Peng et al. 2023",
                      "recovery >= 0.5 at 2L, 4L, 8L", "recovery at 2L / 4L / 8L: " + rec_row(kYarn),
                      all_long([&](int k) { return recovery[kYarn][k] >= 0.5; })});
  r.claims.push_back({"YaRN is at least as good as NTK-aware scaling",
                      "Peng et al. 2023 (their comparison is after fine-tuning; this one is not)",
                      "ppl(YaRN) <= ppl(NTK) at 2L, 4L, 8L", "YaRN " + row(kYarn) + "; NTK " + row(kNtk),
                      all_long([&](int k) { return ppl(kYarn, k) <= ppl(kNtk, k); })});

  // ---- JSON.
  auto bins_json = [&](const WindowLoss& w) { return BinMeans(w.by_position, s.bin); };
  nlohmann::json methods = nlohmann::json::array();
  for (int m = 0; m < kMethods; ++m) {
    nlohmann::json evals = nlohmann::json::array();
    for (int k = 0; k < kLens; ++k) {
      const bool ft_base = Methods()[m].fine_tuned && k == 0;
      evals.push_back({{"len", kMults[k] * L},
                       {"factor", m == kNone || m == kNoneFt || ft_base ? 1.0 : double(kMults[k])},
                       {"loss", table[m][k].loss}, {"ppl", ppl(m, k)},
                       {"recovery", std::isfinite(recovery[m][k]) ? nlohmann::json(recovery[m][k])
                                                                  : nlohmann::json()},
                       {"loss_by_position", bins_json(table[m][k])},
                       {"model", Methods()[m].fine_tuned && !ft_base ? "fine-tuned at this length"
                                                                      : "base"}});
    }
    methods.push_back({{"id", Methods()[m].id}, {"label", Methods()[m].label},
                       {"fine_tuned", Methods()[m].fine_tuned}, {"evals", evals}});
  }
  nlohmann::json jft = nlohmann::json::array();
  for (const FineTuneRun& ft : fts) {
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
               {"ft_steps", s.ft_steps}, {"ft_lr", s.ft_lr}, {"predicted_tokens", predicted},
               {"bin", s.bin}, {"data", data.source}, {"unigram_val_loss", unigram},
               {"rope_base", c.rope_base}, {"yarn_alpha", rc.yarn_alpha}, {"yarn_beta", rc.yarn_beta},
               {"yarn_pairs", {{"extrapolate", ramp_extrapolate}, {"blend", ramp_blend},
                               {"interpolate", ramp_interpolate}}},
               {"pretrain_loss", pretrain_loss}, {"methods", methods}, {"fine_tunes", jft},
               {"seconds", {{"pretrain", pretrain_seconds}, {"fine_tune", ft_seconds},
                            {"total", Secs(t_start)}}}};

  // ---- Summary.
  std::string sum = "A " + std::to_string(s.layers) + "-layer RoPE model trained at L = " +
                    std::to_string(L) + " tokens: without scaling its perplexity goes " + row(kNone) + " at " + lens_txt +
                    ". Recovery of that rise at 2L / 4L / 8L (1 = back to ppl at L, < 0 = worse than no "
                    "scaling): ";
  for (int m = kPi; m < kMethods; ++m) {
    sum += std::string(m > kPi ? "; " : "") + Methods()[m].label + " " + rec_row(m);
  }
  sum += " (fine-tunes: " + std::to_string(s.ft_steps) + " steps at each length).";
  r.summary = sum;

  // ---- Report.
  r.html = report::HtmlReport("Context extrapolation of RoPE: no scaling, PI, NTK, YaRN");
  r.html.SetSubtitle(std::to_string(s.layers) + " layers, d_model " + std::to_string(s.d_model) + ", " +
                     std::to_string(s.heads) + " heads, trained at L = " + std::to_string(L) + " for " +
                     std::to_string(s.steps) + " steps; " + data.source);
  r.html.AddSummaryFact("ppl without scaling, " + lens_txt, row(kNone));
  r.html.AddSummaryFact("best at 8L", [&] {
    int best = kNone;
    for (int m = 0; m < kMethods; ++m) best = ppl(m, kLast) < ppl(best, kLast) ? m : best;
    return std::string(Methods()[best].label) + ": " + Fmt(ppl(best, kLast), "%.3f");
  }());
  std::vector<std::string> cols = {"method"};
  for (int64_t mult : kMults) cols.push_back(lab(mult) + " = " + std::to_string(mult * L));
  r.html.AddSection("perplexity", "Perplexity by evaluation length");
  {
    std::vector<std::vector<std::string>> rows;
    for (int m = 0; m < kMethods; ++m) {
      std::vector<std::string> rw = {Methods()[m].label};
      for (int k = 0; k < kLens; ++k) rw.push_back(Fmt(ppl(m, k), "%.3f"));
      rows.push_back(rw);
    }
    r.html.AddTable(cols, rows,
                    "Perplexity on the same " + std::to_string(predicted) + " validation tokens, cut into "
                    "windows of each length; scalings use s = length / L. Fine-tuned rows: the model "
                    "fine-tuned at that length (at L: the base model itself).");
    report::XyPlot p;
    p.title = "Perplexity against evaluation length";
    p.x.label = "log2(evaluation length / L)   (L = " + std::to_string(L) + ")";
    p.y.label = "perplexity";
    p.y.scale = report::ScaleType::kLog10;
    p.markers = true;
    p.reference_lines = {{ppl_L, "ppl at L"}};
    for (int m = 0; m < kMethods; ++m) {
      report::Series se;
      se.name = Methods()[m].label;
      for (int k = 0; k < kLens; ++k) se.x.push_back(std::log2(double(kMults[k]))), se.y.push_back(ppl(m, k));
      p.series.push_back(se);
    }
    r.html.AddFigure(report::RenderLinePlot(p), "Log-log: 0 on the x axis is the training length.",
                     "fig-ppl");
    std::vector<std::vector<std::string>> rrows;
    report::BarChart bc;
    bc.title = "Recovery of the perplexity rise";
    bc.y.label = "(ppl_none - ppl_method) / (ppl_none - ppl at L)";
    bc.y.min = -1.0;
    bc.y.max = 1.5;
    bc.reference_lines = {{1.0, "full"}, {0.0, "none"}};
    for (int k = 1; k < kLens; ++k) bc.categories.push_back(lab(kMults[k]));
    bool clipped = false;
    for (int m = kPi; m < kMethods; ++m) {
      std::vector<std::string> rw = {Methods()[m].label};
      report::BarSeries bs;
      bs.name = Methods()[m].label;
      for (int k = 1; k < kLens; ++k) {
        rw.push_back(Fmt(recovery[m][k], "%.2f"));
        bs.values.push_back(std::clamp(recovery[m][k], -1.0, 1.5));
        clipped |= recovery[m][k] < -1.0 || recovery[m][k] > 1.5;
      }
      rrows.push_back(rw);
      bc.series.push_back(bs);
    }
    r.html.AddTable({"method", "recovery at 2L", "4L", "8L"}, rrows,
                    "Recovery = (ppl_none - ppl_method) / (ppl_none - ppl_none at L): 1 = the perplexity "
                    "at L, 0 = plain RoPE's, < 0 = worse than plain RoPE; n/a where plain RoPE has no gap.");
    r.html.AddFigure(report::RenderBarChart(bc),
                     clipped ? "Bars are clipped to [-1, 1.5]; the table has the values."
                             : "Recovery per method.",
                     "fig-recovery");
  }
  r.html.AddSection("positions", "Where it breaks: loss by position in the window");
  {
    std::vector<std::vector<std::string>> rows;
    for (int m = 0; m < kMethods; ++m) {
      std::vector<std::string> rw = {Methods()[m].label};
      for (int q = 0; q < kLens; ++q) rw.push_back(Fmt(range_loss(table[m][kLast], q), "%.3f"));
      rows.push_back(rw);
    }
    r.html.AddTable({"method (8L windows)", "positions [0, L)", "[L, 2L)", "[2L, 4L)", "[4L, 8L)"}, rows,
                    "Mean loss (nats/token) over position ranges of the 8L windows, factor 8.");
    using Named = std::vector<std::pair<std::string, const WindowLoss*>>;
    auto position_plot = [&](const std::string& title, const Named& ws) {
      report::XyPlot p;
      p.title = title;
      p.x.label = "position in the window (bins of " + std::to_string(s.bin) + ")";
      p.y.label = "loss (nats/token)";
      p.reference_lines = {{table[kNone][0].loss, "mean at L"}};
      double lo = INFINITY, hi = -INFINITY;
      for (auto& [name, w] : ws) {
        report::Series se;
        se.name = name;
        const std::vector<double> b = BinMeans(w->by_position, s.bin);
        for (size_t i = 0; i < b.size(); ++i) {
          se.x.push_back(static_cast<double>(i * s.bin) + 0.5 * static_cast<double>(s.bin));
          se.y.push_back(b[i]);
          if (std::isfinite(b[i])) lo = std::min(lo, b[i]), hi = std::max(hi, b[i]);
        }
        p.series.push_back(se);
      }
      p.series.push_back({"position L (training length)", {double(L), double(L)}, {lo, hi}});
      return report::RenderLinePlot(p);
    };
    Named at8;
    for (int m = 0; m < kMethods; ++m) at8.push_back({Methods()[m].label, &table[m][kLast]});
    r.html.AddFigure(position_plot("Loss by position, 8L windows", at8),
                     "Every method at 8L (scalings with factor 8; fine-tuned rows: the models "
                     "fine-tuned at 8L).",
                     "fig-position");
    Named none;
    for (int k = 0; k < kLens; ++k) none.push_back({lab(kMults[k]) + " windows", &table[kNone][k]});
    r.html.AddFigure(position_plot("Plain RoPE: loss by position for each window length", none),
                     "Without scaling the loss at a position does not depend on the window length "
                     "(causal attention); it rises where positions pass L.",
                     "fig-position-none");
  }
  r.html.AddSection("fine-tunes", "Fine-tuned models at every length");
  {
    std::vector<std::vector<std::string>> rows;
    for (const FineTuneRun& ft : fts) {
      std::vector<std::string> rw = {std::string(Methods()[ft.method].label) + " at " + lab(ft.mult) +
                                     " (factor " + Fmt(ft.factor, "%g") + ")"};
      for (int j = 0; j < kLens; ++j) rw.push_back(Fmt(std::exp(ft.at[j].loss), "%.3f"));
      rows.push_back(rw);
    }
    std::vector<std::string> fcols = cols;
    fcols[0] = "model (fine-tuned at)";
    r.html.AddTable(fcols, rows, "Perplexity of each fine-tuned model at every length, always with the "
                                 "factor it was fine-tuned with. Base model at L: " + Fmt(ppl_L, "%.3f") + ".");
    report::XyPlot p;
    p.title = "Fine-tuning loss";
    p.x.label = "fine-tuning step";
    p.y.label = "training loss (nats/token)";
    for (const FineTuneRun& ft : fts) {
      report::Series se;
      se.name = std::string(Methods()[ft.method].label) + " at " + lab(ft.mult);
      for (size_t i = 0; i < ft.train_loss.size(); ++i) {
        se.x.push_back(double(i + 1));
        se.y.push_back(ft.train_loss[i]);
      }
      p.series.push_back(se);
    }
    r.html.AddFigure(report::RenderLinePlot(p), "Per step (one batch each).", "fig-ft-loss");
  }
  r.html.AddSection("setup", "Setup");
  {
    report::XyPlot p;
    p.title = "Training loss of the base model at L";
    p.x.label = "step";
    p.y.label = "training loss (nats/token)";
    p.reference_lines = {{unigram, "unigram"}};
    report::Series se;
    se.name = "base";
    for (size_t i = 0; i < pretrain_loss.size(); ++i) {
      se.x.push_back(double(i + 1));
      se.y.push_back(pretrain_loss[i]);
    }
    p.series.push_back(se);
    r.html.AddFigure(report::RenderLinePlot(p), "Pre-training at L.", "fig-train");
    r.html.AddBulletList({
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
        "Evaluation: the first " + std::to_string(predicted) + " validation tokens (+1) in non-overlapping "
            "windows of n tokens, every token predicted exactly once at every n.",
        "YaRN: original context L, ramp alpha " + Fmt(rc.yarn_alpha, "%g") + ", beta " + Fmt(rc.yarn_beta, "%g") +
            " (the paper's Llama values), temperature 0.1 ln s + 1. At L = " + std::to_string(L) +
            " a pair completes r = L theta / 2 pi <= " + Fmt(double(L) / (2 * std::numbers::pi), "%.1f") +
            " rotations, so " + std::to_string(ramp_extrapolate) + " of " + std::to_string(rc.rotary_dim / 2) +
            " pairs keep their frequency (r > beta), " + std::to_string(ramp_blend) + " blend and " +
            std::to_string(ramp_interpolate) + " are interpolated like PI (r < alpha).",
    });
    r.html.AddNote("One seed and a small byte-level model trained for minutes: the numbers show the "
                   "mechanisms at this scale, not what they do in billion-parameter models trained at "
                   "thousands of tokens. YaRN's ramp constants were chosen for L = 2048-4096.");
  }
  return r;
}

}  // namespace

Experiment ExtrapolationExperiment() {
  return {kName,
          "a RoPE model trained at length L, evaluated at 2L-8L with no scaling, position interpolation "
          "(with and without a short fine-tune), NTK and YaRN: perplexity table and recovery",
          RunExtrapolation};
}

}  // namespace attnlab::experiments
