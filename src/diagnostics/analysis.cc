#include "diagnostics/analysis.h"

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <cstdio>
#include <random>

#include "attnlab/attention.h"
#include "attnlab/thread_pool.h"
#include "core/json_number.h"
#include "cache/kv_cache.h"
#include "core/process_memory.h"
#include "diagnostics/analysis_merge.h"
#include "diagnostics/analysis_striped.h"
#include "engine/attention_explicit.h"

namespace attnlab {

namespace {

using analysis_internal::AddStream;
using analysis_internal::MapQueryRows;

// The head CKA of a window of T rows and A = H hd attention columns keeps whichever is smaller:
// the attention output itself ([T, A] floats, the CKA computed once at the end) or the CKA's
// [A, A] double Gram, summed chunk by chunk (HeadCkaAccumulator: long windows of a model, e.g.
// 32k tokens of a 896-wide one; a short window of a 4096-wide model would need 134 MB of Gram
// per layer where its output takes a few MB). Both give the same matrix to rounding.
bool HeadCkaByGram(int64_t T, int64_t A) { return T * 4 > A * 8; }

// Collects, for one window, what each layer exposes.
class WindowObserver : public ForwardObserver {
 public:
  // Keeps the streams of layers [l0, l1) (none if l0 == l1; the embedding with layer 0) and,
  // with stats, feeds every layer's rows to the attention statistics.
  WindowObserver(const ModelConfig& c, std::vector<AttentionStatsAccumulator>* stats,
                 int64_t window_len, int64_t l0, int64_t l1,
                 std::vector<GateStatsAccumulator>* gates = nullptr,
                 std::vector<TokenClassAccumulator>* classes = nullptr, int64_t q_rows = 0)
      : c_(c), stats_(stats), gates_(gates), classes_(classes), l0_(l0), l1_(l1),
        window_len_(window_len), q_rows_(std::min(q_rows, window_len)) {
    const int64_t L = c.n_layer, C = c.d_model, H = c.n_head, A = H * c.head_dim();
    res_.assign(L, {});
    q_.assign(L, {});
    real_share_.assign(L, {});
    key0_.assign(L, {});
    gate_.assign(L, {});
    cka_.assign(L, {});
    att_.assign(L, {});
    norm_sum_.assign(L, {});
    geometry_.assign(L, {});
    rows_seen_.assign(L, 0);
    if (l0_ == 0 && l1_ > 0) emb_.reserve(window_len * C);
    for (int64_t l = l0_; l < l1_; ++l) {
      res_[l].reserve(window_len * C);
      q_[l].reserve(q_rows_ * A);
      if (stats_) key0_[l].reserve(window_len * H);
      if (HeadCkaByGram(window_len, A)) {
        auto cka = HeadCkaAccumulator::Create(H, A);
        if (!cka.ok()) status_ = cka.status();
        else cka_[l] = std::move(cka).value();
      } else {
        att_[l].reserve(window_len * A);
      }
      norm_sum_[l].assign(H, 0.0);
      geometry_[l].assign(H, SinkKeyGeometryAccumulator(c.head_dim()));
    }
    k_all_.resize(L);
    v_all_.resize(L);
    len_k_.assign(L, 0);
    params_.resize(L);
    sinks_.resize(L);
  }

  void OnLayer(const LayerTensors& t) override {
    if (!status_.ok()) return;
    const int64_t C = c_.d_model, Q = c_.qkv_dim(), H = c_.n_head, hd = c_.head_dim();
    const bool kept = t.layer >= l0_ && t.layer < l1_;
    if (stats_) {
      const std::span<const float> extra =  // key_bias: each row's zero-value entry (gpt.h)
          t.key_bias_logits ? std::span<const float>(t.key_bias_logits, H * t.len)
                            : std::span<const float>();
      // Kept layers also take each row's P[i, 0] (with key_bias: of the softmax that includes
      // the bias entry), for the head activity, from the same pass over the scores.
      if (kept) chunk_key0_.resize(H * t.len);
      status_ = (*stats_)[t.layer].AddRows(*t.attention, t.qkv, Q, t.len, t.k_all, t.len_k, extra,
                                           kept ? std::span<float>(chunk_key0_) : std::span<float>());
      if (status_.ok() && kept) {  // [H, len] -> appended to [T, H]
        for (int64_t i = 0; i < t.len; ++i) {
          for (int64_t h = 0; h < H; ++h) key0_[t.layer].push_back(chunk_key0_[h * t.len + i]);
        }
      }
    }
    if (status_.ok() && gates_ && t.gate) status_ = (*gates_)[t.layer].Add(t.gate, t.len);
    if (status_.ok() && classes_) {  // attention by token class, on sampled rows
      if (!TokenClassAccumulator::Supports(*t.attention)) {
        classes_unsupported_ = true;
      } else {
        const std::span<const float> extra =
            t.key_bias_logits ? std::span<const float>(t.key_bias_logits, H * t.len)
                              : std::span<const float>();
        status_ = (*classes_)[t.layer].AddRows(*t.attention, t.qkv, Q, t.len, t.k_all, t.len_k, extra);
      }
    }
    k_all_[t.layer] = t.k_all;
    v_all_[t.layer] = t.v_all;
    len_k_[t.layer] = t.len_k;
    params_[t.layer] = *t.attention;
    if (!t.attention->sink_logits.empty()) {
      sinks_[t.layer].assign(t.attention->sink_logits.begin(), t.attention->sink_logits.end());
      params_[t.layer].sink_logits = sinks_[t.layer];
    }
    params_[t.layer].pool = nullptr;
    if (t.layer < l0_ || t.layer >= l1_) return;
    if (t.layer == 0) emb_.insert(emb_.end(), t.residual_in, t.residual_in + t.len * C);
    res_[t.layer].insert(res_[t.layer].end(), t.residual_out, t.residual_out + t.len * C);
    AccumulateHeads(t);
    for (int64_t i = 0; i < t.len; ++i) {
      const float* q = t.qkv + i * Q;
      if (static_cast<int64_t>(q_[t.layer].size()) < q_rows_ * H * hd) {
        q_[t.layer].insert(q_[t.layer].end(), q, q + H * hd);
      }
      if (t.gate) {  // [T, G] the gate's sigmoids (G = gate_dim())
        const int64_t G = c_.gate_dim();
        gate_[t.layer].insert(gate_[t.layer].end(), t.gate + i * G, t.gate + (i + 1) * G);
      }
      // key_bias: the share 1 - P*_i = 1 - e^(s*_i - lse'_i) the real keys keep, [T, H].
      for (int64_t h = 0; t.key_bias_logits && h < H; ++h) {
        const int64_t r = h * t.len + i;
        real_share_[t.layer].push_back(
            static_cast<float>(-std::expm1(double(t.key_bias_logits[r]) - t.lse[r])));
      }
    }
  }

