// `attnlab train`: train a GPT on a prepared data directory (attnlab prepare).
//
//   attnlab train --data DIR --out CKPT [model flags] [training flags] [--config FILE] [--resume]
//   attnlab train --data DIR --out CKPT --from MODEL [training flags]     (fine-tune a model)
//
// --config FILE is JSON {"model": {ModelConfig keys}, "train": {training keys}}; flags given on
// the command line override it. The vocabulary comes from the data's tokenizer. Progress goes to
// stderr every --log-every steps; validation every --eval-every steps; a checkpoint (atomic) every
// --checkpoint-every steps and at the end, with the tokenizer inside, so the checkpoint alone is
// enough for generate, eval and analyze. --resume continues from CKPT exactly (same flags).
// --from MODEL starts from any model attnlab opens (formats/load_model.h: a Hugging Face
// llama/qwen/... folder, a checkpoint, ...), its configuration and weights; the data must be
// tokenized with that model's tokenizer (attnlab prepare --tokenizer MODEL_DIR): every token id
// must be inside the model's vocabulary.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "attnlab/thread_pool.h"
#include "commands.h"
#include "core/atomic_file.h"
#include "dist/comm.h"
#include "diagnostics/first_token_probe.h"
#include "formats/checkpoint.h"
#include "formats/load_model.h"
#include "formats/loaded_model.h"
#include "tokenizer/tokenizer_spec.h"
#include "train/token_data.h"
#include "train/train_config.h"
#include "train/trainer.h"

