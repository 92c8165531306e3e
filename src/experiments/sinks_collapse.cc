// sinks-and-collapse: are attention sinks and attention collapse one phenomenon? Barbero et al.
// 2025 ("Why do LLMs attend to the first token?", arXiv:2504.02732, COLM 2025) argue that a sink
// is how a softmax head avoids over-mixing (the route to rank / representational collapse), and
// report that sinks grow stronger with depth and with the pre-training context length.
//
// Small attention-only models on the Bigram-Backcopy task (experiments/bigram_backcopy.h, Guo et
// al. 2024; the setup of the sinks experiment, sinks.cc, where sinks emerge in ~1000 steps) are
// trained with the same initialisation seed and the same number of training tokens each:
//   (a) sink strength against depth (layers in Sizes::depths at a fixed context) and against the
//       training context length (Sizes::lens at a fixed depth; batch = tokens per step / length,
//       so every variant sees the same tokens). Sink strength: alpha_1 per layer x head and
//       Sink_1^0.3 (diagnostics/first_token_probe.h; Gu et al. 2024, arXiv:2410.10781, eq. 1) on
//       held-out sequences of the training length, and for the context sweep also on sequences of
//       the shortest length (the same queries for every model);
//   (b) at one depth, the baseline against models whose attention cannot (or need not) put its
//       attention on the first token: mask-first-key (no query sees token 0), softmax1 (Miller
//       2023: an implicit zero logit) and sigmoid attention without normalisation (Ramapuram et
//       al. 2024). Per layer, on held-out sequences: the collapse metrics of
//       experiments/collapse_probe.h (relative residual, mean token cosine, normalised attention
//       entropy), and a perturbation sensitivity in the spirit of Barbero et al.'s over-mixing
//       analysis: replace one token in the middle of every sequence (position p = T / 2, by
//       another data token: its embedding changes by e_new - e_old) and measure, at every depth,
//       how much the residual stream of the LATER tokens t > p changes: mean over t > p of
//       ||h'_t - h_t|| (absolute) and of ||h'_t - h_t|| / ||h_t|| (relative; the models'
//       stream norms differ). Tokens t < p cannot change (causality), which is checked exactly.
// No N x N attention map is materialised.
// The experiment reads: configure (SizesFor, the Bigram-Backcopy data of sink_training.h) -> run
// variants (TrainAll: every model x seed once, Train) -> measure (MeasureSinks, MeasureCollapse,
// MeasurePerturbation; Aggregate over seeds) -> report (AddChecks, AddClaims, AddResults,
// AddSummary, AddHtml).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/json_number.h"
#include "diagnostics/first_token_probe.h"
#include "experiments/collapse_probe.h"
#include "experiments/experiment.h"
#include "experiments/experiment_report.h"
#include "experiments/sink_training.h"
#include "report/svg_plot.h"
#include "train/token_data.h"
#include "train/trainer.h"

namespace attnlab::experiments {
namespace {

constexpr char kName[] = "sinks-and-collapse";

struct Sizes {
  std::vector<int64_t> depths;  // (a) depth sweep at len depth_len
  int64_t depth_len;
  std::vector<int64_t> lens;  // (a) context sweep at depth len_depth
  int64_t len_depth;
  int64_t collapse_depth;  // (b) at len depth_len; must be in depths (shares the baseline)
  int64_t d_model, heads, steps, tokens_per_step, eval_batches, probe_sequences, probe_every;
  double lr;
  int64_t seeds;  // trainings per model (seed k: init and batches from --seed + 7919 k)
};

// The model and optimiser of the sinks experiment (sinks.cc: d_model 32, 8 heads, lr 2e-2, 1000
// steps of 1024 tokens; seed 0 of the 2-layer, T 64 baseline is exactly sinks.cc's baseline).
// Default: 10 models x 2 seeds (~265 s per seed on 1 busy thread); quick: 7 short ones, 1 seed.
Sizes SizesFor(bool quick) {
  if (quick) return Sizes{{1, 2, 4}, 32, {16, 32, 64}, 2, 2, 32, 8, 200, 512, 2, 32, 20, 2e-2, 1};
  return Sizes{{1, 2, 4, 6}, 64, {16, 32, 64, 128}, 2, 4, 32, 8, 1000, 1024, 4, 64, 50, 2e-2, 2};
}

enum class Kind { kBaseline, kMaskFirstKey, kSoftmax1, kSigmoid };

const char* KindId(Kind k) {
  switch (k) {
    case Kind::kBaseline: return "baseline";
    case Kind::kMaskFirstKey: return "mask_first_key";
    case Kind::kSoftmax1: return "softmax1";
    case Kind::kSigmoid: return "sigmoid";
  }
  return "?";
}
const char* KindLabel(Kind k) {
  switch (k) {
    case Kind::kBaseline: return "baseline (softmax)";
    case Kind::kMaskFirstKey: return "mask first key";
    case Kind::kSoftmax1: return "softmax1";
    case Kind::kSigmoid: return "sigmoid (no normalisation)";
  }
  return "?";
}

// Validation tokens: the probe sequences at every length and the evaluation batches.
int64_t ValTokens(const Sizes& s) {
  int64_t val = 0;
  for (int64_t len : s.lens) val = std::max(val, s.probe_sequences * (len + 1));
  val = std::max(val, s.probe_sequences * (s.depth_len + 1));
  return std::max(val, s.eval_batches * s.tokens_per_step * 2);
}

// alpha_1 summaries (sink_training.h) with the matrix (per seed) and its uniform reference.
struct SinkStats : SinkSummary {
  std::vector<std::vector<double>> alpha1;
  double uniform = 0;  // mean alpha_1 of uniform causal attention: H_T / T
};

SinkStats Stats(std::vector<std::vector<double>> a, int64_t T) {
  SinkStats s;
  static_cast<SinkSummary&>(s) = Summarise(a);
  s.alpha1 = std::move(a);
  s.uniform = UniformAlpha1(T);
  return s;
}

// alpha_1 on `sequences` held-out sequences of length T (BOS first), in batches of up to 16.
Result<SinkStats> MeasureSinks(Gpt& g, const SinkData& data, int64_t sequences, int64_t T) {
  FirstTokenProbe probe(g.config());
  const int64_t B = std::min<int64_t>(16, sequences);
  std::vector<int32_t> in(B * T), tg(B * T);
  g.set_observer(&probe);
  int64_t seen = 0;
  for (int64_t k = 0; seen < sequences; ++k) {
    if (!EvalBatch(data.val, k, B, T, static_cast<int32_t>(data.vocab), in.data(), tg.data())) break;
    const Status st = g.Forward(in.data(), nullptr, B, T, nullptr);
    if (!st.ok()) {
      g.set_observer(nullptr);
      return st;
    }
    seen += B;
  }
  g.set_observer(nullptr);
  if (seen == 0) return Status::InvalidArgument("the validation data is shorter than one batch");
  return Stats(probe.alpha1(), T);
}

struct Perturbation {
  // Per depth 0..L (0 = the embedding, L = the final stream before ln_f): mean over sequences
  // and positions t > p of ||dh_t|| and ||dh_t|| / ||h_t||.
  std::vector<double> abs, rel;
  double before_max = 0;     // largest |dh| at t < p, any depth (causality: exactly 0)
  double embedding_max = 0;  // largest |dh| at depth 0 outside position p (exactly 0)
  int64_t position = 0;
};

Result<Perturbation> MeasurePerturbation(Gpt& g, const SinkData& data, int64_t B, int64_t T) {
  const ModelConfig& c = g.config();
  const int64_t L = c.n_layer, C = c.d_model, N = B * T;
  std::vector<int32_t> in(N), tg(N);
  if (!EvalBatch(data.val, 0, B, T, static_cast<int32_t>(data.vocab), in.data(), tg.data())) {
    return Status::InvalidArgument("the validation data is shorter than one batch");
  }
  ATTNLAB_RETURN_IF_ERROR(g.Forward(in.data(), nullptr, B, T, nullptr));
  if (g.last_len() != T) return Status::Internal("unexpected sequence length (sink token?)");
  std::vector<float> before((L + 1) * N * C);
  for (int64_t l = 0; l <= L; ++l) std::copy(g.residual(l), g.residual(l) + N * C, before.begin() + l * N * C);
  Perturbation r;
  r.position = T / 2;
  const int64_t p = r.position, V = data.vocab;
  for (int64_t b = 0; b < B; ++b) {
    int32_t& x = in[b * T + p];
    x = static_cast<int32_t>((x + 1 + b % (V - 1)) % V);  // another data token, never the BOS
  }
  ATTNLAB_RETURN_IF_ERROR(g.Forward(in.data(), nullptr, B, T, nullptr));
  r.abs.assign(L + 1, 0.0);
  r.rel.assign(L + 1, 0.0);
  for (int64_t l = 0; l <= L; ++l) {
    const float* h1 = g.residual(l);
    const float* h0 = before.data() + l * N * C;
    double sa = 0, sr = 0;
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t t = 0; t < T; ++t) {
        const int64_t row = (b * T + t) * C;
        double d2 = 0, n2 = 0, dmax = 0;
        for (int64_t k = 0; k < C; ++k) {
          const double d = static_cast<double>(h1[row + k]) - h0[row + k];
          d2 += d * d;
          n2 += static_cast<double>(h0[row + k]) * h0[row + k];
          dmax = std::max(dmax, std::fabs(d));
        }
        if (t < p) r.before_max = std::max(r.before_max, dmax);
        if (l == 0 && t != p) r.embedding_max = std::max(r.embedding_max, dmax);
        if (t > p) {
          sa += std::sqrt(d2);
          sr += n2 > 0 ? std::sqrt(d2 / n2) : NAN;
        }
      }
    }
    const double n = static_cast<double>(B * (T - 1 - p));
    r.abs[l] = sa / n;
    r.rel[l] = sr / n;
  }
  return r;
}