  // What LayerMetrics reads of the heads, over the window's first window_len rows: the CKA's
  // Gram or the attention output itself (HeadCkaByGram), each head's output norms, and the
  // sink-key geometry from the queries at their key positions (len_k - len + i) against the
  // keys so far (no query stream).
  void AccumulateHeads(const LayerTensors& t) {
    const int64_t l = t.layer, H = c_.n_head, hd = c_.head_dim(), A = H * hd, Q = c_.qkv_dim();
    const int64_t group = H / c_.kv_heads();
    const int64_t take = std::min(t.len, window_len_ - rows_seen_[l]);
    rows_seen_[l] += t.len;
    if (take <= 0 || !status_.ok()) return;
    if (HeadCkaByGram(window_len_, A)) {
      status_ = cka_[l].Add(TokenMatrix{t.attn_out, take, A, A}, &DefaultThreadPool());
    } else {
      att_[l].insert(att_[l].end(), t.attn_out, t.attn_out + take * A);
    }
    for (int64_t i = 0; i < take; ++i) {
      for (int64_t h = 0; h < H; ++h) {
        const float* o = t.attn_out + i * A + h * hd;
        double n = 0;
        for (int64_t d = 0; d < hd; ++d) n += static_cast<double>(o[d]) * o[d];
        norm_sum_[l][h] += std::sqrt(n);
      }
    }
    for (int64_t h = 0; h < H && status_.ok(); ++h) {
      const AttentionTensor& k = t.k_all;
      status_ = geometry_[l][h].Add(TokenMatrix{t.qkv + h * hd, take, hd, Q},
                                    TokenMatrix{k.at(0, h / group, 0), t.len_k, hd, k.stride_token},
                                    t.len_k - t.len);
    }
  }

