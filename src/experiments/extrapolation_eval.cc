#include "experiments/extrapolation_eval.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "formats/loaded_model.h"

namespace attnlab::experiments {

Result<std::unique_ptr<Gpt>> WithRopeScaling(const Gpt& src, int64_t context, RopeScaling scaling,
                                             double factor, int64_t original_context) {
  ModelConfig c = src.config();
  if (c.position != PositionEncoding::kRope) {
    return Status::InvalidArgument(
        "extrapolation: the model must use RoPE positions (a learned table cannot be extended, "
        "and without positions there is nothing to scale)");
  }
  c.context = context;
  c.rope_scaling = scaling;
  c.rope_factor = scaling == RopeScaling::kNone ? 1.0 : factor;
  c.rope_original_context = original_context;
  ATTNLAB_ASSIGN_OR_RETURN(std::unique_ptr<Gpt> g, Gpt::Create(c));
  ATTNLAB_RETURN_IF_ERROR(CopyParameters(src.params(), &g->params()));
  return g;
}

Result<WindowLoss> ScoreWindows(Gpt& g, const std::vector<int32_t>& tokens, int64_t len,
                                int64_t predicted, int64_t batch_tokens) {
  const int64_t V = g.config().vocab_size;
  if (len < 1 || predicted < len || predicted % len != 0) {
    return Status::InvalidArgument("ScoreWindows: " + std::to_string(predicted) +
                                   " predicted tokens is not a positive multiple of the window " +
                                   std::to_string(len));
  }
  if (static_cast<int64_t>(tokens.size()) <= predicted) {
    return Status::InvalidArgument("ScoreWindows: need " + std::to_string(predicted + 1) +
                                   " tokens, have " + std::to_string(tokens.size()));
  }
  if (len > g.config().context) {
    return Status::InvalidArgument("ScoreWindows: window " + std::to_string(len) +
                                   " exceeds the model's context " +
                                   std::to_string(g.config().context));
  }
  for (int64_t i = 0; i <= predicted; ++i) {  // the targets index the logits
    if (tokens[i] < 0 || tokens[i] >= V) {
      return Status::InvalidArgument("ScoreWindows: token " + std::to_string(tokens[i]) +
                                     " at index " + std::to_string(i) +
                                     " is outside the vocabulary [0, " + std::to_string(V) + ")");
    }
  }
  WindowLoss r;
  r.len = len;
  r.windows = predicted / len;
  const int64_t B = std::clamp<int64_t>(batch_tokens / len, 1, r.windows);
  std::vector<double> sum(len, 0.0);
  std::vector<int32_t> x;
  for (int64_t w0 = 0; w0 < r.windows; w0 += B) {
    const int64_t b = std::min(B, r.windows - w0);
    x.assign(tokens.begin() + w0 * len, tokens.begin() + (w0 + b) * len);
    ATTNLAB_RETURN_IF_ERROR(g.Forward(x.data(), nullptr, b, len, nullptr));
    const float* logits = g.logits();  // [b, len, V] raw
    for (int64_t row = 0; row < b * len; ++row) {
      const float* l = logits + row * V;
      const int32_t target = tokens[w0 * len + row + 1];
      double mx = l[0];
      for (int64_t v = 1; v < V; ++v) mx = std::max(mx, static_cast<double>(l[v]));
      double s = 0;
      for (int64_t v = 0; v < V; ++v) s += std::exp(static_cast<double>(l[v]) - mx);
      sum[row % len] += std::log(s) + mx - static_cast<double>(l[target]);
    }
  }
  r.by_position.resize(len);
  double total = 0;
  for (int64_t t = 0; t < len; ++t) {
    r.by_position[t] = sum[t] / static_cast<double>(r.windows);
    total += sum[t];
  }
  r.loss = total / static_cast<double>(predicted);
  return r;
}

std::vector<double> BinMeans(const std::vector<double>& x, int64_t bin) {
  std::vector<double> out;
  for (size_t i = 0; i < x.size(); i += static_cast<size_t>(bin)) {
    const size_t end = std::min(x.size(), i + static_cast<size_t>(bin));
    double s = 0;
    for (size_t k = i; k < end; ++k) s += x[k];
    out.push_back(s / static_cast<double>(end - i));
  }
  return out;
}

}  // namespace attnlab::experiments