// One training (a seed of a model), or the mean over a model's seeds (Aggregate below).
struct Run {
  std::string id, label, sweep;  // sweep: "depth", "context", "collapse" (first one that trained it)
  Kind kind = Kind::kBaseline;
  int64_t layers = 0, len = 0, batch = 0;
  int64_t seed_index = 0;
  uint64_t seed = 0;
  std::vector<const Run*> seeds;  // an aggregate's trainings
  double init_val_loss = NAN, val_loss = NAN;
  std::vector<double> train_loss;
  std::vector<SinkEmergence> emergence;
  SinkStats sinks;         // on sequences of the training length
  SinkStats sinks_common;  // on sequences of the shortest context of the sweep
  std::vector<DepthMetrics> collapse;  // (b) only
  Perturbation perturb;                // (b) only
  bool measured_collapse = false;
  double first_token_sensitivity = NAN;  // (b) only; an aggregate: the largest over its seeds
  double seconds = 0;
};

std::string ModelId(Kind kind, int64_t layers, int64_t len) {
  return std::string(KindId(kind)) + "_L" + std::to_string(layers) + "_T" + std::to_string(len);
}
std::string ModelLabel(Kind kind, int64_t layers, int64_t len) {
  return std::string(KindLabel(kind)) + ", " + std::to_string(layers) + " layer" + (layers == 1 ? "" : "s") +
         ", T " + std::to_string(len);
}

// The sinks experiment's model and optimiser (sink_training.h) at this depth and length, batch =
// tokens per step / len, with the variant's attention.
Result<std::unique_ptr<Gpt>> MakeModel(const Sizes& s, const SinkData& data, const Run& run, TrainOptions& to) {
  SinkModelSizes m;
  m.layers = run.layers;
  m.d_model = s.d_model;
  m.heads = s.heads;
  m.len = run.len;
  m.batch = run.batch;
  m.steps = s.steps;
  m.eval_batches = s.eval_batches;
  m.probe_every = s.probe_every;
  m.lr = s.lr;
  ATTNLAB_ASSIGN_OR_RETURN(ModelConfig c, SinkModelConfig(m, data.vocab));
  if (run.kind == Kind::kMaskFirstKey) c.mask_first_key = true;
  if (run.kind == Kind::kSoftmax1) c.softmax = SoftmaxKind::kSoftmax1;
  if (run.kind == Kind::kSigmoid) c.softmax = SoftmaxKind::kSigmoid;
  ATTNLAB_ASSIGN_OR_RETURN(to, SinkTrainOptions(m, run.seed, data.vocab));
  ATTNLAB_ASSIGN_OR_RETURN(std::unique_ptr<Gpt> g, Gpt::Create(c));
  g->params().Initialize(c, run.seed);
  return g;
}

