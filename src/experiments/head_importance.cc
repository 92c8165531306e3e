#include "experiments/head_importance.h"

#include <cmath>
#include <string>

#include "formats/loaded_model.h"

namespace attnlab::experiments {

std::vector<double> HeadMaskGradient(Gpt& g) {
  const ModelConfig& c = g.config();
  const int64_t L = c.n_layer, H = c.n_head, hd = c.head_dim(), C = c.d_model;
  std::vector<double> out(L * H, 0.0);
  const ModelParams& P = g.params().ptrs();
  const ModelParams& G = g.grads().ptrs();
  for (int64_t l = 0; l < L; ++l) {
    const float* w = P.layers[l].proj_w;
    const float* dw = G.layers[l].proj_w;
    for (int64_t h = 0; h < H; ++h) {
      double s = 0;
      for (int64_t i = h * hd * C; i < (h + 1) * hd * C; ++i) s += double(w[i]) * dw[i];
      out[l * H + h] = s;
    }
  }
  return out;
}

Status ApplyHeadMask(const ParameterStore& base, const std::vector<float>& mask, Gpt* g) {
  const ModelConfig& c = g->config();
  const int64_t L = c.n_layer, H = c.n_head, hd = c.head_dim(), C = c.d_model;
  if (static_cast<int64_t>(mask.size()) != L * H) {
    return Status::InvalidArgument("head mask has " + std::to_string(mask.size()) +
                                   " entries, the model has " + std::to_string(L * H) + " heads");
  }
  ATTNLAB_RETURN_IF_ERROR(CopyParameters(base, &g->params()));
  const ModelParams& P = g->params().ptrs();
  for (int64_t l = 0; l < L; ++l) {
    for (int64_t h = 0; h < H; ++h) {
      const float m = mask[l * H + h];
      if (m == 1.0f) continue;
      float* w = P.layers[l].proj_w;
      for (int64_t i = h * hd * C; i < (h + 1) * hd * C; ++i) w[i] *= m;
    }
  }
  return Status::Ok();
}

std::vector<double> NormalizeImportancePerLayer(const std::vector<double>& importance,
                                                int64_t n_layer, int64_t n_head) {
  std::vector<double> out(importance);
  for (int64_t l = 0; l < n_layer; ++l) {
    double ss = 0;
    for (int64_t h = 0; h < n_head; ++h) ss += importance[l * n_head + h] * importance[l * n_head + h];
    const double norm = std::sqrt(ss);
    for (int64_t h = 0; h < n_head; ++h) out[l * n_head + h] = norm > 0 ? importance[l * n_head + h] / norm : 0.0;
  }
  return out;
}

}  // namespace attnlab::experiments
