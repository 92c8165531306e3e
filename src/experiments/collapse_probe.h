// The collapse metrics of one forward pass, per depth, for the collapse experiments: a
// ForwardObserver that turns each layer's tensors into
//   relative_residual  Dong et al. 2021's ||X - 1 xbar^T||_{1,inf} / ||X||_{1,inf} of the layer's
//                      output residual stream (representation_metrics.h; 0 = rank one)
//   mean_cosine        mean pairwise cosine between the tokens' representations (1 = collapsed)
//   norm               ||X||_{1,inf} (how large the stream is: a vanishing or exploding signal)
//   entropy            normalised attention entropy of the layer, mean over heads
//                      (attention_stats.h; 1 = uniform attention; NaN for sigmoid attention)
//   head_cosine        mean pairwise cosine between the heads' outputs at each token (the
//                      head-diversity penalty's D_l, train/auxiliary_losses.h; 1 = identical)
// Each is computed per sequence of the batch (the token graph is one sequence) and averaged over
// sequences. NaN marks what cannot be measured: a non-finite stream (an exploding variant), or a
// vanished one (every |x| < 1e-33: fp32 underflow, so relative_residual and mean_cosine are
// rounding noise; norm is still reported). The embedding (the stream entering layer 0) gets the representation metrics too.
#ifndef ATTNLAB_EXPERIMENTS_COLLAPSE_PROBE_H_
#define ATTNLAB_EXPERIMENTS_COLLAPSE_PROBE_H_

#include <cstdint>
#include <nlohmann/json.hpp>
#include <vector>

#include "attnlab/status.h"
#include "diagnostics/attention_stats.h"
#include "model/gpt.h"

namespace attnlab::experiments {

struct DepthMetrics {
  double relative_residual = 0, mean_cosine = 0, norm = 0;
  double entropy = 0, head_cosine = 0;  // NaN at the embedding
};

nlohmann::json DepthMetricsToJson(const std::vector<DepthMetrics>& m);

class CollapseProbe : public ForwardObserver {
 public:
  explicit CollapseProbe(const ModelConfig& config) : config_(config) {}

  void OnLayer(const LayerTensors& t) override;

  // After the forward: [n_layer + 1] entries, index 0 = the embedding, l + 1 = layer l's output.
  Result<std::vector<DepthMetrics>> Finish() const;

 private:
  ModelConfig config_;
  Status status_;
  std::vector<DepthMetrics> depth_;  // sums over sequences
  int64_t sequences_ = 0;
};

// Runs `model` on tokens [B, T] (no targets) with a probe attached and returns the metrics.
Result<std::vector<DepthMetrics>> MeasureCollapse(Gpt& model, const std::vector<int32_t>& tokens,
                                                  int64_t B, int64_t T);

}  // namespace attnlab::experiments

#endif  // ATTNLAB_EXPERIMENTS_COLLAPSE_PROBE_H_
