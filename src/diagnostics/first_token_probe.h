// Attention on the first token, measured during a forward pass without materialising any
// attention map: for query t of head h, A[t, 0] = exp(s[t, 0] - lse[t]) with s[t, 0] =
// scale * q_t . k_0 and lse the row's log-sum-exp that the flash kernel saves anyway. O(N d).
//
// Per (layer, head) it reports, averaged over the batch:
//   alpha_1  = 1/T sum_t A[t, 0]: the attention importance of token 1 in the notation of Gu et al.
//              2024 ("When Attention Sink Emerges in Language Models", arXiv:2410.10781, eq. 1:
//              alpha_k = 1/(T - k + 1) sum_{t >= k} A[t, k], tokens numbered from 1)
//   last     = A[T - 1, 0]: the last query's attention on token 0 (GPT-2's last-token attention to
//              token 0, output_attentions' last row; Xiao et al. 2023, Gu et al. 2024)
//   uniform  = 1 / (number of keys the last query sees): what "no preference" would give
// Sink_1^eps = share of (layer, head) pairs with alpha_1 > eps (Gu et al. use eps = 0.3).
#ifndef ATTNLAB_DIAGNOSTICS_FIRST_TOKEN_PROBE_H_
#define ATTNLAB_DIAGNOSTICS_FIRST_TOKEN_PROBE_H_

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/gpt.h"

namespace attnlab {

class FirstTokenProbe : public ForwardObserver {
 public:
  explicit FirstTokenProbe(const ModelConfig& config);
  void OnLayer(const LayerTensors& t) override;
  void Reset();

  // [n_layer][n_head], averaged over every sequence observed since Reset().
  std::vector<std::vector<double>> alpha1() const;
  std::vector<std::vector<double>> last_row() const;
  double uniform_last() const { return uniform_last_; }
  // Share of (layer, head) pairs with alpha_1 > eps.
  double SinkRate(double eps = 0.3) const;

 private:
  ModelConfig config_;
  std::vector<std::vector<double>> alpha_sum_, last_sum_;
  int64_t sequences_ = 0;  // per layer: counted on layer 0
  double uniform_last_ = 0;
};

// The first-token record of a training probe (TrainOptions::probe in train/trainer.h; the
// experiments and `attnlab train` pass these two): runs `model` forward on tokens [batch, len]
// with a FirstTokenProbe attached and returns {"alpha1": [[per head] per layer], "last_row":
// [[...]], "uniform_last": 1 / len, "sink_rate": Sink_1^0.3}. The observer is detached again.
Result<nlohmann::json> MeasureFirstToken(Gpt& model, const int32_t* tokens, int64_t batch,
                                         int64_t len);

// "max alpha1 0.912 sink 0.75": the progress-line text for a MeasureFirstToken record.
std::string FirstTokenProgressText(const nlohmann::json& record);

}  // namespace attnlab

#endif  // ATTNLAB_DIAGNOSTICS_FIRST_TOKEN_PROBE_H_
