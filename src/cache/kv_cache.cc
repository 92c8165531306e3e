#include "cache/kv_cache.h"

#include <algorithm>
#include <cstring>
#include <string>

namespace attnlab {

Status internal::SequencePositions(int64_t size, int64_t T, std::vector<int64_t>* positions) {
  if (T < 1) return Status::InvalidArgument("a cache step needs at least one token");
  positions->resize(T);
  for (int64_t t = 0; t < T; ++t) (*positions)[t] = size + t;
  return Status::Ok();
}

DenseKvCache::DenseKvCache(int64_t n_layer, int64_t kv_heads, int64_t head_dim)
    : n_layer_(n_layer),
      kv_heads_(kv_heads),
      head_dim_(head_dim),
      last_layer_(n_layer),
      k_(n_layer),
      v_(n_layer) {}

Status DenseKvCache::HoldLayers(int64_t first, int64_t last) {
  if (first < 0 || last > n_layer_ || first >= last) {
    return Status::InvalidArgument("layers [" + std::to_string(first) + ", " +
                                   std::to_string(last) + ") of a " + std::to_string(n_layer_) +
                                   "-layer cache");
  }
  if (size_ > 0 || capacity_ > 0) return Status::InvalidArgument("HoldLayers after the first step");
  first_layer_ = first;
  last_layer_ = last;
  return Status::Ok();
}

void DenseKvCache::Grow(int64_t needed) {
  if (needed <= capacity_) return;
  const int64_t cap = internal::DenseCacheCapacity(needed, capacity_);
  for (auto* bufs : {&k_, &v_}) {
    std::vector<AlignedBuffer<float>> held(last_layer_ - first_layer_);
    for (int64_t l = first_layer_; l < last_layer_; ++l) held[l - first_layer_] = std::move((*bufs)[l]);
    internal::RelayoutDenseCache(&held, kv_heads_, head_dim_, size_, capacity_, cap);
    for (int64_t l = first_layer_; l < last_layer_; ++l) (*bufs)[l] = std::move(held[l - first_layer_]);
  }
  capacity_ = cap;
}

Status DenseKvCache::BeginStep(int64_t T, std::vector<int64_t>* positions) {
  ATTNLAB_RETURN_IF_ERROR(internal::SequencePositions(size_, T, positions));
  Grow(size_ + T);
  pending_ = T;
  return Status::Ok();
}

Status DenseKvCache::Update(int64_t layer, const float* k_new, const float* v_new, int64_t ld,
                            const RopeTable* rope, AttentionTensor* k_all,
                            AttentionTensor* v_all, int64_t* len_k) {
  if (layer < first_layer_ || layer >= last_layer_) {
    return Status::InvalidArgument("layer " + std::to_string(layer) + " is not held by this cache (layers " +
                                   std::to_string(first_layer_) + " to " +
                                   std::to_string(last_layer_ - 1) + ")");
  }
  const int64_t hd = head_dim_;
  for (int64_t t = 0; t < pending_; ++t) {
    for (int64_t h = 0; h < kv_heads_; ++h) {
      float* kd = k_[layer].data() + (h * capacity_ + size_ + t) * hd;
      float* vd = v_[layer].data() + (h * capacity_ + size_ + t) * hd;
      std::memcpy(kd, k_new + t * ld + h * hd, sizeof(float) * hd);
      std::memcpy(vd, v_new + t * ld + h * hd, sizeof(float) * hd);
    }
  }
  if (rope) {  // rotate the new keys at their positions (a [1, Hkv, T, hd] view into the cache)
    TensorView4<float> kv;
    kv.data = k_[layer].data() + size_ * hd;
    kv.size = kv_heads_ * capacity_ * hd - size_ * hd;
    kv.stride_head = capacity_ * hd;
    kv.stride_token = hd;
    kv.stride_batch = kv_heads_ * capacity_ * hd;
    std::vector<int64_t> pos(pending_);
    for (int64_t t = 0; t < pending_; ++t) pos[t] = size_ + t;
    ATTNLAB_RETURN_IF_ERROR(RopeForward(*rope, kv, 1, kv_heads_, pending_, pos));
  }
  const int64_t n = size_ + pending_;
  auto view = [&](const AlignedBuffer<float>& b) {
    AttentionTensor t;
    t.data = b.data();
    t.size = kv_heads_ * capacity_ * hd;
    t.stride_head = capacity_ * hd;
    t.stride_token = hd;
    t.stride_batch = kv_heads_ * capacity_ * hd;
    return t;
  };
  *k_all = view(k_[layer]);
  *v_all = view(v_[layer]);
  *len_k = n;
  return Status::Ok();
}

void DenseKvCache::EndStep() {
  size_ += pending_;
  pending_ = 0;
}

int64_t DenseKvCache::bytes() const {
  return 2 * (last_layer_ - first_layer_) * kv_heads_ * capacity_ * head_dim_ *
         static_cast<int64_t>(sizeof(float));
}

LinearAttentionCache::LinearAttentionCache(int64_t n_layer, int64_t kv_heads, int64_t head_dim)
    : n_layer_(n_layer),
      kv_heads_(kv_heads),
      head_dim_(head_dim),
      states_(n_layer, std::vector<float>(kv_heads * head_dim * (head_dim + 1), 0.0f)) {}

Status LinearAttentionCache::BeginStep(int64_t T, std::vector<int64_t>* positions) {
  ATTNLAB_RETURN_IF_ERROR(internal::SequencePositions(size_, T, positions));
  pending_ = T;
  return Status::Ok();
}

Status LinearAttentionCache::Update(int64_t, const float*, const float*, int64_t,
                                    const RopeTable*, AttentionTensor*, AttentionTensor*,
                                    int64_t*) {
  return Status::InvalidArgument(
      "a LinearAttentionCache holds linear attention's running state, not keys and values: it "
      "serves models with attention_type linear (use DenseKvCache, or MakeKvCache(config), for "
      "softmax attention)");
}

void LinearAttentionCache::EndStep() {
  size_ += pending_;
  pending_ = 0;
}

int64_t LinearAttentionCache::bytes() const {
  return n_layer_ * kv_heads_ * head_dim_ * (head_dim_ + 1) * static_cast<int64_t>(sizeof(float));
}

void LinearAttentionCache::Clear() {
  for (auto& s : states_) std::fill(s.begin(), s.end(), 0.0f);
  size_ = pending_ = 0;
}

std::unique_ptr<KvCache> MakeKvCache(const ModelConfig& c) {
  if (c.attention_type == AttentionType::kLinear) {
    return std::make_unique<LinearAttentionCache>(c.n_layer, c.kv_heads(), c.head_dim());
  }
  return std::make_unique<DenseKvCache>(c.n_layer, c.kv_heads(), c.head_dim());
}

}  // namespace attnlab
