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
#include "experiments/bigram_backcopy.h"
#include "experiments/collapse_probe.h"
#include "experiments/experiment.h"
#include "report/svg_plot.h"
#include "train/token_data.h"
#include "train/trainer.h"

namespace attnlab::experiments {
namespace {

constexpr char kName[] = "sinks-and-collapse";
constexpr double kSinkEps = 0.3;  // Gu et al.'s epsilon for Sink_1^eps

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

struct Data {
  std::vector<int32_t> train, val;
  int64_t vocab = 0;  // BOS = vocab
  double floor = NAN;
  std::string source;
};

Result<Data> MakeData(const ExperimentOptions& o, const Sizes& s) {
  Data d;
  BigramBackcopyOptions bo;
  bo.seed = o.seed;
  bo.trigger_mass = 0.05;  // as in sinks.cc: rare triggers, a copy head helps at ~5% of tokens
  ATTNLAB_ASSIGN_OR_RETURN(BigramBackcopy task, BigramBackcopy::Create(bo));
  int64_t val = 0;
  for (int64_t len : s.lens) val = std::max(val, s.probe_sequences * (len + 1));
  val = std::max(val, s.probe_sequences * (s.depth_len + 1));
  val = std::max(val, s.eval_batches * s.tokens_per_step * 2);
  d.train = task.Generate(std::max<int64_t>(1 << 16, s.steps * s.tokens_per_step / 2), SplitMix64(o.seed * 3 + 1));
  d.val = task.Generate(val + 1, SplitMix64(o.seed * 3 + 2));
  d.vocab = bo.vocab;
  d.floor = task.ConditionalEntropy(d.val);
  d.source = "Bigram-Backcopy (Guo et al. 2024): vocab " + std::to_string(bo.vocab) + ", " +
             std::to_string(bo.triggers) + " trigger tokens, " + std::to_string(bo.successors) +
             " successors per row, trigger mass " + Fmt(bo.trigger_mass, "%g");
  return d;
}

struct SinkStats {
  double rate = 0, max = 0, mean = 0;  // Sink_1^0.3, max and mean alpha_1 over layers x heads
  double count = 0;                    // heads with alpha_1 > 0.3
  std::vector<std::vector<double>> alpha1;
  double uniform = 0;  // mean alpha_1 of uniform causal attention: H_T / T
};

SinkStats Summarise(std::vector<std::vector<double>> a, int64_t T) {
  SinkStats s;
  s.alpha1 = std::move(a);
  int64_t n = 0;
  for (const auto& l : s.alpha1) {
    for (double x : l) {
      s.max = std::max(s.max, x);
      s.mean += x;
      s.rate += x > kSinkEps;
      ++n;
    }
  }
  s.count = s.rate;
  if (n) s.mean /= n, s.rate /= n;
  for (int64_t t = 0; t < T; ++t) s.uniform += 1.0 / static_cast<double>(t + 1);
  s.uniform /= static_cast<double>(T);
  return s;
}

// alpha_1 on `sequences` held-out sequences of length T (BOS first), in batches of up to 16.
Result<SinkStats> MeasureSinks(Gpt& g, const Data& data, int64_t sequences, int64_t T) {
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
  return Summarise(probe.alpha1(), T);
}

struct Perturbation {
  // Per depth 0..L (0 = the embedding, L = the final stream before ln_f): mean over sequences
  // and positions t > p of ||dh_t|| and ||dh_t|| / ||h_t||.
  std::vector<double> abs, rel;
  double before_max = 0;     // largest |dh| at t < p, any depth (causality: exactly 0)
  double embedding_max = 0;  // largest |dh| at depth 0 outside position p (exactly 0)
  int64_t position = 0;
};

Result<Perturbation> MeasurePerturbation(Gpt& g, const Data& data, int64_t B, int64_t T) {
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

struct Emergence {
  int64_t step = 0;
  double rate = 0, max = 0;
};

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
  std::vector<Emergence> emergence;
  SinkStats sinks;         // on sequences of the training length
  SinkStats sinks_common;  // on sequences of the shortest context of the sweep
  std::vector<DepthMetrics> collapse;  // (b) only
  Perturbation perturb;                // (b) only
  bool measured_collapse = false;
  double seconds = 0;
};


std::string ModelId(Kind kind, int64_t layers, int64_t len) {
  return std::string(KindId(kind)) + "_L" + std::to_string(layers) + "_T" + std::to_string(len);
}
std::string ModelLabel(Kind kind, int64_t layers, int64_t len) {
  return std::string(KindLabel(kind)) + ", " + std::to_string(layers) + " layer" + (layers == 1 ? "" : "s") +
         ", T " + std::to_string(len);
}

Result<Run> Train(const ExperimentOptions& o, const Sizes& s, const Data& data, Kind kind, int64_t layers,
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
  ModelConfig c;
  c.vocab_size = data.vocab + 1;
  c.context = len;
  c.d_model = s.d_model;
  c.n_layer = layers;
  c.n_head = s.heads;
  c.mlp = false;  // attention-only blocks, as in sinks.cc (with MLPs no sink forms in budget)
  c.position = PositionEncoding::kRope;
  if (kind == Kind::kMaskFirstKey) c.mask_first_key = true;
  if (kind == Kind::kSoftmax1) c.softmax = SoftmaxKind::kSoftmax1;
  if (kind == Kind::kSigmoid) c.softmax = SoftmaxKind::kSigmoid;
  TrainOptions to;
  to.batch = run.batch;
  to.seq_len = len;
  to.steps = s.steps;
  to.seed = run.seed;
  to.bos = static_cast<int32_t>(data.vocab);
  to.opt.lr = static_cast<float>(s.lr);
  to.opt.min_lr = static_cast<float>(s.lr / 10);
  to.opt.warmup_steps = s.steps / 20;
  to.opt.weight_decay = 0.1f;
  to.eval_every = 0;
  to.eval_batches = s.eval_batches;
  to.probe_every = s.probe_every;
  to.quiet = true;
  ATTNLAB_ASSIGN_OR_RETURN(std::unique_ptr<Gpt> g, Gpt::Create(c));
  g->params().Initialize(c, run.seed);
  Trainer trainer(g.get(), to, data.train, data.val);
  ATTNLAB_ASSIGN_OR_RETURN(run.init_val_loss, trainer.Evaluate());
  for (int64_t half = 1; half <= 2; ++half) {
    ATTNLAB_RETURN_IF_ERROR(trainer.Run(s.steps * half / 2));
    const TrainRecord& last = trainer.history().back();
    Progress(o, kName, "%-40s step %4ld/%ld | loss %.3f | Sink_1 %s | %.0f s", run.label.c_str(),
             static_cast<long>(trainer.step()), static_cast<long>(s.steps), last.loss,
             last.probe.is_null() ? "n/a" : Fmt(last.probe["sink_rate"].get<double>(), "%.2f").c_str(),
             std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  for (const TrainRecord& rec : trainer.history()) {
    run.train_loss.push_back(rec.loss);
    if (rec.val_loss >= 0) run.val_loss = rec.val_loss;
    if (!rec.probe.is_null()) {
      const SinkStats st = Summarise(rec.probe["alpha1"].get<std::vector<std::vector<double>>>(), len);
      run.emergence.push_back({rec.step, st.rate, st.max});
    }
  }
  if (!(run.val_loss >= 0)) {
    ATTNLAB_ASSIGN_OR_RETURN(run.val_loss, trainer.Evaluate());
  }
  ATTNLAB_ASSIGN_OR_RETURN(run.sinks, MeasureSinks(*g, data, s.probe_sequences, len));
  ATTNLAB_ASSIGN_OR_RETURN(run.sinks_common, MeasureSinks(*g, data, s.probe_sequences, std::min(common_len, len)));
  if (collapse) {
    std::vector<int32_t> in(s.probe_sequences * len), tg(in.size());
    if (!EvalBatch(data.val, 0, s.probe_sequences, len, static_cast<int32_t>(data.vocab), in.data(), tg.data())) {
      return Status::InvalidArgument("the validation data is shorter than the probe sequences");
    }
    ATTNLAB_ASSIGN_OR_RETURN(run.collapse, MeasureCollapse(*g, in, s.probe_sequences, len));
    ATTNLAB_ASSIGN_OR_RETURN(run.perturb, MeasurePerturbation(*g, data, s.probe_sequences, len));
    run.measured_collapse = true;
  }
  run.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
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
    a.emergence[i].rate = mean([&](const Run& r) { return r.emergence[i].rate; });
    a.emergence[i].max = mean([&](const Run& r) { return r.emergence[i].max; });
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

std::string Join(const std::vector<double>& v, const char* fmt) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? " / " : "") + Fmt(v[i], fmt);
  return s;
}
std::string JoinInt(const std::vector<int64_t>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? " / " : "") + std::to_string(v[i]);
  return s;
}

nlohmann::json SinkJson(const SinkStats& s) {
  nlohmann::json j = {{"sink_rate", s.rate}, {"sink_heads", s.count}, {"max_alpha1", s.max},
                      {"mean_alpha1", s.mean}, {"uniform_alpha1", s.uniform}};
  if (!s.alpha1.empty()) j["alpha1"] = s.alpha1;  // per seed only
  return j;
}

Result<ExperimentResult> RunSinksCollapse(const ExperimentOptions& o) {
  if (!o.data.empty()) {
    return Status::InvalidArgument("sinks-and-collapse trains on the synthetic Bigram-Backcopy task; --data is not supported");
  }
  const Sizes s = SizesFor(o.quick);
  ATTNLAB_ASSIGN_OR_RETURN(Data data, MakeData(o, s));
  const int64_t common_len = *std::min_element(s.lens.begin(), s.lens.end());
  Progress(o, kName,
           "depths %s at T %ld; contexts %s at %ld layers; collapse at %ld layers: baseline, mask first "
           "key, softmax1, sigmoid; d_model %ld, %ld heads, %ld steps x %ld tokens, lr %g; %s",
           JoinInt(s.depths).c_str(), static_cast<long>(s.depth_len), JoinInt(s.lens).c_str(),
           static_cast<long>(s.len_depth), static_cast<long>(s.collapse_depth), static_cast<long>(s.d_model),
           static_cast<long>(s.heads), static_cast<long>(s.steps), static_cast<long>(s.tokens_per_step), s.lr,
           data.source.c_str());

  std::vector<Run> runs;  // every training (model x seed), once
  auto trained = [&](Kind k, int64_t layers, int64_t len) {
    for (const Run& r : runs) {
      if (r.kind == k && r.layers == layers && r.len == len) return true;
    }
    return false;
  };
  auto get = [&](Kind k, int64_t layers, int64_t len, bool collapse, const char* sweep) -> Status {
    if (trained(k, layers, len)) return Status::Ok();
    for (int64_t seed = 0; seed < s.seeds; ++seed) {
      ATTNLAB_ASSIGN_OR_RETURN(Run r, Train(o, s, data, k, layers, len, collapse, common_len, seed));
      r.sweep = sweep;
      runs.push_back(std::move(r));
    }
    return Status::Ok();
  };
  for (int64_t L : s.depths) {
    ATTNLAB_RETURN_IF_ERROR(get(Kind::kBaseline, L, s.depth_len, L == s.collapse_depth, "depth"));
  }
  for (int64_t T : s.lens) ATTNLAB_RETURN_IF_ERROR(get(Kind::kBaseline, s.len_depth, T, false, "context"));
  const Kind kNoSink[] = {Kind::kMaskFirstKey, Kind::kSoftmax1, Kind::kSigmoid};
  for (Kind k : kNoSink) ATTNLAB_RETURN_IF_ERROR(get(k, s.collapse_depth, s.depth_len, true, "collapse"));
  // The models: the mean over their seeds (runs is complete, its addresses stay fixed now).
  std::vector<Run> models;
  for (const Run& run : runs) {
    if (run.seed_index != 0) continue;
    std::vector<const Run*> v;
    for (const Run& other : runs) {
      if (other.kind == run.kind && other.layers == run.layers && other.len == run.len) v.push_back(&other);
    }
    models.push_back(Aggregate(v));
  }
  auto find = [&](Kind k, int64_t layers, int64_t len) -> const Run* {
    for (const Run& r : models) {
      if (r.kind == k && r.layers == layers && r.len == len) return &r;
    }
    return nullptr;
  };

  std::vector<const Run*> by_depth, by_len;
  for (int64_t L : s.depths) by_depth.push_back(find(Kind::kBaseline, L, s.depth_len));
  for (int64_t T : s.lens) by_len.push_back(find(Kind::kBaseline, s.len_depth, T));
  const Run& base = *find(Kind::kBaseline, s.collapse_depth, s.depth_len);
  std::vector<const Run*> cmp{&base};
  for (Kind k : kNoSink) cmp.push_back(find(k, s.collapse_depth, s.depth_len));
  const Run& mask = *cmp[1];
  const int64_t CL = s.collapse_depth;

  ExperimentResult r;
  // ---- Checks: facts that hold by construction or by a wide margin.
  for (const Run& run : runs) {
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
  {
    // The baseline at the collapse depth prefers token 0 well above uniform causal attention.
    r.AddCheck("the baseline prefers token 0: max alpha_1 > 2x uniform attention (H_T / T)",
               base.sinks.max > 2 * base.sinks.uniform,
               "max alpha_1 " + Fmt(base.sinks.max, "%.3f") + ", uniform " + Fmt(base.sinks.uniform, "%.3f"));
  }
  r.AddCheck("mask first key: alpha_1 == 0 in every head", mask.sinks.max == 0 && mask.sinks_common.max == 0,
             "max alpha_1 " + Fmt(mask.sinks.max, "%g"));
  {
    bool causal = true, embed = true, moves = true;
    std::string detail;
    for (const Run* run : cmp) {
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
  }
  {
    bool ok = true;
    for (const Run& run : runs) ok &= run.emergence.size() == static_cast<size_t>(s.steps / s.probe_every);
    r.AddCheck("every training has its emergence curve (Sink_1 every probe interval)", ok,
               "every " + std::to_string(s.probe_every) + " steps");
  }

  // ---- Claims (on the means over seeds; "in k of n seeds" counts the seeds whose own numbers
  // satisfy the same rule).
  const char* kBarbero = "Barbero et al. 2025 (arXiv:2504.02732)";
  auto sweep = [](const std::vector<const Run*>& v, const std::function<double(const Run&)>& f, int64_t seed = -1) {
    std::vector<double> out;
    for (const Run* run : v) out.push_back(f(seed < 0 ? *run : *run->seeds[seed]));
    return out;
  };
  auto rate = [](const Run& r) { return r.sinks.rate; };
  auto amean = [](const Run& r) { return r.sinks.mean; };
  auto amax = [](const Run& r) { return r.sinks.max; };
  auto count = [](const Run& r) { return r.sinks.count; };
  auto grows = [&](const std::vector<const Run*>& v, int64_t seed) {
    return Increases(sweep(v, rate, seed)) && Increases(sweep(v, amean, seed));
  };
  auto seeds_agreeing = [&](const std::function<bool(int64_t)>& rule) {
    int64_t k = 0;
    for (int64_t seed = 0; seed < s.seeds; ++seed) k += rule(seed);
    return " (rule true in " + std::to_string(k) + " of " + std::to_string(s.seeds) + " seeds individually)";
  };
  const std::vector<double> d_rate = sweep(by_depth, rate), d_mean = sweep(by_depth, amean);
  const std::vector<double> t_rate = sweep(by_len, rate), t_mean = sweep(by_len, amean);
  const bool depth_holds = grows(by_depth, -1);
  r.claims.push_back({"deeper models have stronger sinks", kBarbero,
                      "Sink_1^0.3 and mean alpha_1 grow with depth (" + JoinInt(s.depths) +
                          " layers): non-decreasing along the sweep and deepest > shallowest",
                      "Sink_1^0.3 " + Join(d_rate, "%.2f") + "; mean alpha_1 " + Join(d_mean, "%.3f") +
                          "; max alpha_1 " + Join(sweep(by_depth, amax), "%.3f") + "; heads above 0.3 " +
                          Join(sweep(by_depth, count), "%.1f") + seeds_agreeing([&](int64_t k) { return grows(by_depth, k); }),
                      depth_holds});
  const bool len_holds = grows(by_len, -1);
  r.claims.push_back({"longer training context strengthens sinks", kBarbero,
                      "Sink_1^0.3 and mean alpha_1 (on sequences of the training length) grow with the "
                      "training context (" + JoinInt(s.lens) + " tokens, same training tokens): "
                      "non-decreasing and longest > shortest",
                      "Sink_1^0.3 " + Join(t_rate, "%.2f") + "; mean alpha_1 " + Join(t_mean, "%.3f") +
                          " (uniform H_T/T " + Join(sweep(by_len, [](const Run& r) { return r.sinks.uniform; }), "%.3f") +
                          "); on " + std::to_string(common_len) + "-token sequences: Sink_1^0.3 " +
                          Join(sweep(by_len, [](const Run& r) { return r.sinks_common.rate; }), "%.2f") +
                          ", mean alpha_1 " + Join(sweep(by_len, [](const Run& r) { return r.sinks_common.mean; }), "%.3f") +
                          seeds_agreeing([&](int64_t k) { return grows(by_len, k); }),
                      len_holds});
  auto mixes_more = [&](int64_t seed) {
    auto at = [&](const Run* m) -> const Run& { return seed < 0 ? *m : *m->seeds[seed]; };
    bool all = true;
    for (size_t i = 1; i < cmp.size(); ++i) all &= at(cmp[i]).perturb.rel.back() > at(cmp[0]).perturb.rel.back();
    return all;
  };
  auto collapses_more = [&](int64_t seed) {
    auto at = [&](const Run* m) -> const Run& { return seed < 0 ? *m : *m->seeds[seed]; };
    const DepthMetrics& b = at(cmp[0]).collapse.back();
    bool all = true;
    for (size_t i = 1; i < cmp.size(); ++i) {
      const DepthMetrics& d = at(cmp[i]).collapse.back();
      all &= d.relative_residual < b.relative_residual && d.mean_cosine > b.mean_cosine;
    }
    return all;
  };
  {
    std::string measured;
    for (const Run* run : cmp) {
      measured += std::string(measured.empty() ? "" : "; ") + KindId(run->kind) + " " +
                  Fmt(run->perturb.rel.back(), "%.4f") + " (abs " + Fmt(run->perturb.abs.back(), "%.3g") + ")";
    }
    r.claims.push_back({"models whose attention cannot form a first-token sink mix more", kBarbero,
                        "a perturbation of one token changes the later tokens' last-layer stream more "
                        "(relative change ||dh_t|| / ||h_t||, mean over t > p) in every no-sink variant than "
                        "in the baseline (" + std::to_string(CL) + " layers)",
                        measured + seeds_agreeing(mixes_more), mixes_more(-1)});
  }
  {
    std::string measured;
    for (const Run* run : cmp) {
      const DepthMetrics& d = run->collapse.back();
      measured += std::string(measured.empty() ? "" : "; ") + KindId(run->kind) + " rel. residual " +
                  Fmt(d.relative_residual, "%.3f") + ", cosine " + Fmt(d.mean_cosine, "%.3f");
    }
    r.claims.push_back({"models whose attention cannot form a first-token sink are closer to collapse",
                        kBarbero + std::string("; collapse metrics of Dong et al. 2021 (arXiv:2103.03404)"),
                        "at the last layer, lower relative residual and higher mean token cosine than the "
                        "baseline, in every no-sink variant",
                        measured + seeds_agreeing(collapses_more), collapses_more(-1)});
  }

  // ---- JSON: every training (runs) and every model, the mean over its seeds (models).
  auto run_json = [&](const Run& run) {
    nlohmann::json em = nlohmann::json::array();
    for (const Emergence& e : run.emergence) em.push_back({{"step", e.step}, {"sink_rate", e.rate}, {"max_alpha1", e.max}});
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
  };
  nlohmann::json jruns = nlohmann::json::array(), jmodels = nlohmann::json::array();
  for (const Run& run : runs) jruns.push_back(run_json(run));
  for (const Run& m : models) jmodels.push_back(run_json(m));
  auto ids = [](const std::vector<const Run*>& v) {
    nlohmann::json a = nlohmann::json::array();
    for (const Run* run : v) a.push_back(run->id);
    return a;
  };
  r.results = {{"d_model", s.d_model}, {"heads", s.heads}, {"mlp", false}, {"steps", s.steps},
               {"tokens_per_step", s.tokens_per_step}, {"lr", s.lr}, {"eps", kSinkEps},
               {"probe_sequences", s.probe_sequences}, {"probe_every", s.probe_every}, {"seeds", s.seeds},
               {"depths", s.depths}, {"depth_len", s.depth_len}, {"lens", s.lens}, {"len_depth", s.len_depth},
               {"common_len", common_len}, {"collapse_depth", CL}, {"data", data.source},
               {"loss_floor", JsonNumber(data.floor)}, {"depth_sweep", ids(by_depth)}, {"context_sweep", ids(by_len)},
               {"collapse_comparison", ids(cmp)}, {"models", jmodels}, {"runs", jruns}};

  // ---- Summary.
  auto verdict = [](bool h) { return std::string(h ? "holds" : "does not hold"); };
  std::string sum =
      "Means over " + std::to_string(s.seeds) + " seed" + (s.seeds == 1 ? "" : "s") + ". Sink strength against depth (" + JoinInt(s.depths) + " layers, T " + std::to_string(s.depth_len) +
      "): Sink_1^0.3 " + Join(d_rate, "%.2f") + ", mean alpha_1 " + Join(d_mean, "%.3f") +
      " - 'deeper models have stronger sinks' " + verdict(depth_holds) + ". Against the training context (" +
      JoinInt(s.lens) + " tokens, " + std::to_string(s.len_depth) + " layers, same tokens): Sink_1^0.3 " +
      Join(t_rate, "%.2f") + ", mean alpha_1 " + Join(t_mean, "%.3f") + " - 'longer context strengthens sinks' " +
      verdict(len_holds) + ". At " + std::to_string(CL) + " layers, last-layer relative perturbation of later tokens:";
  for (const Run* run : cmp) sum += std::string(" ") + KindId(run->kind) + " " + Fmt(run->perturb.rel.back(), "%.3f");
  sum += "; relative residual:";
  for (const Run* run : cmp) sum += std::string(" ") + KindId(run->kind) + " " + Fmt(run->collapse.back().relative_residual, "%.3f");
  sum += "; Sink_1^0.3:";
  for (const Run* run : cmp) sum += std::string(" ") + KindId(run->kind) + " " + Fmt(run->sinks.rate, "%.2f");
  sum += ". 'No-sink models mix more' " + verdict(r.claims[2].holds) + "; 'are closer to collapse' " +
         verdict(r.claims[3].holds) + ".";
  r.summary = sum;

  // ---- Report.
  r.html = report::HtmlReport("Sinks and collapse: is the sink a guard against over-mixing?");
  r.html.SetSubtitle(std::to_string(runs.size()) + " attention-only models (d_model " + std::to_string(s.d_model) +
                     ", " + std::to_string(s.heads) + " heads, RoPE, BOS first), " + std::to_string(s.steps) +
                     " steps of " + std::to_string(s.tokens_per_step) + " tokens each; " + data.source);
  r.html.AddSummaryFact("Sink_1^0.3 by depth (" + JoinInt(s.depths) + ")", Join(d_rate, "%.2f"));
  r.html.AddSummaryFact("Sink_1^0.3 by training context (" + JoinInt(s.lens) + ")", Join(t_rate, "%.2f"));
  {
    std::string v;
    for (const Run* run : cmp) v += std::string(v.empty() ? "" : ", ") + KindId(run->kind) + " " + Fmt(run->perturb.rel.back(), "%.3f");
    r.html.AddSummaryFact("last-layer relative perturbation of later tokens", v);
  }
  if (std::isfinite(data.floor)) r.html.AddSummaryFact("task loss floor", Fmt(data.floor, "%.3f") + " nats");

  auto sweep_plot = [&](const std::vector<const Run*>& v, bool depth) {
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
  };
  auto table = [&](const std::vector<const Run*>& v) {
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
  };
  const std::vector<std::string> cols{"layers", "T", "batch", "Sink_1^0.3", "per seed", "heads > 0.3",
                                      "max alpha_1", "mean alpha_1",
                                      "uniform H_T/T", "Sink_1^0.3 @" + std::to_string(common_len),
                                      "mean alpha_1 @" + std::to_string(common_len), "val loss", "seconds"};
  r.html.AddSection("depth", "Sink strength against depth");
  r.html.AddFigure(sweep_plot(by_depth, true),
                   "alpha_1: mean attention of all queries on token 0 (the BOS), per layer and head, on " +
                       std::to_string(s.probe_sequences) + " held-out sequences; Sink_1^0.3 the share of heads "
                       "above 0.3 (Gu et al. 2024).",
                   "fig-depth");
  r.html.AddTable(cols, table(by_depth), "Means over " + std::to_string(s.seeds) +
                                             " seeds (init and batch order); every model trained on the same " +
                                             std::to_string(s.steps * s.tokens_per_step) + " tokens.");
  {
    std::vector<std::vector<std::string>> rows;
    for (const Run* run : by_depth) {
      std::vector<double> mean, heads;
      ByLayer(*run, mean, heads);
      std::string m, h;
      for (size_t l = 0; l < mean.size(); ++l) {
        m += (l ? " / " : "") + Fmt(mean[l], "%.3f");
        h += (l ? " / " : "") + Fmt(heads[l], "%.1f");
      }
      rows.push_back({std::to_string(run->layers), m, h});
    }
    r.html.AddTable({"layers", "mean alpha_1 per layer (layer 0 first)", "heads > 0.3 per layer"}, rows,
                    "Where the sink heads sit (mean over seeds, " + std::to_string(s.heads) + " heads per layer).");
  }
  r.html.AddSection("context", "Sink strength against training context length");
  r.html.AddFigure(sweep_plot(by_len, false),
                   "Measured on held-out sequences of each model's training length; batch = " +
                       std::to_string(s.tokens_per_step) + " / T so that every model sees the same tokens.",
                   "fig-context");
  r.html.AddTable(cols, table(by_len),
                  "'@" + std::to_string(common_len) + "': the same measurement on " + std::to_string(common_len) +
                      "-token sequences (the same queries for every model).");
  {
    report::XyPlot em;
    em.title = "Sink_1^0.3 over training";
    em.x.label = "step";
    em.y.label = "Sink_1^0.3";
    em.y.min = 0.0;
    em.y.max = 1.0;
    for (const Run* run : by_depth) {
      report::Series se{std::to_string(run->layers) + " layers, T " + std::to_string(run->len), {}, {}};
      for (const Emergence& e : run->emergence) se.x.push_back(double(e.step)), se.y.push_back(e.rate);
      em.series.push_back(se);
    }
    for (const Run* run : by_len) {
      if (run->sweep != "context") continue;  // the shared one is already drawn
      report::Series se{std::to_string(run->layers) + " layers, T " + std::to_string(run->len), {}, {}};
      for (const Emergence& e : run->emergence) se.x.push_back(double(e.step)), se.y.push_back(e.rate);
      em.series.push_back(se);
    }
    r.html.AddFigure(report::RenderLinePlot(em),
                     "On the first validation batch every " + std::to_string(s.probe_every) + " steps (Trainer's probe).",
                     "fig-emergence");
  }

  r.html.AddSection("collapse", "Collapse and over-mixing: baseline against no-sink attention (" +
                                    std::to_string(CL) + " layers)");
  auto depth_plot = [&](const std::string& title, const std::string& ylabel,
                        const std::function<double(const Run&, size_t)>& f, size_t from) {
    report::XyPlot p;
    p.title = title;
    p.x.label = "depth (0 = embedding, l = output of layer l)";
    p.y.label = ylabel;
    p.markers = true;
    for (const Run* run : cmp) {
      report::Series se{KindId(run->kind), {}, {}};
      for (size_t l = from; l < run->collapse.size(); ++l) se.x.push_back(double(l)), se.y.push_back(f(*run, l));
      p.series.push_back(se);
    }
    return report::RenderLinePlot(p);
  };
  r.html.AddFigure(depth_plot("Relative residual (Dong et al. 2021; 0 = rank one)", "relative residual",
                              [](const Run& run, size_t l) { return run.collapse[l].relative_residual; }, 0),
                   "||X - 1 xbar^T|| / ||X|| (1,inf norms) of the residual stream, mean over " +
                       std::to_string(s.probe_sequences) + " held-out sequences (BOS included).",
                   "fig-rr");
  r.html.AddFigure(depth_plot("Mean pairwise token cosine (1 = collapsed)", "mean cosine",
                              [](const Run& run, size_t l) { return run.collapse[l].mean_cosine; }, 0),
                   "Over every pair of tokens of a sequence, BOS included.", "fig-cosine");
  r.html.AddFigure(depth_plot("Normalised attention entropy (1 = uniform)", "entropy",
                              [](const Run& run, size_t l) { return run.collapse[l].entropy; }, 1),
                   "Mean over heads and rows; undefined for sigmoid attention (its weights are not a "
                   "distribution); for softmax1 the entropy of the sub-probability vector over the real keys.",
                   "fig-entropy");
  r.html.AddFigure(depth_plot("Over-mixing: relative change of later tokens when token p = T/2 is replaced",
                              "mean ||dh_t|| / ||h_t||, t > p",
                              [](const Run& run, size_t l) { return run.perturb.rel[l]; }, 0),
                   "Barbero et al. 2025's question: how far does a perturbation of one token spread into the "
                   "others? 0 at the embedding by construction.",
                   "fig-perturbation");
  {
    std::vector<std::vector<std::string>> rows;
    for (const Run* run : cmp) {
      for (size_t l = 0; l < run->collapse.size(); ++l) {
        const DepthMetrics& d = run->collapse[l];
        rows.push_back({KindLabel(run->kind), std::to_string(l), Fmt(d.relative_residual, "%.3f"),
                        Fmt(d.mean_cosine, "%.3f"), Fmt(d.norm, "%.3g"), Fmt(d.entropy, "%.3f"),
                        Fmt(run->perturb.abs[l], "%.3g"), Fmt(run->perturb.rel[l], "%.3f")});
      }
    }
    r.html.AddTable({"variant", "depth", "relative residual", "mean cosine", "norm", "entropy",
                     "perturbation abs", "perturbation rel"},
                    rows, "n/a: undefined (entropy at the embedding and for sigmoid attention).");
    std::vector<std::vector<std::string>> srows;
    for (const Run* run : cmp) {
      srows.push_back({KindLabel(run->kind), Fmt(run->sinks.rate, "%.2f"), Fmt(run->sinks.max, "%.3f"),
                       Fmt(run->sinks.mean, "%.3f"), Fmt(run->val_loss, "%.3f")});
    }
    r.html.AddTable({"variant", "Sink_1^0.3", "max alpha_1", "mean alpha_1", "val loss"}, srows,
                    "Attention on token 0 of the compared models (softmax1 and sigmoid CAN still attend to "
                    "token 0; they need not, having another way to attend to nothing).");
  }
  r.html.AddSection("setup", "Setup");
  r.html.AddBulletList({
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
  return r;
}

}  // namespace

Experiment SinksCollapseExperiment() {
  return {kName,
          "sink strength against depth and training context, and the collapse / over-mixing metrics of "
          "models that cannot form a first-token sink (Barbero et al. 2025)",
          RunSinksCollapse};
}

}  // namespace attnlab::experiments
