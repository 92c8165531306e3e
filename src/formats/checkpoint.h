// The attnlab checkpoint format (formats/load_model.h loads any model file attnlab reads).
//
// An attnlab checkpoint is a directory DIR/ holding
//   config.json            the ModelConfig (ModelConfigToJson's keys, at top level) plus
//                            "format": "attnlab-checkpoint", "version": 1,
//                            "meta": {...}  the trainer's metadata, as given (step, tokenizer...)
//   model.safetensors      every ParameterStore slice by its name (parameters.h), F32, with the
//                          exact shape of ParameterLayout(config); nothing else
//   optimizer.safetensors  optional, for resuming: AdamW's first and second moments, the same
//                          names prefixed "m." and "v." (F32, same shapes); its __metadata__
//                          holds "format": "attnlab-optimizer", "step" (decimal) and
//                          "rng_state" (opaque string), taken from meta["step"] and
//                          meta["rng_state"] when present
//
// Crash-safe save protocol (at every instant DIR or, failing that, DIR.old is a complete,
// loadable checkpoint; a directory only ever appears under those names by a rename of a
// complete, fsync'ed directory):
//   1. write all files into a fresh sibling DIR.tmp.<pid>.<counter>/ (each file fsync'ed), fsync
//      that directory
//   2. if DIR exists: remove a stale DIR.old if any (DIR is complete, so DIR.old is garbage),
//      rename DIR -> DIR.old, fsync the parent
//   3. rename DIR.tmp.<pid>.<counter> -> DIR, fsync the parent
//   4. remove DIR.old, fsync the parent
// A crash before 3 leaves DIR (or, between 2 and 3, only DIR.old) holding the previous
// checkpoint; after 3 DIR holds the new one. LoadCheckpoint(DIR) therefore loads DIR if it exists
// and DIR.old if DIR is missing. Leftover DIR.tmp.<pid>.* directories of dead processes are
// removed by the next save. Saves remove only the files they know (the three above); a directory
// with other files in it is never deleted: saving over it fails with a message saying so.
// Concurrent saves to the same DIR are not supported.
#ifndef ATTNLAB_FORMATS_CHECKPOINT_H_
#define ATTNLAB_FORMATS_CHECKPOINT_H_

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "attnlab/model_config.h"
#include "attnlab/status.h"
#include "model/parameters.h"

namespace attnlab {

inline constexpr char kCheckpointFormat[] = "attnlab-checkpoint";
inline constexpr int kCheckpointVersion = 1;

// Saves a checkpoint with the protocol above. `m` and `v` are both given (resumable checkpoint)
// or both null. `meta` must be a JSON object (or null, stored as {}).
// REQUIRES (else InvalidArgument): config valid; params (and m, v) laid out by
// ParameterLayout(config); every value finite (a checkpoint that could not be loaded back is
// refused, and the previous one kept).
Status SaveCheckpoint(const std::string& dir, const ModelConfig& config,
                      const ParameterStore& params, const ParameterStore* m,
                      const ParameterStore* v, const nlohmann::json& meta);

struct LoadedCheckpoint {
  ModelConfig config;
  ParameterStore params;  // laid out by ParameterLayout(config)
  bool has_optimizer = false;
  ParameterStore m, v;                             // AdamW moments when has_optimizer, else empty
  int64_t optimizer_step = 0;                      // from optimizer.safetensors (0 when absent)
  std::string rng_state;                           // from optimizer.safetensors ("" when absent)
  nlohmann::json meta = nlohmann::json::object();  // the trainer's metadata
  std::string loaded_from;                         // DIR, or DIR.old after an interrupted save
};

// Loads DIR (or DIR.old when DIR is missing). Every tensor is checked against the layout the
// config implies: a missing tensor, an extra tensor, a wrong shape, a dtype other than F32 or a
// NaN/Inf value is an error naming the file and the tensor.
Result<LoadedCheckpoint> LoadCheckpoint(const std::string& dir);

// True if `dir` (or dir.old) holds config.json with "format": "attnlab-checkpoint".
bool IsCheckpointDir(const std::string& dir);

// Whether the JSON file at `config_path` is an attnlab checkpoint's config.json. An error when
// it cannot be read or is not a JSON object (at most 16 MiB is read). For the format detection
// in formats/load_model.cc.
Result<bool> IsCheckpointConfigFile(const std::string& config_path);

// "runs/a/ckpt/" -> "runs/a/ckpt". InvalidArgument for "", ".", "..", "/" (no name of its own).
Result<std::string> NormalizeCheckpointDir(const std::string& dir);

namespace internal {
// Testing only: makes the next SaveCheckpoint stop dead (no cleanup, as if the process was
// killed) right after the given step of the protocol and return Internal("simulated crash").
enum class CheckpointCrashPoint { kNone, kAfterTempWritten, kAfterOldMoved, kAfterNewMoved };
void SetCheckpointCrashPointForTest(CheckpointCrashPoint p);
}  // namespace internal

}  // namespace attnlab

#endif  // ATTNLAB_FORMATS_CHECKPOINT_H_
