// The trainer's JSON config (train/train_config.h, `attnlab train --config`): what parses yields
// settings in their documented ranges, and its "model" object goes through ModelConfigFromJson.
#include "attnlab/model_config.h"
#include "fuzz_target.h"
#include "train/train_config.h"

using namespace attnlab;

ATTNLAB_FUZZ_TARGET(train_config) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  Result<TrainConfigFile> f = ParseTrainConfig(text, "fuzz.json");
  if (!f.ok()) {
    ATTNLAB_FUZZ_EXPECT(!f.status().message().empty(), "an error without a message");
    return 0;
  }
  nlohmann::json train = DefaultTrainJson();
  train.update(f->train);
  Result<TrainSettings> s = TrainSettingsFromJson(train);
  ATTNLAB_FUZZ_EXPECT(s.ok(), "a parsed config has bad settings: " + s.status().ToString());
  const TrainOptions& o = s->options;
  ATTNLAB_FUZZ_EXPECT(o.batch >= 1 && o.accum >= 1 && o.steps >= 1 && o.seq_len >= 0 &&
                          o.eval_batches >= 1 && o.opt.lr > 0 && o.opt.min_lr >= 0 &&
                          o.opt.beta2 > 0 && o.opt.beta2 < 1 && o.opt.warmup_steps >= 0,
                      "settings outside their documented ranges");
  nlohmann::json model = f->model;
  model["vocab_size"] = 256;  // the data's tokenizer decides it in attnlab train
  (void)ModelConfigFromJson(model.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  return 0;
}
