#include "experiments/sink_training.h"

#include <algorithm>
#include <chrono>

#include "diagnostics/first_token_probe.h"
#include "experiments/bigram_backcopy.h"
#include "experiments/experiment_data.h"
#include "experiments/experiment_report.h"
#include "train/token_data.h"

namespace attnlab::experiments {

SinkSummary Summarise(const std::vector<std::vector<double>>& alpha, double eps) {
  SinkSummary s;
  double max = -INFINITY;
  bool nan = false;
  int64_t n = 0;
  for (const auto& row : alpha) {
    for (double x : row) {
      nan |= std::isnan(x);
      max = std::max(max, x);
      s.mean += x;
      s.count += x > eps;
      ++n;
    }
  }
  if (n == 0) return s;  // max NaN, mean and rate 0
  s.max = nan ? NAN : max;
  s.mean /= static_cast<double>(n);
  s.rate = s.count / static_cast<double>(n);
  return s;
}

double UniformAlpha1(int64_t T) {
  if (T <= 0) return 0.0;
  double u = 0;
  for (int64_t t = 0; t < T; ++t) u += 1.0 / static_cast<double>(t + 1);
  return u / static_cast<double>(T);
}

Result<SinkData> MakeBigramBackcopyData(uint64_t seed, int64_t train_tokens, int64_t val_tokens,
                                        int64_t stream_tokens) {
  if (val_tokens < 2 || stream_tokens < 0) {
    return Status::InvalidArgument("Bigram-Backcopy data: need >= 2 validation tokens and >= 0 streaming tokens");
  }
  BigramBackcopyOptions bo;
  bo.seed = seed;
  bo.trigger_mass = 0.05;  // rare triggers: a copy head is useful at ~5% of the tokens only
  ATTNLAB_ASSIGN_OR_RETURN(BigramBackcopy task, BigramBackcopy::Create(bo));
  SinkData d;
  d.train = task.Generate(std::max<int64_t>(1 << 16, train_tokens), SplitMix64(seed * 3 + 1));
  d.val = task.Generate(val_tokens, SplitMix64(seed * 3 + 2));
  if (stream_tokens > 0) d.stream = task.Generate(stream_tokens, SplitMix64(seed * 3 + 3));
  d.vocab = bo.vocab;
  d.floor = task.ConditionalEntropy(d.val);
  d.source = "Bigram-Backcopy (Guo et al. 2024): vocab " + std::to_string(bo.vocab) + ", " +
             std::to_string(bo.triggers) + " trigger tokens, " + std::to_string(bo.successors) +
             " successors per row, trigger mass " + Fmt(bo.trigger_mass, "%g");
  return d;
}

namespace {

Status CheckSizes(const SinkModelSizes& s, int64_t vocab) {
  if (s.layers <= 0 || s.d_model <= 0 || s.heads <= 0 || s.len <= 0 || s.batch <= 0 || s.steps <= 0 ||
      s.eval_batches <= 0 || s.probe_every < 0 || !(s.lr > 0) || vocab <= 0) {
    return Status::InvalidArgument("sink model: every size, the learning rate and the vocabulary must be positive");
  }
  return Status::Ok();
}

SinkEmergence FromProbe(int64_t step, const nlohmann::json& probe) {
  const SinkSummary a = Summarise(probe["alpha1"].get<std::vector<std::vector<double>>>());
  return {step, a.rate, a.max, a.mean};
}

}  // namespace

Result<ModelConfig> SinkModelConfig(const SinkModelSizes& s, int64_t vocab) {
  ATTNLAB_RETURN_IF_ERROR(CheckSizes(s, vocab));
  ModelConfig c;
  c.vocab_size = vocab + 1;  // + the BOS
  c.context = s.len;
  c.d_model = s.d_model;
  c.n_layer = s.layers;
  c.n_head = s.heads;
  c.mlp = false;  // attention-only blocks: see docs/EXPERIMENTS.md (with MLPs, no sink in budget)
  c.position = PositionEncoding::kRope;
  return c;
}

Result<TrainOptions> SinkTrainOptions(const SinkModelSizes& s, uint64_t seed, int64_t vocab) {
  ATTNLAB_RETURN_IF_ERROR(CheckSizes(s, vocab));
  ATTNLAB_ASSIGN_OR_RETURN(TrainOptions to, ScheduledTrainOptions({.batch = s.batch,
                                                                    .seq_len = s.len,
                                                                    .steps = s.steps,
                                                                    .seed = seed,
                                                                    .lr = s.lr,
                                                                    .min_lr = s.lr / 10,
                                                                    .warmup_steps = s.steps / 20,
                                                                    .eval_batches = s.eval_batches}));
  to.bos = static_cast<int32_t>(vocab);  // BOS = the extra id after the data's vocabulary
  to.opt.weight_decay = 0.1f;
  to.probe_every = s.probe_every;
  to.probe = {MeasureFirstToken, FirstTokenProgressText};  // alpha_1 on the first validation batch
  return to;
}

Result<SinkTraining> TrainInTwoHalves(Gpt& g, const TrainOptions& to, const SinkData& data,
                                      bool probe_at_start, const ExperimentOptions& o,
                                      const char* name, const std::string& label) {
  if (to.steps <= 0) return Status::InvalidArgument("sink training: no steps");
  const auto t0 = std::chrono::steady_clock::now();
  SinkTraining run;
  Trainer trainer(&g, to, data.train, data.val);
  ATTNLAB_ASSIGN_OR_RETURN(run.init_val_loss, trainer.Evaluate());
  if (probe_at_start) {
    ATTNLAB_ASSIGN_OR_RETURN(nlohmann::json p0, trainer.Probe());
    run.emergence.push_back(FromProbe(0, p0));
  }
  for (int64_t half = 1; half <= 2; ++half) {
    ATTNLAB_RETURN_IF_ERROR(trainer.Run(to.steps * half / 2));
    const TrainRecord& last = trainer.history().back();
    const SinkEmergence e = last.probe.is_null() ? SinkEmergence{last.step, NAN, NAN, NAN}
                                                 : FromProbe(last.step, last.probe);
    Progress(o, name, "%-40s step %4ld/%ld | loss %.3f | Sink_1 %s | max alpha_1 %s | %.0f s", label.c_str(),
             static_cast<long>(trainer.step()), static_cast<long>(to.steps), last.loss,
             Fmt(e.sink_rate, "%.2f").c_str(), Fmt(e.max_alpha1, "%.3f").c_str(), SecondsSince(t0));
  }
  for (const TrainRecord& rec : trainer.history()) {
    run.train_loss.push_back(rec.loss);
    if (!rec.probe.is_null()) run.emergence.push_back(FromProbe(rec.step, rec.probe));
    if (rec.val_loss >= 0) run.val_loss = rec.val_loss;
  }
  if (!(run.val_loss >= 0)) {
    ATTNLAB_ASSIGN_OR_RETURN(run.val_loss, trainer.Evaluate());
  }
  return run;
}

Result<double> FirstTokenSensitivity(Gpt& g, const std::vector<int32_t>& val, int64_t batch,
                                     int64_t len, int32_t bos, int64_t vocab) {
  if (batch <= 0 || len < 2 || vocab < 2) {
    return Status::InvalidArgument("first-token sensitivity: need batch >= 1, len >= 2, vocab >= 2");
  }
  std::vector<int32_t> in(batch * len), tg(in.size());
  if (!EvalBatch(val, 0, batch, len, bos, in.data(), tg.data())) {
    return Status::InvalidArgument("the validation data is shorter than one batch");
  }
  const int64_t V = g.config().vocab_size;
  ATTNLAB_RETURN_IF_ERROR(g.Forward(in.data(), nullptr, batch, len, nullptr));
  const int64_t Tm = g.last_len(), off = Tm - len;  // off = 1 with a sink token
  std::vector<float> before(g.logits(), g.logits() + batch * Tm * V);
  for (int64_t b = 0; b < batch; ++b) {
    in[b * len] = static_cast<int32_t>((in[b * len] + 1 + b) % vocab);
  }
  ATTNLAB_RETURN_IF_ERROR(g.Forward(in.data(), nullptr, batch, len, nullptr));
  double diff = 0;
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t t = off + 1; t < Tm; ++t) {
      for (int64_t v = 0; v < V; ++v) {
        const int64_t i = (b * Tm + t) * V + v;
        diff = std::max(diff, std::fabs(static_cast<double>(g.logits()[i]) - before[i]));
      }
    }
  }
  return diff;
}

}  // namespace attnlab::experiments
