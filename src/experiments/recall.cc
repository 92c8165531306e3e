// recall: can attention with a bounded view of the context (linear attention's fixed-size state, a
// sliding window, a window plus global tokens) recall what full softmax attention recalls as the
// number of facts in the context grows? And why linear attention cannot: a training-free probe of
// attention dilution.
//
// Part 1, trained: multi-query associative recall (MQAR; Arora et al. 2023, "Zoology: measuring
// and improving recall in efficient language models", arXiv:2312.04927), scaled down to CPU
// (experiments/mqar.h): BOS, n key-value pairs, then the n keys again in a random order; each
// query must be answered with its key's value (loss and accuracy on the query positions only).
// One model per attention type, from the same initialisation seed, on the same batches, trained
// on a mixture of kv counts (each step: one micro-batch of ~the same number of tokens per count,
// the counts' mean losses averaged), then evaluated per count on held-out sequences (greedy
// accuracy over the whole vocabulary, the same sequences for every model):
//   softmax  full causal softmax attention (Zoology: attention solves MQAR at every size)
//   linear   causal linear attention, phi = elu + 1 (Katharopoulos et al. 2020, arXiv:2006.16236):
//            one head_dim x head_dim state per head, whatever the context length
//   window   softmax over a causal sliding window (keys i-w..i)
//   sparse   the window plus g global tokens (Longformer, Beltagy et al. 2020, arXiv:2004.05150;
//            model_config.h): the first g positions, visible to every query. In a causal decoder
//            they can only hold what precedes them (here BOS and the first pair).
// Zoology trains 2-layer models of d_model 64 and up on a vocabulary of thousands of tokens and
// sequences of hundreds. Here: 2 attention-only layers, d_model 64, 4 heads, 32 keys + 32 values,
// 4-32 pairs (13-97 tokens), 800 steps per model; --quick: 8 keys + 16 values, 2-8 pairs, 200
// steps. Found by trials: MQAR is learned in a sudden phase transition (an induction circuit: a
// previous-token head, then a head matching the query to it). With GPT-2's init std 0.02 it did not
// come within the 600-2000 steps of any configuration tried (lr 3e-3 or 1e-2, d_model 64 or 128, 4
// or 8 heads, with or without MLPs, 32-128 keys); with init std 0.1 it comes after ~100 (8 keys),
// ~250 (32 keys) and > 600 steps (64 keys): the number of distinct keys sets the timing, hence at
// most 32 pairs in the time budget.
// The window models get the share of queries whose value lies within their receptive field
// (layers x w tokens back, or at a global position): beyond it the answer is independent of
// everything the model sees, which bounds their accuracy (a check).
//
// Part 2, training-free (experiments/recall_probe.h): one query matching one of N random keys,
// d = 64; the attention weight on that key under softmax and under linear attention, from the
// engine's kernels (cross-checked against plain double loops), for N = 16 .. 16384 and a plain
// (q = k_t) and a sharpened (q = 2 k_t) query. Linear attention's positive feature map gives
// every key a weight of the same order, so the target's share falls as ~r/N (log-log slope -1);
// softmax separates it by a margin in the exponent.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "attnlab/model_config.h"
#include "core/json_number.h"
#include "experiments/experiment.h"
#include "experiments/experiment_report.h"
#include "experiments/mqar.h"
#include "experiments/recall_models.h"
#include "experiments/recall_probe.h"
#include "model/gpt.h"
#include "report/svg_plot.h"
#include "train/optimizer.h"
#include "train/token_data.h"

namespace attnlab::experiments {
namespace {

constexpr char kName[] = "recall";

using recall_models::Accuracy;
using recall_models::AccLine;
using recall_models::kWeightDecay;
using recall_models::ModelRun;
using recall_models::Sizes;
using recall_models::SizesFor;
using recall_models::StreamSeed;
using recall_models::TrainModel;
using recall_models::Variant;
using recall_models::Variants;

// Share of queries whose value token can influence the query's output through `layers` stacked
// windows of w keys back (each layer reaches w further; global positions are seen by every layer):
// the value position 2 + 2j is within reach = layers * w of the query position 2n + 1 + i, or is
// one of the first g positions. The query order is a uniform permutation, so slot i asks key j
// with probability 1/n.
double ReachableShare(int64_t n, int64_t reach, int64_t g) {
  int64_t hit = 0;
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      const int64_t q = Mqar::FirstQuery(n) + i, v = 2 + 2 * j;
      hit += (q - v <= reach) || v < g;
    }
  }
  return static_cast<double>(hit) / static_cast<double>(n * n);
}

// The largest accuracy a model can reach when a share `reach` of the queries is within its
// receptive field: the other queries' values are independent of everything it sees (uniform over
// the values), so they are right with probability 1/values; plus 3 standard errors of the
// evaluation's ceil(eval_queries / n) * n queries.
double AccuracyBound(double reach, const Sizes& s, int64_t n) {
  const double p = reach + (1 - reach) / static_cast<double>(s.values);
  const double q = static_cast<double>((s.eval_queries + n - 1) / n * n);
  return std::min(1.0, p + 3 * std::sqrt(p * (1 - p) / q));
}


