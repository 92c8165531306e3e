#include "experiments/collapse_probe.h"

#include <algorithm>
#include <cmath>

#include "diagnostics/representation_metrics.h"
#include "train/auxiliary_losses.h"

namespace attnlab::experiments {

nlohmann::json DepthMetricsToJson(const std::vector<DepthMetrics>& m) {
  nlohmann::json j = nlohmann::json::object();
  auto column = [&](const char* key, double DepthMetrics::*field) {
    nlohmann::json a = nlohmann::json::array();
    for (const DepthMetrics& d : m) a.push_back(std::isfinite(d.*field) ? nlohmann::json(d.*field) : nlohmann::json());
    j[key] = a;
  };
  column("relative_residual", &DepthMetrics::relative_residual);
  column("mean_cosine", &DepthMetrics::mean_cosine);
  column("norm", &DepthMetrics::norm);
  column("entropy", &DepthMetrics::entropy);
  column("head_cosine", &DepthMetrics::head_cosine);
  return j;
}

void CollapseProbe::OnLayer(const LayerTensors& t) {
  if (!status_.ok()) return;
  const ModelConfig& c = config_;
  const int64_t C = c.d_model, Q = c.qkv_dim(), H = c.n_head, hd = c.head_dim(), T = t.len;
  if (depth_.empty()) depth_.assign(c.n_layer + 1, DepthMetrics{});
  if (t.layer == 0) sequences_ = t.batch;
  // A diverged stream (Inf or NaN: a variant whose signal explodes) gets NaN metrics.
  auto finite = [](const float* x, int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
      if (!std::isfinite(x[i])) return false;
    }
    return true;
  };
  // A stream whose largest element is below kVanished has underflowed for our purposes: the next
  // layer's products (two weight matrices of std ~0.02 sqrt(d) each) reach the subnormal range
  // (FLT_MIN = 1.2e-38) where fp32 loses relative precision, so its direction (relative residual,
  // cosine) is rounding noise; those two get NaN, the norm is kept.
  constexpr double kVanished = 1e-33;
  auto stream = [&](const float* x, DepthMetrics& d) -> Status {
    for (int64_t b = 0; b < t.batch; ++b) {
      const TokenMatrix m = MakeTokenMatrix(x + b * T * C, T, C);
      if (!finite(m.data, T * C)) {
        d.relative_residual = d.norm = d.mean_cosine = NAN;
        continue;
      }
      ATTNLAB_ASSIGN_OR_RETURN(RankCollapseResidual r, ComputeRankCollapseResidual(m));
      ATTNLAB_ASSIGN_OR_RETURN(PairwiseCosine pc, ComputePairwiseCosine(m));
      double max_abs = 0;
      for (int64_t i = 0; i < T * C; ++i) max_abs = std::max(max_abs, double(std::fabs(m.data[i])));
      const bool vanished = max_abs < kVanished;
      d.relative_residual += vanished ? NAN : r.relative;
      d.norm += r.norm;
      d.mean_cosine += vanished ? NAN : pc.mean_cosine;
    }
    return Status::Ok();
  };
  if (t.layer == 0) {
    status_ = stream(t.residual_in, depth_[0]);
    depth_[0].entropy = depth_[0].head_cosine = NAN;
    if (!status_.ok()) return;
  }
  DepthMetrics& d = depth_[t.layer + 1];
  status_ = stream(t.residual_out, d);
  if (!status_.ok()) return;
  if (!finite(t.qkv, t.batch * T * Q) || !finite(t.attn_out, t.batch * T * H * hd)) {
    d.entropy = d.head_cosine = NAN;
    return;
  }
  // Attention entropy over every row of every sequence (one accumulator per layer).
  AttentionStatsOptions so;
  so.first_k = 0;
  so.jsd_rows = 1;
  auto acc = AttentionStatsAccumulator::Create(so, H, c.kv_heads(), hd);
  if (!acc.ok()) {
    status_ = acc.status();
    return;
  }
  for (int64_t b = 0; b < t.batch && status_.ok(); ++b) {
    AttentionTensor k = t.k_all;
    k.data = t.k_all.at(b, 0, 0);
    k.size = t.k_all.size - b * t.k_all.stride_batch;
    status_ = acc.value().AddRows(*t.attention, t.qkv + b * T * Q, Q, T, k, t.len_k);
    d.head_cosine += HeadCosineLoss<float>(t.attn_out + b * T * H * hd, T, H, hd, H * hd, nullptr, 0.0);
  }
  if (!status_.ok()) return;
  const AttentionLayerStats st = acc.value().Finish();
  double e = 0;
  for (const AttentionHeadStats& h : st.heads) e += h.entropy;
  d.entropy = e / H;  // NaN under sigmoid attention
}

Result<std::vector<DepthMetrics>> CollapseProbe::Finish() const {
  ATTNLAB_RETURN_IF_ERROR(status_);
  if (depth_.empty() || sequences_ < 1) return Status::Internal("the probe saw no forward pass");
  std::vector<DepthMetrics> out = depth_;
  const double n = static_cast<double>(sequences_);
  for (DepthMetrics& d : out) {
    d.relative_residual /= n;
    d.mean_cosine /= n;
    d.norm /= n;
    d.head_cosine /= n;
  }
  return out;
}

Result<std::vector<DepthMetrics>> MeasureCollapse(Gpt& model, const std::vector<int32_t>& tokens,
                                                  int64_t B, int64_t T) {
  CollapseProbe probe(model.config());
  model.set_observer(&probe);
  const Status st = model.Forward(tokens.data(), nullptr, B, T, nullptr);
  model.set_observer(nullptr);
  ATTNLAB_RETURN_IF_ERROR(st);
  return probe.Finish();
}

}  // namespace attnlab::experiments
