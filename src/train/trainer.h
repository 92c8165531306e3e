// The training loop: batches from a token file, forward/backward with gradient accumulation,
// AdamW, periodic validation, atomic checkpoints, exact resume, a progress line.
//
// Reproducibility: batches are a pure function of (seed, step) (token_data.h), the model and
// optimizer are bit-deterministic for a fixed thread count, and a checkpoint stores parameters,
// both AdamW moments and the step. A run resumed from step s therefore produces exactly the
// losses of the uninterrupted run from step s on.
//
// Data parallel (issue 36): under `mpirun -np P` (dist::World() has P ranks) every micro-batch
// is shared among the ranks (train/data_parallel.h: rank r runs a contiguous share of the
// sequences), gradients are summed over the ranks bucket by bucket while the backward runs
// (dist/grad_reducer.h), and every rank takes the same optimizer step. The global batch, the
// schedule and the checkpoint do not depend on P, so P = 1 and P = 2 give the same losses to
// rounding, and a run saved with one P resumes with another. Rank 0 alone writes checkpoints,
// the log and the progress line; the probe runs on rank 0. The auxiliary losses are refused
// when P > 1 (their value is not a sum over sequences).
#ifndef ATTNLAB_TRAIN_TRAINER_H_
#define ATTNLAB_TRAIN_TRAINER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "attnlab/status.h"
#include "dist/comm.h"
#include "dist/grad_reducer.h"
#include "model/gpt.h"
#include "train/auxiliary_losses.h"
#include "train/optimizer.h"

namespace attnlab {

// A measurement taken on the model during training. The trainer knows nothing of what it
// measures: `measure` gets the model and the first validation batch (tokens [batch, len], the
// same batch every time; BOS-prefixed like every batch) and returns a JSON record, stored in
// TrainRecord::probe and the log; `progress` (optional) gives text for the progress line.
struct TrainProbe {
  std::function<Result<nlohmann::json>(Gpt& model, const int32_t* tokens, int64_t batch,
                                        int64_t len)>
      measure;
  std::function<std::string(const nlohmann::json& record)> progress;
};

struct TrainOptions {
  int64_t batch = 16;     // sequences per micro-batch
  int64_t seq_len = 0;    // tokens per sequence; 0: the model's context
  int64_t accum = 1;      // micro-batches per optimizer step
  int64_t steps = 1000;   // optimizer steps in total
  uint64_t seed = 1;      // batch sampling (and nothing else: init has its own seed)
  int32_t bos = -1;       // >= 0: every sequence starts with this token
  // First-token augmentation (token_data.h): replace / drop the BOS with these probabilities.
  double first_token_replace = 0, first_token_drop = 0;
  AdamWConfig opt;
  int64_t eval_every = 100;  // steps; 0: only at the end
  int64_t eval_batches = 16;
  int64_t log_every = 10;
  int64_t checkpoint_every = 0;  // steps; 0: only at the end (if out_dir is set)
  std::string out_dir;           // checkpoint directory (and train_log.jsonl next to it)
  int64_t max_bad_steps = 20;    // consecutive NaN/Inf steps before giving up
  // Every probe_every steps (0: never) and at the last step, `probe` measures the model on the
  // first validation batch and the result is recorded in the log (e.g. the first-token attention
  // of diagnostics/first_token_probe.h: the sink-emergence curve). Required when probe_every > 0.
  int64_t probe_every = 0;
  TrainProbe probe;
  // Auxiliary losses (experiments): a head-diversity penalty and a contrastive loss between
  // layers are applied by the callback after each Backward, adding to gradients.
  std::function<Status(Gpt&, double* extra_loss)> auxiliary;
  // Training-side remedies against collapse (train/auxiliary_losses.h), 0 = off: a head-diversity
  // penalty (weight of D) and an InfoNCE loss between consecutive layers (weight of I), added to
  // the LM loss with hand-written gradients. TrainRecord::loss stays the LM loss alone.
  double diversity_weight = 0, contrastive_weight = 0;
  // A penalty on each head's attention to the first token (train/first_token_penalty.h): weight
  // of R = mean over layers and heads of alpha_1^power (power 1: L1, 2: L2), 0 = off.
  double first_token_weight = 0;
  int first_token_power = 2;
  bool quiet = false;  // no progress line (tests)
  nlohmann::json meta = nlohmann::json::object();  // stored in checkpoints (tokenizer, data...)
  // The ranks sharing each batch (data parallel); null: dist::World().
  dist::Comm* comm = nullptr;

  nlohmann::json ToJson() const;
};

struct TrainRecord {
  int64_t step = 0;  // optimizer steps done after this record's update
  double loss = 0, lr = 0, grad_norm = 0, tokens_per_s = 0;
  double val_loss = -1;  // < 0: not evaluated at this step
  bool skipped = false;  // NaN/Inf: the update was skipped
  // Distributed runs only (P > 1): this rank's gradient all-reduce in this step.
  double allreduce_s = 0;       // on the communication thread
  double allreduce_hidden = 1;  // share of it the backward hid (1 - exposed / allreduce_s)
  int64_t allreduce_bytes = 0;  // sent by this rank
  double aux_loss = 0;   // weighted auxiliary loss (diversity_weight D + contrastive_weight I
                         // + first_token_weight R)
  double diversity = 0, contrastive = 0, first_token = 0;  // D, I and R (unweighted), 0 when off
  nlohmann::json probe;  // null, or what TrainOptions::probe measured at this step
};

class Trainer {
 public:
  // REQUIRES: model outlives the trainer; train tokens longer than seq_len + 1.
  Trainer(Gpt* model, TrainOptions options, std::vector<int32_t> train_tokens,
          std::vector<int32_t> val_tokens);

  // Restores the optimizer state and step from a resumable checkpoint's moments.
  Status RestoreOptimizer(const ParameterStore& m, const ParameterStore& v, int64_t step);

  // Trains from the current step until options.steps (or until `until` if it is smaller; the
  // schedule still spans options.steps, so stopping early and resuming later is the same run).
  // Writes checkpoints when out_dir is set, always one at the point where it stops.
  Status Run(int64_t until = -1);

  // Mean validation loss over options.eval_batches batches of validation windows.
  Result<double> Evaluate();

  // TrainOptions::probe on the first validation batch. InvalidArgument without a probe.
  Result<nlohmann::json> Probe();

  const std::vector<TrainRecord>& history() const { return history_; }
  int64_t step() const { return opt_.step(); }
  AdamW& optimizer() { return opt_; }
  Status SaveCheckpointNow();

 private:
  Gpt* model_;
  TrainOptions options_;
  std::vector<int32_t> train_, val_;
  AdamW opt_;
  std::vector<TrainRecord> history_;
  std::unique_ptr<AuxiliaryLosses> aux_;  // null when both weights are 0
  std::vector<int32_t> inputs_, targets_;  // one global batch [batch, seq_len]
  int64_t seq_len_ = 0;
  dist::Comm* comm_;                                  // options.comm or dist::World()
  std::unique_ptr<dist::GradientReducer> reducer_;    // P > 1 only

  // One optimizer step's forwards and backwards over options.accum micro-batches (this rank's
  // share of each), the gradients summed over the ranks: fills rec's loss, auxiliary terms and
  // all-reduce timing; *finite is false when the loss of any micro-batch on any rank was not.
  Status AccumulateGradients(int64_t step, TrainRecord* rec, bool* finite);
};

}  // namespace attnlab

#endif  // ATTNLAB_TRAIN_TRAINER_H_