// ---- What the report stages read: the trained models, the probe, and the numbers derived from
// them ([P] vectors are per kv count, in s.pairs order; probe vectors per length, in
// s.probe_lengths order).
struct Measured {
  Sizes s;
  bool quick = false;
  int64_t vocab = 0;            // the MQAR task's
  std::vector<ModelRun> runs;   // one per Variants() entry, in that order
  std::vector<double> betas;    // the probe's query scales
  DilutionResult probe;
  int64_t reach_len = 0;        // receptive field of `layers` stacked windows: layers * window
  std::vector<double> gap, reach_window, reach_sparse, bound_window, bound_sparse, guess;  // [P]
  std::vector<double> ns, soft1, soft2, lin1, lin2;  // N; mass on the target per (kind, beta)
  double slope_lin1 = NAN, slope_lin2 = NAN, slope_soft1 = NAN, slope_soft2 = NAN;
  double r1 = NAN, r2 = NAN;  // LinearTargetRatio(beta 1, 2)
  double soft_half = NAN;     // N where softmax's mass halves (beta 1)
  double worst_pred = 0;      // linear: max |measured / predicted - 1| over N and beta
  int64_t n_big = 0;          // the largest probe length

  size_t Last() const { return s.pairs.size() - 1; }
};

// The four models by role. An id no run has is an error (FindById), never a fallback.
struct Roles {
  const ModelRun *soft = nullptr, *lin = nullptr, *win = nullptr, *sparse = nullptr;
};
Result<Roles> RolesOf(const Measured& m) {
  Roles r;
  ATTNLAB_ASSIGN_OR_RETURN(r.soft, FindById(m.runs, "softmax", "recall model"));
  ATTNLAB_ASSIGN_OR_RETURN(r.lin, FindById(m.runs, "linear", "recall model"));
  ATTNLAB_ASSIGN_OR_RETURN(r.win, FindById(m.runs, "window", "recall model"));
  ATTNLAB_ASSIGN_OR_RETURN(r.sparse, FindById(m.runs, "sparse", "recall model"));
  return r;
}

// Trains every variant (same init seed, same batches) into m.runs.
Status TrainAll(const ExperimentOptions& o, const Mqar& task, Measured& m) {
  const Sizes& s = m.s;
  Progress(o, kName,
           "MQAR, %zu kv counts up to %ld pairs, vocab %ld keys + %ld values; %zu models: %ld layers, d_model "
           "%ld, %ld heads, %s, %ld steps of %zu x ~%ld tokens, lr %g; window %ld, %ld global",
           s.pairs.size(), static_cast<long>(s.pairs.back()), static_cast<long>(s.keys),
           static_cast<long>(s.values), Variants().size(), static_cast<long>(s.layers),
           static_cast<long>(s.d_model), static_cast<long>(s.heads), s.mlp ? "MLP" : "attention-only",
           static_cast<long>(s.steps), s.pairs.size(), static_cast<long>(s.tokens_per_count), s.lr,
           static_cast<long>(s.window), static_cast<long>(s.global));
  for (const Variant& v : Variants()) {
    ATTNLAB_ASSIGN_OR_RETURN(ModelRun run, TrainModel(o, s, task, v, kName));
    m.runs.push_back(std::move(run));
  }
  return Status::Ok();
}

// The training-free dilution probe (recall_probe.h) at beta 1 and 2.
Status RunProbe(const ExperimentOptions& o, Measured& m) {
  DilutionOptions po;
  po.head_dim = m.s.probe_dim;
  po.lengths = m.s.probe_lengths;
  po.betas = {1.0, 2.0};
  po.seeds = m.s.probe_seeds;
  po.seed = o.seed;
  m.betas = po.betas;
  ATTNLAB_ASSIGN_OR_RETURN(m.probe, RunDilutionProbe(po));
  Progress(o, kName, "dilution probe: %zu points, engine vs plain loops max rel. diff %.2e", m.probe.points.size(),
           m.probe.max_rel_diff);
  return Status::Ok();
}

