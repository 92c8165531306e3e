#include "train/trainer.h"

#include <chrono>
#include <cmath>
#include <cstdio>

#include "attnlab/thread_pool.h"
#include "core/atomic_file.h"
#include "formats/checkpoint.h"
#include "train/data_parallel.h"
#include "train/first_token_penalty.h"
#include "train/token_data.h"

namespace attnlab {

namespace {

std::string FormatDuration(double seconds) {
  const int64_t s = static_cast<int64_t>(seconds + 0.5);
  char buf[32];
  if (s >= 3600) {
    std::snprintf(buf, sizeof(buf), "%ldh%02ldm", static_cast<long>(s / 3600),
                  static_cast<long>((s / 60) % 60));
  } else {
    std::snprintf(buf, sizeof(buf), "%ldm%02lds", static_cast<long>(s / 60),
                  static_cast<long>(s % 60));
  }
  return buf;
}

// Keeps the log records with step <= max_step (a run resumed from an earlier checkpoint than the
// log's end replays those steps and must not duplicate them).
std::string TruncateLogAfter(const std::string& log, int64_t max_step) {
  std::string out;
  size_t pos = 0;
  while (pos < log.size()) {
    size_t end = log.find('\n', pos);
    if (end == std::string::npos) end = log.size();
    const std::string line = log.substr(pos, end - pos);
    pos = end + 1;
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_object() && j.contains("step") && j["step"].is_number_integer() &&
        j["step"].get<int64_t>() <= max_step) {
      out += line + "\n";
    }
  }
  return out;
}

}  // namespace

nlohmann::json TrainOptions::ToJson() const {
  return nlohmann::json{{"batch", batch},
                        {"seq_len", seq_len},
                        {"accum", accum},
                        {"steps", steps},
                        {"seed", seed},
                        {"bos", bos},
                        {"first_token_replace", first_token_replace},
                        {"first_token_drop", first_token_drop},
                        {"diversity_weight", diversity_weight},
                        {"contrastive_weight", contrastive_weight},
                        {"first_token_weight", first_token_weight},
                        {"first_token_power", first_token_power},
                        {"lr", opt.lr},
                        {"min_lr", opt.min_lr},
                        {"beta1", opt.beta1},
                        {"beta2", opt.beta2},
                        {"weight_decay", opt.weight_decay},
                        {"warmup_steps", opt.warmup_steps},
                        {"grad_clip", opt.grad_clip},
                        {"eval_every", eval_every},
                        {"eval_batches", eval_batches},
                        {"threads", DefaultThreadCount()},
                        {"ranks", (comm ? comm : &dist::World())->size()}};
}

Trainer::Trainer(Gpt* model, TrainOptions options, std::vector<int32_t> train_tokens,
                 std::vector<int32_t> val_tokens)
    : model_(model),
      options_(std::move(options)),
      train_(std::move(train_tokens)),
      val_(std::move(val_tokens)),
      opt_(model->config(), options_.opt),
      comm_(options_.comm ? options_.comm : &dist::World()) {
  seq_len_ = options_.seq_len > 0 ? options_.seq_len : model->config().context;
  opt_ = AdamW(model->config(), [&] {
    AdamWConfig c = options_.opt;
    c.total_steps = options_.steps;
    return c;
  }());
  inputs_.resize(options_.batch * seq_len_);
  targets_.resize(options_.batch * seq_len_);
  if (options_.diversity_weight != 0 || options_.contrastive_weight != 0 ||
      options_.first_token_weight != 0) {
    AuxiliaryLossOptions ao;
    ao.diversity_weight = options_.diversity_weight;
    ao.contrastive_weight = options_.contrastive_weight;
    ao.first_token_weight = options_.first_token_weight;
    ao.first_token_power = options_.first_token_power;
    aux_ = std::make_unique<AuxiliaryLosses>(ao);
  }
}

Status Trainer::RestoreOptimizer(const ParameterStore& m, const ParameterStore& v, int64_t step) {
  if (m.size() != opt_.m().size() || v.size() != opt_.v().size()) {
    return Status::InvalidArgument("optimizer state does not match the model's parameters");
  }
  std::copy(m.data(), m.data() + m.size(), opt_.m().data());
  std::copy(v.data(), v.data() + v.size(), opt_.v().data());
  opt_.set_step(step);
  return Status::Ok();
}