  Status status_;
  ModelConfig c_;
  std::vector<AttentionStatsAccumulator>* stats_;  // null: statistics gathered elsewhere
  std::vector<GateStatsAccumulator>* gates_;       // null: no gate, or gathered elsewhere
  std::vector<TokenClassAccumulator>* classes_;    // null: not computed
  bool classes_unsupported_ = false;               // a layer's softmax has no distribution
  int64_t l0_, l1_;
  int64_t window_len_;  // T: the rows the metrics read (a sink token's row makes T + 1)
  int64_t q_rows_;      // queries kept for the maps (the first rows of the first window)
  std::vector<float> emb_;
  std::vector<std::vector<float>> res_, q_;  // per layer [T, C], [q_rows, H hd]
  std::vector<HeadCkaAccumulator> cka_;      // per kept layer, when HeadCkaByGram
  std::vector<std::vector<float>> att_;      // per kept layer [T, H hd], when not
  std::vector<std::vector<double>> norm_sum_;  // per layer [H] sum of |o_{h,i}|
  std::vector<std::vector<SinkKeyGeometryAccumulator>> geometry_;  // per layer [H]
  std::vector<int64_t> rows_seen_;           // per layer
  std::vector<std::vector<float>> real_share_;     // per layer [T, H] (key_bias only)
  std::vector<std::vector<float>> key0_;           // per layer [T, H] P[i, 0] (with stats)
  std::vector<float> chunk_key0_;                  // [H, len] of the current chunk
  std::vector<std::vector<float>> gate_;           // per layer [T, G] (output gate only)
  std::vector<AttentionTensor> k_all_, v_all_;
  std::vector<int64_t> len_k_;
  std::vector<AttentionParams> params_;
  std::vector<std::vector<float>> sinks_;
};

// Runs one sequence through a cache in chunks, with the observer attached: layers
// [first, last) only, the stream entering `first` > 0 read from residual_in ([rows, d_model]),
// and never the LM head (the analysis reads no logits).
Status RunSequence(Gpt& model, const std::vector<int32_t>& seq, int64_t chunk, DenseKvCache* cache,
                   ForwardObserver* obs, int64_t first, int64_t last,
                   const std::vector<float>& residual_in, Gpt::ForwardProfile* profile) {
  model.set_observer(obs);
  model.set_partial_forward(last, /*skip_head=*/true);
  const int64_t C = model.config().d_model;
  model.set_forward_start(first, residual_in.data(), static_cast<int64_t>(residual_in.size()) / C);
  model.set_profile(profile);
  Status st;
  for (int64_t s = 0; s < static_cast<int64_t>(seq.size()) && st.ok(); s += chunk) {
    const int64_t n = std::min<int64_t>(chunk, seq.size() - s);
    st = model.Forward(seq.data() + s, nullptr, 1, n, nullptr, cache);
  }
  model.set_observer(nullptr);
  model.set_partial_forward(0, false);
  model.set_forward_start(0, nullptr, 0);
  model.set_profile(nullptr);
  return st;
}

void DivideStream(StreamMetrics& acc, double n) {
  for (double* x : {&acc.relative_residual, &acc.mean_cosine, &acc.mad, &acc.dirichlet,
                    &acc.dirichlet_relative, &acc.erank, &acc.erank_centred}) {
    *x /= n;
  }
}

// Representation metrics, head geometry and requested maps of layers [l0, l1) of window w from
// one pass's observer (and the embedding stream's when l0 == 0), added into *r.
// Layer l's extreme-token numbers on one window of T >= 2 tokens, added to `acc` (divided by
// acc->windows at the end): the residual peak of its output stream, the value drain of each kv
// head, and each head's activity, whose P[i, 0] comes from the engine's streamed row statistics
// (a score GEMM per head, no T x T map).
Status AddExtremeTokens(const ModelConfig& c, const AnalysisOptions& o, const WindowObserver& obs,
                        int64_t l, int64_t T, ExtremeTokens* acc) {
  const int64_t H = c.n_head, Hkv = c.kv_heads(), hd = c.head_dim(), C = c.d_model;
  ATTNLAB_ASSIGN_OR_RETURN(const TokenZeroNorm peak,
                           ComputeTokenZeroNorm(MakeTokenMatrix(obs.res_[l].data(), T, C)));
  const AttentionTensor& v = obs.v_all_[l];
  std::vector<double> drain(Hkv);
  for (int64_t hk = 0; hk < Hkv; ++hk) {
    ATTNLAB_ASSIGN_OR_RETURN(const TokenZeroNorm d,
                             ComputeTokenZeroNorm(TokenMatrix{v.at(0, hk, 0), obs.len_k_[l], hd,
                                                              v.stride_token}));
    drain[hk] = d.ratio;
  }
  if (static_cast<int64_t>(obs.key0_[l].size()) < T * H) {
    return Status::Internal("analysis: layer " + std::to_string(l) + " has " +
                            std::to_string(obs.key0_[l].size() / H) + " rows of P[i, 0], not " +
                            std::to_string(T));
  }
  // From the attention statistics' pass (key_bias included in its normaliser), [T, H].
  std::vector<double> first_sum(H, 0.0), gated_sum;
  for (int64_t i = 0; i < T; ++i) {
    for (int64_t h = 0; h < H; ++h) first_sum[h] += obs.key0_[l][i * H + h];
  }
  const std::vector<float>& g = obs.gate_[l];
  if (c.output_gate && static_cast<int64_t>(g.size()) == T * c.gate_dim()) {
    gated_sum = analysis_internal::GatedFirstSums(c, g.data(), obs.key0_[l].data(), T);
  }
  return analysis_internal::AddExtremeSums(c, o.sink_eps, peak, drain, first_sum, obs.norm_sum_[l],
                                           gated_sum, T, acc);
}

// Every head's attention map of layer l over query rows [0, n) and keys [0, keys) of the window
// the observer holds, [H, n, keys]: key_bias's entry left out (each row
// times the share the real keys keep). Fewer rows than the window's are exact only where those
// rows see no key past `keys`.
Result<std::vector<float>> FullMaps(const ModelConfig& c, const WindowObserver& obs, int64_t l,
                                    int64_t n, int64_t keys) {
  const int64_t H = c.n_head, hd = c.head_dim();
  if (static_cast<int64_t>(obs.q_[l].size()) < n * H * hd) {
    return Status::Internal("analysis: the map of layer " + std::to_string(l) + " needs " +
                            std::to_string(n) + " query rows, the observer kept " +
                            std::to_string(obs.q_[l].size() / (H * hd)));
  }
  return analysis_internal::MapsFromRows(c, obs.params_[l], obs.q_[l].data(), obs.k_all_[l], n,
                                         keys, obs.real_share_[l]);
}

Status LayerMetrics(const ModelConfig& c, const AnalysisOptions& o,
                    const RepresentationMetricsOptions& ro, const WindowObserver& obs, int64_t l0,
                    int64_t l1, int64_t T, int64_t w, AnalysisResult* out) {
  AnalysisResult& r = *out;
  const int64_t H = c.n_head, hd = c.head_dim(), C = c.d_model, group = H / c.kv_heads();
  if (l0 == 0 && l1 > 0) {
    ATTNLAB_ASSIGN_OR_RETURN(RepresentationMetrics em,
                             ComputeRepresentationMetrics(MakeTokenMatrix(obs.emb_.data(), T, C), ro,
                                                          &DefaultThreadPool()));
    AddStream(r.embedding, em, w);
  }
  for (int64_t l = l0; l < l1; ++l) {
    LayerAnalysis& la = r.layers[l];
    ATTNLAB_ASSIGN_OR_RETURN(RepresentationMetrics m,
                             ComputeRepresentationMetrics(MakeTokenMatrix(obs.res_[l].data(), T, C), ro,
                                                          &DefaultThreadPool()));
    AddStream(la.output, m, w);
    if (T >= 2) {
      ATTNLAB_ASSIGN_OR_RETURN(
          std::vector<double> cka,
          HeadCkaByGram(T, H * hd) ? obs.cka_[l].Finish()
                                   : ComputeHeadCkaMatrix(MakeTokenMatrix(obs.att_[l].data(), T, H * hd),
                                                          H, &DefaultThreadPool()));
      for (int64_t i = 0; i < H * H; ++i) la.head_cka[i] += cka[i];
    }
    if (T >= 2) ATTNLAB_RETURN_IF_ERROR(AddExtremeTokens(c, o, obs, l, T, &la.extreme));
    for (int64_t h = 0; h < H; ++h) {
      const AttentionTensor& k = obs.k_all_[l];
      TokenMatrix km{k.at(0, h / group, 0), obs.len_k_[l], hd, k.stride_token};
      ATTNLAB_ASSIGN_OR_RETURN(SinkKeyGeometry g, obs.geometry_[l][h].Finish(km));
      la.geometry[h].key_norm_ratio += g.key_norm_ratio;
      la.geometry[h].cos_key0 += g.cos_key0;
      la.geometry[h].cos_key_other += g.cos_key_other;
    }
    // Full maps of the requested heads, first window only.
    if (w == 0 && T <= o.plot_max) {
      for (auto [pl, ph] : o.plot_heads) {
        if (pl != l) continue;
        const int64_t K = obs.len_k_[l];
        ATTNLAB_ASSIGN_OR_RETURN(std::vector<float> probs, FullMaps(c, obs, l, T, K));
        AttentionMap map;
        map.layer = pl, map.head = ph, map.len = T, map.keys = K;
        map.probs.assign(probs.begin() + ph * T * K, probs.begin() + (ph + 1) * T * K);
        r.maps.push_back(std::move(map));
      }
    }
    if (w == 0 && o.view_layer && o.view_tokens > 0) {
      const AttentionMask& mask = obs.params_[l].mask;
      const int64_t n = std::min(T, o.view_tokens);
      if (obs.len_k_[l] == T && (n == T || (mask.causal && !mask.explicit_mask))) {
        ATTNLAB_ASSIGN_OR_RETURN(std::vector<float> probs, FullMaps(c, obs, l, n, n));
        ATTNLAB_RETURN_IF_ERROR(
            o.view_layer(l, std::span<const int32_t>(r.first_window).first(n), probs));
      }
    }
  }
  return Status::Ok();
}

// Layers whose residual stream ([T, C] floats) and head CKA data (HeadCkaByGram: the [A, A]
// double Gram or the [T, A] float attention output, A = H hd) fit `budget` bytes; all of them
// when budget <= 0. At least one.
int64_t LayersPerPass(const ModelConfig& c, int64_t T, int64_t budget) {
  if (budget <= 0) return c.n_layer;
  const int64_t A = c.n_head * c.head_dim();
  const int64_t per_layer = T * c.d_model * 4 + (HeadCkaByGram(T, A) ? A * A * 8 : T * A * 4);
  return std::clamp<int64_t>(budget / std::max<int64_t>(1, per_layer), 1, c.n_layer);
}

// Key j's class bits for a window's sequence (BOS first if any): a dedicated sink token is
// key 0 and special, the BOS special, every token its text bits and frequency decile.
std::vector<uint32_t> WindowKeyClasses(const ModelConfig& c, const AnalysisOptions& o,
                                       const std::vector<int32_t>& seq,
                                       const std::vector<uint32_t>& deciles) {
  std::vector<uint32_t> out;
  if (c.sink_token) out.push_back(1u << kClassSpecial);
  for (size_t i = 0; i < seq.size(); ++i) {
    const int32_t id = seq[i];
    uint32_t bits = 0;
    if (id >= 0 && id < static_cast<int32_t>(o.token_classes.size())) bits |= o.token_classes[id];
    if (id >= 0 && id < static_cast<int32_t>(deciles.size())) bits |= deciles[id];
    if (i == 0 && o.bos >= 0) bits = 1u << kClassSpecial;
    out.push_back(bits);
  }
  return out;
}

int64_t PeakRssBytes() {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<int64_t>(ru.ru_maxrss) * 1024;
}

}  // namespace

Result<AnalysisResult> AnalyzeModel(Gpt& model, const std::vector<int32_t>& text,
                                    const AnalysisOptions& o, bool progress) {
  const ModelConfig& c = model.config();
  const int64_t L = c.n_layer, H = c.n_head, hd = c.head_dim();
  const int64_t bos = o.bos >= 0 ? 1 : 0;
  const int64_t window = o.window > 0 ? o.window : c.context;
  if (window <= bos) return Status::InvalidArgument("the window must hold at least one text token");
  if (c.position == PositionEncoding::kLearned && window > c.max_positions()) {
    return Status::InvalidArgument("a window of " + std::to_string(window) +
                                   " tokens exceeds the " + std::to_string(c.max_positions()) +
                                   " learned positions of the model");
  }
  if (o.chunk < 1) return Status::InvalidArgument("chunk must be >= 1");
  std::vector<int32_t> tokens = text;
  if (o.max_tokens > 0 && static_cast<int64_t>(tokens.size()) > o.max_tokens) tokens.resize(o.max_tokens);
  if (tokens.empty()) return Status::InvalidArgument("the text has no tokens to analyse");
  const auto t0 = std::chrono::steady_clock::now();

  AttentionStatsOptions so;
  so.first_k = std::max(o.first_k, o.sink_search);
  so.jsd_rows = o.jsd_rows;
  so.diagonals = {AttentionDiagonal{1, 0, -1}};  // previous token, on the text itself
  // The accumulators a window adds to (per layer); fresh ones also for a short window that a
  // sequence-parallel rank other than 0 runs whole (its sums must not count twice).
  const auto make_stats = [&]() -> Result<std::vector<AttentionStatsAccumulator>> {
    std::vector<AttentionStatsAccumulator> v;
    for (int64_t l = 0; l < L; ++l) {
      ATTNLAB_ASSIGN_OR_RETURN(auto acc, AttentionStatsAccumulator::Create(so, H, c.kv_heads(), hd));
      v.push_back(std::move(acc));
    }
    return v;
  };
  const auto make_gates = [&]() -> Result<std::vector<GateStatsAccumulator>> {
    std::vector<GateStatsAccumulator> v;  // the output gate's statistics, if it has one
    for (int64_t l = 0; l < L && c.output_gate; ++l) {
      ATTNLAB_ASSIGN_OR_RETURN(auto acc, GateStatsAccumulator::Create(H, c.gate_dim()));
      v.push_back(std::move(acc));
    }
    return v;
  };
  TokenClassOptions co;
  co.first_k = o.first_k, co.recent = o.class_recent, co.rows_per_window = o.class_rows;
  const auto make_classes = [&]() -> Result<std::vector<TokenClassAccumulator>> {
    std::vector<TokenClassAccumulator> v;
    for (int64_t l = 0; l < L && o.classes; ++l) {
      ATTNLAB_ASSIGN_OR_RETURN(auto acc, TokenClassAccumulator::Create(co, H, c.kv_heads(), hd));
      v.push_back(std::move(acc));
    }
    return v;
  };
  ATTNLAB_ASSIGN_OR_RETURN(std::vector<AttentionStatsAccumulator> stats, make_stats());
  ATTNLAB_ASSIGN_OR_RETURN(std::vector<GateStatsAccumulator> gates, make_gates());
  // Attention by token class: one accumulator per layer; the keys' classes per window.
  ATTNLAB_ASSIGN_OR_RETURN(std::vector<TokenClassAccumulator> classes, make_classes());
  std::vector<uint32_t> deciles;
  if (o.classes) deciles = FrequencyDecileClasses(tokens, c.vocab_size);
  bool classes_unsupported = false;
  AnalysisResult r;
  r.config = c;
  r.text_tokens = static_cast<int64_t>(tokens.size());
  r.window = window;
  r.bos = o.bos;
  r.layers.resize(L);
  for (auto& la : r.layers) {
    la.head_cka.assign(H * H, 0.0);
    la.geometry.assign(H, HeadGeometry{});
  }
  const int64_t per_window = window - bos;
  const int64_t n_windows = (r.text_tokens + per_window - 1) / per_window;
  RepresentationMetricsOptions ro;
  ro.effective_rank = o.effective_rank;
  const int rank = o.comm ? o.comm->rank() : 0, ranks = o.comm ? o.comm->size() : 1;
  const bool striped = o.sequence_parallel && o.comm != nullptr;
  int64_t windows_run = 0;
  for (int64_t w = 0; w < n_windows; ++w) {
    std::vector<int32_t> seq;
    if (o.bos >= 0) seq.push_back(o.bos);
    const int64_t s = w * per_window, e = std::min(r.text_tokens, s + per_window);
    seq.insert(seq.end(), tokens.begin() + s, tokens.begin() + e);
    const int64_t T = static_cast<int64_t>(seq.size());
    // The rows this window adds to each layer's statistics (the sink token is a row too).
    const int64_t rows = T + (c.sink_token ? 1 : 0);
    if (!striped && w % ranks != rank) {  // another rank's window: keep the rows' numbers (SkipRows)
      for (AttentionStatsAccumulator& a : stats) a.SkipRows(rows);
      continue;
    }
    ++windows_run;
    const int64_t rows_before = stats[0].rows();
    if (w == 0) r.first_window = seq;
    const std::vector<uint32_t> key_classes =  // the same for every layer of the window
        o.classes ? WindowKeyClasses(c, o, seq, deciles) : std::vector<uint32_t>();
    if (striped && T >= ranks) {
      // The window split across the ranks: one lean sequence-parallel forward, every layer's
      // diagnostics completed over the ranks as it passes.
      const auto tp = std::chrono::steady_clock::now();
      analysis_internal::WindowSums sums{&stats, c.output_gate ? &gates : nullptr,
                                         o.classes ? &classes : nullptr, &key_classes};
      ATTNLAB_RETURN_IF_ERROR(
          analysis_internal::RunStripedWindow(model, seq, o, w, &sums, &r, progress, n_windows));
      classes_unsupported = classes_unsupported || sums.classes_unsupported;
      if (w == 0) r.passes = 1;
      for (const AttentionStatsAccumulator& a : stats) {
        if (a.rows() != rows_before + rows) {
          return Status::Internal("analysis: window " + std::to_string(w) + " added " +
                                  std::to_string(a.rows() - rows_before) + " rows, not " +
                                  std::to_string(rows));
        }
      }
      if (progress && (T >= 2048 || w % 16 == 15 || w + 1 == n_windows)) {
        const double done_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        const double window_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - tp).count();
        std::fprintf(stderr,
                     "analyze: window %ld/%ld (%ld tokens over %d ranks) done in %.1f s; %.0f s so "
                     "far, about %.0f s left\n",
                     static_cast<long>(w + 1), static_cast<long>(n_windows), static_cast<long>(T),
                     ranks, window_s, done_s, window_s * static_cast<double>(n_windows - 1 - w));
      }
      continue;
    }
    // A window of fewer tokens than ranks in a sequence-parallel run: every rank runs it whole
    // (the same layer metrics everywhere); rank 0's statistics count, the others' go to scratch
    // accumulators and their rows are skipped.
    std::vector<AttentionStatsAccumulator> scratch_stats;
    std::vector<GateStatsAccumulator> scratch_gates;
    std::vector<TokenClassAccumulator> scratch_classes;
    const bool scratch = striped && rank != 0;
    if (scratch) {
      ATTNLAB_ASSIGN_OR_RETURN(scratch_stats, make_stats());
      ATTNLAB_ASSIGN_OR_RETURN(scratch_gates, make_gates());
      ATTNLAB_ASSIGN_OR_RETURN(scratch_classes, make_classes());
      for (AttentionStatsAccumulator& a : stats) a.SkipRows(rows);
    }
    std::vector<AttentionStatsAccumulator>& wstats = scratch ? scratch_stats : stats;
    std::vector<GateStatsAccumulator>& wgates = scratch ? scratch_gates : gates;
    std::vector<TokenClassAccumulator>& wclasses = scratch ? scratch_classes : classes;
    // The layers' streams in groups that fit the budget, one pass over the window per group, in
    // layer order: each pass starts from the stream the previous one's last layer left (kept,
    // [T, d_model]) and runs only its own layers, so the passes add up to one forward. Each
    // pass's observer feeds the attention statistics of its layers.
    const int64_t per_pass = LayersPerPass(c, T, o.stream_budget_bytes);
    std::vector<std::pair<int64_t, int64_t>> groups;
    for (int64_t l0 = 0; l0 < L; l0 += per_pass) groups.push_back({l0, std::min(L, l0 + per_pass)});
    if (w == 0) r.passes = static_cast<int64_t>(groups.size());
    const bool long_window = T >= 2048;
    std::vector<float> handoff;
    for (size_t g = 0; g < groups.size(); ++g) {
      // The previous pass freed its streams and, chunk by chunk, its forward's buffers; without
      // this the allocator's arenas keep those pages resident and grow pass after pass
      // (docs/PERFORMANCE.md: ~670 MB at 32k tokens).
      if (long_window && g > 0) ReleaseFreeHeap();
      const auto [l0, l1] = groups[g];
      const auto tp = std::chrono::steady_clock::now();
      WindowObserver obs(c, &wstats, T, l0, l1, c.output_gate ? &wgates : nullptr,
                         o.classes ? &wclasses : nullptr, w == 0 ? MapQueryRows(o, T) : 0);
      for (int64_t l = l0; l < l1 && o.classes; ++l) {
        ATTNLAB_RETURN_IF_ERROR(wclasses[l].BeginWindow(key_classes));
      }
      DenseKvCache cache(L, c.kv_heads(), hd);
      ATTNLAB_RETURN_IF_ERROR(cache.HoldLayers(l0, l1));
      cache.Reserve(T + (c.sink_token ? 1 : 0));
      Gpt::ForwardProfile prof;
      ATTNLAB_RETURN_IF_ERROR(
          RunSequence(model, seq, o.chunk, &cache, &obs, l0, l1, handoff, &prof));
      ATTNLAB_RETURN_IF_ERROR(obs.status_);
      for (int64_t l = l0; l < l1 && o.classes; ++l) wclasses[l].EndWindow();
      classes_unsupported = classes_unsupported || obs.classes_unsupported_;
      const auto tm = std::chrono::steady_clock::now();
      ATTNLAB_RETURN_IF_ERROR(LayerMetrics(c, o, ro, obs, l0, l1, T, w, &r));
      const double metrics_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - tm).count();
      r.phases.attention += prof.attention;
      r.phases.attention_statistics += prof.observer;
      r.phases.weights_and_rest += prof.total - prof.attention - prof.observer;
      r.phases.layer_metrics += metrics_s;
      if (g + 1 < groups.size()) handoff = std::move(obs.res_[l1 - 1]);
      if (progress && long_window) {
        // Per pass on a long window: what is done, how long the pass took, and what is left
        // at that pace (the passes differ only in their number of layers).
        const double pass_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - tp).count();
        const double done_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        const double layers_left = static_cast<double>(L - l1) + static_cast<double>(L) * (n_windows - 1 - w);
        std::fprintf(stderr,
                     "analyze: window %ld/%ld (%ld tokens), layers %ld-%ld done (pass %zu/%zu, "
                     "%.1f s: forward %.1f s of which attention %.1f s and its statistics %.1f s, "
                     "metrics %.1f s); %.0f s so far, about %.0f s left\n",
                     static_cast<long>(w + 1), static_cast<long>(n_windows), static_cast<long>(T),
                     static_cast<long>(l0), static_cast<long>(l1 - 1), g + 1, groups.size(), pass_s,
                     prof.total, prof.attention, prof.observer, metrics_s, done_s,
                     pass_s / static_cast<double>(l1 - l0) * layers_left);
      }
    }
    for (const AttentionStatsAccumulator& a : stats) {
      if (a.rows() != rows_before + rows) {
        return Status::Internal("analysis: window " + std::to_string(w) + " added " +
                                std::to_string(a.rows() - rows_before) + " rows, not " +
                                std::to_string(rows));
      }
    }
    if (progress && !long_window && (w % 16 == 15 || w + 1 == n_windows)) {
      std::fprintf(stderr, "analyze: window %ld/%ld (%ld tokens)%s\n", static_cast<long>(w + 1),
                   static_cast<long>(n_windows), static_cast<long>(e),
                   groups.size() > 1 ? (", " + std::to_string(groups.size()) +
                                        " passes per window (--stream-budget)").c_str()
                                     : "");
    }
  }

  if (o.comm && o.classes) {
    std::vector<int64_t> flag{classes_unsupported ? 1 : 0};
    ATTNLAB_RETURN_IF_ERROR(o.comm->AllReduceSum(std::span<int64_t>(flag), "token classes' support"));
    classes_unsupported = flag[0] > 0;
    for (int64_t l = 0; l < L; ++l) {
      ATTNLAB_RETURN_IF_ERROR(classes[l].AllReduce(*o.comm, "token classes, layer " + std::to_string(l)));
    }
  }
  if (striped) {  // the layer metrics are already every rank's; the sums are per rank
    for (int64_t l = 0; l < L; ++l) {
      const std::string layer = "layer " + std::to_string(l);
      ATTNLAB_RETURN_IF_ERROR(stats[l].AllReduce(*o.comm, "analysis: attention statistics, " + layer));
      if (c.output_gate) {
        ATTNLAB_RETURN_IF_ERROR(gates[l].AllReduce(*o.comm, "analysis: gate statistics, " + layer));
      }
    }
  } else if (o.comm) {
    ATTNLAB_RETURN_IF_ERROR(MergeAnalysisRanks(*o.comm, c, windows_run, ro.massive.top_k, stats,
                                               gates, r));
  }
  r.windows = n_windows;
  r.ranks = ranks;
  r.token_classes = o.classes && !classes_unsupported;
  r.token_classes_note = !o.classes ? "not asked for"
                         : classes_unsupported ? "the model's attention weights are not a softmax "
                                                 "distribution (sigmoid or softpick)"
                                               : "";
  // The maps are reported by layer.
  std::stable_sort(r.maps.begin(), r.maps.end(),
                   [](const AttentionMap& x, const AttentionMap& y) { return x.layer < y.layer; });
  DivideStream(r.embedding, n_windows);
  for (int64_t l = 0; l < L; ++l) {
    LayerAnalysis& la = r.layers[l];
    DivideStream(la.output, n_windows);
    for (double& x : la.head_cka) x /= n_windows;
    for (HeadGeometry& g : la.geometry) {
      g.key_norm_ratio /= n_windows, g.cos_key0 /= n_windows, g.cos_key_other /= n_windows;
    }
    la.attention = stats[l].Finish();
    if (o.classes && !classes_unsupported) la.token_classes = classes[l].Finish();
    ExtremeTokens& x = la.extreme;
    if (x.windows > 0) {
      const double n = static_cast<double>(x.windows);
      x.residual_peak.norm0 /= n, x.residual_peak.mean_other /= n, x.residual_peak.ratio /= n;
      for (double& d : x.value_drain) d /= n;
      for (HeadActivityStats& h : x.heads) {
        h.dormant_share /= n, h.output_norm_ratio /= n, h.gated_first_mass /= n;
      }
    }
    if (c.output_gate) la.gate = gates[l].Finish();
  }

  // Head patterns on repeated random sequences (TransformerLens' detector).
  const int64_t n = o.pattern_len > 0 ? o.pattern_len : std::min<int64_t>(64, (window - bos) / 2);
  r.pattern_len = n;
  if (o.pattern_sequences > 0 && n >= 2) {
    AttentionStatsOptions po;
    po.first_k = 0;
    po.jsd_rows = 1;
    po.diagonals = {AttentionDiagonal{1, bos, -1}, AttentionDiagonal{n, bos + n, bos + 2 * n},
                    AttentionDiagonal{n - 1, bos + n, bos + 2 * n}};
    std::vector<AttentionStatsAccumulator> pstats;
    for (int64_t l = 0; l < L; ++l) {
      ATTNLAB_ASSIGN_OR_RETURN(auto acc, AttentionStatsAccumulator::Create(po, H, c.kv_heads(), hd));
      pstats.push_back(std::move(acc));
    }
    std::mt19937_64 rng(o.seed);
    std::uniform_int_distribution<int32_t> tok(0, static_cast<int32_t>(c.vocab_size - 1));
    for (int64_t s = 0; s < o.pattern_sequences; ++s) {
      std::vector<int32_t> seq;
      if (o.bos >= 0) seq.push_back(o.bos);
      std::vector<int32_t> rnd(n);
      for (auto& x : rnd) x = tok(rng);
      seq.insert(seq.end(), rnd.begin(), rnd.end());
      seq.insert(seq.end(), rnd.begin(), rnd.end());
      WindowObserver obs(c, &pstats, static_cast<int64_t>(seq.size()), 0, 0);
      DenseKvCache cache(L, c.kv_heads(), hd);
      ATTNLAB_RETURN_IF_ERROR(RunSequence(model, seq, o.chunk, &cache, &obs, 0, L, {}, nullptr));
      ATTNLAB_RETURN_IF_ERROR(obs.status_);
    }
    for (int64_t l = 0; l < L; ++l) r.layers[l].patterns = pstats[l].Finish();
  }

  // Sinks, against what uniform attention would give at these lengths (analysis.h).
  std::vector<AttentionLayerStats> all;
  for (const LayerAnalysis& la : r.layers) all.push_back(la.attention);
  r.sink_rate_1 = o.first_k >= 1 ? AttentionSinkRate(all, 1, o.sink_eps) : 0.0;
  r.alpha_1_uniform = 0;
  int64_t counted = 0;
  for (int64_t l = 0; l < L; ++l) {
    for (int64_t h = 0; h < H; ++h) {
      const AttentionHeadStats& s = r.layers[l].attention.heads[h];
      if (s.alpha_uniform.empty() || std::isnan(s.alpha_uniform[0])) continue;
      r.alpha_1_uniform = std::max(r.alpha_1_uniform, s.alpha_uniform[0]);
      ++counted;
    }
  }
  r.sink_verdict = counted > 0 && r.alpha_1_uniform <= kMaxUniformForVerdict;
  for (int64_t l = 0; l < L && r.sink_verdict; ++l) {
    for (int64_t h = 0; h < H; ++h) {
      if (SinkExcess(r.layers[l].attention.heads[h]) > o.sink_eps) r.sink_heads.push_back({l, h});
    }
  }
  r.sink_rate_excess = counted > 0 ? static_cast<double>(r.sink_heads.size()) / (L * H) : 0.0;
  r.sink_key.assign(L, std::vector<int64_t>(H, -1));
  r.sink_key_excess.assign(L, std::vector<double>(H, std::nan("")));
  for (int64_t l = 0; l < L; ++l) {
    for (int64_t h = 0; h < H; ++h) {
      const AttentionHeadStats& st = r.layers[l].attention.heads[h];
      for (int64_t j = 0; j < static_cast<int64_t>(st.alpha.size()); ++j) {
        const double e = SinkExcess(st, j);
        if (std::isfinite(e) && (r.sink_key[l][h] < 0 || e > r.sink_key_excess[l][h])) {
          r.sink_key[l][h] = j, r.sink_key_excess[l][h] = e;
        }
      }
    }
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.peak_rss_bytes = PeakRssBytes();
  if (o.comm && o.comm->distributed()) {  // the slowest rank's time, the largest rank's memory
    std::vector<double> run = {r.seconds, static_cast<double>(r.peak_rss_bytes)};
    ATTNLAB_RETURN_IF_ERROR(o.comm->AllReduceMax(run, "analysis: time and memory"));
    r.seconds = run[0];
    r.peak_rss_bytes = static_cast<int64_t>(run[1]);
  }
  return r;
}