// Per kv count: the softmax - linear gap, the windows' reachable shares and accuracy bounds, the
// no-recall baseline; the probe's masses, slopes and predictions.
Status Derive(Measured& m) {
  const Sizes& s = m.s;
  ATTNLAB_ASSIGN_OR_RETURN(Roles roles, RolesOf(m));
  const size_t P = s.pairs.size();
  m.reach_len = s.layers * s.window;
  m.gap.assign(P, NAN);
  m.reach_window.assign(P, 0);
  m.reach_sparse.assign(P, 0);
  m.bound_window.assign(P, 0);
  m.bound_sparse.assign(P, 0);
  m.guess.assign(P, 0);
  for (size_t i = 0; i < P; ++i) {
    // No recall at all: answering with the value of a random pair of the context is right when
    // the pair is the query's (1/n) or its value happens to equal the target's.
    const double n = static_cast<double>(s.pairs[i]);
    m.guess[i] = 1 / n + (1 - 1 / n) / static_cast<double>(s.values);
    m.gap[i] = roles.soft->accuracy[i] - roles.lin->accuracy[i];
    m.reach_window[i] = ReachableShare(s.pairs[i], m.reach_len, 0);
    m.reach_sparse[i] = ReachableShare(s.pairs[i], m.reach_len, s.global);
    m.bound_window[i] = AccuracyBound(m.reach_window[i], s, s.pairs[i]);
    m.bound_sparse[i] = AccuracyBound(m.reach_sparse[i], s, s.pairs[i]);
  }

  // Probe summaries: mass against N per (kind, beta), the log-log slopes.
  for (int64_t n : s.probe_lengths) m.ns.push_back(static_cast<double>(n));
  auto masses = [&](double beta, bool linear) {
    std::vector<double> v;
    for (const DilutionPoint& p : m.probe.points) {
      if (p.beta == beta) v.push_back(linear ? p.linear : p.softmax);
    }
    return v;
  };
  m.soft1 = masses(1, false), m.soft2 = masses(2, false), m.lin1 = masses(1, true), m.lin2 = masses(2, true);
  m.slope_lin1 = LogLogSlope(m.ns, m.lin1), m.slope_lin2 = LogLogSlope(m.ns, m.lin2);
  m.slope_soft1 = LogLogSlope(m.ns, m.soft1), m.slope_soft2 = LogLogSlope(m.ns, m.soft2);
  m.r1 = LinearTargetRatio(1), m.r2 = LinearTargetRatio(2);
  // Where softmax's mass halves (beta = 1): p = 1/2 at N - 1 = exp(sqrt(d) - 1/2).
  m.soft_half = 1 + std::exp(std::sqrt(static_cast<double>(s.probe_dim)) - 0.5);
  m.worst_pred = 0;
  for (const DilutionPoint& p : m.probe.points) {
    m.worst_pred = std::max(m.worst_pred, std::fabs(p.linear / p.predicted_linear - 1));
  }
  m.n_big = s.probe_lengths.back();
  return Status::Ok();
}

// ---- Checks: hold at any size and seed (by construction, or by a wide margin).
Status AddChecks(const Measured& m, ExperimentResult& r) {
  const Sizes& s = m.s;
  ATTNLAB_ASSIGN_OR_RETURN(Roles roles, RolesOf(m));
  const size_t P = s.pairs.size(), last = m.Last();
  for (const ModelRun& run : m.runs) {
    bool finite = run.skipped == 0 && run.accuracy.size() == P;
    for (double x : run.train_loss) finite &= std::isfinite(x);
    for (double a : run.accuracy) finite &= a >= 0 && a <= 1;
    r.AddCheck(std::string(run.v->label) + ": training finite, accuracies in [0, 1]", finite,
               std::to_string(run.skipped) + " skipped steps, final loss " +
                   Fmt(run.train_loss.empty() ? NAN : run.train_loss.back(), "%.4f") + ", accuracy " +
                   AccLine(s, run.accuracy));
  }
  // At both sizes softmax is past its phase transition by mid-training (accuracy ~1) at every
  // seed tried, while linear attention (no transition at any size tried) stays near the 1/n
  // of a guess among the context's values: gaps of 0.67-0.73 (quick) and 0.89 (default).
  const double margin = m.quick ? 0.3 : 0.5;
  r.AddCheck("softmax recalls far better than linear attention at the largest count (gap > " +
                 Fmt(margin, "%.1f") + ")",
             m.gap[last] > margin,
             std::to_string(s.pairs[last]) + " pairs: softmax " + Fmt(roles.soft->accuracy[last], "%.3f") +
                 ", linear " + Fmt(roles.lin->accuracy[last], "%.3f") + ", gap " + Fmt(m.gap[last], "%.3f"));
  // A query whose value lies beyond what `layers` stacked windows can reach (and is not a global
  // token) has an answer independent of everything the model sees: such queries are right with
  // probability 1/values. AccuracyBound adds 3 standard errors of the evaluation.
  for (const ModelRun* run : {roles.win, roles.sparse}) {
    const std::vector<double>& bound = run == roles.win ? m.bound_window : m.bound_sparse;
    bool ok = true;
    std::string detail;
    for (size_t i = 0; i < P; ++i) {
      ok &= run->accuracy[i] <= bound[i];
      detail += (i ? ", " : "") + std::to_string(s.pairs[i]) + ": " + Fmt(run->accuracy[i], "%.3f") + " <= " +
                Fmt(bound[i], "%.3f");
    }
    r.AddCheck(std::string(run->v->label) + ": no recall beyond the receptive field (" + std::to_string(s.layers) +
                   " x " + std::to_string(s.window) + " tokens" + (run == roles.sparse ? " + global tokens)" : ")"),
               ok, detail);
  }
  r.AddCheck("probe: the engine's kernels agree with plain double loops (relative difference < 1e-3)",
             m.probe.max_rel_diff < 1e-3, "max relative difference " + Fmt(m.probe.max_rel_diff, "%.2e"));
  r.AddCheck("probe: linear attention's mass on the target falls as ~1/N (log-log slope in [-1.2, -0.8])",
             m.slope_lin1 >= -1.2 && m.slope_lin1 <= -0.8,
             "slope " + Fmt(m.slope_lin1, "%.3f") + " (beta 1), " + Fmt(m.slope_lin2, "%.3f") + " (beta 2)");
  r.AddCheck("probe: linear attention's mass matches r / (r + N - 1) within 15%", m.worst_pred < 0.15,
             "worst relative deviation " + Fmt(m.worst_pred, "%.3f") + "; r = " + Fmt(m.r1, "%.3f") + " (beta 1), " +
                 Fmt(m.r2, "%.3f") + " (beta 2)");
  r.AddCheck("probe: softmax keeps >= 10x linear attention's mass at the largest N",
             m.soft1.back() >= 10 * m.lin1.back(),
             "N = " + std::to_string(m.n_big) + ": softmax " + Fmt(m.soft1.back(), "%.3g") + ", linear " +
                 Fmt(m.lin1.back(), "%.3g") + " (beta 1)");
  return Status::Ok();
}

