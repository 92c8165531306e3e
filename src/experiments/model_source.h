// The model and text an inference experiment runs on (`heads`, `interventions`): the embedded
// default model (data/default-model) or --data MODEL_DIR (any model `attnlab --model` loads that
// carries its tokenizer) with data/sample.txt, cut into windows exactly as `attnlab eval` cuts
// them; --quick without a default model (a checkout without it) falls back to a tiny random-init
// byte model. Also the windows' mean loss.
#ifndef ATTNLAB_EXPERIMENTS_MODEL_SOURCE_H_
#define ATTNLAB_EXPERIMENTS_MODEL_SOURCE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "attnlab/status.h"
#include "experiments/experiment.h"
#include "model/gpt.h"

namespace attnlab::experiments {

struct Source {
  std::unique_ptr<Gpt> g;
  std::vector<int32_t> ids;  // the text's tokens (no BOS)
  int32_t bos = -1;          // the BOS the model was trained with, or -1
  std::string model, model_kind, text;  // model path, "default" / "checkpoint" / "random-init"
};

Result<Source> LoadSource(const ExperimentOptions& o);

// One window: tokens x [T] and targets y [T] (-1: not scored).
struct Window {
  std::vector<int32_t> x, y;
};

// Full windows of T tokens as `attnlab eval` cuts them (BOS first when bos >= 0).
std::vector<Window> MakeWindows(const std::vector<int32_t>& ids, int32_t bos, int64_t T);

// Mean cross-entropy over every scored target (forwards of up to 8 windows, all of one length).
Result<double> MeanLoss(Gpt& g, const std::vector<Window>& ws);

}  // namespace attnlab::experiments

#endif  // ATTNLAB_EXPERIMENTS_MODEL_SOURCE_H_