// Trains one model at one seed and measures it: sinks at its length and at common_len, and with
// `collapse` the collapse metrics and the perturbation.
Result<Run> Train(const ExperimentOptions& o, const Sizes& s, const SinkData& data, Kind kind, int64_t layers,
                  int64_t len, bool collapse, int64_t common_len, int64_t seed_index) {
  const auto t0 = std::chrono::steady_clock::now();
  Run run;
  run.kind = kind;
  run.layers = layers;
  run.len = len;
  run.batch = std::max<int64_t>(1, s.tokens_per_step / len);
  run.seed_index = seed_index;
  run.seed = o.seed + 7919 * static_cast<uint64_t>(seed_index);
  run.id = ModelId(kind, layers, len) + "_s" + std::to_string(seed_index);
  run.label = ModelLabel(kind, layers, len) + (s.seeds > 1 ? ", seed " + std::to_string(seed_index) : "");
  TrainOptions to;
  ATTNLAB_ASSIGN_OR_RETURN(std::unique_ptr<Gpt> g, MakeModel(s, data, run, to));
  ATTNLAB_ASSIGN_OR_RETURN(SinkTraining t, TrainInTwoHalves(*g, to, data, /*probe_at_start=*/false, o, kName, run.label));
  run.init_val_loss = t.init_val_loss;
  run.val_loss = t.val_loss;
  run.train_loss = std::move(t.train_loss);
  run.emergence = std::move(t.emergence);
  ATTNLAB_ASSIGN_OR_RETURN(run.sinks, MeasureSinks(*g, data, s.probe_sequences, len));
  ATTNLAB_ASSIGN_OR_RETURN(run.sinks_common, MeasureSinks(*g, data, s.probe_sequences, std::min(common_len, len)));
  if (collapse) {
    std::vector<int32_t> in(s.probe_sequences * len), tg(in.size());
    if (!EvalBatch(data.val, 0, s.probe_sequences, len, static_cast<int32_t>(data.vocab), in.data(), tg.data())) {
      return Status::InvalidArgument("the validation data is shorter than the probe sequences");
    }
    ATTNLAB_ASSIGN_OR_RETURN(run.collapse, MeasureCollapse(*g, in, s.probe_sequences, len));
    ATTNLAB_ASSIGN_OR_RETURN(run.perturb, MeasurePerturbation(*g, data, s.probe_sequences, len));
    ATTNLAB_ASSIGN_OR_RETURN(run.first_token_sensitivity,
                             FirstTokenSensitivity(*g, data.val, s.probe_sequences, len,
                                                   static_cast<int32_t>(data.vocab), data.vocab));
    run.measured_collapse = true;
  }
  run.seconds = SecondsSince(t0);
  std::string extra;
  if (collapse) {
    const DepthMetrics& d = run.collapse.back();
    extra = " | last layer: rel. residual " + Fmt(d.relative_residual, "%.3f") + ", cosine " +
            Fmt(d.mean_cosine, "%.3f") + ", perturbation " + Fmt(run.perturb.rel.back(), "%.3f");
  }
  Progress(o, kName, "%-40s val %.3f | Sink_1 %.2f | max alpha_1 %.3f | mean alpha_1 %.3f%s | %.0f s",
           run.label.c_str(), run.val_loss, run.sinks.rate, run.sinks.max, run.sinks.mean, extra.c_str(),
           run.seconds);
  return run;
}

// The mean over a model's seeds of every scalar and per-depth metric (max alpha_1: the mean of
// the seeds' maxima; the alpha_1 matrices stay per seed). Checks of exactness (causality) take
// the largest value over the seeds.
Run Aggregate(const std::vector<const Run*>& v) {
  Run a = *v.front();
  a.id = ModelId(a.kind, a.layers, a.len);
  a.label = ModelLabel(a.kind, a.layers, a.len);
  a.seeds = v;
  a.train_loss.clear();
  a.sinks.alpha1.clear();
  a.sinks_common.alpha1.clear();
  const double n = static_cast<double>(v.size());
  auto mean = [&](const std::function<double(const Run&)>& f) {
    double sum = 0;
    for (const Run* r : v) sum += f(*r);
    return sum / n;
  };
  a.init_val_loss = mean([](const Run& r) { return r.init_val_loss; });
  a.val_loss = mean([](const Run& r) { return r.val_loss; });
  a.seconds = n * mean([](const Run& r) { return r.seconds; });
  for (SinkStats Run::*st : {&Run::sinks, &Run::sinks_common}) {
    (a.*st).rate = mean([&](const Run& r) { return (r.*st).rate; });
    (a.*st).max = mean([&](const Run& r) { return (r.*st).max; });
    (a.*st).mean = mean([&](const Run& r) { return (r.*st).mean; });
    (a.*st).count = mean([&](const Run& r) { return (r.*st).count; });
  }
  for (size_t i = 0; i < a.emergence.size(); ++i) {
    a.emergence[i].sink_rate = mean([&](const Run& r) { return r.emergence[i].sink_rate; });
    a.emergence[i].max_alpha1 = mean([&](const Run& r) { return r.emergence[i].max_alpha1; });
    a.emergence[i].mean_alpha1 = mean([&](const Run& r) { return r.emergence[i].mean_alpha1; });
  }
  if (a.measured_collapse) {
    for (size_t l = 0; l < a.collapse.size(); ++l) {
      for (double DepthMetrics::*f : {&DepthMetrics::relative_residual, &DepthMetrics::mean_cosine,
                                      &DepthMetrics::norm, &DepthMetrics::entropy, &DepthMetrics::head_cosine}) {
        a.collapse[l].*f = mean([&](const Run& r) { return r.collapse[l].*f; });
      }
      a.perturb.abs[l] = mean([&](const Run& r) { return r.perturb.abs[l]; });
      a.perturb.rel[l] = mean([&](const Run& r) { return r.perturb.rel[l]; });
    }
    for (const Run* r : v) {
      const double x = r->first_token_sensitivity, m = a.first_token_sensitivity;  // NaN-sticky max
      a.first_token_sensitivity = std::isnan(x) || std::isnan(m) ? NAN : std::max(m, x);
      a.perturb.before_max = std::max(a.perturb.before_max, r->perturb.before_max);
      a.perturb.embedding_max = std::max(a.perturb.embedding_max, r->perturb.embedding_max);
    }
  }
  return a;
}

// "non-decreasing along the sweep and last > first"
bool Increases(const std::vector<double>& v) {
  if (v.size() < 2) return false;
  for (size_t i = 1; i < v.size(); ++i) {
    if (!(v[i] >= v[i - 1])) return false;
  }
  return v.back() > v.front();
}

// Per layer, over a model's seeds: mean alpha_1 over heads, and heads with alpha_1 > 0.3.
void ByLayer(const Run& model, std::vector<double>& mean, std::vector<double>& heads) {
  mean.assign(model.layers, 0.0);
  heads.assign(model.layers, 0.0);
  for (const Run* r : model.seeds) {
    for (int64_t l = 0; l < model.layers && l < static_cast<int64_t>(r->sinks.alpha1.size()); ++l) {
      const std::vector<double>& a = r->sinks.alpha1[l];
      for (double x : a) {
        mean[l] += x / static_cast<double>(a.size() * model.seeds.size());
        heads[l] += (x > kSinkEps) / static_cast<double>(model.seeds.size());
      }
    }
  }
}