// ---- Claims: the trained models (Zoology, Based, Longformer), then the probe.
Status AddModelClaims(const Measured& m, ExperimentResult& r) {
  const Sizes& s = m.s;
  ATTNLAB_ASSIGN_OR_RETURN(Roles roles, RolesOf(m));
  const ModelRun &soft = *roles.soft, &lin = *roles.lin, &win = *roles.win, &sparse = *roles.sparse;
  const size_t P = s.pairs.size(), last = m.Last();
  bool all = true;
  for (double a : soft.accuracy) all &= a >= 0.9;
  r.claims.push_back(
      {"attention solves MQAR at every size; linear attention is clearly worse",
       "Arora et al. 2023 (Zoology, arXiv:2312.04927)",
       "softmax accuracy >= 0.9 at every kv count, linear attention at least 0.2 lower at the largest",
       "softmax " + AccLine(s, soft.accuracy) + "; linear " + AccLine(s, lin.accuracy) + "; gap at " +
           std::to_string(s.pairs[last]) + " pairs " + Fmt(m.gap[last], "%.3f"),
       all && m.gap[last] >= 0.2});
  r.claims.push_back({"a fixed-size state recalls less as the number of pairs grows",
                      "Arora et al. 2023 (Zoology); Katharopoulos et al. 2020 (arXiv:2006.16236)",
                      "linear attention's accuracy falls from the smallest to the largest kv count",
                      "linear " + AccLine(s, lin.accuracy) + " (guessing a value of the context: " +
                          AccLine(s, m.guess) + ")",
                      lin.accuracy[last] < lin.accuracy[0] - 0.05});
  // Counts whose whole sequence (1 + 3n tokens) fits in one window: every query sees its pair.
  bool fits_ok = true, any_fit = false;
  for (size_t i = 0; i < P; ++i) {
    if (Mqar::SequenceLength(s.pairs[i]) <= s.window + 1) {
      fits_ok &= win.accuracy[i] >= 0.9;
      any_fit = true;
    }
  }
  r.claims.push_back({"sliding-window attention recalls only what is near the query",
                      "Arora et al. 2024 (Based, arXiv:2402.18668): the recall-memory tradeoff",
                      "the window model recalls >= 0.9 while the whole sequence fits in its window of " +
                          std::to_string(s.window) + " and < 0.6 at " + std::to_string(s.pairs[last]) +
                          " pairs (softmax: all of them)",
                      "window " + AccLine(s, win.accuracy) + "; share within its receptive field (" +
                          std::to_string(s.layers) + " x " + std::to_string(s.window) + " tokens) " +
                          AccLine(s, m.reach_window),
                      any_fit && fits_ok && win.accuracy[last] < 0.6});
  r.claims.push_back({"global tokens give a windowed model access to the whole context",
                      "Beltagy et al. 2020 (Longformer, arXiv:2004.05150), global attention",
                      "window + " + std::to_string(s.global) + " global tokens beats the window alone by > 0.05 at " +
                          std::to_string(s.pairs[last]) + " pairs",
                      "window " + Fmt(win.accuracy[last], "%.3f") + ", window + global " +
                          Fmt(sparse.accuracy[last], "%.3f") +
                          " (in a causal decoder the global tokens are the first positions and hold only "
                          "what precedes them)",
                      sparse.accuracy[last] > win.accuracy[last] + 0.05});
  return Status::Ok();
}

