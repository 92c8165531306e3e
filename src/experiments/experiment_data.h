// What the training experiments share: token data (a directory made by `attnlab prepare`, --data
// DIR, or by default the Brown corpus as bytes) and the optimiser schedule.
#ifndef ATTNLAB_EXPERIMENTS_EXPERIMENT_DATA_H_
#define ATTNLAB_EXPERIMENTS_EXPERIMENT_DATA_H_

#include <cstdint>
#include <string>
#include <vector>

#include "attnlab/status.h"
#include "experiments/experiment.h"
#include "train/trainer.h"

namespace attnlab::experiments {

struct TokenData {
  std::vector<int32_t> train, val;
  int64_t vocab = 0;   // every id is in [0, vocab)
  std::string source;  // for the report: the directory, or the corpus and its split
};

// DIR/train.tok and DIR/val.tok (train/token_data.h); vocab = the larger of the two files'.
Result<TokenData> ReadPreparedData(const std::string& dir);

// options.data when set (ReadPreparedData), else the Brown corpus as bytes, tokenised in memory
// with every 20th document held out for validation (as `attnlab prepare` splits it) and an EOS
// after each document. NotFound, with how to get data, when neither is there.
Result<TokenData> LoadTextData(const ExperimentOptions& options);

// Cross-entropy (nats per token) of the validation split under the training split's unigram
// distribution, add-one smoothed: the loss of a model that ignores context entirely.
// InvalidArgument on an empty split or an id outside [0, vocab).
Result<double> UnigramValLoss(const TokenData& data);

// AdamW at `lr` with linear warmup over warmup_steps and cosine decay to min_lr at `steps`
// (train/optimizer.h), the default weight decay and clipping; batches from `seed`; no periodic
// evaluation (Trainer::Evaluate averages eval_batches batches); no progress lines.
struct TrainingSchedule {
  int64_t batch = 0, seq_len = 0, steps = 0;
  uint64_t seed = 1;
  double lr = 0, min_lr = 0;
  int64_t warmup_steps = 0, eval_batches = 1;
};
// InvalidArgument on a non-positive size or learning rate, or a negative warmup.
Result<TrainOptions> ScheduledTrainOptions(const TrainingSchedule& schedule);

}  // namespace attnlab::experiments

#endif  // ATTNLAB_EXPERIMENTS_EXPERIMENT_DATA_H_
