// HalfKvCache: a dense KV cache stored in bf16 or fp16 (kv_cache.h).
#include <algorithm>
#include <cstring>

#include "cache/kv_cache.h"

namespace attnlab {

HalfKvCache::HalfKvCache(int64_t n_layer, int64_t kv_heads, int64_t head_dim, KvDtype dtype)
    : n_layer_(n_layer),
      kv_heads_(kv_heads),
      head_dim_(head_dim),
      dtype_(dtype),
      k_(n_layer),
      v_(n_layer) {}

void HalfKvCache::Grow(int64_t needed) {
  if (needed <= capacity_) return;
  const int64_t cap = internal::DenseCacheCapacity(needed, capacity_);
  internal::RelayoutDenseCache(&k_, kv_heads_, head_dim_, size_, capacity_, cap);
  internal::RelayoutDenseCache(&v_, kv_heads_, head_dim_, size_, capacity_, cap);
  capacity_ = cap;
}

Status HalfKvCache::BeginStep(int64_t T, std::vector<int64_t>* positions) {
  ATTNLAB_RETURN_IF_ERROR(internal::SequencePositions(size_, T, positions));
  Grow(size_ + T);
  pending_ = T;
  return Status::Ok();
}

Status HalfKvCache::Update(int64_t layer, const float* k_new, const float* v_new, int64_t ld,
                           const RopeTable* rope, AttentionTensor* k_all, AttentionTensor* v_all,
                           int64_t* len_k) {
  const int64_t hd = head_dim_, T = pending_;
  // New keys, [Hkv, T, hd] in fp32, rotated at their positions before rounding.
  rot_.resize(kv_heads_ * T * hd);
  for (int64_t h = 0; h < kv_heads_; ++h) {
    for (int64_t t = 0; t < T; ++t) {
      std::memcpy(rot_.data() + (h * T + t) * hd, k_new + t * ld + h * hd, sizeof(float) * hd);
    }
  }
  if (rope) {
    std::vector<int64_t> pos(T);
    for (int64_t t = 0; t < T; ++t) pos[t] = size_ + t;
    TensorView4<float> kv = ContiguousView(rot_.data(), 1, kv_heads_, T, hd);
    ATTNLAB_RETURN_IF_ERROR(RopeForward(*rope, kv, 1, kv_heads_, T, pos));
  }
  for (int64_t h = 0; h < kv_heads_; ++h) {
    for (int64_t t = 0; t < T; ++t) {
      const int64_t dst = (h * capacity_ + size_ + t) * hd;
      ConvertToKvDtype(rot_.data() + (h * T + t) * hd, hd, dtype_, k_[layer].data() + dst);
      ConvertToKvDtype(v_new + t * ld + h * hd, hd, dtype_, v_[layer].data() + dst);
    }
  }
  const int64_t n = size_ + T;
  *len_k = n;
  if (T == 1) {  // the model attends through DecodeViews
    *k_all = AttentionTensor{};
    *v_all = AttentionTensor{};
    return Status::Ok();
  }
  // Prefill: every token held, back in fp32, [1, Hkv, n, hd].
  for (auto [src, dst] : {std::pair{&k_[layer], &k32_}, {&v_[layer], &v32_}}) {
    dst->resize(kv_heads_ * n * hd);
    for (int64_t h = 0; h < kv_heads_; ++h) {
      ConvertFromKvDtype(src->data() + h * capacity_ * hd, n * hd, dtype_,
                         dst->data() + h * n * hd);
    }
  }
  *k_all = ContiguousView<const float>(k32_.data(), 1, kv_heads_, n, hd);
  *v_all = ContiguousView<const float>(v32_.data(), 1, kv_heads_, n, hd);
  return Status::Ok();
}

bool HalfKvCache::DecodeViews(int64_t layer, KvView* k, KvView* v, int64_t* len_k) const {
  if (layer < 0 || layer >= n_layer_) return false;
  for (auto [buf, view] : {std::pair{&k_[layer], k}, {&v_[layer], v}}) {
    view->data = buf->data();
    view->dtype = dtype_;
    view->size = static_cast<int64_t>(buf->size());
    view->stride_head = capacity_ * head_dim_;
    view->stride_token = head_dim_;
  }
  *len_k = size_ + pending_;
  return true;
}

void HalfKvCache::EndStep() {
  size_ += pending_;
  pending_ = 0;
}

int64_t HalfKvCache::bytes() const {
  return 2 * n_layer_ * kv_heads_ * capacity_ * head_dim_ * KvDtypeBytes(dtype_);
}

Status CheckHalfKvCacheSupported(const ModelConfig& c) {
  const char* why = nullptr;
  if (c.attention_type != AttentionType::kSoftmax) why = "its attention type is not softmax";
  else if (c.softmax != SoftmaxKind::kStandard) why = "it uses a softmax variant";
  else if (c.attention_window >= 0) why = "it uses a sliding window";
  else if (c.sink_token) why = "it has a sink token";
  else if (c.mask_first_key) why = "it masks the first key";
  else if (!c.causal) why = "it is not causal";
  if (!why) return Status::Ok();
  return Status::InvalidArgument(std::string("a bf16/fp16 KV cache needs plain causal softmax "
                                             "attention, but ") + why +
                                 " (use --kv-dtype f32)");
}

Result<std::unique_ptr<KvCache>> MakeKvCache(const ModelConfig& c, KvDtype dtype) {
  if (dtype == KvDtype::kF32) return MakeKvCache(c);
  ATTNLAB_RETURN_IF_ERROR(CheckHalfKvCacheSupported(c));
  return std::unique_ptr<KvCache>(
      std::make_unique<HalfKvCache>(c.n_layer, c.kv_heads(), c.head_dim(), dtype));
}

}  // namespace attnlab