Status AddProbeClaims(const Measured& m, ExperimentResult& r) {
  r.claims.push_back({"linear attention dilutes: the mass on the matching key falls as 1/N",
                      "Katharopoulos et al. 2020 (phi = elu + 1: positive weights of one scale for every key)",
                      "log-log slope of the mass against N in [-1.1, -0.9] (prediction r / (r + N - 1), r = " +
                          Fmt(m.r1, "%.2f") + ")",
                      "slope " + Fmt(m.slope_lin1, "%.3f") + ", mass " + Fmt(m.lin1.front(), "%.3g") + " at N = " +
                          std::to_string(m.s.probe_lengths.front()) + " -> " + Fmt(m.lin1.back(), "%.3g") +
                          " at N = " + std::to_string(m.n_big),
                      m.slope_lin1 >= -1.1 && m.slope_lin1 <= -0.9});
  // Odds on the target p / (1 - p): softmax's grow as exp(margin), linear attention's as r(beta).
  auto odds = [](double p) { return p / (1 - p); };
  const double soft_gain = odds(m.soft2.back()) / odds(m.soft1.back()),
               lin_gain = odds(m.lin2.back()) / odds(m.lin1.back());
  r.claims.push_back({"a sharper query concentrates softmax exponentially, linear attention by a constant",
                      "Katharopoulos et al. 2020 (no temperature reaches through phi = elu + 1); derivation in "
                      "experiments/recall_probe.h",
                      "q = 2 k_t instead of k_t multiplies softmax's odds on the target p / (1 - p) at N = " +
                          std::to_string(m.n_big) + " by > 10, linear attention's by < 1.5 (r: " + Fmt(m.r1, "%.2f") +
                          " -> " + Fmt(m.r2, "%.2f") + ")",
                      "softmax " + Fmt(m.soft1.back(), "%.3f") + " -> " + Fmt(m.soft2.back(), "%.3f") + " (odds x" +
                          Fmt(soft_gain, "%.3g") + "); linear " + Fmt(m.lin1.back(), "%.3g") + " -> " +
                          Fmt(m.lin2.back(), "%.3g") + " (odds x" + Fmt(lin_gain, "%.3g") + ")",
                      soft_gain > 10 && lin_gain < 1.5});
  return Status::Ok();
}

Status AddClaims(const Measured& m, ExperimentResult& r) {
  ATTNLAB_RETURN_IF_ERROR(AddModelClaims(m, r));
  return AddProbeClaims(m, r);
}

// ---- Results JSON.
nlohmann::json ModelsJson(const Measured& m, const ModelRun* sparse) {
  nlohmann::json jmodels = nlohmann::json::array();
  for (const ModelRun& run : m.runs) {
    nlohmann::json loss = nlohmann::json::array();
    for (double x : run.train_loss) loss.push_back(JsonNumber(x));
    const bool windowed = run.config.attention_window >= 0;
    jmodels.push_back(
        {{"model", run.v->id}, {"label", run.v->label}, {"config", nlohmann::json::parse(ModelConfigToJson(run.config))},
         {"accuracy", run.accuracy},
         {"reachable", windowed ? nlohmann::json(&run == sparse ? m.reach_sparse : m.reach_window) : nlohmann::json(nullptr)},
         {"accuracy_bound", windowed ? nlohmann::json(&run == sparse ? m.bound_sparse : m.bound_window) : nlohmann::json(nullptr)},
         {"train_loss", loss}, {"curve", {{"steps", run.curve_steps}, {"accuracy", run.curve}}},
         {"skipped", run.skipped}, {"seconds", run.seconds}});
  }
  return jmodels;
}

nlohmann::json ProbeJson(const Measured& m) {
  const Sizes& s = m.s;
  nlohmann::json jpoints = nlohmann::json::array();
  for (const DilutionPoint& p : m.probe.points) {
    jpoints.push_back({{"n", p.n}, {"beta", p.beta}, {"softmax", p.softmax}, {"linear", p.linear},
                       {"softmax_plain", p.softmax_plain}, {"linear_plain", p.linear_plain},
                       {"predicted_softmax", p.predicted_softmax}, {"predicted_linear", p.predicted_linear}});
  }
  return {{"head_dim", s.probe_dim}, {"seeds", s.probe_seeds}, {"lengths", s.probe_lengths}, {"betas", m.betas},
          {"max_rel_diff", m.probe.max_rel_diff}, {"linear_ratio", {{"1", m.r1}, {"2", m.r2}}},
          {"slopes", {{"softmax_beta1", JsonNumber(m.slope_soft1)}, {"softmax_beta2", JsonNumber(m.slope_soft2)},
                      {"linear_beta1", JsonNumber(m.slope_lin1)}, {"linear_beta2", JsonNumber(m.slope_lin2)}}},
          {"softmax_half_n", m.soft_half}, {"points", jpoints}};
}

Status AddResults(const Measured& m, ExperimentResult& r) {
  const Sizes& s = m.s;
  ATTNLAB_ASSIGN_OR_RETURN(Roles roles, RolesOf(m));
  nlohmann::json jgap = nlohmann::json::array();  // null where not finite
  for (double x : m.gap) jgap.push_back(JsonNumber(x));
  r.results = {
      {"layers", s.layers}, {"d_model", s.d_model}, {"heads", s.heads}, {"mlp", s.mlp}, {"init_std", s.init_std},
      {"keys", s.keys}, {"values", s.values}, {"vocab", m.vocab}, {"pairs", s.pairs},
      {"tokens_per_count", s.tokens_per_count}, {"steps", s.steps}, {"warmup", s.warmup}, {"lr", s.lr},
      {"weight_decay", kWeightDecay}, {"window", s.window}, {"global", s.global}, {"eval_queries", s.eval_queries},
      {"curve_queries", s.curve_queries}, {"models", ModelsJson(m, roles.sparse)}, {"gap", jgap}, {"guess", m.guess},
      {"probe", ProbeJson(m)}};
  return Status::Ok();
}

