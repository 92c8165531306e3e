#include "cache/scored_cache.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "engine/gemm.h"
#include "engine/kernel_table.h"

namespace attnlab {

int64_t DefaultH2oRecent(const StreamingCacheConfig& sc) {
  return std::max<int64_t>(0, (sc.window - 1 - sc.n_sink) / 2);
}

ScoredKvCache::ScoredKvCache(const StreamingCacheConfig& sc, const ModelConfig& model)
    : sc_(sc),
      n_layer_(model.n_layer),
      kv_heads_(model.kv_heads()),
      head_dim_(model.head_dim()),
      n_head_(model.n_head),
      context_(model.context),
      keep_(sc.window - 1),
      n_sink_(sc.n_sink),
      recent_(sc.policy == CachePolicy::kH2O ? (sc.recent >= 0 ? sc.recent : DefaultH2oRecent(sc))
                                              : 0),
      k_(model.n_layer),
      v_(model.n_layer),
      order_(model.n_layer, std::vector<std::vector<int32_t>>(model.kv_heads())),
      seq_(model.n_layer, std::vector<std::vector<int64_t>>(model.kv_heads())),
      score_(model.n_layer, std::vector<std::vector<double>>(model.kv_heads())) {
  Grow(sc.window);
}

void ScoredKvCache::Grow(int64_t slots) {
  if (slots <= cap_) return;
  const int64_t hd = head_dim_, H = kv_heads_;
  for (int64_t l = 0; l < n_layer_; ++l) {
    for (std::vector<float>* buf : {&k_[l], &v_[l]}) {
      std::vector<float> fresh(H * slots * hd, 0.0f);
      for (int64_t g = 0; g < H && cap_ > 0; ++g) {
        std::memcpy(fresh.data() + g * slots * hd, buf->data() + g * cap_ * hd,
                    sizeof(float) * cap_ * hd);
      }
      *buf = std::move(fresh);
    }
    for (int64_t g = 0; g < H; ++g) {
      seq_[l][g].resize(slots, -1);
      score_[l][g].resize(slots, 0.0);
    }
  }
  k_scratch_.assign(H * slots * hd, 0.0f);
  cap_ = slots;
}

int64_t ScoredKvCache::NewestPosition() const {
  return std::min(arrivals_ + pending_ - 1, context_ - 1);
}

int64_t ScoredKvCache::KeyPosition(int64_t rank, int64_t arrival) const {
  if (sc_.scored_positions == StreamingCacheConfig::ScoredPositions::kRank) return rank;
  return std::max<int64_t>(0, NewestPosition() - (arrivals_ + pending_ - 1 - arrival));
}

Status ScoredKvCache::BeginStep(int64_t T, std::vector<int64_t>* positions) {
  if (T < 1) return Status::InvalidArgument("a cache step needs at least one token");
  if (size_ + T > context_) {
    return Status::InvalidArgument("a step of " + std::to_string(T) + " tokens on " +
                                   std::to_string(size_) + " kept ones exceeds the context of " +
                                   std::to_string(context_) + "; feed fewer tokens per step");
  }
  Grow(size_ + T);
  pending_ = T;
  positions->resize(T);
  for (int64_t t = 0; t < T; ++t) (*positions)[t] = KeyPosition(size_ + t, arrivals_ + t);
  return Status::Ok();
}

Status ScoredKvCache::Update(int64_t layer, const float* k_new, const float* v_new, int64_t ld,
                             const RopeTable* rope, AttentionTensor* k_all, AttentionTensor* v_all,
                             int64_t* len_k) {
  if (layer < 0 || layer >= n_layer_) {
    return Status::InvalidArgument("scored cache: layer " + std::to_string(layer) + " of " +
                                   std::to_string(n_layer_));
  }
  const int64_t hd = head_dim_, H = kv_heads_;
  float* K = k_[layer].data();
  float* V = v_[layer].data();
  // The step's tokens join at slots [size, size + T) of every head, in order: the slots
  // [0, n) are all occupied (EndStep keeps them compact), so the new keys come last and
  // attention's end-aligned causal mask holds within the step. Attention does not depend on
  // the order of the older keys (their positions are in the rotation), so they stay where
  // they are and the values are read in place.
  const int64_t n = size_ + pending_;
  for (int64_t g = 0; g < H; ++g) {
    for (int64_t t = 0; t < pending_; ++t) {
      const int32_t slot = static_cast<int32_t>(size_ + t);
      order_[layer][g].push_back(slot);
      seq_[layer][g][slot] = arrivals_ + t;
      score_[layer][g][slot] = 0.0;
      std::memcpy(K + (g * cap_ + slot) * hd, k_new + t * ld + g * hd, sizeof(float) * hd);
      std::memcpy(V + (g * cap_ + slot) * hd, v_new + t * ld + g * hd, sizeof(float) * hd);
    }
  }
  // Keys rotated into the scratch, each to its own position (its rank in the head's logical
  // order for kRank).
  for (int64_t g = 0; g < H; ++g) {
    std::memcpy(k_scratch_.data() + g * cap_ * hd, K + g * cap_ * hd, sizeof(float) * n * hd);
  }
  TensorView4<float> kv;
  kv.data = k_scratch_.data(), kv.size = static_cast<int64_t>(k_scratch_.size());
  kv.stride_token = hd, kv.stride_head = cap_ * hd, kv.stride_batch = H * cap_ * hd;
  if (rope) {
    pos_.resize(n);
    for (int64_t g = 0; g < H; ++g) {
      const std::vector<int32_t>& ord = order_[layer][g];
      for (int64_t i = 0; i < n; ++i) pos_[ord[i]] = KeyPosition(i, seq_[layer][g][ord[i]]);
      TensorView4<float> head = kv;
      head.data = k_scratch_.data() + g * cap_ * hd;
      head.size = cap_ * hd;
      ATTNLAB_RETURN_IF_ERROR(RopeForward(*rope, head, 1, 1, n, pos_));
    }
  }
  auto view = [&](const float* base) {
    AttentionTensor a;
    a.data = base, a.size = H * cap_ * hd;
    a.stride_token = hd, a.stride_head = cap_ * hd, a.stride_batch = H * cap_ * hd;
    return a;
  };
  *k_all = view(k_scratch_.data());
  *v_all = view(V);
  *len_k = n;
  scratch_layer_ = layer;
  return Status::Ok();
}

Status ScoredKvCache::ObserveAttention(int64_t layer, const AttentionParams& params,
                                       const AttentionTensor& q, int64_t T,
                                       std::span<const float> lse) {
  const int64_t hd = head_dim_, H = n_head_, Hkv = kv_heads_, group = H / Hkv;
  const int64_t n = size_ + pending_;
  if (layer != scratch_layer_ || T != pending_ || static_cast<int64_t>(lse.size()) < H * T) {
    return Status::Internal("scored cache: attention of layer " + std::to_string(layer) +
                            " (" + std::to_string(T) + " rows) does not match the step (layer " +
                            std::to_string(scratch_layer_) + ", " + std::to_string(pending_) +
                            " new tokens)");
  }
  // P[i, j] = 2^(s2[i, j] - lse_i log2 e) with s2 = scale log2(e) q_i . k_j: one fp32 GEMM per
  // head for the scores (base 2), the kernels' exp2 for the probabilities, summed over the rows
  // in fp32 into w[h][j] (H2O: the step's rows; TOVA: the last row, the current query).
  constexpr double kLog2e = 1.4426950408889634074;
  const double scale = params.scale ? *params.scale : 1.0 / std::sqrt(static_cast<double>(hd));
  // The rows whose attention scores: H2O every row of the step, TOVA the last (the current
  // query), SnapKV the observation window (the step's last snap_window rows).
  const int64_t first_row = sc_.policy == CachePolicy::kTova     ? T - 1
                            : sc_.policy == CachePolicy::kSnapKV ? std::max<int64_t>(0, T - sc_.snap_window)
                                                                 : 0;
  const int64_t rows = T - first_row;
  w_.assign(H * n, 0.0f);
  s2_.resize(rows * n);
  const internal::RowStatsTable& kern = internal::ActiveKernels().row_stats;
  for (int64_t h = 0; h < H; ++h) {
    const int64_t g = h / group;
    internal::Sgemm(internal::Trans::kNo, internal::Trans::kYes, rows, n, hd,
                    static_cast<float>(scale * kLog2e), q.at(0, h, first_row), q.stride_token,
                    k_scratch_.data() + g * cap_ * hd, hd, 0.0f, s2_.data(), n);
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t i = first_row + r, visible = n - T + i + 1;  // causal within the step
      kern.exp2_accumulate(s2_.data() + r * n, visible, static_cast<float>(lse[h * T + i] * kLog2e),
                           w_.data() + h * n);
    }
  }
  if (sc_.policy == CachePolicy::kTova) {  // the mean over every head of the layer
    mean_.assign(n, 0.0);
    for (int64_t h = 0; h < H; ++h) {
      for (int64_t j = 0; j < n; ++j) mean_[j] += w_[h * n + j];
    }
    for (double& m : mean_) m /= static_cast<double>(H);
  }
  for (int64_t g = 0; g < Hkv; ++g) {  // attention's key j is slot j
    std::vector<double>& sc = score_[layer][g];
    for (int64_t j = 0; j < n; ++j) {
      if (sc_.policy == CachePolicy::kTova) {
        sc[j] = mean_[j];
      } else {  // H2O (accumulated) and SnapKV (this step's votes): the group's heads add up
        double s = 0;
        for (int64_t h = g * group; h < (g + 1) * group; ++h) s += w_[h * n + j];
        sc[j] = sc_.policy == CachePolicy::kSnapKV ? s : sc[j] + s;
      }
    }
  }
  return Status::Ok();
}

