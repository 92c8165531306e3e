// What every model-file loader returns (a config and its parameters), and the checks and
// copies the loaders share. The bottom of formats/: each format (checkpoint.h, hf_gpt2.h,
// llmc.h) includes this file; formats/load_model.h, above them all, picks the format.
#ifndef ATTNLAB_FORMATS_LOADED_MODEL_H_
#define ATTNLAB_FORMATS_LOADED_MODEL_H_

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "attnlab/model_config.h"
#include "attnlab/status.h"
#include "model/matrix_weights.h"
#include "model/parameters.h"

namespace attnlab {

class Gpt;

// How a loader may hold the weights.
struct LoadOptions {
  // Inference only: a model whose linear layers are stored as BF16/F16 (or in GGUF's quantized
  // types) keeps them as stored, read in place from the mapped file where its layout allows
  // (LoadedModel::matrices). Off: every weight widened to fp32 in params (what training needs).
  bool keep_stored = false;
};

// A model ready to run: Gpt::Create(config), then CopyParameters(params, &gpt->params()) (or
// MakeGpt, which does both).
struct LoadedModel {
  ModelConfig config;
  ParameterStore params;  // laid out by ParameterLayout(config), or MatrixFreeLayout(config)
                          // when matrices holds the linear layers
  std::shared_ptr<const MatrixWeights> matrices;  // linear layers as stored (LoadOptions); or null
  std::string format;     // "attnlab-checkpoint", "hf-gpt2" or "llm.c"
  std::string path;       // what was read (e.g. DIR.old, or DIR/model.safetensors)
  nlohmann::json meta =
      nlohmann::json::object();    // checkpoint: trainer metadata; others: source details
  std::vector<std::string> notes;  // assumptions made while loading, for the user to see
};

// Copies src into dst. InvalidArgument unless both have the same layout (names, shapes, offsets).
Status CopyParameters(const ParameterStore& src, ParameterStore* dst);

// Gpt::Create(m.config) with m.params copied in (and m.matrices shared).
Result<std::unique_ptr<Gpt>> MakeGpt(const LoadedModel& m);
// The same, moving m.params into the model (no second copy of the weights).
Result<std::unique_ptr<Gpt>> MakeGpt(LoadedModel&& m);

// InvalidArgument "<what>: tensor '<tensor>' has NaN at index i (of n)" (or +Inf/-Inf) if any
// of x[0, n) is not finite. Shared by the loaders.
Status CheckFinite(const float* x, int64_t n, const std::string& what, const std::string& tensor);
// The same check for `rows` rows of `cols` elements stored as block b describes (fp32, 16-bit
// or quantized), without widening more than a few rows at a time.
Status CheckFiniteStored(const internal::WeightBlock& b, int64_t cols, const std::string& what,
                         const std::string& tensor);

}  // namespace attnlab

#endif  // ATTNLAB_FORMATS_LOADED_MODEL_H_