// ---- Summary.
Status AddSummary(const Measured& m, ExperimentResult& r) {
  const Sizes& s = m.s;
  ATTNLAB_ASSIGN_OR_RETURN(Roles roles, RolesOf(m));
  const size_t last = m.Last();
  std::string sum;
  sum += "At " + std::to_string(s.pairs[last]) + " key-value pairs softmax attention recalls " +
         Fmt(roles.soft->accuracy[last], "%.3f") + " of the queries and linear attention " +
         Fmt(roles.lin->accuracy[last], "%.3f") + " (gap " + Fmt(m.gap[last], "%.3f") + "; per count " +
         AccLine(s, m.gap) + "). ";
  sum += "A sliding window of " + std::to_string(s.window) + " keys recalls " + AccLine(s, roles.win->accuracy) +
         " (share of queries within its " + std::to_string(s.layers) + " x " + std::to_string(s.window) +
         "-token receptive field: " + AccLine(s, m.reach_window) + ")";
  sum += "; with " + std::to_string(s.global) + " global tokens (the first positions, which in a causal decoder "
         "hold only the first pair) " + AccLine(s, roles.sparse->accuracy);
  sum += ". ";
  sum += "Training-free probe (d = " + std::to_string(s.probe_dim) + "): linear attention's mass on the matching key " +
         "falls as N^" + Fmt(m.slope_lin1, "%.2f") + " (" + Fmt(m.lin1.front(), "%.3g") + " at N = " +
         std::to_string(s.probe_lengths.front()) + ", " + Fmt(m.lin1.back(), "%.2g") + " at N = " +
         std::to_string(m.n_big) + ": ~" + Fmt(m.r1, "%.2f") + "/N), softmax's stays at " +
         Fmt(m.soft1.front(), "%.3f") + " -> " + Fmt(m.soft1.back(), "%.3f") + " (" + Fmt(m.soft2.back(), "%.3f") +
         " with a 2x sharper query).";
  r.summary = sum;
  return Status::Ok();
}

// ---- The page.
void AddAccuracySection(const Measured& m, report::HtmlReport& html) {
  const Sizes& s = m.s;
  html.AddSection("accuracy", "Recall accuracy against the number of key-value pairs");
  report::XyPlot p;
  p.title = "MQAR accuracy (held-out queries)";
  p.x.label = "key-value pairs";
  p.x.scale = report::ScaleType::kLog10;
  p.y.label = "accuracy";
  p.y.min = 0.0;
  p.y.max = 1.0;
  p.markers = true;
  std::vector<double> xs;
  for (int64_t n : s.pairs) xs.push_back(static_cast<double>(n));
  for (const ModelRun& run : m.runs) p.series.push_back({run.v->label, xs, run.accuracy});
  p.series.push_back({"reachable by the window (" + std::to_string(m.reach_len) + " tokens)", xs, m.reach_window});
  p.series.push_back({"no recall: a random value of the context", xs, m.guess});
  html.AddFigure(report::RenderLinePlot(p),
                 "Greedy accuracy over the whole vocabulary at the query positions, " +
                     std::to_string(s.eval_queries) + " held-out queries per count, the same for every model. "
                     "'Reachable': share of queries whose value lies within " + std::to_string(s.layers) + " x " +
                     std::to_string(s.window) + " tokens (the receptive field of the stacked windows).",
                 "fig-accuracy");
  std::vector<std::string> cols{"model"};
  for (int64_t n : s.pairs) cols.push_back(std::to_string(n) + " pairs");
  std::vector<std::vector<std::string>> rows;
  auto add_row = [&](const std::string& label, const std::vector<double>& v) {
    std::vector<std::string> row{label};
    for (double x : v) row.push_back(Fmt(x, "%.3f"));
    rows.push_back(row);
  };
  for (const ModelRun& run : m.runs) add_row(run.v->label, run.accuracy);
  add_row("gap softmax - linear", m.gap);
  add_row("no recall: a random value of the context", m.guess);
  add_row("reachable: window", m.reach_window);
  add_row("reachable: window + global", m.reach_sparse);
  std::vector<std::string> lens{"sequence length"};
  for (int64_t n : s.pairs) lens.push_back(std::to_string(Mqar::SequenceLength(n)));
  rows.push_back(lens);
  html.AddTable(cols, rows,
                "Accuracy per model and kv count; a window model cannot beat its reachable share plus (1 - "
                "share) / " + std::to_string(s.values) + " (chance on the unreachable queries), which a check enforces.");
}

