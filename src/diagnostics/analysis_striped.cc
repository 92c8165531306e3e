// AnalyzeModel's sequence-parallel window and the pieces analysis.cc shares with it
// (analysis_striped.h).
#include "diagnostics/analysis_striped.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>

#include "attnlab/thread_pool.h"
#include "dist/comm.h"
#include "engine/attention_reference.h"

namespace attnlab::analysis_internal {

void AddStream(StreamMetrics& acc, const RepresentationMetrics& m, int64_t window) {
  acc.relative_residual += m.residual.relative;
  acc.mean_cosine += m.cosine.mean_cosine;
  acc.mad += m.cosine.mad;
  acc.dirichlet += m.dirichlet.energy;
  acc.dirichlet_relative += m.dirichlet.relative;
  acc.erank += m.erank.erank;
  acc.erank_centred += m.erank_centred.erank;
  if (window == 0 || m.massive.ratio > acc.massive.ratio) {
    acc.massive = m.massive;
    acc.massive_window = window;
  }
}

Status AddExtremeSums(const ModelConfig& c, double eps, const TokenZeroNorm& peak,
                      std::span<const double> drain, std::span<const double> first_sum,
                      std::span<const double> norm_sum, std::span<const double> gated_sum,
                      int64_t T, ExtremeTokens* acc) {
  const int64_t H = c.n_head, Hkv = c.kv_heads();
  if (acc->windows == 0) {
    acc->value_drain.assign(Hkv, 0.0);
    acc->heads.assign(H, HeadActivityStats{});
  }
  ++acc->windows;
  acc->residual_peak.norm0 += peak.norm0;
  acc->residual_peak.mean_other += peak.mean_other;
  acc->residual_peak.ratio += peak.ratio;
  for (int64_t hk = 0; hk < Hkv; ++hk) acc->value_drain[hk] += drain[hk];
  ATTNLAB_ASSIGN_OR_RETURN(const std::vector<HeadActivity> act,
                           ClassifyHeadActivityFromSums(first_sum, norm_sum, T, eps));
  for (int64_t h = 0; h < H; ++h) {
    acc->heads[h].dormant_share += act[h].dormant ? 1.0 : 0.0;
    acc->heads[h].output_norm_ratio += act[h].output_norm_ratio;
    acc->heads[h].gated_first_mass = gated_sum.empty()
                                         ? std::nan("")
                                         : acc->heads[h].gated_first_mass +
                                               gated_sum[h] / static_cast<double>(T);
  }
  return Status::Ok();
}

std::vector<double> GatedFirstSums(const ModelConfig& c, const float* gate, const float* key0,
                                   int64_t n) {
  const int64_t H = c.n_head, G = c.gate_dim(), per_head = G / H;  // 1 head-wise, hd element-wise
  std::vector<double> sum(H, 0.0);
  for (int64_t h = 0; h < H; ++h) {
    for (int64_t i = 0; i < n; ++i) {
      double gi = 0;
      for (int64_t e = h * per_head; e < (h + 1) * per_head; ++e) gi += gate[i * G + e];
      sum[h] += gi / static_cast<double>(per_head) * key0[i * H + h];
    }
  }
  return sum;
}

Result<std::vector<float>> MapsFromRows(const ModelConfig& c, const AttentionParams& params,
                                        const float* q, const AttentionTensor& k_all, int64_t n,
                                        int64_t keys, std::span<const float> real_share) {
  const int64_t H = c.n_head, hd = c.head_dim();
  const AttentionShape shape{1, H, c.kv_heads(), n, keys, hd};
  std::vector<float> out(n * H * hd), probs(H * n * keys);
  AttentionTensor qv = TokenMajorView<const float>(q, 1, H, n, hd);
  ATTNLAB_RETURN_IF_ERROR(AttentionForwardReference(shape, params, qv, k_all, k_all,
                                                    TokenMajorView(out.data(), 1, H, n, hd), {},
                                                    probs));
  if (!real_share.empty()) {  // key_bias's share, [T, H]
    for (int64_t h = 0; h < H; ++h) {
      for (int64_t i = 0; i < n; ++i) {
        float* row = probs.data() + (h * n + i) * keys;
        for (int64_t j = 0; j < keys; ++j) row[j] *= real_share[i * H + h];
      }
    }
  }
  return probs;
}

int64_t MapQueryRows(const AnalysisOptions& o, int64_t T) {
  int64_t rows = 0;
  if (!o.plot_heads.empty() && T <= o.plot_max) rows = T;
  if (o.view_layer && o.view_tokens > 0) rows = std::max(rows, std::min(T, o.view_tokens));
  return rows;
}

namespace {

double Seconds(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Every layer's diagnostics from this rank's striped rows, completed over the ranks as the
// layer passes (the collectives run in the same order on every rank: one layer after another).
class StripedObserver : public ForwardObserver {
 public:
  StripedObserver(const ModelConfig& c, const AnalysisOptions& o, int64_t w, int64_t T,
                  WindowSums* sums, AnalysisResult* r, bool progress, int64_t n_windows)
      : c_(c), o_(o), w_(w), T_(T), sums_(sums), r_(r), progress_(progress),
        n_windows_(n_windows), start_(std::chrono::steady_clock::now()) {
    ro_.effective_rank = o.effective_rank;
  }
  bool TakesStripedRows() const override { return true; }

  void OnLayer(const LayerTensors& t) override {
    if (!status_.ok()) return;
    const auto t0 = std::chrono::steady_clock::now();
    status_ = Statistics(t);
    stats_s_ += Seconds(t0);
    const auto t1 = std::chrono::steady_clock::now();
    if (status_.ok()) status_ = Metrics(t);
    metrics_s_ += Seconds(t1);
    if (progress_ && T_ >= 2048 && o_.comm->root()) {
      const double done = Seconds(start_);
      const double left = done / static_cast<double>(t.layer + 1) *
                          static_cast<double>(c_.n_layer - 1 - t.layer);
      std::fprintf(stderr,
                   "analyze: window %ld/%ld (%ld tokens over %d ranks), layer %ld/%ld done: "
                   "%.0f s in this window (its statistics %.1f s, metrics %.1f s), about %.0f s "
                   "left of it\n",
                   static_cast<long>(w_ + 1), static_cast<long>(n_windows_),
                   static_cast<long>(T_), o_.comm->size(), static_cast<long>(t.layer + 1),
                   static_cast<long>(c_.n_layer), done, stats_s_, metrics_s_, left);
    }
  }

  Status status_;
  double stats_s_ = 0, metrics_s_ = 0;

 private:
  // The sums the ranks keep until the end: attention statistics (and P[i, 0] per local row for
  // the head activity), gate statistics, token classes.
  Status Statistics(const LayerTensors& t) {
    const int64_t H = c_.n_head, Q = c_.qkv_dim(), l = t.layer;
    key0_.assign(H * std::max<int64_t>(1, t.len), 0.0f);
    ATTNLAB_RETURN_IF_ERROR((*sums_->stats)[l].AddStripedRows(
        *t.attention, t.qkv, Q, t.stripe_rank, t.stripe_ranks, t.k_all, t.len_k, {},
        std::span<float>(key0_.data(), H * t.len)));
    if (sums_->gates && t.gate && t.len > 0) ATTNLAB_RETURN_IF_ERROR((*sums_->gates)[l].Add(t.gate, t.len));
    if (sums_->classes) {
      if (!TokenClassAccumulator::Supports(*t.attention)) {
        sums_->classes_unsupported = true;
      } else {
        TokenClassAccumulator& acc = (*sums_->classes)[l];
        ATTNLAB_RETURN_IF_ERROR(acc.BeginWindow(*sums_->key_classes));
        ATTNLAB_RETURN_IF_ERROR(acc.AddStripedRows(*t.attention, t.qkv, Q, t.stripe_rank,
                                                   t.stripe_ranks, t.k_all, t.len_k));
        acc.EndWindow();
      }
    }
    return Status::Ok();
  }

  // What one process computes per layer after a pass (analysis.cc's LayerMetrics), here from
  // the striped rows and the gathered keys and values.
  Status Metrics(const LayerTensors& t) {
    dist::Comm& comm = *o_.comm;
    ThreadPool* pool = &DefaultThreadPool();
    const int64_t l = t.layer, n = t.len, T = T_, C = c_.d_model, Q = c_.qkv_dim();
    const int64_t H = c_.n_head, Hkv = c_.kv_heads(), hd = c_.head_dim(), A = H * hd;
    const int64_t group = H / Hkv, rank = t.stripe_rank, P = t.stripe_ranks;
    LayerAnalysis& la = r_->layers[l];
    const auto rows = [&](const float* x, int64_t cols, int64_t stride) {
      return TokenMatrix{n > 0 ? x : nullptr, n, cols, stride};
    };
    if (l == 0) {
      ATTNLAB_ASSIGN_OR_RETURN(RepresentationMetrics em, ComputeRepresentationMetricsAcrossRanks(
                                                             rows(t.residual_in, C, C), comm, ro_, pool));
      AddStream(r_->embedding, em, w_);
    }
    ATTNLAB_ASSIGN_OR_RETURN(RepresentationMetrics m, ComputeRepresentationMetricsAcrossRanks(
                                                          rows(t.residual_out, C, C), comm, ro_, pool));
    AddStream(la.output, m, w_);
    if (T >= 2) {
      ATTNLAB_ASSIGN_OR_RETURN(HeadCkaAccumulator cka, HeadCkaAccumulator::Create(H, A));
      if (n > 0) ATTNLAB_RETURN_IF_ERROR(cka.Add(rows(t.attn_out, A, A), pool));
      ATTNLAB_RETURN_IF_ERROR(cka.AllReduce(comm, "analysis: head CKA, layer " + std::to_string(l)));
      ATTNLAB_ASSIGN_OR_RETURN(std::vector<double> m2, cka.Finish());
      for (int64_t i = 0; i < H * H; ++i) la.head_cka[i] += m2[i];
    }
    // Per head: sums of P[i, 0], |o_{h,i}| and the gated first mass over this rank's rows.
    std::vector<double> sums(3 * H, 0.0);
    for (int64_t h = 0; h < H; ++h) {
      for (int64_t i = 0; i < n; ++i) {
        sums[h] += key0_[h * n + i];
        const float* o = t.attn_out + i * A + h * hd;
        double s2 = 0;
        for (int64_t d = 0; d < hd; ++d) s2 += static_cast<double>(o[d]) * o[d];
        sums[H + h] += std::sqrt(s2);
      }
    }
    const bool gated = c_.output_gate && t.gate;
    if (gated && n > 0) {
      std::vector<float> key0_rows(n * H);  // [n, H] as GatedFirstSums reads it
      for (int64_t h = 0; h < H; ++h) {
        for (int64_t i = 0; i < n; ++i) key0_rows[i * H + h] = key0_[h * n + i];
      }
      const std::vector<double> g = GatedFirstSums(c_, t.gate, key0_rows.data(), n);
      std::copy(g.begin(), g.end(), sums.begin() + 2 * H);
    }
    ATTNLAB_RETURN_IF_ERROR(comm.AllReduceSum(std::span<double>(sums),
                                              "analysis: head sums, layer " + std::to_string(l)));
    for (int64_t h = 0; h < H; ++h) {
      const AttentionTensor& k = t.k_all;
      const TokenMatrix km{k.at(0, h / group, 0), t.len_k, hd, k.stride_token};
      SinkKeyGeometryAccumulator geo(hd);
      if (n > 0) ATTNLAB_RETURN_IF_ERROR(geo.Add(rows(t.qkv + h * hd, hd, Q), km, rank, P));
      ATTNLAB_RETURN_IF_ERROR(geo.AllReduce(comm, "analysis: sink-key geometry, layer " +
                                                      std::to_string(l)));
      ATTNLAB_ASSIGN_OR_RETURN(SinkKeyGeometry g, geo.Finish(km));
      la.geometry[h].key_norm_ratio += g.key_norm_ratio;
      la.geometry[h].cos_key0 += g.cos_key0;
      la.geometry[h].cos_key_other += g.cos_key_other;
    }
    if (T >= 2) {
      ATTNLAB_ASSIGN_OR_RETURN(const TokenZeroNorm peak,
                               ComputeTokenZeroNormAcrossRanks(rows(t.residual_out, C, C), comm));
      std::vector<double> drain(Hkv);
      for (int64_t hk = 0; hk < Hkv; ++hk) {  // the gathered values: the same on every rank
        ATTNLAB_ASSIGN_OR_RETURN(const TokenZeroNorm d,
                                 ComputeTokenZeroNorm(TokenMatrix{t.v_all.at(0, hk, 0), t.len_k,
                                                                  hd, t.v_all.stride_token}));
        drain[hk] = d.ratio;
      }
      ATTNLAB_RETURN_IF_ERROR(AddExtremeSums(
          c_, o_.sink_eps, peak, drain, std::span<const double>(sums.data(), H),
          std::span<const double>(sums.data() + H, H),
          gated ? std::span<const double>(sums.data() + 2 * H, H) : std::span<const double>(), T,
          &la.extreme));
    }
    return w_ == 0 ? Maps(t) : Status::Ok();
  }

  // Window 0's full maps and attention view: its first query rows gathered (each rank writes
  // its rows into zeros; the all-reduce adds them exactly), computed and handed out on rank 0.
  Status Maps(const LayerTensors& t) {
    const int64_t T = T_, rows = MapQueryRows(o_, T);
    if (rows == 0) return Status::Ok();
    const int64_t l = t.layer, H = c_.n_head, hd = c_.head_dim(), A = H * hd, Q = c_.qkv_dim();
    std::vector<float> q(rows * A, 0.0f);
    for (int64_t i = 0; i < t.len; ++i) {
      const int64_t p = t.stripe_rank + i * t.stripe_ranks;
      if (p < rows) std::copy_n(t.qkv + i * Q, A, q.data() + p * A);
    }
    ATTNLAB_RETURN_IF_ERROR(o_.comm->AllReduceSum(std::span<float>(q), "analysis: window 0's queries"));
    if (!o_.comm->root()) return Status::Ok();
    AttentionParams params = *t.attention;
    params.pool = nullptr;
    if (T <= o_.plot_max) {
      for (auto [pl, ph] : o_.plot_heads) {
        if (pl != l) continue;
        ATTNLAB_ASSIGN_OR_RETURN(std::vector<float> probs,
                                 MapsFromRows(c_, params, q.data(), t.k_all, T, t.len_k, {}));
        AttentionMap map;
        map.layer = pl, map.head = ph, map.len = T, map.keys = t.len_k;
        map.probs.assign(probs.begin() + ph * T * t.len_k, probs.begin() + (ph + 1) * T * t.len_k);
        r_->maps.push_back(std::move(map));
      }
    }
    if (o_.view_layer && o_.view_tokens > 0) {
      const AttentionMask& mask = params.mask;
      const int64_t n = std::min(T, o_.view_tokens);
      if (t.len_k == T && (n == T || (mask.causal && !mask.explicit_mask))) {
        ATTNLAB_ASSIGN_OR_RETURN(std::vector<float> probs,
                                 MapsFromRows(c_, params, q.data(), t.k_all, n, n, {}));
        ATTNLAB_RETURN_IF_ERROR(
            o_.view_layer(l, std::span<const int32_t>(r_->first_window).first(n), probs));
      }
    }
    return Status::Ok();
  }

  const ModelConfig& c_;
  const AnalysisOptions& o_;
  int64_t w_, T_;
  WindowSums* sums_;
  AnalysisResult* r_;
  RepresentationMetricsOptions ro_;
  bool progress_;
  int64_t n_windows_;
  std::chrono::steady_clock::time_point start_;
  std::vector<float> key0_;  // [H, local rows] P[i, 0] from the statistics' pass
};

}  // namespace

Status RunStripedWindow(Gpt& model, const std::vector<int32_t>& seq, const AnalysisOptions& o,
                        int64_t w, WindowSums* sums, AnalysisResult* r, bool progress,
                        int64_t n_windows) {
  dist::Comm& comm = *o.comm;
  const int64_t P = comm.size(), rank = comm.rank(), T = static_cast<int64_t>(seq.size());
  std::vector<int32_t> local;
  for (int64_t t = rank; t < T; t += P) local.push_back(seq[t]);
  StripedObserver obs(model.config(), o, w, T, sums, r, progress, n_windows);
  Gpt::ForwardProfile prof;
  model.set_sequence_parallel(&comm, T);
  model.set_partial_forward(0, /*skip_head=*/true);
  model.set_observer(&obs);
  model.set_profile(&prof);
  const Status st = model.Forward(local.data(), nullptr, 1, static_cast<int64_t>(local.size()), nullptr);
  model.set_profile(nullptr);
  model.set_observer(nullptr);
  model.set_partial_forward(0, false);
  model.set_sequence_parallel(nullptr, 0);
  ATTNLAB_RETURN_IF_ERROR(st);
  ATTNLAB_RETURN_IF_ERROR(obs.status_);
  r->phases.attention += prof.attention;
  r->phases.attention_statistics += obs.stats_s_;
  r->phases.layer_metrics += obs.metrics_s_;
  r->phases.weights_and_rest += prof.total - prof.attention - prof.observer;
  return Status::Ok();
}

}  // namespace attnlab::analysis_internal