namespace {


nlohmann::json StreamJson(const StreamMetrics& s) {
  nlohmann::json top = nlohmann::json::array();
  for (const Activation& a : s.massive.top) {
    top.push_back({{"token", a.token}, {"channel", a.channel}, {"value", a.value}});
  }
  return {{"relative_residual", JsonNumber(s.relative_residual)},
          {"mean_cosine", JsonNumber(s.mean_cosine)},
          {"mad", JsonNumber(s.mad)},
          {"dirichlet_energy", JsonNumber(s.dirichlet)},
          {"dirichlet_relative", JsonNumber(s.dirichlet_relative)},
          {"effective_rank", JsonNumber(s.erank)},
          {"effective_rank_centred", JsonNumber(s.erank_centred)},
          {"massive",
           {{"ratio", JsonNumber(s.massive.ratio)},
            {"max_abs", JsonNumber(s.massive.max_abs)},
            {"median_abs", JsonNumber(s.massive.median_abs)},
            {"token", s.massive.max.token},
            {"channel", s.massive.max.channel},
            {"window", s.massive_window},
            {"count", s.massive.massive_count},
            {"top", top}}}};
}

std::vector<double> First(const std::vector<double>& v, int64_t k) {
  return std::vector<double>(v.begin(), v.begin() + std::min<int64_t>(k, v.size()));
}

nlohmann::json Vec(const std::vector<double>& v) {
  nlohmann::json a = nlohmann::json::array();
  for (double x : v) a.push_back(JsonNumber(x));
  return a;
}

}  // namespace