void AddTrainingSection(const Measured& m, report::HtmlReport& html) {
  const Sizes& s = m.s;
  const size_t last = m.Last();
  html.AddSection("training", "Training");
  report::XyPlot p;
  p.title = "Accuracy at " + std::to_string(s.pairs[last]) + " pairs during training";
  p.x.label = "step";
  p.y.label = "accuracy";
  p.y.min = 0.0;
  p.y.max = 1.0;
  p.markers = true;
  report::XyPlot l;
  l.title = "Training loss (mean over the kv counts, query positions only)";
  l.x.label = "step";
  l.y.label = "cross-entropy (nats)";
  for (const ModelRun& run : m.runs) {
    report::Series se{run.v->label, {}, {}};
    for (size_t k = 0; k < run.curve.size(); ++k) {
      se.x.push_back(static_cast<double>(run.curve_steps[k]));
      se.y.push_back(run.curve[k][last]);
    }
    p.series.push_back(se);
    l.series.push_back({run.v->label, {}, run.train_loss});
  }
  html.AddFigure(report::RenderLinePlot(p),
                 std::to_string(s.curve_queries) + " held-out queries per point. MQAR is learned in a sudden phase "
                 "transition (an induction circuit: a previous-token head, then a matching head).",
                 "fig-curve");
  html.AddFigure(report::RenderLinePlot(l), "Per step, before the update.", "fig-loss");
}

void AddDilutionSection(const Measured& m, report::HtmlReport& html) {
  const Sizes& s = m.s;
  const std::vector<double>& ns = m.ns;
  html.AddSection("dilution", "Training-free probe: attention mass on the matching key");
  report::XyPlot p;
  p.title = "Mass on the matching key among N random keys (d = " + std::to_string(s.probe_dim) + ")";
  p.x.label = "N (keys)";
  p.x.scale = report::ScaleType::kLog10;
  p.y.label = "attention on the target";
  p.y.scale = report::ScaleType::kLog10;
  p.markers = true;
  std::vector<double> pred, pred_soft;  // beta 1
  for (const DilutionPoint& q : m.probe.points) {
    if (q.beta == 1) pred.push_back(q.predicted_linear), pred_soft.push_back(q.predicted_softmax);
  }
  p.series = {{"softmax, q = k_t", ns, m.soft1},
              {"softmax, q = 2 k_t", ns, m.soft2},
              {"linear (elu+1), q = k_t", ns, m.lin1},
              {"linear (elu+1), q = 2 k_t", ns, m.lin2},
              {"predicted linear: r / (r + N - 1), r = " + Fmt(m.r1, "%.2f"), ns, pred},
              {"predicted softmax (q = k_t)", ns, pred_soft}};
  html.AddFigure(report::RenderLinePlot(p),
                 "Mean over " + std::to_string(s.probe_seeds) + " seeds of keys ~ N(0, I), from the engine's kernels "
                 "(flash softmax, chunked linear attention). Log-log slopes: linear " + Fmt(m.slope_lin1, "%.3f") +
                     " (q = k_t), " + Fmt(m.slope_lin2, "%.3f") + " (q = 2 k_t); softmax " +
                     Fmt(m.slope_soft1, "%.3f") + ", " + Fmt(m.slope_soft2, "%.3f") + ".",
                 "fig-dilution");
  std::vector<std::vector<std::string>> rows;
  for (size_t i = 0; i < ns.size(); ++i) {
    rows.push_back({std::to_string(s.probe_lengths[i]), Fmt(m.soft1[i], "%.4g"), Fmt(pred_soft[i], "%.4g"),
                    Fmt(m.soft2[i], "%.4g"), Fmt(m.lin1[i], "%.4g"), Fmt(pred[i], "%.4g"), Fmt(m.lin2[i], "%.4g"),
                    Fmt(m.lin1[i] * ns[i], "%.3f")});
  }
  rows.push_back({"log-log slope", Fmt(m.slope_soft1, "%.3f"), "", Fmt(m.slope_soft2, "%.3f"),
                  Fmt(m.slope_lin1, "%.3f"), "", Fmt(m.slope_lin2, "%.3f"), ""});
  html.AddTable({"N", "softmax (q = k_t)", "predicted", "softmax (q = 2 k_t)", "linear (q = k_t)", "predicted",
                 "linear (q = 2 k_t)", "N x linear"},
                rows,
                "Linear attention gives every key a weight phi(q).phi(k) of the same order, so the target gets "
                "~r/N (r = E[phi(x)^2] / E[phi(x)]^2 = " + Fmt(m.r1, "%.3f") + " for x ~ N(0, 1)). Softmax separates "
                "it by a margin in the exponent: p ~= 1 / (1 + (N - 1) exp(1/2 - sqrt(d))) at |k|^2 = d, which halves "
                "only at N ~= " + Fmt(m.soft_half, "%.0f") + " ('predicted' averages it over the spread of |k|^2); "
                "doubling the query doubles the margin, while linear attention's r grows to " + Fmt(m.r2, "%.3f") +
                " only.");
}

