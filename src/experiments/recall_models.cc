#include "experiments/recall_models.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "experiments/experiment_report.h"
#include "train/optimizer.h"
#include "train/token_data.h"

namespace attnlab::experiments::recall_models {

// Default: 4-6.5 min on 2 threads (235 s; 356-383 s with the cores shared with other jobs), the
// probe a few seconds of it; softmax's phase transition comes at ~250 of its 800 steps at every
// seed tried (1, 2). Quick: ~40 s; 8 keys put the transition at ~100 of 200 steps at every seed
// tried (1-4; with 16 keys and 4-16 pairs it missed 250 steps at one seed of three).
Sizes SizesFor(bool quick) {
  return quick ? Sizes{2, 64, 4, false, 0.1, {2, 4, 8}, 8, 16, 512, 200, 20, 3e-3, 8, 4, 1024, 5, 256,
                       64, 8, {16, 64, 256, 1024, 4096}}
               : Sizes{2, 64, 4, false, 0.1, {4, 8, 16, 32}, 32, 32, 1024, 800, 50, 3e-3, 16, 4, 4096, 10,
                       512, 64, 32, {16, 64, 256, 1024, 4096, 16384}};
}

const std::vector<Variant>& Variants() {
  static const std::vector<Variant> v = {
      {"softmax", "softmax (full causal)", [](ModelConfig&, const Sizes&) {}},
      {"linear", "linear (elu+1)", [](ModelConfig& c, const Sizes&) { c.attention_type = AttentionType::kLinear; }},
      {"window", "sliding window", [](ModelConfig& c, const Sizes& s) { c.attention_window = s.window; }},
      {"sparse", "window + global", [](ModelConfig& c, const Sizes& s) {
         c.attention_type = AttentionType::kSparse;
         c.attention_window = s.window;
         c.attention_global = s.global;
       }},
  };
  return v;
}

uint64_t StreamSeed(uint64_t seed, uint64_t purpose, uint64_t a, uint64_t b) {
  return SplitMix64(SplitMix64(SplitMix64(seed ^ (purpose << 56)) + a) + b);
}

Result<std::vector<double>> Accuracy(Gpt& g, const Mqar& task, const Sizes& s, int64_t queries, uint64_t seed,
                                     uint64_t evaluation) {
  std::vector<double> acc;
  const int64_t V = g.config().vocab_size;
  for (size_t ci = 0; ci < s.pairs.size(); ++ci) {
    const int64_t n = s.pairs[ci], B = (queries + n - 1) / n;
    ATTNLAB_ASSIGN_OR_RETURN(MqarBatch b, task.MakeBatch(n, B, StreamSeed(seed, 2, evaluation, ci)));
    ATTNLAB_RETURN_IF_ERROR(g.Forward(b.tokens.data(), nullptr, B, b.len, nullptr));
    int64_t right = 0, total = 0;
    for (int64_t i = 0; i < B * b.len; ++i) {
      if (b.targets[i] < 0) continue;
      const float* z = g.logits() + i * V;
      right += std::max_element(z, z + V) - z == b.targets[i];
      ++total;
    }
    acc.push_back(static_cast<double>(right) / static_cast<double>(total));
  }
  return acc;
}

std::string AccLine(const Sizes& s, const std::vector<double>& acc) {
  std::string r;
  for (size_t i = 0; i < acc.size(); ++i) {
    if (i) r += ' ';
    r += std::to_string(s.pairs[i]);
    r += ':';
    r += Fmt(acc[i], "%.2f");
  }
  return r;
}

Result<ModelRun> TrainModel(const ExperimentOptions& o, const Sizes& s, const Mqar& task,
                            const Variant& v, const char* name) {
  const auto t0 = std::chrono::steady_clock::now();
  ModelRun run;
  run.v = &v;
  run.id = v.id;
  ModelConfig c;
  c.vocab_size = task.vocab();
  c.context = Mqar::SequenceLength(s.pairs.back());
  c.d_model = s.d_model;
  c.n_layer = s.layers;
  c.n_head = s.heads;
  c.mlp = s.mlp;
  c.position = PositionEncoding::kRope;
  c.init_std = static_cast<float>(s.init_std);
  v.apply(c, s);
  run.config = c;
  ATTNLAB_ASSIGN_OR_RETURN(std::unique_ptr<Gpt> g, Gpt::Create(c));
  g->params().Initialize(c, o.seed);
  AdamWConfig oc;
  oc.lr = static_cast<float>(s.lr);
  oc.min_lr = static_cast<float>(s.lr / 10);
  oc.warmup_steps = s.warmup;
  oc.total_steps = s.steps;
  oc.weight_decay = static_cast<float>(kWeightDecay);
  AdamW opt(c, oc);
  const int64_t P = static_cast<int64_t>(s.pairs.size());
  int64_t bad_in_a_row = 0;
  auto curve_point = [&](int64_t step) -> Status {
    ATTNLAB_ASSIGN_OR_RETURN(std::vector<double> acc, Accuracy(*g, task, s, s.curve_queries, o.seed, 1 + step));
    run.curve_steps.push_back(step);
    run.curve.push_back(acc);
    const double loss = run.train_loss.empty() ? NAN : run.train_loss.back();
    Progress(o, name, "%-22s step %5ld/%ld | loss %s | accuracy %s | %.0f s", v.label, static_cast<long>(step),
             static_cast<long>(s.steps), Fmt(loss, "%.3f").c_str(), AccLine(s, acc).c_str(),
             SecondsSince(t0));
    return Status::Ok();
  };
  ATTNLAB_RETURN_IF_ERROR(curve_point(0));
  for (int64_t step = 0; step < s.steps; ++step) {
    g->grads().Zero();
    double loss_sum = 0;
    bool finite = true;
    for (int64_t ci = 0; ci < P && finite; ++ci) {
      const int64_t n = s.pairs[ci], len = Mqar::SequenceLength(n);
      const int64_t B = std::max<int64_t>(1, s.tokens_per_count / len);
      ATTNLAB_ASSIGN_OR_RETURN(MqarBatch b, task.MakeBatch(n, B, StreamSeed(o.seed, 1, step, ci)));
      double loss = 0;
      ATTNLAB_RETURN_IF_ERROR(g->Forward(b.tokens.data(), b.targets.data(), B, len, &loss));
      finite = std::isfinite(loss);
      if (finite) {
        ATTNLAB_RETURN_IF_ERROR(g->Backward(1.0f / static_cast<float>(P)));
        loss_sum += loss;
      }
    }
    const double norm = finite ? opt.Step(g->params(), g->grads()) : NAN;
    if (!std::isfinite(norm)) {
      ++run.skipped;
      opt.set_step(step + 1);  // the schedule follows the loop
      if (++bad_in_a_row >= 20) {
        return Status::Internal(std::string(name) + ": " + v.id +
                                " training diverged (20 steps in a row with non-finite loss or gradients)");
      }
    } else {
      bad_in_a_row = 0;
    }
    run.train_loss.push_back(finite ? loss_sum / static_cast<double>(P) : NAN);
    const int64_t done = step + 1;
    if (done % std::max<int64_t>(1, s.steps / s.curve_points) == 0 || done == s.steps) {
      ATTNLAB_RETURN_IF_ERROR(curve_point(done));
    }
  }
  ATTNLAB_ASSIGN_OR_RETURN(run.accuracy, Accuracy(*g, task, s, s.eval_queries, o.seed, 0));
  run.seconds = SecondsSince(t0);
  run.model = std::move(g);
  Progress(o, name, "%-22s final accuracy %s (%ld queries per count) | %.0f s", v.label,
           AccLine(s, run.accuracy).c_str(), static_cast<long>(s.eval_queries), run.seconds);
  return run;
}

}  // namespace attnlab::experiments::recall_models