int64_t ScoredKvCache::Victim(int64_t layer, int64_t head, int64_t n) const {
  // Candidates: logical [n_sink, n - recent); the lowest score, the oldest on ties.
  const int64_t lo = std::min(n_sink_, n - 1), hi = std::max(lo + 1, n - recent_);
  const std::vector<int32_t>& ord = order_[layer][head];
  const std::vector<double>& sc = score_[layer][head];
  int64_t best = lo;
  for (int64_t i = lo + 1; i < hi; ++i) {
    if (sc[ord[i]] < sc[ord[best]]) best = i;
  }
  return best;
}

void ScoredKvCache::Remove(int64_t l, int64_t g, int64_t i, int64_t len) {
  std::vector<int32_t>& ord = order_[l][g];
  const int32_t slot = ord[i], last = static_cast<int32_t>(len - 1);
  ord.erase(ord.begin() + i);
  if (slot != last) {  // the last slot moves into the hole: slots stay compact
    const int64_t hd = head_dim_;
    float* K = k_[l].data() + g * cap_ * hd;
    float* V = v_[l].data() + g * cap_ * hd;
    std::memcpy(K + slot * hd, K + last * hd, sizeof(float) * hd);
    std::memcpy(V + slot * hd, V + last * hd, sizeof(float) * hd);
    seq_[l][g][slot] = seq_[l][g][last];
    score_[l][g][slot] = score_[l][g][last];
    *std::find(ord.begin(), ord.end(), last) = slot;
  }
  seq_[l][g][last] = -1;
  score_[l][g][last] = 0.0;
}