// ---- What the report stages read: every training, every model (mean over seeds), the sweeps.
struct Measured {
  Sizes s;
  SinkData data;
  int64_t common_len = 0;  // the shortest training context: the common probe length
  std::vector<Run> runs;    // every training (model x seed), once
  std::vector<Run> models;  // the mean over each model's seeds (addresses fixed once built)
  std::vector<const Run*> by_depth, by_len;  // (a) the sweeps, into models
  std::vector<const Run*> cmp;  // (b) baseline, then the no-sink kinds, at collapse_depth
};

const Kind kNoSink[] = {Kind::kMaskFirstKey, Kind::kSoftmax1, Kind::kSigmoid};

Result<const Run*> FindModel(const Measured& m, Kind k, int64_t layers, int64_t len) {
  return FindById(m.models, ModelId(k, layers, len), "sinks-and-collapse model");
}

// Trains every model of the sweeps and the comparison at every seed, each once (a model in two
// sweeps is trained for the first).
Status TrainAll(const ExperimentOptions& o, Measured& m) {
  const Sizes& s = m.s;
  auto get = [&](Kind k, int64_t layers, int64_t len, bool collapse, const char* sweep) -> Status {
    for (const Run& r : m.runs) {
      if (r.kind == k && r.layers == layers && r.len == len) return Status::Ok();
    }
    for (int64_t seed = 0; seed < s.seeds; ++seed) {
      ATTNLAB_ASSIGN_OR_RETURN(Run r, Train(o, s, m.data, k, layers, len, collapse, m.common_len, seed));
      r.sweep = sweep;
      m.runs.push_back(std::move(r));
    }
    return Status::Ok();
  };
  for (int64_t L : s.depths) {
    ATTNLAB_RETURN_IF_ERROR(get(Kind::kBaseline, L, s.depth_len, L == s.collapse_depth, "depth"));
  }
  for (int64_t T : s.lens) ATTNLAB_RETURN_IF_ERROR(get(Kind::kBaseline, s.len_depth, T, false, "context"));
  for (Kind k : kNoSink) ATTNLAB_RETURN_IF_ERROR(get(k, s.collapse_depth, s.depth_len, true, "collapse"));
  return Status::Ok();
}

// The models (the mean over their seeds; runs is complete, its addresses stay fixed now) and the
// sweeps' pointers into them. NotFound when a sweep names a model that was not trained.
Status BuildModels(Measured& m) {
  const Sizes& s = m.s;
  for (const Run& run : m.runs) {
    if (run.seed_index != 0) continue;
    std::vector<const Run*> v;
    for (const Run& other : m.runs) {
      if (other.kind == run.kind && other.layers == run.layers && other.len == run.len) v.push_back(&other);
    }
    m.models.push_back(Aggregate(v));
  }
  for (int64_t L : s.depths) {
    ATTNLAB_ASSIGN_OR_RETURN(const Run* r, FindModel(m, Kind::kBaseline, L, s.depth_len));
    m.by_depth.push_back(r);
  }
  for (int64_t T : s.lens) {
    ATTNLAB_ASSIGN_OR_RETURN(const Run* r, FindModel(m, Kind::kBaseline, s.len_depth, T));
    m.by_len.push_back(r);
  }
  ATTNLAB_ASSIGN_OR_RETURN(const Run* base, FindModel(m, Kind::kBaseline, s.collapse_depth, s.depth_len));
  m.cmp.push_back(base);
  for (Kind k : kNoSink) {
    ATTNLAB_ASSIGN_OR_RETURN(const Run* r, FindModel(m, k, s.collapse_depth, s.depth_len));
    m.cmp.push_back(r);
  }
  return Status::Ok();
}

// ---- The claims' rules, on the means over seeds (seed < 0) or on one seed's trainings.
const Run& AtSeed(const Run* model, int64_t seed) { return seed < 0 ? *model : *model->seeds[seed]; }

std::vector<double> Sweep(const std::vector<const Run*>& v, const std::function<double(const Run&)>& f,
                          int64_t seed = -1) {
  std::vector<double> out;
  for (const Run* run : v) out.push_back(f(AtSeed(run, seed)));
  return out;
}
double Rate(const Run& r) { return r.sinks.rate; }
double MeanAlpha(const Run& r) { return r.sinks.mean; }

// Sink_1^0.3 and mean alpha_1 both increase along the sweep (Increases).
bool Grows(const std::vector<const Run*>& v, int64_t seed) {
  return Increases(Sweep(v, Rate, seed)) && Increases(Sweep(v, MeanAlpha, seed));
}

// Every no-sink model's last-layer relative perturbation exceeds the baseline's.
bool MixesMore(const Measured& m, int64_t seed) {
  bool all = true;
  const double base = AtSeed(m.cmp[0], seed).perturb.rel.back();
  for (size_t i = 1; i < m.cmp.size(); ++i) all &= AtSeed(m.cmp[i], seed).perturb.rel.back() > base;
  return all;
}

// Every no-sink model has, at the last layer, a lower relative residual and a higher mean cosine.
bool CollapsesMore(const Measured& m, int64_t seed) {
  const DepthMetrics& b = AtSeed(m.cmp[0], seed).collapse.back();
  bool all = true;
  for (size_t i = 1; i < m.cmp.size(); ++i) {
    const DepthMetrics& d = AtSeed(m.cmp[i], seed).collapse.back();
    all &= d.relative_residual < b.relative_residual && d.mean_cosine > b.mean_cosine;
  }
  return all;
}

// " (rule true in k of n seeds individually)".
std::string SeedsAgreeing(const Measured& m, const std::function<bool(int64_t)>& rule) {
  int64_t k = 0;
  for (int64_t seed = 0; seed < m.s.seeds; ++seed) k += rule(seed);
  return " (rule true in " + std::to_string(k) + " of " + std::to_string(m.s.seeds) + " seeds individually)";
}