double SinkExcess(const AttentionHeadStats& s, int64_t key) {
  if (key < 0 || key >= static_cast<int64_t>(std::min(s.alpha.size(), s.alpha_uniform.size()))) {
    return std::nan("");
  }
  const double a = s.alpha[key], u = s.alpha_uniform[key];
  if (!std::isfinite(a) || !std::isfinite(u) || u >= 1.0) return std::nan("");
  return (a - u) / (1.0 - u);
}

const AttentionHeadStats* StrongestHead(const AnalysisResult& r, int64_t* layer, int64_t* head) {
  const AttentionHeadStats* best = nullptr;
  for (int64_t l = 0; l < static_cast<int64_t>(r.layers.size()); ++l) {
    for (int64_t h = 0; h < static_cast<int64_t>(r.layers[l].attention.heads.size()); ++h) {
      const AttentionHeadStats& s = r.layers[l].attention.heads[h];
      if (s.alpha.empty() || std::isnan(s.alpha[0])) continue;
      if (!best || s.alpha[0] > best->alpha[0]) {
        best = &s;
        if (layer) *layer = l;
        if (head) *head = h;
      }
    }
  }
  return best;
}

double MeanLastKey0(const AnalysisResult& r) {
  double sum = 0;
  int64_t n = 0;
  for (const LayerAnalysis& la : r.layers) {
    for (const AttentionHeadStats& s : la.attention.heads) sum += s.last_key0, ++n;
  }
  return n ? sum / static_cast<double>(n) : std::nan("");
}