Result<double> Trainer::Evaluate() {
  const int64_t B = options_.batch, T = seq_len_;
  double total = 0;
  int64_t n = 0;
  const int P = comm_->size();
  for (int64_t i = 0; i < options_.eval_batches; ++i) {
    if (!EvalBatch(val_, i, B, T, options_.bos, inputs_.data(), targets_.data())) break;
    double loss = 0;
    if (P == 1) {
      ATTNLAB_RETURN_IF_ERROR(model_->Forward(inputs_.data(), targets_.data(), B, T, &loss));
      total += loss;
    } else {  // this rank's share; the weighted losses are summed over the ranks below
      const BatchShare sh = ShareOfBatch(targets_.data(), B, T, comm_->rank(), P);
      ATTNLAB_RETURN_IF_ERROR(model_->Forward(inputs_.data() + sh.begin * T,
                                              targets_.data() + sh.begin * T, sh.end - sh.begin,
                                              T, &loss));
      total += sh.weight * loss;
    }
    ++n;
  }
  if (n == 0) {
    return Status::InvalidArgument("validation data has fewer than " +
                                   std::to_string(B * (T + 1)) + " tokens (one batch)");
  }
  if (P > 1) {
    ATTNLAB_RETURN_IF_ERROR(comm_->AllReduceSum(std::span<double>(&total, 1),
                                                "all-reduce of the validation loss"));
  }
  return total / n;
}

Result<nlohmann::json> Trainer::Probe() {
  if (!options_.probe.measure) {
    return Status::InvalidArgument("no probe to run (TrainOptions::probe is empty)");
  }
  const int64_t B = options_.batch, T = seq_len_;
  if (!EvalBatch(val_, 0, B, T, options_.bos, inputs_.data(), targets_.data())) {
    return Status::InvalidArgument("validation data is shorter than one batch");
  }
  return options_.probe.measure(*model_, inputs_.data(), B, T);
}

Status Trainer::SaveCheckpointNow() {
  if (options_.out_dir.empty() || !comm_->root()) return Status::Ok();
  nlohmann::json meta = options_.meta;
  meta["step"] = opt_.step();
  meta["trainer"] = options_.ToJson();
  return SaveCheckpoint(options_.out_dir, model_->config(), model_->params(), &opt_.m(),
                        &opt_.v(), meta);
}

Status Trainer::AccumulateGradients(int64_t step, TrainRecord* rec, bool* finite) {
  const int64_t B = options_.batch, T = seq_len_;
  const int P = comm_->size();
  model_->grads().Zero();
  double loss_sum = 0, aux_sum = 0, div_sum = 0, con_sum = 0, first_sum = 0;
  int64_t nonfinite = 0;
  for (int64_t a = 0; a < options_.accum; ++a) {
    FirstTokenAugment aug;
    aug.replace = options_.first_token_replace;
    aug.drop = options_.first_token_drop;
    aug.vocab = static_cast<int32_t>(model_->config().vocab_size);
    SampleBatchAugmented(train_, options_.seed, step * options_.accum + a, B, T, options_.bos,
                         aug, inputs_.data(), targets_.data());
    double loss = 0;
    if (P == 1) {
      ATTNLAB_RETURN_IF_ERROR(model_->Forward(inputs_.data(), targets_.data(), B, T, &loss));
      if (!std::isfinite(loss)) {
        ++nonfinite;
        break;
      }
      if (aux_) {
        ATTNLAB_RETURN_IF_ERROR(aux_->Compute(*model_));
        ATTNLAB_RETURN_IF_ERROR(model_->Backward(1.0f / options_.accum, &aux_->gradients()));
        aux_sum += aux_->loss();
        div_sum += aux_->diversity();
        con_sum += aux_->contrastive();
        first_sum += aux_->first_token();
      } else {
        ATTNLAB_RETURN_IF_ERROR(model_->Backward(1.0f / options_.accum));
      }
      loss_sum += loss;
      continue;
    }
    // Data parallel: this rank's share. The last micro-batch's backward hands each finished
    // layer to the reducer; a rank whose loss is not finite skips its backward but still takes
    // part in every all-reduce (Finish marks the buckets), and the step is skipped everywhere.
    const BatchShare sh = ShareOfBatch(targets_.data(), B, T, comm_->rank(), P);
    const bool last = a + 1 == options_.accum;
    const int64_t L = model_->config().n_layer;
    if (last) {
      reducer_->Begin("step " + std::to_string(step + 1));
      model_->set_backward_listener(
          [this, L](int64_t l) { reducer_->Ready(static_cast<size_t>(l >= 0 ? L - 1 - l : L)); });
    }
    Status st = model_->Forward(inputs_.data() + sh.begin * T, targets_.data() + sh.begin * T,
                                sh.end - sh.begin, T, &loss);
    if (st.ok() && std::isfinite(loss)) {
      st = model_->Backward(static_cast<float>(sh.weight / options_.accum));
      loss_sum += sh.weight * loss;
    } else if (st.ok()) {
      ++nonfinite;
    }
    if (last) {
      model_->set_backward_listener(nullptr);
      dist::ReduceTiming rt;
      // Finish even after an error here: the other ranks are inside the same all-reduces.
      const Status red = reducer_->Finish(&rt);
      ATTNLAB_RETURN_IF_ERROR(st);
      ATTNLAB_RETURN_IF_ERROR(red);
      rec->allreduce_s = rt.comm_seconds;
      rec->allreduce_hidden = rt.hidden();
      rec->allreduce_bytes = rt.bytes;
    }
    ATTNLAB_RETURN_IF_ERROR(st);
  }
  if (P > 1) {
    double sums[2] = {loss_sum, static_cast<double>(nonfinite)};
    ATTNLAB_RETURN_IF_ERROR(comm_->AllReduceSum(std::span<double>(sums, 2),
                                                "all-reduce of the loss, step " +
                                                    std::to_string(step + 1)));
    loss_sum = sums[0];
    nonfinite = static_cast<int64_t>(sums[1]);
  }
  *finite = nonfinite == 0;
  rec->loss = *finite ? loss_sum / options_.accum : NAN;  // logged as null
  rec->aux_loss = aux_sum / options_.accum;
  rec->diversity = div_sum / options_.accum;
  rec->contrastive = con_sum / options_.accum;
  rec->first_token = first_sum / options_.accum;
  return Status::Ok();
}

