#include "train/train_config.h"

#include <cmath>
#include <limits>

namespace attnlab {

namespace {

using nlohmann::json;

constexpr int64_t kMaxSteps = int64_t{1} << 40;

// A JSON value for an error message: compact, at most ~60 characters, never throwing.
std::string Show(const json& j) {
  std::string s = j.dump(-1, ' ', false, json::error_handler_t::replace);
  if (s.size() > 60) s = s.substr(0, 57) + "...";
  return s;
}

Status IntKey(const json& train, const char* key, int64_t lo, int64_t hi, int64_t* out) {
  auto it = train.find(key);
  if (it == train.end()) return Status::Ok();
  const json& v = *it;
  if (!v.is_number_integer()) {
    return Status::InvalidArgument("training option '" + std::string(key) +
                                   "' must be an integer in [" + std::to_string(lo) + ", " +
                                   std::to_string(hi) + "], found " + Show(v));
  }
  const bool too_big =
      v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(hi);
  const int64_t x = too_big ? hi : v.get<int64_t>();
  if (too_big || x < lo || x > hi) {
    return Status::InvalidArgument("training option '" + std::string(key) + "' = " + Show(v) +
                                   " is outside [" + std::to_string(lo) + ", " +
                                   std::to_string(hi) + "]");
  }
  *out = x;
  return Status::Ok();
}

// A finite number; `ok` says whether it is in range, `range` how the range is written.
template <typename F, typename Pred>
Status NumberKey(const json& train, const char* key, Pred ok, const char* range, F* out) {
  auto it = train.find(key);
  if (it == train.end()) return Status::Ok();
  const json& v = *it;
  if (!v.is_number()) {
    return Status::InvalidArgument("training option '" + std::string(key) + "' must be a number " +
                                   range + ", found " + Show(v));
  }
  const double x = v.get<double>();
  if (!std::isfinite(x) || std::fabs(x) > std::numeric_limits<float>::max()) {
    return Status::InvalidArgument("training option '" + std::string(key) + "' = " + Show(v) +
                                   " is not a finite float number; it must be " + range);
  }
  if (!ok(x)) {
    return Status::InvalidArgument("training option '" + std::string(key) + "' = " + Show(v) +
                                   " must be " + range);
  }
  *out = static_cast<F>(x);
  return Status::Ok();
}

}  // namespace

json DefaultTrainJson() {
  TrainOptions d;
  return json{{"batch", d.batch},
              {"seq_len", d.seq_len},
              {"accum", d.accum},
              {"steps", d.steps},
              {"lr", d.opt.lr},
              {"min_lr", d.opt.min_lr},
              {"warmup", d.opt.warmup_steps},
              {"weight_decay", d.opt.weight_decay},
              {"grad_clip", d.opt.grad_clip},
              {"beta2", d.opt.beta2},
              {"seed", d.seed},
              {"init_seed", 1},
              {"bos", false},
              {"eval_every", d.eval_every},
              {"eval_batches", d.eval_batches},
              {"log_every", d.log_every},
              {"checkpoint_every", 200},
              {"probe_every", 0},
              {"first_token_replace", d.first_token_replace},
              {"first_token_drop", d.first_token_drop},
              {"diversity_weight", d.diversity_weight},
              {"contrastive_weight", d.contrastive_weight},
              {"first_token_weight", d.first_token_weight},
              {"first_token_power", d.first_token_power}};
}

Result<TrainSettings> TrainSettingsFromJson(const json& train) {
  if (!train.is_object()) {
    return Status::InvalidArgument("the training options must be a JSON object, found " +
                                   Show(train));
  }
  const json defaults = DefaultTrainJson();
  for (auto it = train.begin(); it != train.end(); ++it) {
    if (!defaults.contains(it.key())) {
      std::string known;
      for (auto d = defaults.begin(); d != defaults.end(); ++d) {
        known += (known.empty() ? "" : ", ") + d.key();
      }
      return Status::InvalidArgument("unknown training option " + Show(json(it.key())) +
                                     " (known: " + known + ")");
    }
  }
  TrainSettings s;
  TrainOptions& o = s.options;
  const json j = [&] {
    json merged = defaults;
    merged.update(train);
    return merged;
  }();
  ATTNLAB_RETURN_IF_ERROR(IntKey(j, "batch", 1, 65536, &o.batch));
  ATTNLAB_RETURN_IF_ERROR(IntKey(j, "seq_len", 0, int64_t{1} << 20, &o.seq_len));
  ATTNLAB_RETURN_IF_ERROR(IntKey(j, "accum", 1, 65536, &o.accum));
  ATTNLAB_RETURN_IF_ERROR(IntKey(j, "steps", 1, kMaxSteps, &o.steps));
  ATTNLAB_RETURN_IF_ERROR(IntKey(j, "warmup", 0, kMaxSteps, &o.opt.warmup_steps));
  ATTNLAB_RETURN_IF_ERROR(IntKey(j, "eval_every", 0, kMaxSteps, &o.eval_every));
  ATTNLAB_RETURN_IF_ERROR(IntKey(j, "eval_batches", 1, int64_t{1} << 20, &o.eval_batches));
  ATTNLAB_RETURN_IF_ERROR(IntKey(j, "log_every", 0, kMaxSteps, &o.log_every));
  ATTNLAB_RETURN_IF_ERROR(IntKey(j, "checkpoint_every", 0, kMaxSteps, &o.checkpoint_every));
  ATTNLAB_RETURN_IF_ERROR(IntKey(j, "probe_every", 0, kMaxSteps, &o.probe_every));
  int64_t seed = 1, init_seed = 1;
  const int64_t kMaxSeed = std::numeric_limits<int64_t>::max();
  ATTNLAB_RETURN_IF_ERROR(IntKey(j, "seed", 0, kMaxSeed, &seed));
  ATTNLAB_RETURN_IF_ERROR(IntKey(j, "init_seed", 0, kMaxSeed, &init_seed));
  o.seed = static_cast<uint64_t>(seed);
  s.init_seed = static_cast<uint64_t>(init_seed);
  ATTNLAB_RETURN_IF_ERROR(NumberKey(j, "lr", [](double x) { return x > 0; }, "> 0", &o.opt.lr));
  ATTNLAB_RETURN_IF_ERROR(
      NumberKey(j, "min_lr", [](double x) { return x >= 0; }, ">= 0", &o.opt.min_lr));
  ATTNLAB_RETURN_IF_ERROR(NumberKey(j, "weight_decay", [](double x) { return x >= 0; }, ">= 0",
                                    &o.opt.weight_decay));
  ATTNLAB_RETURN_IF_ERROR(NumberKey(j, "grad_clip", [](double x) { return x >= 0; },
                                    ">= 0 (0 turns clipping off)", &o.opt.grad_clip));
  ATTNLAB_RETURN_IF_ERROR(NumberKey(j, "beta2", [](double x) { return x > 0 && x < 1; },
                                    "in (0, 1)", &o.opt.beta2));
  auto probability = [](double x) { return x >= 0 && x <= 1; };
  ATTNLAB_RETURN_IF_ERROR(NumberKey(j, "first_token_replace", probability, "in [0, 1]",
                                    &o.first_token_replace));
  ATTNLAB_RETURN_IF_ERROR(
      NumberKey(j, "first_token_drop", probability, "in [0, 1]", &o.first_token_drop));
  if (o.first_token_replace + o.first_token_drop > 1) {
    return Status::InvalidArgument(
        "training options 'first_token_replace' + 'first_token_drop' must be at most 1");
  }
  auto weight = [](double x) { return x >= 0 && x <= 1e3; };
  ATTNLAB_RETURN_IF_ERROR(
      NumberKey(j, "diversity_weight", weight, "in [0, 1000]", &o.diversity_weight));
  ATTNLAB_RETURN_IF_ERROR(
      NumberKey(j, "contrastive_weight", weight, "in [0, 1000]", &o.contrastive_weight));
  ATTNLAB_RETURN_IF_ERROR(
      NumberKey(j, "first_token_weight", weight, "in [0, 1000]", &o.first_token_weight));
  int64_t power = 2;
  ATTNLAB_RETURN_IF_ERROR(IntKey(j, "first_token_power", 1, 2, &power));
  o.first_token_power = static_cast<int>(power);
  if (o.opt.lr > 0 && !(static_cast<float>(o.opt.lr) > 0)) {
    return Status::InvalidArgument("training option 'lr' underflows to 0 in float");
  }
  const json& bos = j["bos"];
  if (!bos.is_boolean()) {
    return Status::InvalidArgument("training option 'bos' must be true or false, found " +
                                   Show(bos));
  }
  s.bos = bos.get<bool>();
  return s;
}

Result<TrainConfigFile> ParseTrainConfig(std::string_view text, const std::string& name) {
  const json cfg = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (cfg.is_discarded() || text.find('\0') != std::string_view::npos) {
    return Status::Corrupt(name + ": not valid JSON (expected {\"model\": {...}, \"train\": "
                                  "{...}, \"data\": \"DIR\"})");
  }
  if (!cfg.is_object()) {
    return Status::InvalidArgument(name + ": expected a JSON object {\"model\": {...}, "
                                          "\"train\": {...}, \"data\": \"DIR\"}, found " +
                                   std::string(cfg.type_name()));
  }
  TrainConfigFile out;
  for (auto it = cfg.begin(); it != cfg.end(); ++it) {
    const std::string& key = it.key();
    const json& v = it.value();
    if (key == "model") {
      if (!v.is_object()) {
        return Status::InvalidArgument(name + ": \"model\" must be an object of model config "
                                              "keys, found " + Show(v));
      }
      out.model = v;
    } else if (key == "train") {
      if (!v.is_object()) {
        return Status::InvalidArgument(name + ": \"train\" must be an object of training "
                                              "options, found " + Show(v));
      }
      out.train = v;
    } else if (key == "data") {
      if (!v.is_string()) {
        return Status::InvalidArgument(name + ": \"data\" must be a string (a data directory), "
                                              "found " + Show(v));
      }
      out.data = v.get<std::string>();
    } else {
      return Status::InvalidArgument(name + ": unknown top-level key " + Show(json(key)) +
                                     " (expected model, train, data)");
    }
  }
  auto settings = TrainSettingsFromJson(out.train);
  if (!settings.ok()) return settings.status().WithContext(name);
  return out;
}

}  // namespace attnlab