std::vector<int64_t> ScoredKvCache::SnapVictims(int64_t l, int64_t g, int64_t n, int64_t drop) {
  // Candidates: logical [n_sink, n - obs), obs = the step's newest tokens the observation window
  // covers (kept, as the paper keeps the window), as many as the budget allows.
  const int64_t obs = std::min({pending_, sc_.snap_window, keep_ - n_sink_});
  const int64_t lo = n_sink_, hi = n - obs, k = sc_.snap_kernel;
  const std::vector<int32_t>& ord = order_[l][g];
  const std::vector<double>& sc = score_[l][g];
  // Average pooling (torch's avg_pool1d, padding k / 2 with zeros counted): pooled_i = (1/k)
  // sum of the votes of candidates i - k/2 .. i + k/2 (summed directly, so equal windows tie
  // exactly and the oldest leaves first).
  const int64_t m = hi - lo, r = k / 2;
  std::vector<std::pair<double, int64_t>>& pooled = pooled_;
  pooled.resize(m);
  votes_.resize(m);
  for (int64_t i = lo; i < hi; ++i) votes_[i - lo] = sc[ord[i]];
  const double* v = votes_.data();
  for (int64_t i = 0; i < m; ++i) {
    double sum = 0;
    for (int64_t j = std::max<int64_t>(0, i - r), e = std::min(m - 1, i + r); j <= e; ++j) sum += v[j];
    pooled[i] = {sum / static_cast<double>(k), lo + i};
  }
  // The lowest pooled votes leave (the oldest on ties): one-token steps drop one, by a scan.
  std::vector<int64_t> out;
  const int64_t d = std::min(drop, m);
  if (d == 1) {
    out.push_back(std::min_element(pooled.begin(), pooled.end())->second);
  } else if (d > 1) {
    std::partial_sort(pooled.begin(), pooled.begin() + d, pooled.end());
    for (int64_t e = 0; e < d; ++e) out.push_back(pooled[e].second);
  }
  std::sort(out.rbegin(), out.rend());  // removed from the back: indices stay valid
  return out;
}