// ---- Checks: facts that hold by a wide margin or exactly (causality).
Status AddChecks(const Measured& m, ExperimentResult& r) {
  for (const Run& run : m.runs) {
    bool finite = std::isfinite(run.val_loss) && std::isfinite(run.sinks.max) && std::isfinite(run.sinks_common.max);
    for (double x : run.train_loss) finite &= std::isfinite(x);
    if (run.measured_collapse) {
      for (size_t l = 0; l < run.collapse.size(); ++l) {
        const DepthMetrics& d = run.collapse[l];
        finite &= std::isfinite(d.relative_residual) && std::isfinite(d.mean_cosine);
        // Entropy: undefined at the embedding and for sigmoid attention (not a distribution).
        if (l > 0 && run.kind != Kind::kSigmoid) finite &= std::isfinite(d.entropy);
      }
      for (size_t l = 0; l < run.perturb.rel.size(); ++l) {
        finite &= std::isfinite(run.perturb.abs[l]) && std::isfinite(run.perturb.rel[l]);
      }
    }
    r.AddCheck(run.label + ": every metric finite, and it learns",
               finite && run.val_loss < run.init_val_loss - 1.0,
               "validation loss " + Fmt(run.init_val_loss, "%.3f") + " -> " + Fmt(run.val_loss, "%.3f") +
                   ", max alpha_1 " + Fmt(run.sinks.max, "%.3f"));
  }
  const Run& base = *m.cmp[0];
  const Run& mask = *m.cmp[1];
  // The baseline at the collapse depth prefers token 0 well above uniform causal attention.
  r.AddCheck("the baseline prefers token 0: max alpha_1 > 2x uniform attention (H_T / T)",
             base.sinks.max > 2 * base.sinks.uniform,
             "max alpha_1 " + Fmt(base.sinks.max, "%.3f") + ", uniform " + Fmt(base.sinks.uniform, "%.3f"));
  // Masking's alpha_1 == 0 would hold by construction of the probe; the model's mask and the
  // measurement are what can fail (sink_training.h, FirstTokenSensitivity).
  r.AddCheck("mask first key: logits at positions >= 1 ignore token 0 exactly; the baseline's do not",
             mask.first_token_sensitivity == 0 && base.first_token_sensitivity > 0,
             "largest logit change when token 0 is replaced: mask first key " +
                 Fmt(mask.first_token_sensitivity, "%g") + ", baseline " + Fmt(base.first_token_sensitivity, "%.3g"));
  bool causal = true, embed = true, moves = true;
  std::string detail;
  for (const Run* run : m.cmp) {
    causal &= run->perturb.before_max == 0;
    embed &= run->perturb.embedding_max == 0;
    moves &= run->perturb.abs.back() > 0;
    detail += std::string(detail.empty() ? "" : "; ") + KindId(run->kind) + ": t < p " +
              Fmt(run->perturb.before_max, "%g") + ", embedding " + Fmt(run->perturb.embedding_max, "%g") +
              ", last layer t > p " + Fmt(run->perturb.abs.back(), "%.3g");
  }
  r.AddCheck("perturbing token p changes no earlier token at any depth, no other token's embedding, and "
             "the later tokens' last layer",
             causal && embed && moves, detail);
  bool ok = true;
  for (const Run& run : m.runs) ok &= run.emergence.size() == static_cast<size_t>(m.s.steps / m.s.probe_every);
  r.AddCheck("every training has its emergence curve (Sink_1 every probe interval)", ok,
             "every " + std::to_string(m.s.probe_every) + " steps");
  return Status::Ok();
}

// ---- Claims (on the means over seeds; "in k of n seeds" counts the seeds whose own numbers
// satisfy the same rule). tests/experiments_test.py recomputes every verdict from report.json.
Status AddClaims(const Measured& m, ExperimentResult& r) {
  const Sizes& s = m.s;
  const char* kBarbero = "Barbero et al. 2025 (arXiv:2504.02732)";
  auto amax = [](const Run& r) { return r.sinks.max; };
  auto count = [](const Run& r) { return r.sinks.count; };
  r.AddClaim("deeper models have stronger sinks", kBarbero,
             "Sink_1^0.3 and mean alpha_1 grow with depth (" + JoinInts(s.depths) +
                 " layers): non-decreasing along the sweep and deepest > shallowest",
             "Sink_1^0.3 " + JoinNumbers(Sweep(m.by_depth, Rate), "%.2f") + "; mean alpha_1 " +
                 JoinNumbers(Sweep(m.by_depth, MeanAlpha), "%.3f") + "; max alpha_1 " +
                 JoinNumbers(Sweep(m.by_depth, amax), "%.3f") + "; heads above 0.3 " +
                 JoinNumbers(Sweep(m.by_depth, count), "%.1f") +
                 SeedsAgreeing(m, [&](int64_t k) { return Grows(m.by_depth, k); }),
             Grows(m.by_depth, -1));
  r.AddClaim("longer training context strengthens sinks", kBarbero,
             "Sink_1^0.3 and mean alpha_1 (on sequences of the training length) grow with the "
             "training context (" + JoinInts(s.lens) + " tokens, same training tokens): "
             "non-decreasing and longest > shortest",
             "Sink_1^0.3 " + JoinNumbers(Sweep(m.by_len, Rate), "%.2f") + "; mean alpha_1 " +
                 JoinNumbers(Sweep(m.by_len, MeanAlpha), "%.3f") + " (uniform H_T/T " +
                 JoinNumbers(Sweep(m.by_len, [](const Run& r) { return r.sinks.uniform; }), "%.3f") + "); on " +
                 std::to_string(m.common_len) + "-token sequences: Sink_1^0.3 " +
                 JoinNumbers(Sweep(m.by_len, [](const Run& r) { return r.sinks_common.rate; }), "%.2f") +
                 ", mean alpha_1 " +
                 JoinNumbers(Sweep(m.by_len, [](const Run& r) { return r.sinks_common.mean; }), "%.3f") +
                 SeedsAgreeing(m, [&](int64_t k) { return Grows(m.by_len, k); }),
             Grows(m.by_len, -1));
  std::string mixing, collapse;
  for (const Run* run : m.cmp) {
    mixing += std::string(mixing.empty() ? "" : "; ") + KindId(run->kind) + " " +
              Fmt(run->perturb.rel.back(), "%.4f") + " (abs " + Fmt(run->perturb.abs.back(), "%.3g") + ")";
    const DepthMetrics& d = run->collapse.back();
    collapse += std::string(collapse.empty() ? "" : "; ") + KindId(run->kind) + " rel. residual " +
                Fmt(d.relative_residual, "%.3f") + ", cosine " + Fmt(d.mean_cosine, "%.3f");
  }
  r.AddClaim("models whose attention cannot form a first-token sink mix more", kBarbero,
             "a perturbation of one token changes the later tokens' last-layer stream more "
             "(relative change ||dh_t|| / ||h_t||, mean over t > p) in every no-sink variant than "
             "in the baseline (" + std::to_string(s.collapse_depth) + " layers)",
             mixing + SeedsAgreeing(m, [&](int64_t k) { return MixesMore(m, k); }), MixesMore(m, -1));
  r.AddClaim("models whose attention cannot form a first-token sink are closer to collapse",
             kBarbero + std::string("; collapse metrics of Dong et al. 2021 (arXiv:2103.03404)"),
             "at the last layer, lower relative residual and higher mean token cosine than the "
             "baseline, in every no-sink variant",
             collapse + SeedsAgreeing(m, [&](int64_t k) { return CollapsesMore(m, k); }), CollapsesMore(m, -1));
  return Status::Ok();
}