double MeanLastUniform(const AnalysisResult& r) {
  double sum = 0;
  int64_t n = 0;
  for (const LayerAnalysis& la : r.layers) {
    for (const AttentionHeadStats& s : la.attention.heads) {
      sum += s.last_visible ? 1.0 / static_cast<double>(s.last_visible) : 0.0;
      ++n;
    }
  }
  return n ? sum / static_cast<double>(n) : std::nan("");
}

namespace {
std::string F(double x, const char* f = "%.3f") {
  if (!std::isfinite(x)) return "n/a";
  char buf[48];
  std::snprintf(buf, sizeof buf, f, x);
  return buf;
}
}  // namespace

std::string SinkVerdictText(const AnalysisResult& r, double eps) {
  const int64_t total = static_cast<int64_t>(r.layers.size()) * r.config.n_head;
  int64_t bl = 0, bh = 0;
  const AttentionHeadStats* best = StrongestHead(r, &bl, &bh);
  const std::string strongest =
      best ? "layer " + std::to_string(bl) + " head " + std::to_string(bh) + " with alpha_1 = " +
                 F(best->alpha[0]) + " (excess " + F(SinkExcess(*best)) + ")"
           : "none";
  // The longest window actually run (a short text fills less than one configured window).
  const int64_t longest = std::min(r.window, r.text_tokens + (r.bos >= 0 ? 1 : 0));
  const std::string baseline = "uniform attention over the same tokens would give alpha_1 = " +
                               F(r.alpha_1_uniform);
  if (!r.sink_verdict) {
    return "Too short to call attention sinks: " + baseline +
           " (above " + F(kMaxUniformForVerdict, "%.1f") + "), so no head can stand out from it. "
           "Strongest: " + strongest + ".";
  }
  std::string t;
  if (r.sink_heads.empty()) {
    t = "No attention sink at eps = " + F(eps, "%.2f") + ": no head gives token 0 more than " +
        F(eps, "%.2f") + " of its attention beyond what uniform attention would (" + baseline +
        "). Strongest: " + strongest + ".";
  } else {
    t = std::to_string(r.sink_heads.size()) + " of " + std::to_string(total) +
        " heads are attention sinks: token 0 gets more than eps = " + F(eps, "%.2f") +
        " of their attention beyond uniform's share (" + baseline + "): ";
    for (size_t i = 0; i < r.sink_heads.size() && i < 12; ++i) {
      t += (i ? ", " : "") + std::string("L") + std::to_string(r.sink_heads[i].first) + ".H" +
           std::to_string(r.sink_heads[i].second);
    }
    if (r.sink_heads.size() > 12) t += ", ...";
    t += ". Strongest: " + strongest + ".";
  }
  if (r.alpha_1_uniform > 0.05) {
    t += " Short text: " + std::to_string(longest) +
         " tokens per window, where alpha_1 alone would overstate sinks (Gu et al.'s alpha_1 > " +
         F(eps, "%.2f") + " holds for " + F(100 * r.sink_rate_1, "%.1f") + "% of heads).";
  }
  return t;
}

