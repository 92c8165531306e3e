#include "diagnostics/first_token_probe.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "engine/attention_weight.h"

namespace attnlab {

FirstTokenProbe::FirstTokenProbe(const ModelConfig& config) : config_(config) { Reset(); }

void FirstTokenProbe::Reset() {
  alpha_sum_.assign(config_.n_layer, std::vector<double>(config_.n_head, 0.0));
  last_sum_ = alpha_sum_;
  sequences_ = 0;
}

void FirstTokenProbe::OnLayer(const LayerTensors& t) {
  const ModelConfig& c = config_;
  const int64_t H = c.n_head, Hkv = c.kv_heads(), hd = c.head_dim(), Q = c.qkv_dim();
  const int64_t group = H / Hkv, T = t.len;
  const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
  if (t.layer == 0) sequences_ += t.batch;
  for (int64_t b = 0; b < t.batch; ++b) {
    for (int64_t h = 0; h < H; ++h) {
      const float* k0 = t.k_all.at(b, h / group, 0);
      double sum = 0, last = 0;
      for (int64_t i = 0; i < T; ++i) {
        double p = 0;
        if (!c.mask_first_key) {
          const float* q = t.qkv + (b * T + i) * Q + h * hd;
          double s = 0;
          for (int64_t d = 0; d < hd; ++d) s += static_cast<double>(q[d]) * k0[d];
          s *= scale;
          p = internal::KeyWeightFromLse(c.softmax, s, t.lse[(b * H + h) * T + i],
                                         c.effective_sigmoid_bias());
        }
        sum += p;
        if (i == T - 1) last = p;
      }
      alpha_sum_[t.layer][h] += sum / T;
      last_sum_[t.layer][h] += last;
    }
  }
  const int64_t visible = c.attention_window >= 0 ? std::min<int64_t>(T, c.attention_window + 1) : T;
  uniform_last_ = 1.0 / static_cast<double>(visible);
}

std::vector<std::vector<double>> FirstTokenProbe::alpha1() const {
  auto r = alpha_sum_;
  for (auto& l : r) for (double& x : l) x /= std::max<int64_t>(1, sequences_);
  return r;
}

std::vector<std::vector<double>> FirstTokenProbe::last_row() const {
  auto r = last_sum_;
  for (auto& l : r) for (double& x : l) x /= std::max<int64_t>(1, sequences_);
  return r;
}

double FirstTokenProbe::SinkRate(double eps) const {
  int64_t n = 0, total = 0;
  for (const auto& l : alpha1()) {
    for (double a : l) {
      n += a > eps;
      ++total;
    }
  }
  return total ? static_cast<double>(n) / total : 0.0;
}

Result<nlohmann::json> MeasureFirstToken(Gpt& model, const int32_t* tokens, int64_t batch,
                                         int64_t len) {
  FirstTokenProbe probe(model.config());
  model.set_observer(&probe);
  const Status st = model.Forward(tokens, nullptr, batch, len, nullptr);
  model.set_observer(nullptr);
  ATTNLAB_RETURN_IF_ERROR(st);
  return nlohmann::json{{"alpha1", probe.alpha1()},
                        {"last_row", probe.last_row()},
                        {"uniform_last", probe.uniform_last()},
                        {"sink_rate", probe.SinkRate(0.3)}};
}

std::string FirstTokenProgressText(const nlohmann::json& record) {
  double best = 0;
  for (const auto& layer : record.at("alpha1")) {
    for (const auto& a : layer) best = std::max(best, a.get<double>());
  }
  char buf[64];
  std::snprintf(buf, sizeof(buf), "max alpha1 %.3f sink %.2f", best,
                record.at("sink_rate").get<double>());
  return buf;
}

}  // namespace attnlab