// ---- results in report.json: every training (runs) and every model, the mean over its seeds.
nlohmann::json SinkJson(const SinkStats& s) {
  nlohmann::json j = {{"sink_rate", s.rate}, {"sink_heads", s.count}, {"max_alpha1", s.max},
                      {"mean_alpha1", s.mean}, {"uniform_alpha1", s.uniform}};
  if (!s.alpha1.empty()) j["alpha1"] = s.alpha1;  // per seed only
  return j;
}

nlohmann::json RunJson(const Run& run, int64_t common_len) {
  nlohmann::json em = nlohmann::json::array();
  for (const SinkEmergence& e : run.emergence) {
    em.push_back({{"step", e.step}, {"sink_rate", e.sink_rate}, {"max_alpha1", e.max_alpha1}});
  }
  nlohmann::json j = {{"id", run.id}, {"variant", KindId(run.kind)}, {"label", run.label},
                      {"sweep", run.sweep}, {"layers", run.layers}, {"seq_len", run.len},
                      {"batch", run.batch}, {"init_val_loss", JsonNumber(run.init_val_loss)},
                      {"val_loss", JsonNumber(run.val_loss)},
                      {"sinks", SinkJson(run.sinks)}, {"sinks_common", SinkJson(run.sinks_common)},
                      {"common_len", std::min(common_len, run.len)}, {"emergence", em},
                      {"seconds", run.seconds}};
  if (run.seeds.empty()) {
    j["model"] = ModelId(run.kind, run.layers, run.len);
    j["seed_index"] = run.seed_index;
    j["seed"] = run.seed;
    j["train_loss"] = run.train_loss;
  } else {
    nlohmann::json ids = nlohmann::json::array();
    for (const Run* sr : run.seeds) ids.push_back(sr->id);
    j["runs"] = ids;
    std::vector<double> mean, heads;
    ByLayer(run, mean, heads);
    j["mean_alpha1_by_layer"] = mean;
    j["sink_heads_by_layer"] = heads;
  }
  if (run.measured_collapse) {
    nlohmann::json pa = nlohmann::json::array(), pr = nlohmann::json::array();
    for (double x : run.perturb.abs) pa.push_back(JsonNumber(x));
    for (double x : run.perturb.rel) pr.push_back(JsonNumber(x));
    j["collapse"] = DepthMetricsToJson(run.collapse);
    j["perturbation"] = {{"position", run.perturb.position}, {"abs", pa}, {"rel", pr},
                         {"before_max", run.perturb.before_max}, {"embedding_max", run.perturb.embedding_max}};
  }
  return j;
}

Status AddResults(const Measured& m, ExperimentResult& r) {
  const Sizes& s = m.s;
  nlohmann::json jruns = nlohmann::json::array(), jmodels = nlohmann::json::array();
  for (const Run& run : m.runs) jruns.push_back(RunJson(run, m.common_len));
  for (const Run& model : m.models) jmodels.push_back(RunJson(model, m.common_len));
  auto ids = [](const std::vector<const Run*>& v) {
    nlohmann::json a = nlohmann::json::array();
    for (const Run* run : v) a.push_back(run->id);
    return a;
  };
  r.results = {{"d_model", s.d_model}, {"heads", s.heads}, {"mlp", false}, {"steps", s.steps},
               {"tokens_per_step", s.tokens_per_step}, {"lr", s.lr}, {"eps", kSinkEps},
               {"probe_sequences", s.probe_sequences}, {"probe_every", s.probe_every}, {"seeds", s.seeds},
               {"depths", s.depths}, {"depth_len", s.depth_len}, {"lens", s.lens}, {"len_depth", s.len_depth},
               {"common_len", m.common_len}, {"collapse_depth", s.collapse_depth}, {"data", m.data.source},
               {"loss_floor", JsonNumber(m.data.floor)}, {"depth_sweep", ids(m.by_depth)},
               {"context_sweep", ids(m.by_len)}, {"collapse_comparison", ids(m.cmp)}, {"models", jmodels},
               {"runs", jruns}};
  return Status::Ok();
}

// ---- Summary.
Status AddSummary(const Measured& m, ExperimentResult& r) {
  const Sizes& s = m.s;
  std::string sum =
      "Means over " + std::to_string(s.seeds) + " seed" + (s.seeds == 1 ? "" : "s") + ". Sink strength against depth (" +
      JoinInts(s.depths) + " layers, T " + std::to_string(s.depth_len) + "): Sink_1^0.3 " +
      JoinNumbers(Sweep(m.by_depth, Rate), "%.2f") + ", mean alpha_1 " + JoinNumbers(Sweep(m.by_depth, MeanAlpha), "%.3f") +
      " - 'deeper models have stronger sinks' " + Verdict(Grows(m.by_depth, -1)) + ". Against the training context (" +
      JoinInts(s.lens) + " tokens, " + std::to_string(s.len_depth) + " layers, same tokens): Sink_1^0.3 " +
      JoinNumbers(Sweep(m.by_len, Rate), "%.2f") + ", mean alpha_1 " + JoinNumbers(Sweep(m.by_len, MeanAlpha), "%.3f") +
      " - 'longer context strengthens sinks' " + Verdict(Grows(m.by_len, -1)) + ". At " +
      std::to_string(s.collapse_depth) + " layers, last-layer relative perturbation of later tokens:";
  for (const Run* run : m.cmp) sum += std::string(" ") + KindId(run->kind) + " " + Fmt(run->perturb.rel.back(), "%.3f");
  sum += "; relative residual:";
  for (const Run* run : m.cmp) {
    sum += std::string(" ") + KindId(run->kind) + " " + Fmt(run->collapse.back().relative_residual, "%.3f");
  }
  sum += "; Sink_1^0.3:";
  for (const Run* run : m.cmp) sum += std::string(" ") + KindId(run->kind) + " " + Fmt(run->sinks.rate, "%.2f");
  sum += ". 'No-sink models mix more' " + Verdict(MixesMore(m, -1)) + "; 'are closer to collapse' " +
         Verdict(CollapsesMore(m, -1)) + ".";
  r.summary = sum;
  return Status::Ok();
}

