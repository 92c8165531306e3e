// The models `experiment recall` trains on multi-query associative recall (experiments/mqar.h),
// shared with `experiment kv-eviction`, which answers the same task through bounded KV caches:
// the sizes (default and --quick), the attention variants, the training loop (AdamW, the kv
// counts' mixture, accuracy curves) and greedy accuracy at the query positions. recall.cc states
// the setup and why these sizes.
#ifndef ATTNLAB_EXPERIMENTS_RECALL_MODELS_H_
#define ATTNLAB_EXPERIMENTS_RECALL_MODELS_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "attnlab/model_config.h"
#include "attnlab/status.h"
#include "experiments/experiment.h"
#include "experiments/mqar.h"
#include "model/gpt.h"

namespace attnlab::experiments::recall_models {

constexpr double kWeightDecay = 0.1;  // Zoology's

struct Sizes {
  int64_t layers, d_model, heads;
  bool mlp;
  double init_std;
  std::vector<int64_t> pairs;  // kv counts: trained on the mixture, evaluated on each
  int64_t keys, values;        // MQAR vocabulary (mqar.h)
  int64_t tokens_per_count;    // training tokens per kv count per step
  int64_t steps, warmup;
  double lr;
  int64_t window, global;  // window: keys i-window..i; sparse: plus `global` global positions
  int64_t eval_queries;    // queries per kv count in the final evaluation
  int64_t curve_points, curve_queries;  // accuracy during training: evaluations, queries per count
  int64_t probe_dim, probe_seeds;
  std::vector<int64_t> probe_lengths;
};

// Default: 4-6.5 min on 2 threads for the four models; quick: ~40 s (recall.cc).
Sizes SizesFor(bool quick);

struct Variant {
  const char* id;
  const char* label;
  void (*apply)(ModelConfig& c, const Sizes& s);
};

// softmax, linear, window, sparse (recall.cc), in that order.
const std::vector<Variant>& Variants();

// Seeds of the batch streams: training batches depend on (seed, step, count), evaluation
// batches on (seed, evaluation, count); never the same stream twice, the same for every model.
uint64_t StreamSeed(uint64_t seed, uint64_t purpose, uint64_t a, uint64_t b);

struct ModelRun {
  const Variant* v = nullptr;
  const char* id = "";                           // v->id (FindById)
  ModelConfig config;
  std::vector<double> train_loss;                // [steps], mean over the counts
  std::vector<double> accuracy;                  // [counts], final evaluation
  std::vector<int64_t> curve_steps;              // [points]
  std::vector<std::vector<double>> curve;        // [points][counts]
  int64_t skipped = 0;                           // non-finite steps (update skipped)
  double seconds = 0;
  std::shared_ptr<Gpt> model;                    // the trained model
};

// Greedy accuracy (argmax over the vocabulary == target) at the query positions, per count, on
// `queries` held-out queries per count (ceil(queries / n) sequences).
Result<std::vector<double>> Accuracy(Gpt& g, const Mqar& task, const Sizes& s, int64_t queries,
                                     uint64_t seed, uint64_t evaluation);

// "2:0.50 4:0.25 ..." (count:accuracy).
std::string AccLine(const Sizes& s, const std::vector<double>& acc);

// Trains variant v from ParameterStore::Initialize(c, o.seed) on the kv counts' mixture, with
// progress lines under `name`; the run keeps the trained model.
Result<ModelRun> TrainModel(const ExperimentOptions& o, const Sizes& s, const Mqar& task,
                            const Variant& v, const char* name);

}  // namespace attnlab::experiments::recall_models

#endif  // ATTNLAB_EXPERIMENTS_RECALL_MODELS_H_
