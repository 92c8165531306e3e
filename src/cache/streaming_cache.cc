#include "cache/streaming_cache.h"

#include <algorithm>
#include <cstring>
#include <string>

namespace attnlab {

const char* CachePolicyName(CachePolicy p) {
  switch (p) {
    case CachePolicy::kDense: return "dense";
    case CachePolicy::kWindow: return "window";
    case CachePolicy::kSinkWindow: return "sink";
    case CachePolicy::kRecompute: return "recompute";
    case CachePolicy::kH2O: return "h2o";
    case CachePolicy::kTova: return "tova";
    case CachePolicy::kSnapKV: return "snapkv";
  }
  return "?";
}

bool IsScoredPolicy(CachePolicy p) {
  return p == CachePolicy::kH2O || p == CachePolicy::kTova || p == CachePolicy::kSnapKV;
}

Result<CachePolicy> ParseCachePolicy(const std::string& name) {
  for (CachePolicy p : {CachePolicy::kDense, CachePolicy::kWindow, CachePolicy::kSinkWindow,
                        CachePolicy::kRecompute, CachePolicy::kH2O, CachePolicy::kTova,
                        CachePolicy::kSnapKV}) {
    if (name == CachePolicyName(p)) return p;
  }
  return Status::InvalidArgument("unknown cache policy '" + name +
                                 "' (expected dense, window, sink, recompute, h2o, tova or snapkv)");
}

Status ValidateStreamingConfig(const StreamingCacheConfig& sc, const ModelConfig& model) {
  if (sc.policy == CachePolicy::kDense) return Status::Ok();
  const std::string p = CachePolicyName(sc.policy);
  if (sc.window < 1) return Status::InvalidArgument("--window must be >= 1");
  if (sc.window > model.context) {
    return Status::InvalidArgument("--window " + std::to_string(sc.window) +
                                   " exceeds the model's context of " +
                                   std::to_string(model.context) +
                                   " (positions past the training context are not in-distribution)");
  }
  if (sc.policy == CachePolicy::kSinkWindow) {
    if (sc.n_sink < 1) return Status::InvalidArgument("--sinks must be >= 1 for the sink policy");
    if (sc.window <= sc.n_sink) {
      return Status::InvalidArgument("--window (" + std::to_string(sc.window) +
                                     ") must be larger than --sinks (" +
                                     std::to_string(sc.n_sink) + ")");
    }
  }
  const bool bounded = sc.policy == CachePolicy::kWindow || sc.policy == CachePolicy::kSinkWindow ||
                       IsScoredPolicy(sc.policy);
  if (IsScoredPolicy(sc.policy)) {
    if (sc.window < 2) {
      return Status::InvalidArgument("--window must be >= 2 for the " + p + " policy (it keeps " +
                                     "window - 1 tokens between steps)");
    }
    if (sc.n_sink < 0) return Status::InvalidArgument("--sinks must be >= 0");
    if (sc.policy == CachePolicy::kSnapKV) {
      if (sc.snap_window < 1) return Status::InvalidArgument("--snap-window must be >= 1");
      if (sc.snap_kernel < 1 || sc.snap_kernel % 2 == 0) {
        return Status::InvalidArgument("--snap-kernel must be odd and >= 1 (a centred pooling window)");
      }
      if (sc.n_sink >= sc.window - 1) {
        return Status::InvalidArgument("the snapkv policy needs sinks (" + std::to_string(sc.n_sink) +
                                       ") < window - 1 (" + std::to_string(sc.window - 1) +
                                       "): something must be left to choose from");
      }
    }
    const int64_t recent = sc.policy == CachePolicy::kH2O ? sc.recent : 0;
    if (sc.policy == CachePolicy::kH2O && sc.recent < -1) {
      return Status::InvalidArgument("--recent must be >= 0 (or -1: the default)");
    }
    if (sc.n_sink + std::max<int64_t>(recent, 0) > sc.window - 1) {
      return Status::InvalidArgument(
          "the " + p + " policy needs sinks (" + std::to_string(sc.n_sink) + ") + recent (" +
          std::to_string(std::max<int64_t>(recent, 0)) + ") <= window - 1 (" +
          std::to_string(sc.window - 1) + "): something must be left to choose from");
    }
    if (model.softmax != SoftmaxKind::kStandard || model.key_bias || model.sink_token ||
        model.attention_window >= 0 || model.mask_first_key || !model.causal ||
        model.attention_type != AttentionType::kSoftmax) {
      return Status::InvalidArgument(
          "the " + p + " policy scores tokens by plain softmax attention over the cache; this "
          "model's attention (a softmax variant, key bias, a sink token, a local window or a "
          "masked first key) is not that: use the window or sink policy");
    }
  }
  if (bounded && model.attention_type == AttentionType::kLinear) {
    return Status::InvalidArgument(
        "the " + p + " policy evicts keys, and a linear-attention model keeps none: its cache is "
        "a running state of constant size already; use --policy dense");
  }
  if (bounded && model.position == PositionEncoding::kLearned) {
    return Status::InvalidArgument(
        "the " + p + " policy shifts positions as tokens are evicted, which learned absolute "
        "positions cannot do (each cached key carries its position); use --policy recompute "
        "for this model");
  }
  return Status::Ok();
}

StreamingKvCache::StreamingKvCache(const StreamingCacheConfig& sc, const ModelConfig& model)
    : sc_(sc),
      n_layer_(model.n_layer),
      kv_heads_(model.kv_heads()),
      head_dim_(model.head_dim()),
      capacity_(sc.window),
      n_sink_(sc.policy == CachePolicy::kSinkWindow ? sc.n_sink : 0),
      seq_(sc.window, -1),
      k_(model.n_layer),
      k_lo_(model.n_layer),
      v_(model.n_layer) {
  const int64_t n = capacity_ * kv_heads_ * head_dim_;
  for (int64_t l = 0; l < n_layer_; ++l) {
    k_[l].Resize(n);
    v_[l].Resize(n);
    if (sc_.rope_mode == RopeCacheMode::kStoreRotated) k_lo_[l].Resize(n);
  }
  k_scratch_.Resize(n);
  v_scratch_.Resize(n);
  pending_slots_.reserve(capacity_);
}

int64_t StreamingKvCache::Physical(int64_t logical) const {
  if (logical < n_sink_) return logical;
  const int64_t ring = capacity_ - n_sink_;
  return n_sink_ + (head_ + (logical - n_sink_)) % ring;
}

void StreamingKvCache::EvictOldestRecent() {
  seq_[Physical(n_sink_)] = -1;
  head_ = (head_ + 1) % (capacity_ - n_sink_);
  --size_;
  ++evictions_;
}

Status StreamingKvCache::BeginStep(int64_t T, std::vector<int64_t>* positions) {
  const int64_t ring = capacity_ - n_sink_;
  if (T < 1) return Status::InvalidArgument("a cache step needs at least one token");
  if (size_ + T > capacity_ && T > ring) {
    return Status::InvalidArgument("a step of " + std::to_string(T) +
                                   " tokens does not fit the cache's " + std::to_string(ring) +
                                   " recent slots; feed fewer tokens per step");
  }
  const int64_t evict = std::max<int64_t>(0, size_ + T - capacity_);
  shift_pending_.resize(n_layer_, 0);
  for (int64_t e = 0; e < evict; ++e) EvictOldestRecent();
  // Mode (b): every layer's retained recent keys must move down `evict` positions; done lazily
  // in Update, per layer.
  for (int64_t l = 0; l < n_layer_; ++l) shift_pending_[l] += evict;
  pending_ = T;
  positions->resize(T);
  pending_slots_.clear();
  for (int64_t t = 0; t < T; ++t) {
    const int64_t logical = size_ + t;
    (*positions)[t] = logical;
    const int64_t slot = Physical(logical);
    pending_slots_.push_back(slot);
    seq_[slot] = arrivals_ + t;
  }
  // One new query that sees every key: physical order is as good as logical order.
  chunk_logical_ = T > 1;
  return Status::Ok();
}

Status StreamingKvCache::Update(int64_t layer, const float* k_new, const float* v_new, int64_t ld,
                                const RopeTable* rope, AttentionTensor* k_all,
                                AttentionTensor* v_all, int64_t* len_k) {
  const int64_t hd = head_dim_, H = kv_heads_, row = H * hd;
  const bool stored_rotated = rope && sc_.rope_mode == RopeCacheMode::kStoreRotated;
  float* K = k_[layer].data();
  float* V = v_[layer].data();
  std::vector<double> tmp(hd);
  // Mode (b): re-rotate the recent keys that moved down (exact: rotated in double from hi + lo).
  if (stored_rotated && shift_pending_[layer] > 0) {
    float* lo = k_lo_[layer].data();
    for (int64_t logical = n_sink_; logical < size_; ++logical) {
      const int64_t slot = Physical(logical);
      for (int64_t h = 0; h < H; ++h) {
        float* hi = K + slot * row + h * hd;
        float* lw = lo + slot * row + h * hd;
        for (int64_t d = 0; d < hd; ++d) tmp[d] = static_cast<double>(hi[d]) + lw[d];
        RopeRotateVector(*rope, tmp.data(), -shift_pending_[layer]);
        for (int64_t d = 0; d < hd; ++d) {
          hi[d] = static_cast<float>(tmp[d]);
          lw[d] = static_cast<float>(tmp[d] - hi[d]);
        }
      }
    }
  }
  if (!shift_pending_.empty()) shift_pending_[layer] = 0;
  // Store the new tokens.
  for (int64_t t = 0; t < pending_; ++t) {
    const int64_t slot = pending_slots_[t];
    for (int64_t h = 0; h < H; ++h) {
      const float* ks = k_new + t * ld + h * hd;
      std::memcpy(V + slot * row + h * hd, v_new + t * ld + h * hd, sizeof(float) * hd);
      float* kd = K + slot * row + h * hd;
      if (stored_rotated) {
        // Rotate at the token's position in double: rotation by `position` from position 0
        // (the table's factor A is applied as RopeForward does).
        for (int64_t d = 0; d < hd; ++d) tmp[d] = ks[d];
        const double a = rope->AttentionFactor();
        for (int64_t d = 0; d < rope->rotary_dim(); ++d) tmp[d] *= a;
        RopeRotateVector(*rope, tmp.data(), size_ + t);
        float* lw = k_lo_[layer].data() + slot * row + h * hd;
        for (int64_t d = 0; d < hd; ++d) {
          kd[d] = static_cast<float>(tmp[d]);
          lw[d] = static_cast<float>(tmp[d] - kd[d]);
        }
      } else {
        std::memcpy(kd, ks, sizeof(float) * hd);
      }
    }
  }
  const int64_t n = size_ + pending_;
  auto view = [&](const float* base) {
    AttentionTensor v;
    v.data = base;
    v.size = capacity_ * row;
    v.stride_token = row;
    v.stride_head = hd;
    v.stride_batch = capacity_ * row;
    return v;
  };
  const bool rotate_now = rope && !stored_rotated;
  if (!chunk_logical_) {
    // Physical order: slots [0, n) are exactly the retained tokens (the ring only wraps when
    // full). Mode (a) rotates each slot's key to its logical position in the scratch buffer.
    if (rotate_now) {
      std::vector<int64_t> pos(n);
      for (int64_t logical = 0; logical < n; ++logical) pos[Physical(logical)] = logical;
      std::memcpy(k_scratch_.data(), K, sizeof(float) * n * row);
      TensorView4<float> kv;
      kv.data = k_scratch_.data(), kv.size = capacity_ * row;
      kv.stride_token = row, kv.stride_head = hd, kv.stride_batch = capacity_ * row;
      ATTNLAB_RETURN_IF_ERROR(RopeForward(*rope, kv, 1, H, n, pos));
      *k_all = view(k_scratch_.data());
    } else {
      *k_all = view(K);
    }
    *v_all = view(V);
  } else {
    // Logical order (several new queries: the causal mask needs the order).
    for (int64_t logical = 0; logical < n; ++logical) {
      const int64_t slot = Physical(logical);
      std::memcpy(k_scratch_.data() + logical * row, K + slot * row, sizeof(float) * row);
      std::memcpy(v_scratch_.data() + logical * row, V + slot * row, sizeof(float) * row);
    }
    if (rotate_now) {
      std::vector<int64_t> pos(n);
      for (int64_t i = 0; i < n; ++i) pos[i] = i;
      TensorView4<float> kv;
      kv.data = k_scratch_.data(), kv.size = capacity_ * row;
      kv.stride_token = row, kv.stride_head = hd, kv.stride_batch = capacity_ * row;
      ATTNLAB_RETURN_IF_ERROR(RopeForward(*rope, kv, 1, H, n, pos));
    }
    *k_all = view(k_scratch_.data());
    *v_all = view(v_scratch_.data());
  }
  *len_k = n;
  return Status::Ok();
}

void StreamingKvCache::EndStep() {
  size_ += pending_;
  arrivals_ += pending_;
  pending_ = 0;
}

int64_t StreamingKvCache::bytes() const {
  int64_t b = 0;
  for (const auto& x : k_) b += static_cast<int64_t>(x.size()) * 4;
  for (const auto& x : k_lo_) b += static_cast<int64_t>(x.size()) * 4;
  for (const auto& x : v_) b += static_cast<int64_t>(x.size()) * 4;
  return b + static_cast<int64_t>(k_scratch_.size() + v_scratch_.size()) * 4;
}

std::vector<int64_t> StreamingKvCache::RetainedTokens() const {
  std::vector<int64_t> out;
  for (int64_t logical = 0; logical < size_; ++logical) out.push_back(seq_[Physical(logical)]);
  return out;
}

std::vector<double> StreamingKvCache::StoredKey(int64_t layer, int64_t h, int64_t slot) const {
  std::vector<double> out(head_dim_);
  const int64_t off = Physical(slot) * kv_heads_ * head_dim_ + h * head_dim_;
  for (int64_t d = 0; d < head_dim_; ++d) {
    out[d] = static_cast<double>(k_[layer][off + d]) +
             (k_lo_[layer].size() ? static_cast<double>(k_lo_[layer][off + d]) : 0.0);
  }
  return out;
}

}  // namespace attnlab