// ---- The page.
report::SvgImage SweepPlot(const Measured& m, const std::vector<const Run*>& v, bool depth) {
  const Sizes& s = m.s;
  report::XyPlot p;
  p.title = depth ? "Sink strength against depth (T = " + std::to_string(s.depth_len) + ")"
                  : "Sink strength against training context (" + std::to_string(s.len_depth) + " layers)";
  p.x.label = depth ? "layers" : "training context (tokens)";
  if (!depth) {
    p.x.scale = report::ScaleType::kLog10;
    p.x.min = static_cast<double>(s.lens.front()) / 1.3;
    p.x.max = static_cast<double>(s.lens.back()) * 1.3;
  }
  p.y.label = "alpha_1 / share of heads";
  p.y.min = 0.0;
  p.y.max = 1.0;
  p.markers = true;
  report::Series rate{"Sink_1^0.3", {}, {}}, mx{"max alpha_1", {}, {}}, mean{"mean alpha_1", {}, {}},
      uni{"uniform H_T/T", {}, {}};
  for (const Run* run : v) {
    const double x = static_cast<double>(depth ? run->layers : run->len);
    rate.x.push_back(x), rate.y.push_back(run->sinks.rate);
    mx.x.push_back(x), mx.y.push_back(run->sinks.max);
    mean.x.push_back(x), mean.y.push_back(run->sinks.mean);
    uni.x.push_back(x), uni.y.push_back(run->sinks.uniform);
  }
  p.series = {rate, mx, mean, uni};
  p.reference_lines.push_back({kSinkEps, "eps = 0.3"});
  return report::RenderLinePlot(p);
}

std::vector<std::vector<std::string>> SweepRows(const std::vector<const Run*>& v) {
  std::vector<std::vector<std::string>> rows;
  for (const Run* run : v) {
    std::string per_seed;
    for (const Run* sr : run->seeds) per_seed += (per_seed.empty() ? "" : " / ") + Fmt(sr->sinks.rate, "%.2f");
    rows.push_back({std::to_string(run->layers), std::to_string(run->len), std::to_string(run->batch),
                    Fmt(run->sinks.rate, "%.2f"), per_seed, Fmt(run->sinks.count, "%.1f"),
                    Fmt(run->sinks.max, "%.3f"), Fmt(run->sinks.mean, "%.3f"),
                    Fmt(run->sinks.uniform, "%.3f"), Fmt(run->sinks_common.rate, "%.2f"),
                    Fmt(run->sinks_common.mean, "%.3f"), Fmt(run->val_loss, "%.3f"), Fmt(run->seconds, "%.0f")});
  }
  return rows;
}

std::vector<std::string> SweepColumns(int64_t common_len) {
  return {"layers", "T", "batch", "Sink_1^0.3", "per seed", "heads > 0.3", "max alpha_1", "mean alpha_1",
          "uniform H_T/T", "Sink_1^0.3 @" + std::to_string(common_len),
          "mean alpha_1 @" + std::to_string(common_len), "val loss", "seconds"};
}

void AddSweepSections(const Measured& m, report::HtmlReport& html) {
  const Sizes& s = m.s;
  const std::vector<std::string> cols = SweepColumns(m.common_len);
  html.AddSection("depth", "Sink strength against depth");
  html.AddFigure(SweepPlot(m, m.by_depth, true),
                 "alpha_1: mean attention of all queries on token 0 (the BOS), per layer and head, on " +
                     std::to_string(s.probe_sequences) + " held-out sequences; Sink_1^0.3 the share of heads "
                     "above 0.3 (Gu et al. 2024).",
                 "fig-depth");
  html.AddTable(cols, SweepRows(m.by_depth), "Means over " + std::to_string(s.seeds) +
                                                 " seeds (init and batch order); every model trained on the same " +
                                                 std::to_string(s.steps * s.tokens_per_step) + " tokens.");
  std::vector<std::vector<std::string>> rows;
  for (const Run* run : m.by_depth) {
    std::vector<double> mean, heads;
    ByLayer(*run, mean, heads);
    rows.push_back({std::to_string(run->layers), JoinNumbers(mean, "%.3f"), JoinNumbers(heads, "%.1f")});
  }
  html.AddTable({"layers", "mean alpha_1 per layer (layer 0 first)", "heads > 0.3 per layer"}, rows,
                "Where the sink heads sit (mean over seeds, " + std::to_string(s.heads) + " heads per layer).");
  html.AddSection("context", "Sink strength against training context length");
  html.AddFigure(SweepPlot(m, m.by_len, false),
                 "Measured on held-out sequences of each model's training length; batch = " +
                     std::to_string(s.tokens_per_step) + " / T so that every model sees the same tokens.",
                 "fig-context");
  html.AddTable(cols, SweepRows(m.by_len),
                "'@" + std::to_string(m.common_len) + "': the same measurement on " + std::to_string(m.common_len) +
                    "-token sequences (the same queries for every model).");
  report::XyPlot em;
  em.title = "Sink_1^0.3 over training";
  em.x.label = "step";
  em.y.label = "Sink_1^0.3";
  em.y.min = 0.0;
  em.y.max = 1.0;
  auto add_series = [&](const Run* run) {
    report::Series se{std::to_string(run->layers) + " layers, T " + std::to_string(run->len), {}, {}};
    for (const SinkEmergence& e : run->emergence) se.x.push_back(double(e.step)), se.y.push_back(e.sink_rate);
    em.series.push_back(se);
  };
  for (const Run* run : m.by_depth) add_series(run);
  for (const Run* run : m.by_len) {
    if (run->sweep == "context") add_series(run);  // the shared one is already drawn
  }
  html.AddFigure(report::RenderLinePlot(em),
                 "On the first validation batch every " + std::to_string(s.probe_every) + " steps (Trainer's probe).",
                 "fig-emergence");
}

report::SvgImage DepthPlot(const Measured& m, const std::string& title, const std::string& ylabel,
                      const std::function<double(const Run&, size_t)>& f, size_t from) {
  report::XyPlot p;
  p.title = title;
  p.x.label = "depth (0 = embedding, l = output of layer l)";
  p.y.label = ylabel;
  p.markers = true;
  for (const Run* run : m.cmp) {
    report::Series se{KindId(run->kind), {}, {}};
    for (size_t l = from; l < run->collapse.size(); ++l) se.x.push_back(double(l)), se.y.push_back(f(*run, l));
    p.series.push_back(se);
  }
  return report::RenderLinePlot(p);
}

