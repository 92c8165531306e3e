// Model files: the attnlab checkpoint format, and one entry point that loads any model file
// attnlab understands (attnlab checkpoints, Hugging Face GPT-2 safetensors, llm.c .bin).
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
#ifndef ATTNLAB_MODEL_CHECKPOINT_H_
#define ATTNLAB_MODEL_CHECKPOINT_H_

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

class Gpt;

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

// ---------------------------------------------------------------------------------------------
// Any model file.

// A model ready to run: Gpt::Create(config), then CopyParameters(params, &gpt->params()) (or
// MakeGpt, which does both).
struct LoadedModel {
  ModelConfig config;
  ParameterStore params;  // laid out by ParameterLayout(config)
  std::string format;     // "attnlab-checkpoint", "hf-gpt2" or "llm.c"
  std::string path;       // what was read (e.g. DIR.old, or DIR/model.safetensors)
  nlohmann::json meta =
      nlohmann::json::object();    // checkpoint: trainer metadata; others: source details
  std::vector<std::string> notes;  // assumptions made while loading, for the user to see
};

// Detects the format of `path` by content:
//   a directory with config.json saying "format": "attnlab-checkpoint" (or only DIR.old)
//     -> LoadCheckpoint
//   a directory with model.safetensors, or a safetensors file -> LoadHfGpt2 (hf_gpt2.h)
//   a file starting with llm.c's magic 20240326 -> LoadLlmc (llmc.h)
// Anything else: InvalidArgument "not a model: expected ...".
Result<LoadedModel> LoadAnyModel(const std::string& path);

// Copies src into dst. InvalidArgument unless both have the same layout (names, shapes, offsets).
Status CopyParameters(const ParameterStore& src, ParameterStore* dst);

// Gpt::Create(m.config) with m.params copied in.
Result<std::unique_ptr<Gpt>> MakeGpt(const LoadedModel& m);

// InvalidArgument "<what>: tensor '<tensor>' has NaN at index i (of n)" (or +Inf/-Inf) if any
// of x[0, n) is not finite. Shared by the loaders.
Status CheckFinite(const float* x, int64_t n, const std::string& what, const std::string& tensor);

namespace internal {
// Testing only: makes the next SaveCheckpoint stop dead (no cleanup, as if the process was
// killed) right after the given step of the protocol and return Internal("simulated crash").
enum class CheckpointCrashPoint { kNone, kAfterTempWritten, kAfterOldMoved, kAfterNewMoved };
void SetCheckpointCrashPointForTest(CheckpointCrashPoint p);
}  // namespace internal

}  // namespace attnlab

#endif  // ATTNLAB_MODEL_CHECKPOINT_H_