namespace {

// [{"key": j, "token": id, "heads": n}, ...]: how many of the sink heads (excess > eps at their
// sink key) sit on each key, most first; the token is window 0's id at that key.
nlohmann::json SinkKeysJson(const AnalysisResult& r, const AnalysisOptions& o) {
  std::map<int64_t, int64_t> count;
  for (size_t l = 0; r.sink_verdict && l < r.sink_key.size(); ++l) {
    for (size_t h = 0; h < r.sink_key[l].size(); ++h) {
      if (r.sink_key[l][h] >= 0 && r.sink_key_excess[l][h] > o.sink_eps) ++count[r.sink_key[l][h]];
    }
  }
  std::vector<std::pair<int64_t, int64_t>> v(count.begin(), count.end());
  std::stable_sort(v.begin(), v.end(), [](auto& a, auto& b) { return a.second > b.second; });
  nlohmann::json out = nlohmann::json::array();
  for (auto [key, n] : v) {
    const bool in = key < static_cast<int64_t>(r.first_window.size());
    out.push_back({{"key", key},
                   {"token", in ? nlohmann::json(r.first_window[key]) : nlohmann::json(nullptr)},
                   {"heads", n}});
  }
  return out;
}

}  // namespace

static nlohmann::json ExtremeJson(const ExtremeTokens& x) {
  if (x.windows == 0) return nullptr;
  return {{"windows", x.windows},
          {"residual_peak", {{"norm0", JsonNumber(x.residual_peak.norm0)},
                             {"mean_other", JsonNumber(x.residual_peak.mean_other)},
                             {"ratio", JsonNumber(x.residual_peak.ratio)}}},
          {"value_drain", Vec(x.value_drain)}};
}