Status Trainer::Run(int64_t until) {
  const int64_t stop = until >= 0 ? std::min(until, options_.steps) : options_.steps;
  const int64_t B = options_.batch, T = seq_len_;
  if (static_cast<int64_t>(train_.size()) <= T + 1) {
    return Status::InvalidArgument("training data has " + std::to_string(train_.size()) +
                                   " tokens; need more than seq_len + 1 = " + std::to_string(T + 1));
  }
  if (T > model_->config().context) {
    return Status::InvalidArgument("seq_len " + std::to_string(T) + " exceeds the context " +
                                   std::to_string(model_->config().context));
  }
  if (options_.probe_every > 0 && !options_.probe.measure) {
    return Status::InvalidArgument("probe_every is " + std::to_string(options_.probe_every) +
                                   " but no probe was given (TrainOptions::probe)");
  }
  if ((options_.first_token_replace > 0 || options_.first_token_drop > 0) && options_.bos < 0) {
    return Status::InvalidArgument("first-token augmentation needs a BOS token (options.bos)");
  }
  if (options_.first_token_weight != 0) {
    ATTNLAB_RETURN_IF_ERROR(CheckFirstTokenPenaltySupported(model_->config()));
    if (options_.first_token_power != 1 && options_.first_token_power != 2) {
      return Status::InvalidArgument("the first-token penalty's power must be 1 or 2, not " +
                                     std::to_string(options_.first_token_power));
    }
  }
  const int P = comm_->size();
  const bool root = comm_->root();
  if (P > 1) {
    if (aux_ || options_.auxiliary) {
      return Status::InvalidArgument(
          "the auxiliary losses (diversity, contrastive, first-token penalty) are not supported in a distributed run "
          "(" + std::to_string(P) + " ranks): their value is not a sum over sequences");
    }
    if (B < P) {
      return Status::InvalidArgument("batch " + std::to_string(B) + " is smaller than the " +
                                     std::to_string(P) + " ranks: every rank needs a sequence");
    }
    if (!reducer_) {
      ParameterStore& g = model_->grads();
      reducer_ = std::make_unique<dist::GradientReducer>(
          comm_, g.data(), g.size(), BackwardBuckets(g, model_->config().n_layer));
    }
  }
  // The log (one JSON record per step) sits next to the checkpoint and is rewritten atomically
  // just before every checkpoint. A crash between the two leaves the log ahead of the saved
  // state, never behind it (it would then lack records that no resumed run replays); a resumed
  // run drops the records after its checkpoint's step before appending.
  std::string log_path, log_text;
  if (!options_.out_dir.empty() && root) {  // rank 0 writes the log and the checkpoints
    log_path = options_.out_dir + ".log.jsonl";
    auto old = ReadFileToString(log_path, int64_t{1} << 30);
    if (old.ok()) log_text = TruncateLogAfter(old.value(), opt_.step());
  }
  auto save = [&]() -> Status {
    if (!root) return Status::Ok();
    if (!log_path.empty()) ATTNLAB_RETURN_IF_ERROR(WriteFileAtomically(log_path, log_text));
    return SaveCheckpointNow();
  };
  const auto t_start = std::chrono::steady_clock::now();
  auto t_last = t_start;
  int64_t tokens_since = 0, bad = 0;
  const int64_t start_step = opt_.step();
  while (opt_.step() < stop) {
    const int64_t step = opt_.step();
    TrainRecord rec;
    bool finite = true;
    ATTNLAB_RETURN_IF_ERROR(AccumulateGradients(step, &rec, &finite));
    if (finite && options_.auxiliary) {  // single process only (checked above)
      double extra = 0;
      ATTNLAB_RETURN_IF_ERROR(options_.auxiliary(*model_, &extra));
    }
    rec.lr = LearningRateAt(opt_.config(), step);
    double norm = NAN;
    if (finite) norm = opt_.Step(model_->params(), model_->grads());
    rec.grad_norm = norm;
    rec.step = opt_.step();
    if (!finite || !std::isfinite(norm)) {
      rec.skipped = true;
      rec.step = step;
      ++bad;
      if (root) std::fprintf(stderr, "step %ld: %s; update skipped (%ld in a row)\n",
                   static_cast<long>(step + 1),
                   finite ? "gradient norm is NaN/Inf" : "loss is NaN/Inf", static_cast<long>(bad));
      if (bad >= options_.max_bad_steps) {
        return Status::Internal("training stopped: " + std::to_string(bad) +
                                " consecutive steps with NaN/Inf loss or gradients (lower the "
                                "learning rate, check the data)");
      }
      // The batch is a function of the step, so a skipped step must still advance it.
      opt_.set_step(step + 1);
      rec.step = step + 1;
    } else {
      bad = 0;
    }
    tokens_since += B * T * options_.accum;
    const bool last = opt_.step() >= stop;
    if (last || (options_.eval_every > 0 && opt_.step() % options_.eval_every == 0)) {
      ATTNLAB_ASSIGN_OR_RETURN(rec.val_loss, Evaluate());
    }
    if (root && options_.probe_every > 0 && (opt_.step() % options_.probe_every == 0 || last)) {
      ATTNLAB_ASSIGN_OR_RETURN(rec.probe, Probe());
    }
    const auto now = std::chrono::steady_clock::now();
    const double dt = std::chrono::duration<double>(now - t_last).count();
    if (last || opt_.step() % std::max<int64_t>(1, options_.log_every) == 0 || rec.val_loss >= 0) {
      rec.tokens_per_s = dt > 0 ? tokens_since / dt : 0;
      const double elapsed = std::chrono::duration<double>(now - t_start).count();
      const double done = static_cast<double>(opt_.step() - start_step);
      const double eta = done > 0 ? elapsed / done * (stop - opt_.step()) : 0;
      if (!options_.quiet && root) {
        std::fprintf(stderr, "step %5ld/%ld | loss %.4f | lr %.2e | grad %.2f | %6.0f tok/s | ETA %s",
                     static_cast<long>(opt_.step()), static_cast<long>(options_.steps), rec.loss,
                     rec.lr, rec.grad_norm, rec.tokens_per_s, FormatDuration(eta).c_str());
        if (rec.val_loss >= 0) std::fprintf(stderr, " | val %.4f", rec.val_loss);
        if (aux_) std::fprintf(stderr, " | aux %.4f", rec.aux_loss);
        if (P > 1) {
          std::fprintf(stderr, " | %d ranks, all-reduce %.0f ms (%.0f%% hidden)", P,
                       rec.allreduce_s * 1e3, rec.allreduce_hidden * 100);
        }
        if (!rec.probe.is_null() && options_.probe.progress) {
          std::fprintf(stderr, " | %s", options_.probe.progress(rec.probe).c_str());
        }
        std::fprintf(stderr, "\n");
      }
      t_last = now;
      tokens_since = 0;
    }
    history_.push_back(rec);
    if (!log_path.empty()) {
      nlohmann::json j{{"step", rec.step}, {"loss", rec.loss}, {"lr", rec.lr},
                       {"grad_norm", std::isfinite(rec.grad_norm) ? rec.grad_norm : -1.0}};
      if (rec.val_loss >= 0) j["val_loss"] = rec.val_loss;
      if (rec.skipped) j["skipped"] = true;
      if (aux_) {
        j["aux_loss"] = rec.aux_loss;
        j["diversity"] = rec.diversity;
        j["contrastive"] = rec.contrastive;
        if (options_.first_token_weight != 0) j["first_token_penalty"] = rec.first_token;
      }
      if (!rec.probe.is_null()) j["probe"] = rec.probe;
      if (P > 1) {
        j["ranks"] = P;
        j["allreduce_s"] = rec.allreduce_s;
        j["allreduce_hidden"] = rec.allreduce_hidden;
        j["allreduce_bytes"] = rec.allreduce_bytes;
      }
      log_text += j.dump() + "\n";
    }
    if (options_.checkpoint_every > 0 && opt_.step() % options_.checkpoint_every == 0 && !last) {
      ATTNLAB_RETURN_IF_ERROR(save());
    }
  }
  return save();
}

}  // namespace attnlab
