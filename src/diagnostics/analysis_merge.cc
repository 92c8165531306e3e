#include "diagnostics/analysis_merge.h"

#include <cmath>
#include <limits>
#include <string>

namespace attnlab {
namespace {

constexpr double kNone = -std::numeric_limits<double>::infinity();

// The per-window sums of one residual stream, in a fixed order.
void PackStream(const StreamMetrics& s, std::vector<double>& out) {
  out.insert(out.end(), {s.relative_residual, s.mean_cosine, s.mad, s.dirichlet,
                         s.dirichlet_relative, s.erank, s.erank_centred});
}
void UnpackStream(StreamMetrics& s, const std::vector<double>& in, size_t& i) {
  for (double* x : {&s.relative_residual, &s.mean_cosine, &s.mad, &s.dirichlet,
                    &s.dirichlet_relative, &s.erank, &s.erank_centred}) {
    *x = in[i++];
  }
}

// Massive activations: per stream, the window with the largest ratio (one process keeps window
// 0's, then a later window only when strictly larger: the earliest window on ties), taken from
// the rank that ran it.
Status MergeMassive(dist::Comm& comm, int64_t windows_run, int64_t top_k,
                    std::vector<StreamMetrics*> streams) {
  const size_t n = streams.size();
  std::vector<double> ratio(n), window(n);
  for (size_t s = 0; s < n; ++s) ratio[s] = windows_run > 0 ? streams[s]->massive.ratio : kNone;
  std::vector<double> best = ratio;
  ATTNLAB_RETURN_IF_ERROR(comm.AllReduceMax(best, "analysis: massive activations (ratio)"));
  for (size_t s = 0; s < n; ++s) {
    window[s] = windows_run > 0 && ratio[s] == best[s]
                    ? -static_cast<double>(streams[s]->massive_window)
                    : kNone;
  }
  ATTNLAB_RETURN_IF_ERROR(comm.AllReduceMax(window, "analysis: massive activations (window)"));
  // Fields: max_abs, median_abs, ratio, count, max {token, channel, value}, top size, top_k x 3.
  const size_t F = 8 + 3 * static_cast<size_t>(top_k);
  std::vector<double> packed(n * F, 0.0);
  for (size_t s = 0; s < n; ++s) {
    const StreamMetrics& m = *streams[s];
    const bool mine = windows_run > 0 && ratio[s] == best[s] &&
                      -static_cast<double>(m.massive_window) == window[s];
    if (!mine) continue;
    if (static_cast<int64_t>(m.massive.top.size()) > top_k) {
      return Status::Internal("analysis: a stream kept more massive activations than top_k");
    }
    double* p = packed.data() + s * F;
    const MassiveActivations& a = m.massive;
    p[0] = a.max_abs, p[1] = a.median_abs, p[2] = a.ratio, p[3] = static_cast<double>(a.massive_count);
    p[4] = static_cast<double>(a.max.token), p[5] = static_cast<double>(a.max.channel), p[6] = a.max.value;
    p[7] = static_cast<double>(a.top.size());
    for (size_t t = 0; t < a.top.size(); ++t) {
      p[8 + 3 * t] = static_cast<double>(a.top[t].token);
      p[9 + 3 * t] = static_cast<double>(a.top[t].channel);
      p[10 + 3 * t] = a.top[t].value;
    }
  }
  ATTNLAB_RETURN_IF_ERROR(comm.AllReduceSum(packed, "analysis: massive activations (values)"));
  for (size_t s = 0; s < n; ++s) {
    const double* p = packed.data() + s * F;
    MassiveActivations& a = streams[s]->massive;
    a.max_abs = p[0], a.median_abs = p[1], a.ratio = p[2];
    a.massive_count = static_cast<int64_t>(p[3]);
    a.max = {static_cast<int64_t>(p[4]), static_cast<int64_t>(p[5]), static_cast<float>(p[6])};
    a.top.resize(static_cast<size_t>(p[7]));
    for (size_t t = 0; t < a.top.size(); ++t) {
      a.top[t] = {static_cast<int64_t>(p[8 + 3 * t]), static_cast<int64_t>(p[9 + 3 * t]),
                  static_cast<float>(p[10 + 3 * t])};
    }
    streams[s]->massive_window = static_cast<int64_t>(-window[s]);
  }
  return Status::Ok();
}

}  // namespace

Status MergeAnalysisRanks(dist::Comm& comm, const ModelConfig& c, int64_t windows_run,
                          int64_t massive_top_k, std::vector<AttentionStatsAccumulator>& stats,
                          std::vector<GateStatsAccumulator>& gates, AnalysisResult& r) {
  if (comm.size() == 1) return Status::Ok();
  const int64_t L = c.n_layer, H = c.n_head, Hkv = c.kv_heads();
  for (int64_t l = 0; l < L; ++l) {
    ATTNLAB_RETURN_IF_ERROR(stats[l].AllReduce(comm, "analysis: attention statistics of layer " +
                                                         std::to_string(l)));
  }
  for (size_t l = 0; l < gates.size(); ++l) {
    ATTNLAB_RETURN_IF_ERROR(gates[l].AllReduce(comm, "analysis: gate statistics of layer " +
                                                         std::to_string(l)));
  }
  // Per-window sums; a rank that ran no window of >= 2 tokens has not sized the extreme-token
  // vectors yet: zeros (0 added to a sum changes nothing).
  std::vector<double> sums;
  std::vector<int64_t> counts;
  PackStream(r.embedding, sums);
  for (LayerAnalysis& la : r.layers) {
    PackStream(la.output, sums);
    sums.insert(sums.end(), la.head_cka.begin(), la.head_cka.end());
    for (const HeadGeometry& g : la.geometry) {
      sums.insert(sums.end(), {g.key_norm_ratio, g.cos_key0, g.cos_key_other});
    }
    ExtremeTokens& x = la.extreme;
    if (x.windows == 0) {
      x.value_drain.assign(Hkv, 0.0);
      x.heads.assign(H, HeadActivityStats{});
    }
    sums.insert(sums.end(), {x.residual_peak.norm0, x.residual_peak.mean_other, x.residual_peak.ratio});
    sums.insert(sums.end(), x.value_drain.begin(), x.value_drain.end());
    for (const HeadActivityStats& h : x.heads) {
      sums.insert(sums.end(), {h.dormant_share, h.output_norm_ratio, h.gated_first_mass});
    }
    counts.push_back(x.windows);
  }
  ATTNLAB_RETURN_IF_ERROR(comm.AllReduceSum(sums, "analysis: per-window sums"));
  ATTNLAB_RETURN_IF_ERROR(comm.AllReduceSum(counts, "analysis: window counts"));
  size_t i = 0, k = 0;
  UnpackStream(r.embedding, sums, i);
  for (LayerAnalysis& la : r.layers) {
    UnpackStream(la.output, sums, i);
    for (double& x : la.head_cka) x = sums[i++];
    for (HeadGeometry& g : la.geometry) {
      g.key_norm_ratio = sums[i++], g.cos_key0 = sums[i++], g.cos_key_other = sums[i++];
    }
    ExtremeTokens& x = la.extreme;
    x.residual_peak.norm0 = sums[i++], x.residual_peak.mean_other = sums[i++];
    x.residual_peak.ratio = sums[i++];
    for (double& d : x.value_drain) d = sums[i++];
    for (HeadActivityStats& h : x.heads) {
      h.dormant_share = sums[i++], h.output_norm_ratio = sums[i++], h.gated_first_mass = sums[i++];
    }
    x.windows = counts[k++];
  }
  std::vector<StreamMetrics*> streams = {&r.embedding};
  for (LayerAnalysis& la : r.layers) streams.push_back(&la.output);
  ATTNLAB_RETURN_IF_ERROR(MergeMassive(comm, windows_run, massive_top_k, streams));
  // Where the time went: summed over the ranks (work, not wall time).
  std::vector<double> phases = {r.phases.attention, r.phases.attention_statistics,
                                r.phases.weights_and_rest, r.phases.layer_metrics};
  ATTNLAB_RETURN_IF_ERROR(comm.AllReduceSum(phases, "analysis: phase times"));
  r.phases = {phases[0], phases[1], phases[2], phases[3]};
  return Status::Ok();
}

}  // namespace attnlab
