// Helpers of the extrapolation experiment (extrapolation.cc): give a trained RoPE model a longer
// context and another RoPE scaling while keeping its weights, and score non-overlapping windows of
// any length with the loss at every position of the window.
#ifndef ATTNLAB_EXPERIMENTS_EXTRAPOLATION_EVAL_H_
#define ATTNLAB_EXPERIMENTS_EXTRAPOLATION_EVAL_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "attnlab/model_config.h"
#include "attnlab/status.h"
#include "model/gpt.h"

namespace attnlab::experiments {

// A copy of src with context = `context` and RoPE scaling (scaling, factor, original_context);
// every other field of the config and every weight is src's. A RoPE model has no learned position
// table, so its parameter layout does not depend on the context (CopyParameters verifies it).
// factor is ignored (1) for RopeScaling::kNone. REQUIRES: src uses RoPE positions (else
// InvalidArgument); context, factor and original_context valid for ValidateModelConfig.
Result<std::unique_ptr<Gpt>> WithRopeScaling(const Gpt& src, int64_t context, RopeScaling scaling,
                                             double factor, int64_t original_context);

struct WindowLoss {
  int64_t len = 0;      // tokens per window
  int64_t windows = 0;  // predicted / len
  double loss = 0;      // mean next-token cross-entropy (nats) over every predicted token
  std::vector<double> by_position;  // [len]: mean loss at position t of a window, t = 0 .. len-1
};

// Cuts tokens[0, predicted] into `predicted / len` non-overlapping windows of len tokens: window w
// reads tokens[w*len, (w+1)*len) and predicts tokens[w*len + 1, (w+1)*len + 1). Whatever len, the
// same `predicted` tokens (tokens[1..predicted]) are scored, so losses at different lengths differ
// only in how much context each prediction had. Scored in batches of about batch_tokens tokens
// (Forward without targets; the log-softmax is taken in double from the raw logits).
// REQUIRES: len >= 1, predicted a positive multiple of len, tokens.size() > predicted,
// g.config().context >= len, every token in the vocabulary (else InvalidArgument).
Result<WindowLoss> ScoreWindows(Gpt& g, const std::vector<int32_t>& tokens, int64_t len,
                                int64_t predicted, int64_t batch_tokens);

// Means of consecutive bins of `bin` values (the last bin may be shorter). REQUIRES: bin >= 1.
std::vector<double> BinMeans(const std::vector<double>& x, int64_t bin);

}  // namespace attnlab::experiments

#endif  // ATTNLAB_EXPERIMENTS_EXTRAPOLATION_EVAL_H_