void AddSetup(const Measured& m, report::HtmlReport& html) {
  const Sizes& s = m.s;
  AddSetupSection(html, {
      "Task (src/experiments/mqar.h; Arora et al. 2023): BOS, n pairs k v (distinct keys of " + std::to_string(s.keys) +
          ", values of " + std::to_string(s.values) + " drawn with repetition), then the n keys in a random order; "
          "the target at each query is its value, nothing else is scored. Sequence length 1 + 3n.",
      "Models: " + std::to_string(s.layers) + " pre-LN attention-only blocks, d_model " + std::to_string(s.d_model) +
          ", " + std::to_string(s.heads) + " heads, RoPE, tied embeddings, init std " + Fmt(s.init_std, "%g") +
          " (GPT-2's 0.02 leaves the attention logits ~0 and delays the induction circuit's phase transition by "
          "thousands of steps). Window: keys i-" + std::to_string(s.window) + "..i; sparse: the same window plus " +
          std::to_string(s.global) + " global positions (BOS and the first pair). Same init seed, same batches.",
      "Training: AdamW lr " + Fmt(s.lr, "%g") + " (warmup " + std::to_string(s.warmup) + ", cosine to lr/10), weight decay " +
          Fmt(kWeightDecay, "%g") + ", clip 1; each step one micro-batch of ~" + std::to_string(s.tokens_per_count) +
          " tokens per kv count, the counts' mean losses averaged; " + std::to_string(s.steps) + " steps.",
      "Probe (src/experiments/recall_probe.h): " + std::to_string(s.probe_seeds) + " seeds per N, d = " +
          std::to_string(s.probe_dim) + ", engine kernels cross-checked against double loops (max relative "
          "difference " + Fmt(m.probe.max_rel_diff, "%.1e") + ").",
  });
}

Status AddHtml(const Measured& m, ExperimentResult& r) {
  const Sizes& s = m.s;
  ATTNLAB_ASSIGN_OR_RETURN(Roles roles, RolesOf(m));
  const size_t last = m.Last();
  r.html = report::HtmlReport("Associative recall: softmax, linear, window and sparse attention");
  r.html.SetSubtitle("MQAR (Zoology) with " + std::to_string(s.pairs.front()) + "-" + std::to_string(s.pairs.back()) +
                     " key-value pairs; " + std::to_string(s.layers) + "-layer attention-only models, d_model " +
                     std::to_string(s.d_model) + ", " + std::to_string(s.heads) + " heads, " + std::to_string(s.steps) +
                     " steps each; and a training-free dilution probe");
  r.html.AddSummaryFact("accuracy at " + std::to_string(s.pairs[last]) + " pairs: softmax / linear",
                        Fmt(roles.soft->accuracy[last], "%.3f") + " / " + Fmt(roles.lin->accuracy[last], "%.3f") +
                            " (gap " + Fmt(m.gap[last], "%.3f") + ")");
  r.html.AddSummaryFact("accuracy at " + std::to_string(s.pairs[last]) + " pairs: window / window + global",
                        Fmt(roles.win->accuracy[last], "%.3f") + " / " + Fmt(roles.sparse->accuracy[last], "%.3f"));
  r.html.AddSummaryFact("probe slope of mass vs N: linear / softmax (beta 1)",
                        Fmt(m.slope_lin1, "%.3f") + " / " + Fmt(m.slope_soft1, "%.3f"));
  r.html.AddSummaryFact("probe mass at N = " + std::to_string(m.n_big) + ": softmax / linear",
                        Fmt(m.soft1.back(), "%.3g") + " / " + Fmt(m.lin1.back(), "%.3g"));
  AddAccuracySection(m, r.html);
  AddTrainingSection(m, r.html);
  AddDilutionSection(m, r.html);
  AddSetup(m, r.html);
  return Status::Ok();
}

// configure -> train the four models -> run the probe -> derive -> report.
Result<ExperimentResult> RunRecall(const ExperimentOptions& o) {
  auto m = std::make_unique<Measured>();
  m->s = SizesFor(o.quick);
  m->quick = o.quick;
  ATTNLAB_ASSIGN_OR_RETURN(Mqar task, Mqar::Create({m->s.keys, m->s.values}));
  m->vocab = task.vocab();
  ATTNLAB_RETURN_IF_ERROR(TrainAll(o, task, *m));
  ATTNLAB_RETURN_IF_ERROR(RunProbe(o, *m));
  ATTNLAB_RETURN_IF_ERROR(Derive(*m));
  return AssembleReport<Measured>(*m, {AddChecks, AddClaims, AddResults, AddSummary, AddHtml});
}

}  // namespace

Experiment RecallExperiment() {
  return {kName,
          "multi-query associative recall (Zoology's MQAR) with softmax, linear, window and sparse "
          "attention: accuracy against the number of key-value pairs; plus a training-free dilution "
          "probe (attention mass on the matching key as N grows)",
          RunRecall};
}

}  // namespace attnlab::experiments
