// The JSON a training run is configured by (`attnlab train --config FILE`), parsed without
// trusting it:
//   {
//     "model": {ModelConfig keys (attnlab/model_config.h)},      optional
//     "train": {training keys, below},                           optional
//     "data":  "DIR"                                             optional (--data wins)
//   }
// Training keys, their types and allowed ranges (defaults in DefaultTrainJson()):
//   batch         integer [1, 65536]      sequences per micro-batch (16)
//   seq_len       integer [0, 2^20]       tokens per sequence, 0 = the model's context (0)
//   accum         integer [1, 65536]      micro-batches per optimizer step (1)
//   steps         integer [1, 2^40]       optimizer steps (1000)
//   lr            number, finite, > 0     peak learning rate (1e-3)
//   min_lr        number, finite, >= 0    final learning rate (1e-4)
//   warmup        integer [0, 2^40]       warmup steps (100)
//   weight_decay  number, finite, >= 0    AdamW weight decay (0.1)
//   grad_clip     number, finite, >= 0    global-norm clip, 0 = off (1.0)
//   beta2         number in (0, 1)        AdamW beta2 (0.95)
//   seed          integer [0, 2^63)       batch sampling seed (1)
//   init_seed     integer [0, 2^63)       weight initialisation seed (1)
//   bos           boolean                 start every sequence with BOS (false)
//   eval_every    integer [0, 2^40]       validate every n steps, 0 = only at the end (100)
//   eval_batches  integer [1, 2^20]       validation batches (16)
//   log_every     integer [0, 2^40]       progress line every n steps (10)
//   checkpoint_every integer [0, 2^40]    checkpoint every n steps, 0 = only at the end (200)
//   probe_every   integer [0, 2^40]       first-token attention probe every n steps (0)
// Unknown keys (at the top level or in "train"), a wrong type (a fraction or a string where an
// integer belongs, NaN...) and an out-of-range value are InvalidArgument errors naming the key,
// what was expected and what was found. The "model" object is checked by ModelConfigFromJson
// when the model is built (its "vocab_size" comes from the data's tokenizer).
#ifndef ATTNLAB_TRAIN_TRAIN_CONFIG_H_
#define ATTNLAB_TRAIN_TRAIN_CONFIG_H_

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "attnlab/status.h"
#include "train/trainer.h"

namespace attnlab {

// Every training key with its default value.
nlohmann::json DefaultTrainJson();

// The three parts of a --config file; "train" holds only the keys the file gives.
struct TrainConfigFile {
  nlohmann::json model = nlohmann::json::object();
  nlohmann::json train = nlohmann::json::object();
  std::string data;  // "" when absent
};

// Parses the text of a --config file. `name` (usually the path) prefixes every error.
// Corrupt if it is not JSON; InvalidArgument for a non-object, unknown keys, a "model" or
// "train" that is not an object, a "data" that is not a string, unknown training keys, or a
// training value of the wrong type or out of range (the checks of TrainSettingsFromJson).
Result<TrainConfigFile> ParseTrainConfig(std::string_view text, const std::string& name);

// What the training keys configure.
struct TrainSettings {
  TrainOptions options;    // batch .. probe_every; bos stays -1 (the caller knows the token)
  uint64_t init_seed = 1;  // weight initialisation
  bool bos = false;        // start every sequence with the tokenizer's BOS token
};

// Checks every key of `train` (DefaultTrainJson()'s keys, any subset: missing keys keep their
// defaults) for type and range and builds the settings. InvalidArgument naming the key otherwise.
Result<TrainSettings> TrainSettingsFromJson(const nlohmann::json& train);

}  // namespace attnlab

#endif  // ATTNLAB_TRAIN_TRAIN_CONFIG_H_