void ScoredKvCache::EndStep() {
  const int64_t n = size_ + pending_;
  const int64_t drop = std::max<int64_t>(0, n - keep_);
  for (int64_t l = 0; l < n_layer_ && drop > 0; ++l) {
    if (sc_.policy == CachePolicy::kSnapKV) {  // one selection per KV head for the whole step
      for (int64_t g = 0; g < kv_heads_; ++g) {
        int64_t len = n;
        for (int64_t i : SnapVictims(l, g, n, drop)) Remove(l, g, i, len--);
      }
      continue;
    }
    for (int64_t e = 0; e < drop; ++e) {
      const int64_t len = n - e;
      // TOVA decides once per layer (the scores are the heads' mean, the same in every KV
      // head); H2O per KV head.
      const int64_t shared = sc_.policy == CachePolicy::kTova ? Victim(l, 0, len) : -1;
      for (int64_t g = 0; g < kv_heads_; ++g) Remove(l, g, shared >= 0 ? shared : Victim(l, g, len), len);
    }
  }
  evictions_ += drop;
  size_ = n - drop;
  arrivals_ += pending_;
  pending_ = 0;
}

int64_t ScoredKvCache::bytes() const {
  int64_t b = 0;
  for (const auto& x : k_) b += static_cast<int64_t>(x.size()) * 4;
  for (const auto& x : v_) b += static_cast<int64_t>(x.size()) * 4;
  b += static_cast<int64_t>(k_scratch_.size()) * 4;
  // Scores and arrival numbers: 16 bytes per slot and head.
  return b + n_layer_ * kv_heads_ * cap_ * 16;
}

std::vector<int64_t> ScoredKvCache::RetainedTokens(int64_t layer, int64_t head) const {
  std::vector<int64_t> out;
  for (int32_t slot : order_[layer][head]) out.push_back(seq_[layer][head][slot]);
  return out;
}

std::vector<double> ScoredKvCache::Scores(int64_t layer, int64_t head) const {
  std::vector<double> out;
  for (int32_t slot : order_[layer][head]) out.push_back(score_[layer][head][slot]);
  return out;
}

std::unique_ptr<KvCache> MakeBoundedKvCache(const StreamingCacheConfig& sc,
                                            const ModelConfig& model) {
  if (IsScoredPolicy(sc.policy)) {
    return std::make_unique<ScoredKvCache>(sc, model);
  }
  return std::make_unique<StreamingKvCache>(sc, model);
}

}  // namespace attnlab