void AddCollapseSection(const Measured& m, report::HtmlReport& html) {
  html.AddSection("collapse", "Collapse and over-mixing: baseline against no-sink attention (" +
                                  std::to_string(m.s.collapse_depth) + " layers)");
  html.AddFigure(DepthPlot(m, "Relative residual (Dong et al. 2021; 0 = rank one)", "relative residual",
                           [](const Run& run, size_t l) { return run.collapse[l].relative_residual; }, 0),
                 "||X - 1 xbar^T|| / ||X|| (1,inf norms) of the residual stream, mean over " +
                     std::to_string(m.s.probe_sequences) + " held-out sequences (BOS included).",
                 "fig-rr");
  html.AddFigure(DepthPlot(m, "Mean pairwise token cosine (1 = collapsed)", "mean cosine",
                           [](const Run& run, size_t l) { return run.collapse[l].mean_cosine; }, 0),
                 "Over every pair of tokens of a sequence, BOS included.", "fig-cosine");
  html.AddFigure(DepthPlot(m, "Normalised attention entropy (1 = uniform)", "entropy",
                           [](const Run& run, size_t l) { return run.collapse[l].entropy; }, 1),
                 "Mean over heads and rows; undefined for sigmoid attention (its weights are not a "
                 "distribution); for softmax1 the entropy of the sub-probability vector over the real keys.",
                 "fig-entropy");
  html.AddFigure(DepthPlot(m, "Over-mixing: relative change of later tokens when token p = T/2 is replaced",
                           "mean ||dh_t|| / ||h_t||, t > p",
                           [](const Run& run, size_t l) { return run.perturb.rel[l]; }, 0),
                 "Barbero et al. 2025's question: how far does a perturbation of one token spread into the "
                 "others? 0 at the embedding by construction.",
                 "fig-perturbation");
  std::vector<std::vector<std::string>> rows;
  for (const Run* run : m.cmp) {
    for (size_t l = 0; l < run->collapse.size(); ++l) {
      const DepthMetrics& d = run->collapse[l];
      rows.push_back({KindLabel(run->kind), std::to_string(l), Fmt(d.relative_residual, "%.3f"),
                      Fmt(d.mean_cosine, "%.3f"), Fmt(d.norm, "%.3g"), Fmt(d.entropy, "%.3f"),
                      Fmt(run->perturb.abs[l], "%.3g"), Fmt(run->perturb.rel[l], "%.3f")});
    }
  }
  html.AddTable({"variant", "depth", "relative residual", "mean cosine", "norm", "entropy",
                 "perturbation abs", "perturbation rel"},
                rows, "n/a: undefined (entropy at the embedding and for sigmoid attention).");
  std::vector<std::vector<std::string>> srows;
  for (const Run* run : m.cmp) {
    srows.push_back({KindLabel(run->kind), Fmt(run->sinks.rate, "%.2f"), Fmt(run->sinks.max, "%.3f"),
                     Fmt(run->sinks.mean, "%.3f"), Fmt(run->val_loss, "%.3f")});
  }
  html.AddTable({"variant", "Sink_1^0.3", "max alpha_1", "mean alpha_1", "val loss"}, srows,
                "Attention on token 0 of the compared models (softmax1 and sigmoid CAN still attend to "
                "token 0; they need not, having another way to attend to nothing).");
}

Status AddHtml(const Measured& m, ExperimentResult& r) {
  const Sizes& s = m.s;
  const SinkData& data = m.data;
  r.html = report::HtmlReport("Sinks and collapse: is the sink a guard against over-mixing?");
  r.html.SetSubtitle(std::to_string(m.runs.size()) + " attention-only models (d_model " + std::to_string(s.d_model) +
                     ", " + std::to_string(s.heads) + " heads, RoPE, BOS first), " + std::to_string(s.steps) +
                     " steps of " + std::to_string(s.tokens_per_step) + " tokens each; " + data.source);
  r.html.AddSummaryFact("Sink_1^0.3 by depth (" + JoinInts(s.depths) + ")", JoinNumbers(Sweep(m.by_depth, Rate), "%.2f"));
  r.html.AddSummaryFact("Sink_1^0.3 by training context (" + JoinInts(s.lens) + ")",
                        JoinNumbers(Sweep(m.by_len, Rate), "%.2f"));
  std::string v;
  for (const Run* run : m.cmp) {
    v += std::string(v.empty() ? "" : ", ") + KindId(run->kind) + " " + Fmt(run->perturb.rel.back(), "%.3f");
  }
  r.html.AddSummaryFact("last-layer relative perturbation of later tokens", v);
  if (std::isfinite(data.floor)) r.html.AddSummaryFact("task loss floor", Fmt(data.floor, "%.3f") + " nats");
  AddSweepSections(m, r.html);
  AddCollapseSection(m, r.html);
  AddSetupSection(r.html, {
      "Models: attention-only pre-LN blocks (no MLP), d_model " + std::to_string(s.d_model) + ", " +
          std::to_string(s.heads) + " heads, RoPE, tied embeddings, init std 0.02 from the same seed.",
      "Training: AdamW lr " + Fmt(s.lr, "%g") + " (warmup " + std::to_string(s.steps / 20) +
          " steps, cosine to lr/10), weight decay 0.1, clip 1.0, " + std::to_string(s.steps) + " steps of " +
          std::to_string(s.tokens_per_step) + " tokens (batch " + std::to_string(s.tokens_per_step) +
          " / T sequences), BOS first.",
      "Data: " + data.source + (std::isfinite(data.floor) ? "; loss floor " + Fmt(data.floor, "%.3f") + " nats" : ""),
      "Perturbation: in each of " + std::to_string(s.probe_sequences) + " held-out sequences the token at "
          "p = T/2 is replaced by another data token; the change of the residual stream at every depth is "
          "averaged over the later tokens t > p.",
  });
  return Status::Ok();
}

// configure -> run variants -> measure -> report.
Result<ExperimentResult> RunSinksCollapse(const ExperimentOptions& o) {
  if (!o.data.empty()) {
    return Status::InvalidArgument("sinks-and-collapse trains on the synthetic Bigram-Backcopy task; --data is not supported");
  }
  Measured m;
  m.s = SizesFor(o.quick);
  const Sizes& s = m.s;
  ATTNLAB_ASSIGN_OR_RETURN(m.data, MakeBigramBackcopyData(o.seed, s.steps * s.tokens_per_step / 2, ValTokens(s) + 1, 0));
  m.common_len = *std::min_element(s.lens.begin(), s.lens.end());
  Progress(o, kName,
           "depths %s at T %ld; contexts %s at %ld layers; collapse at %ld layers: baseline, mask first "
           "key, softmax1, sigmoid; d_model %ld, %ld heads, %ld steps x %ld tokens, lr %g; %s",
           JoinInts(s.depths).c_str(), static_cast<long>(s.depth_len), JoinInts(s.lens).c_str(),
           static_cast<long>(s.len_depth), static_cast<long>(s.collapse_depth), static_cast<long>(s.d_model),
           static_cast<long>(s.heads), static_cast<long>(s.steps), static_cast<long>(s.tokens_per_step), s.lr,
           m.data.source.c_str());
  ATTNLAB_RETURN_IF_ERROR(TrainAll(o, m));
  ATTNLAB_RETURN_IF_ERROR(BuildModels(m));
  return AssembleReport<Measured>(m, {AddChecks, AddClaims, AddResults, AddSummary, AddHtml});
}

}  // namespace

Experiment SinksCollapseExperiment() {
  return {kName,
          "sink strength against depth and training context, and the collapse / over-mixing metrics of "
          "models that cannot form a first-token sink (Barbero et al. 2025)",
          RunSinksCollapse};
}

}  // namespace attnlab::experiments