namespace attnlab::cli {
namespace {

using nlohmann::json;

struct TrainFlags {
  std::string config_file, data, out, from;
  bool resume = false, json_out = false;
  int64_t stop_at = -1;  // stop after this step (the schedule still spans --steps); -1: at the end
  json model = json::object();  // flags given, as ModelConfig JSON keys
  json train = json::object();  // flags given, as training keys
};

// Sizes in a config are checked against the machine before anything is allocated: training
// holds four float copies of the parameters (weights, gradients, AdamW's m and v).
void CheckModelFitsInMemory(const ModelConfig& c) {
  const double params = static_cast<double>(ModelParameterCount(c));
  const double need = 4.0 * sizeof(float) * params;
  const double have =
      static_cast<double>(::sysconf(_SC_PHYS_PAGES)) * static_cast<double>(::sysconf(_SC_PAGESIZE));
  if (have > 0 && need > have) {
    char msg[400];
    std::snprintf(msg, sizeof(msg),
                  "model configuration: %.4g parameters need %.3g GiB for weights, gradients and "
                  "AdamW moments, more than this machine's %.3g GiB of memory (lower --d-model, "
                  "--layers, --mlp-hidden or the vocabulary)",
                  params, need / (1 << 30), have / (1 << 30));
    throw CommandError(msg);
  }
}

void Run(TrainFlags f) {
  // Merge: defaults <- config file <- flags. Every training value is checked (type and range)
  // by TrainSettingsFromJson below; the model keys by ModelConfigFromJson.
  json model = json::object(), train = DefaultTrainJson();
  if (!f.config_file.empty()) {
    auto text = ReadFileToString(f.config_file, int64_t{1} << 24);
    Check(text.status(), "--config");
    auto cfg = ParseTrainConfig(text.value(), f.config_file);
    Check(cfg.status(), "--config");
    model.update(cfg.value().model);
    train.update(cfg.value().train);
    if (f.data.empty()) f.data = cfg.value().data;
  }
  model.update(f.model);
  train.update(f.train);
  auto settings = TrainSettingsFromJson(train);
  Check(settings.status());
  if (f.data.empty()) throw UsageError("--data DIR is required (make one with attnlab prepare)");

  // Data and tokenizer.
  auto spec_text = ReadFileToString(f.data + "/tokenizer.json", int64_t{1} << 28);
  Check(spec_text.status(), "--data (expected a directory made by attnlab prepare)");
  json tok_spec = json::parse(spec_text.value(), nullptr, false);
  auto tok = TokenizerFromJson(tok_spec);
  Check(tok.status(), f.data + "/tokenizer.json");
  auto train_tok = ReadTokenFile(f.data + "/train.tok");
  Check(train_tok.status());
  auto val_tok = ReadTokenFile(f.data + "/val.tok");
  Check(val_tok.status());
  if (train_tok.value().vocab_size != tok.value()->vocab_size()) {
    throw CommandError("the data's tokens (vocabulary " +
                       std::to_string(train_tok.value().vocab_size) +
                       ") do not match its tokenizer (" +
                       std::to_string(tok.value()->vocab_size()) + ")");
  }
  double unigram = -1;
  if (auto c = ReadFileToString(f.data + "/corpus.json", 1 << 20); c.ok()) {
    json cj = json::parse(c.value(), nullptr, false);
    if (cj.is_object() && cj.contains("unigram_val_loss") && cj["unigram_val_loss"].is_number()) {
      unigram = cj["unigram_val_loss"].get<double>();
    }
  }

  // Model: from the checkpoint when resuming, else from the flags.
  std::unique_ptr<Gpt> gpt;
  LoadedCheckpoint ckpt;
  if (f.resume && !f.from.empty()) {
    throw UsageError("--resume continues the run in --out; --from starts a new one: give one");
  }
  if (f.resume) {
    if (f.out.empty()) throw UsageError("--resume needs --out CKPT (the checkpoint to continue)");
    auto r = LoadCheckpoint(f.out);
    Check(r.status(), "--resume");
    ckpt = std::move(r).value();
    if (!ckpt.has_optimizer) {
      throw CommandError("--resume: " + f.out + " has no optimizer state (not a training checkpoint)");
    }
    if (ckpt.meta.contains("train")) {
      // The run is only the same run if the training flags are the same.
      const json& was = ckpt.meta["train"];
      for (const char* k : {"batch", "seq_len", "accum", "steps", "lr", "seed", "bos",
                            "first_token_replace", "first_token_drop", "diversity_weight",
                            "contrastive_weight", "first_token_weight", "first_token_power"}) {
        if (was.contains(k) && train.contains(k) && was[k] != train[k]) {
          throw CommandError(std::string("--resume: training option '") + k + "' was " +
                             was[k].dump() + " in the checkpoint but is " + train[k].dump() +
                             " now; resume with the same flags");
        }
      }
    }
    auto g = Gpt::Create(ckpt.config);
    Check(g.status());
    gpt = std::move(g).value();
    Check(CopyParameters(ckpt.params, &gpt->params()));
  } else if (!f.from.empty()) {
    if (!f.model.empty() || !model.empty()) {
      throw UsageError("--from takes the model's configuration from " + f.from +
                       "; drop the model flags (and the config file's \"model\" section)");
    }
    auto loaded = LoadAnyModel(f.from);
    Check(loaded.status(), "--from " + f.from);
    CheckModelFitsInMemory(loaded.value().config);
    for (const std::string& note : loaded.value().notes) {
      std::fprintf(stderr, "note: %s\n", note.c_str());
    }
    auto g = MakeGpt(std::move(loaded).value());
    Check(g.status());
    gpt = std::move(g).value();
  } else {
    model["vocab_size"] = tok.value()->vocab_size();
    auto cfg = ModelConfigFromJson(model.dump());
    Check(cfg.status(), "model configuration");
    CheckModelFitsInMemory(cfg.value());
    auto g = Gpt::Create(cfg.value());
    Check(g.status());
    gpt = std::move(g).value();
    gpt->params().Initialize(cfg.value(), settings.value().init_seed);
  }
  const ModelConfig& mc = gpt->config();
  // A model from --from may have more rows than its tokenizer has ids (Hugging Face models pad
  // the embedding): every data id must only be inside the model's vocabulary.
  std::string from = f.from;
  if (f.resume && ckpt.meta.is_object() && ckpt.meta.contains("from") &&
      ckpt.meta["from"].is_string()) {
    from = ckpt.meta["from"].get<std::string>();
  }
  const bool fits = from.empty() ? mc.vocab_size == tok.value()->vocab_size()
                                 : mc.vocab_size >= tok.value()->vocab_size();
  if (!fits) {
    throw CommandError(std::string(from.empty() ? "the checkpoint's" : "the --from model's") +
                       " vocabulary (" + std::to_string(mc.vocab_size) +
                       ") does not match the data's tokenizer (" +
                       std::to_string(tok.value()->vocab_size()) + ")");
  }

  TrainOptions o = settings.value().options;
  if (settings.value().bos) {
    if (!tok.value()->bos_id()) throw CommandError("--bos: the tokenizer has no BOS token");
    o.bos = *tok.value()->bos_id();
  }
  if ((o.first_token_replace > 0 || o.first_token_drop > 0) && o.bos < 0) {
    throw UsageError("--first-token-replace and --first-token-drop act on the BOS token: add --bos");
  }
  const int64_t T = o.seq_len > 0 ? o.seq_len : mc.context;
  if (T > mc.context) {
    throw CommandError("seq_len " + std::to_string(T) + " exceeds the model's context " +
                       std::to_string(mc.context));
  }
  if (o.batch * T > (int64_t{1} << 26)) {
    throw CommandError("batch x seq_len = " + std::to_string(o.batch) + " x " +
                       std::to_string(T) + " tokens per micro-batch is more than 2^26; lower "
                       "--batch (and raise --accum)");
  }
  if (o.opt.warmup_steps >= o.steps) {
    std::fprintf(stderr,
                 "warning: the warmup (%ld steps) is not shorter than the run (%ld steps): the "
                 "learning rate never reaches --lr (%g); lower --warmup (or raise --steps)\n",
                 static_cast<long>(o.opt.warmup_steps), static_cast<long>(o.steps), static_cast<double>(o.opt.lr));
  }
  o.out_dir = f.out;
  o.meta = json{{"tokenizer", tok_spec}, {"data", f.data}};
  if (!from.empty()) o.meta["from"] = from;
  o.meta["train"] = train;

  std::fprintf(stderr,
               "model: %ld layers, d_model %ld, %ld heads (head_dim %ld), context %ld, vocab %ld, "
               "%.2fM parameters\ntraining: %ld steps x %ld sequences x %ld tokens (x%ld accum) "
               "= %.1fM tokens on %s%d threads\n",
               static_cast<long>(mc.n_layer), static_cast<long>(mc.d_model),
               static_cast<long>(mc.n_head), static_cast<long>(mc.head_dim()),
               static_cast<long>(mc.context), static_cast<long>(mc.vocab_size),
               ModelParameterCount(mc) / 1e6, static_cast<long>(o.steps),
               static_cast<long>(o.batch), static_cast<long>(T), static_cast<long>(o.accum),
               static_cast<double>(o.steps) * o.batch * T * o.accum / 1e6,
               dist::World().distributed()
                   ? (std::to_string(dist::World().size()) + " ranks x ").c_str()
                   : "",
               DefaultThreadCount());
  if (o.probe_every > 0) o.probe = {MeasureFirstToken, FirstTokenProgressText};
  Trainer trainer(gpt.get(), o, std::move(train_tok.value().tokens),
                  std::move(val_tok.value().tokens));
  if (f.resume) {
    Check(trainer.RestoreOptimizer(ckpt.m, ckpt.v, ckpt.optimizer_step));
    std::fprintf(stderr, "resuming at step %ld from %s\n", static_cast<long>(trainer.step()),
                 ckpt.loaded_from.c_str());
  }
  const auto t0 = std::chrono::steady_clock::now();
  const int64_t first = trainer.step();
  if (f.stop_at >= 0 && f.stop_at <= trainer.step()) {
    throw CommandError("--stop-at " + std::to_string(f.stop_at) + " is not after the current step " +
                       std::to_string(trainer.step()));
  }
  Check(trainer.Run(f.stop_at));
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const auto& h = trainer.history();
  double val = -1;
  for (auto it = h.rbegin(); it != h.rend(); ++it) {
    if (it->val_loss >= 0) {
      val = it->val_loss;
      break;
    }
  }
  const double tokens = static_cast<double>(trainer.step() - first) * o.batch * T * o.accum;
  // Data parallel: the gradient all-reduce per step, on rank 0 (dist/grad_reducer.h).
  json comm = nullptr;
  if (dist::World().distributed() && !h.empty()) {
    double s = 0, hidden = 0, bytes = 0;
    for (const TrainRecord& r : h) {
      s += r.allreduce_s;
      hidden += r.allreduce_hidden;
      bytes += static_cast<double>(r.allreduce_bytes);
    }
    const double n = static_cast<double>(h.size());
    comm = json{{"ranks", dist::World().size()},
                {"allreduce_s_per_step", s / n},
                {"allreduce_hidden", hidden / n},
                {"allreduce_bytes_per_step", bytes / n}};
  }
  if (f.json_out) {
    json j{{"steps", trainer.step() - first},
           {"seconds", secs},
           {"tokens_per_s", secs > 0 ? tokens / secs : 0.0},
           {"final_train_loss", h.empty() ? json(nullptr) : json(h.back().loss)},
           {"val_loss", val >= 0 ? json(val) : json(nullptr)},
           {"unigram_val_loss", unigram >= 0 ? json(unigram) : json(nullptr)},
           {"checkpoint", f.out.empty() ? json(nullptr) : json(f.out)},
           {"data_parallel", comm}};
    std::printf("%s\n", j.dump(2).c_str());
    return;
  }
  std::printf("trained %ld steps in %.1f s (%.0f tokens/s)\n", static_cast<long>(trainer.step() - first),
              secs, secs > 0 ? tokens / secs : 0.0);
  if (!h.empty()) std::printf("  final train loss %.4f\n", h.back().loss);
  if (!comm.is_null()) {
    std::printf("  %d ranks: gradient all-reduce %.1f ms and %.2f MB per step, %.0f%% of it hidden "
                "behind the backward\n",
                dist::World().size(), comm["allreduce_s_per_step"].get<double>() * 1e3,
                comm["allreduce_bytes_per_step"].get<double>() / 1e6,
                comm["allreduce_hidden"].get<double>() * 100);
  }
  if (val >= 0) {
    std::printf("  validation loss  %.4f (perplexity %.2f)\n", val, std::exp(val));
  }
  if (unigram >= 0) std::printf("  unigram baseline %.4f (perplexity %.2f)\n", unigram, std::exp(unigram));
  if (!f.out.empty()) std::printf("  checkpoint: %s (log: %s.log.jsonl)\n", f.out.c_str(), f.out.c_str());
}

}  // namespace

void RegisterTrainCommand(CLI::App& app) {
  auto f = std::make_shared<TrainFlags>();
  CLI::App* cmd = app.add_subcommand("train", "Train a GPT on a data directory (attnlab prepare)");
  cmd->add_option("--data", f->data, "data directory (train.tok, val.tok, tokenizer.json)");
  cmd->add_option("--out", f->out, "checkpoint directory (written atomically)");
  cmd->add_option("--config", f->config_file, "JSON {\"model\": {...}, \"train\": {...}}");
  cmd->add_flag("--resume", f->resume, "continue the run saved in --out exactly");
  cmd->add_option("--from", f->from,
                  "fine-tune: start from this model (HF folder, GGUF, checkpoint, ...), its "
                  "configuration and weights");
  cmd->add_flag("--json", f->json_out, "print the result (steps, time, losses) as JSON");
  cmd->add_option("--stop-at", f->stop_at,
                  "stop (with a checkpoint) after this step; the learning-rate schedule still "
                  "spans --steps, and --resume continues the same run")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 40));
  // Model flags map onto ModelConfig JSON keys.
  auto model_int = [&](const char* flag, const char* key, const char* help) {
    cmd->add_option_function<int64_t>(flag, [f, key](int64_t v) { f->model[key] = v; }, help);
  };
  auto model_str = [&](const char* flag, const char* key, const char* help) {
    cmd->add_option_function<std::string>(flag, [f, key](const std::string& v) { f->model[key] = v; }, help);
  };
  auto model_flag = [&](const char* flag, const char* key, bool value, const char* help) {
    cmd->add_flag_function(flag, [f, key, value](int64_t) { f->model[key] = value; }, help);
  };
  model_int("--layers", "n_layer", "transformer blocks");
  model_int("--d-model", "d_model", "residual width");
  model_int("--heads", "n_head", "query heads");
  model_int("--kv-heads", "n_kv_head", "key/value heads (GQA; 0 = heads)");
  model_int("--context", "context", "longest sequence");
  model_int("--mlp-hidden", "mlp_hidden", "MLP width (0 = 4 d_model)");
  model_int("--window", "attention_window", "causal sliding window (-1 = full)");
  model_str("--position", "position", "learned | rope | none");
  model_str("--norm", "norm", "pre | post | none");
  model_str("--norm-type", "norm_type", "layernorm | rmsnorm");
  model_str("--residual-scale", "residual_scale", "one | inv_sqrt_2l | rezero | deepnorm");
  model_str("--softmax", "softmax", "standard | softmax1 | sink_logit | sigmoid | softpick");
  model_flag("--gate", "output_gate", true, "head-wise output gate (Qiu et al. 2025's G1)");
  cmd->add_flag_function(
      "--gate-elementwise",
      [f](int64_t) { f->model["output_gate"] = true, f->model["gate_elementwise"] = true; },
      "element-wise output gate: one sigmoid per attention channel (implies --gate)");
  model_flag("--mask-first-key", "mask_first_key", true, "no query attends to token 0");
  model_flag("--position-every-layer", "position_every_layer", true,
             "add the learned positions before every layer, not only the first (--position learned)");
  model_flag("--key-bias", "key_bias", true,
             "a learnable key with a zero value per layer and kv head (Gu et al. 2024)");
  model_flag("--sink-token", "sink_token", true, "a learnable sink token before every sequence");
  model_flag("--no-mlp", "mlp", false, "attention-only blocks");
  model_flag("--no-residual", "residual", false, "no skip connections");
  model_flag("--no-bias", "bias", false, "no biases");
  model_flag("--untied", "tie_embeddings", false, "separate LM head");
  cmd->add_option_function<double>("--init-std", [f](double v) { f->model["init_std"] = v; },
                                   "weight init std (0.02)");
  // Training flags.
  auto train_int = [&](const char* flag, const char* key, const char* help) {
    cmd->add_option_function<int64_t>(flag, [f, key](int64_t v) { f->train[key] = v; }, help);
  };
  auto train_num = [&](const char* flag, const char* key, const char* help) {
    cmd->add_option_function<double>(flag, [f, key](double v) { f->train[key] = v; }, help);
  };
  train_int("--batch", "batch", "sequences per micro-batch (16)");
  train_int("--seq-len", "seq_len", "tokens per sequence (0 = context)");
  train_int("--accum", "accum", "micro-batches per step (1)");
  train_int("--steps", "steps", "optimizer steps (1000)");
  train_num("--lr", "lr", "peak learning rate (1e-3)");
  train_num("--min-lr", "min_lr", "final learning rate (1e-4)");
  train_int("--warmup", "warmup", "warmup steps (100)");
  train_num("--weight-decay", "weight_decay", "AdamW weight decay (0.1)");
  train_num("--grad-clip", "grad_clip", "global-norm clip (1.0; 0 = off)");
  train_num("--beta2", "beta2", "AdamW beta2 (0.95)");
  train_int("--seed", "seed", "batch sampling seed (1)");
  train_int("--init-seed", "init_seed", "weight initialisation seed (1)");
  train_int("--eval-every", "eval_every", "validate every n steps (100)");
  train_int("--eval-batches", "eval_batches", "validation batches (16)");
  train_int("--log-every", "log_every", "progress line every n steps (10)");
  train_int("--checkpoint-every", "checkpoint_every", "checkpoint every n steps (200)");
  train_int("--probe-every", "probe_every",
            "measure attention on token 0 every n steps (sink emergence; 0 = off)");
  train_num("--first-token-replace", "first_token_replace",
            "augmentation: replace the BOS by a random token with this probability");
  train_num("--first-token-drop", "first_token_drop",
            "augmentation: drop the BOS with this probability");
  train_num("--diversity-weight", "diversity_weight",
            "head-diversity penalty weight (0 = off; train/auxiliary_losses.h)");
  train_num("--contrastive-weight", "contrastive_weight",
            "contrastive loss between consecutive layers, weight (0 = off)");
  train_num("--first-token-penalty", "first_token_weight",
            "weight of a penalty on each head's attention to token 0 (alpha_1; 0 = off; "
            "train/first_token_penalty.h)");
  train_int("--first-token-power", "first_token_power",
            "the penalty's power: 1 (L1) or 2 (L2, the default)");
  cmd->add_flag_function("--bos", [f](int64_t) { f->train["bos"] = true; },
                         "start every sequence with the tokenizer's BOS token");
  cmd->callback([f] { Run(*f); });
}

}  // namespace attnlab::cli
