// The training setup shared by the experiments that grow an attention sink (sinks.cc,
// sinks_collapse.cc): the Bigram-Backcopy data (Guo et al. 2024, arXiv:2410.13835), the small
// attention-only model and its optimiser, the two-half training loop with the sink-emergence
// probe, and the summaries of alpha_1 (Gu et al. 2024, arXiv:2410.10781, eq. 1). One definition:
// sinks-and-collapse's 2-layer, T 64 baseline at seed 0 IS the sinks experiment's baseline
// because both build it here.
#ifndef ATTNLAB_EXPERIMENTS_SINK_TRAINING_H_
#define ATTNLAB_EXPERIMENTS_SINK_TRAINING_H_

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "attnlab/status.h"
#include "experiments/experiment.h"
#include "model/gpt.h"
#include "train/trainer.h"

namespace attnlab::experiments {

inline constexpr double kSinkEps = 0.3;  // Gu et al.'s epsilon for Sink_1^eps

// A [layer][head] matrix of alpha values (attention on one key, mean over queries) summarised.
struct SinkSummary {
  double max = NAN;   // largest entry; NaN when the matrix is empty or has a NaN
  double mean = 0;    // mean over entries
  double rate = 0;    // Sink^eps: share of entries > eps
  double count = 0;   // entries > eps (a double: experiments average it over seeds)
};
SinkSummary Summarise(const std::vector<std::vector<double>>& alpha, double eps = kSinkEps);

// alpha_1 of uniform causal attention over T tokens: query t sees t + 1 keys, so the mean over
// queries of 1 / (t + 1) is H_T / T (the harmonic number over T). 0 for T <= 0.
double UniformAlpha1(int64_t T);

// The training data: Bigram-Backcopy streams, or a prepared corpus (sinks --data).
struct SinkData {
  std::vector<int32_t> train, val, stream;  // stream: held-out text (streaming evaluation)
  int64_t vocab = 0;  // data ids are [0, vocab); BOS = vocab, so the model has vocab + 1 ids
  double floor = NAN;  // the task's loss floor on val (synthetic data only)
  std::string source;  // for the report
};

// The Bigram-Backcopy task with rare triggers (trigger mass 0.05: a copy head is useful at ~5%
// of the tokens), the matrix from `seed`, and three independent streams of it: training
// (max(2^16, train_tokens) tokens), validation (val_tokens) and streaming (stream_tokens; 0 =
// none), from SplitMix64(3 seed + 1), (3 seed + 2), (3 seed + 3).
Result<SinkData> MakeBigramBackcopyData(uint64_t seed, int64_t train_tokens, int64_t val_tokens,
                                        int64_t stream_tokens);

// The model and optimiser: attention-only pre-LN blocks (with MLPs no sink forms within the
// budget; docs/EXPERIMENTS.md), RoPE, init std 0.02; AdamW lr with warmup steps / 20 and cosine
// decay to lr / 10, weight decay 0.1; BOS first; the first-token probe every probe_every steps.
struct SinkModelSizes {
  int64_t layers = 2, d_model = 32, heads = 8, len = 64, batch = 16, steps = 1000;
  int64_t eval_batches = 8, probe_every = 50;
  double lr = 2e-2;
};
// InvalidArgument when a size is not positive.
Result<ModelConfig> SinkModelConfig(const SinkModelSizes& s, int64_t vocab);
Result<TrainOptions> SinkTrainOptions(const SinkModelSizes& s, uint64_t seed, int64_t vocab);

// One point of the sink-emergence curve: the Trainer's probe (alpha_1 on the first validation
// batch) summarised.
struct SinkEmergence {
  int64_t step = 0;
  double sink_rate = 0, max_alpha1 = 0, mean_alpha1 = 0;
};

struct SinkTraining {
  double init_val_loss = NAN, val_loss = NAN;
  std::vector<double> train_loss;         // per step
  std::vector<SinkEmergence> emergence;   // every probe_every steps (and step 0 if asked)
};

// Trains `g` (initialised by the caller) with `to` on data.train in two halves, a progress line
// "[name] label step k/n | loss | Sink_1 | max alpha_1 | s" after each; evaluates before and
// after (the last training evaluation when there was one at the end). probe_at_start adds the
// probe at step 0 to the emergence curve.
Result<SinkTraining> TrainInTwoHalves(Gpt& g, const TrainOptions& to, const SinkData& data,
                                      bool probe_at_start, const ExperimentOptions& o,
                                      const char* name, const std::string& label);

// The largest |change| of any logit at text positions >= 1 when every sequence's token 0 (the
// BOS, or the first text token when bos < 0) is replaced by another data id, on the first
// validation batch of batch x len: exactly 0 when no query can see token 0 (mask_first_key), and
// > 0 when some can.
Result<double> FirstTokenSensitivity(Gpt& g, const std::vector<int32_t>& val, int64_t batch,
                                     int64_t len, int32_t bos, int64_t vocab);

}  // namespace attnlab::experiments

#endif  // ATTNLAB_EXPERIMENTS_SINK_TRAINING_H_