namespace {

nlohmann::json TokenClassNames() {
  nlohmann::json names = nlohmann::json::array();
  for (int c = 0; c < kNumTokenClasses; ++c) names.push_back(TokenClassName(c));
  return names;
}

// One layer's attention by token class: per head, per class (in TokenClassNames' order) the mass,
// the uniform share and their ratio; null when not computed.
nlohmann::json TokenClassesJson(const TokenClassStats& t, bool computed) {
  if (!computed || t.mass.empty()) return nullptr;
  nlohmann::json mass = nlohmann::json::array(), uni = nlohmann::json::array(),
                 ratio = nlohmann::json::array();
  for (size_t h = 0; h < t.mass.size(); ++h) {
    nlohmann::json m = nlohmann::json::array(), u = nlohmann::json::array(), q = nlohmann::json::array();
    for (int c = 0; c < kNumTokenClasses; ++c) {
      m.push_back(JsonNumber(t.mass[h][c]));
      u.push_back(JsonNumber(t.uniform[h][c]));
      q.push_back(t.uniform[h][c] > 0 ? JsonNumber(t.mass[h][c] / t.uniform[h][c])
                                      : nlohmann::json(nullptr));
    }
    mass.push_back(m), uni.push_back(u), ratio.push_back(q);
  }
  return {{"rows", t.rows}, {"mass", mass}, {"uniform", uni}, {"ratio", ratio}};
}

}  // namespace

nlohmann::json AnalysisToJson(const AnalysisResult& r, const AnalysisOptions& o) {
  const ModelConfig& c = r.config;
  nlohmann::json layers = nlohmann::json::array();
  for (int64_t l = 0; l < static_cast<int64_t>(r.layers.size()); ++l) {
    const LayerAnalysis& la = r.layers[l];
    nlohmann::json heads = nlohmann::json::array();
    for (int64_t h = 0; h < c.n_head; ++h) {
      const AttentionHeadStats& s = la.attention.heads[h];
      nlohmann::json head{{"head", h},
                          {"alpha", Vec(First(s.alpha, o.first_k))},
                          {"alpha_uniform", Vec(First(s.alpha_uniform, o.first_k))},
                          {"alpha_1_excess", JsonNumber(SinkExcess(s))},
                          {"sink_key", r.sink_key.empty() ? -1 : r.sink_key[l][h]},
                          {"sink_key_excess", JsonNumber(r.sink_key.empty() ? std::nan("") : r.sink_key_excess[l][h])},
                          {"first_mass", Vec(First(s.first_mass, o.first_k))},
                          {"last_key0", JsonNumber(s.last_key0)},
                          {"last_visible", s.last_visible},
                          {"entropy", JsonNumber(s.entropy)},
                          {"distance", JsonNumber(s.distance)},
                          {"sink_mass", JsonNumber(s.sink_mass)},
                          {"previous_token_text", s.diagonal.empty() ? nlohmann::json(nullptr) : JsonNumber(s.diagonal[0])},
                          {"key_norm_ratio", JsonNumber(la.geometry[h].key_norm_ratio)},
                          {"cos_q_key0", JsonNumber(la.geometry[h].cos_key0)},
                          {"cos_q_other_keys", JsonNumber(la.geometry[h].cos_key_other)}};
      if (!la.extreme.heads.empty()) {
        head["dormant_share"] = JsonNumber(la.extreme.heads[h].dormant_share);
        head["output_norm_ratio"] = JsonNumber(la.extreme.heads[h].output_norm_ratio);
      }
      if (!la.gate.empty()) {
        const GateHeadStats& g = la.gate[h];
        head["gate"] = {{"mean", JsonNumber(g.mean)}, {"std", JsonNumber(g.std)},
                        {"share_closed", JsonNumber(g.share_closed)}, {"values", g.values}};
        head["gate"]["first_mass"] =
            la.extreme.heads.empty() ? nlohmann::json(nullptr)
                                     : JsonNumber(la.extreme.heads[h].gated_first_mass);
      }
      if (!la.patterns.heads.empty()) {
        const auto& d = la.patterns.heads[h].diagonal;
        head["previous_token_score"] = JsonNumber(d[0]);
        head["duplicate_token_score"] = JsonNumber(d[1]);
        head["induction_score"] = JsonNumber(d[2]);
      }
      heads.push_back(head);
    }
    layers.push_back({{"layer", l},
                      {"heads", heads},
                      {"jsd", Vec(la.attention.jsd)},
                      {"jsd_sample_rows", la.attention.jsd_sample_rows},
                      {"head_cka", Vec(la.head_cka)},
                      {"extreme_tokens", ExtremeJson(la.extreme)},
                      {"token_classes", TokenClassesJson(la.token_classes, r.token_classes)},
                      {"output", StreamJson(la.output)}});
  }
  nlohmann::json sink_heads = nlohmann::json::array();
  for (auto [l, h] : r.sink_heads) sink_heads.push_back({{"layer", l}, {"head", h}});
  std::vector<AttentionLayerStats> all;
  for (const LayerAnalysis& la : r.layers) all.push_back(la.attention);
  nlohmann::json sink_rates = nlohmann::json::object();
  for (int64_t k = 1; k <= o.first_k; ++k) {
    // Built with += : GCC 12 warns -Wrestrict (a false positive, GCC bug 105329) on the
    // inlined "k" + std::to_string(k).
    std::string key = "k";
    key += std::to_string(k);
    sink_rates[key] = AttentionSinkRate(all, k, o.sink_eps);
  }
  return {{"format", "attnlab-analysis"},
          {"version", 1},
          {"model", {{"n_layer", c.n_layer}, {"n_head", c.n_head}, {"d_model", c.d_model},
                     {"head_dim", c.head_dim()}, {"context", c.context}, {"vocab_size", c.vocab_size},
                     {"config", nlohmann::json::parse(ModelConfigToJson(c))}}},
          {"input", {{"text_tokens", r.text_tokens}, {"window", r.window}, {"windows", r.windows},
                     {"passes_per_window", r.passes}, {"ranks", r.ranks}, {"bos", r.bos}, {"pattern_len", r.pattern_len}}},
          {"sinks", {{"eps", o.sink_eps},
                     {"rule", "alpha_1_excess = (alpha_1 - alpha_1_uniform) / (1 - alpha_1_uniform) > eps"},
                     {"alpha_1_uniform", JsonNumber(r.alpha_1_uniform)},
                     {"verdict", r.sink_verdict},
                     {"sink_rate_excess", r.sink_rate_excess},
                     {"sink_rate", sink_rates},
                     {"sink_heads", sink_heads},
                     {"sink_keys", SinkKeysJson(r, o)}}},
          {"token_classes", {{"computed", r.token_classes},
                             {"note", r.token_classes_note},
                             {"classes", TokenClassNames()},
                             {"first_k", o.first_k},
                             {"recent", o.class_recent},
                             {"rows_per_window", o.class_rows},
                             {"rule", "mass = mean over sampled rows of the attention the class "
                                      "receives; uniform = its share of each row's visible keys; "
                                      "ratio = mass / uniform"}}},
          {"embedding", StreamJson(r.embedding)},
          {"layers", layers},
          {"run", {{"seconds", r.seconds},
                  {"peak_rss_bytes", r.peak_rss_bytes},
                  {"phases", {{"attention_seconds", r.phases.attention},
                              {"attention_statistics_seconds", r.phases.attention_statistics},
                              {"weights_and_rest_seconds", r.phases.weights_and_rest},
                              {"layer_metrics_seconds", r.phases.layer_metrics}}}}}};
}

}  // namespace attnlab
