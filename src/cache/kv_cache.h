// Key/value caches for incremental inference (prefill, then decode one token at a time).
//
// The model hands each layer's NEW keys to the cache unrotated; the cache decides where keys live
// and at which positions they are rotated, which is what lets streaming policies (sinks + window,
// positions as cache indices) plug in without touching the model. The contract, per Forward:
//   BeginStep(T, &positions)  -> positions of the T new tokens (RoPE / learned positions)
//   Update(layer, k_new, v_new, ...) for every layer -> views of every key and value to attend
//       over, in logical order, the T new tokens last (so the engine's bottom-right causal mask
//       applies unchanged)
//   EndStep()
#ifndef ATTNLAB_CACHE_KV_CACHE_H_
#define ATTNLAB_CACHE_KV_CACHE_H_

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <type_traits>
#include <vector>

#include "attnlab/attention.h"
#include "attnlab/attention_decode.h"
#include "attnlab/model_config.h"
#include "attnlab/rope.h"
#include "attnlab/status.h"
#include "core/aligned_buffer.h"

namespace attnlab {

class KvCache {
 public:
  virtual ~KvCache() = default;
  // Tokens currently held (before BeginStep adds new ones).
  virtual int64_t size() const = 0;
  virtual Status BeginStep(int64_t T, std::vector<int64_t>* positions) = 0;
  // k_new, v_new: [T, Hkv, hd] rows with row stride ld (floats). rope: null for models without
  // RoPE. On return *k_all and *v_all view [1, Hkv, *len_k, hd].
  virtual Status Update(int64_t layer, const float* k_new, const float* v_new, int64_t ld,
                        const RopeTable* rope, AttentionTensor* k_all, AttentionTensor* v_all,
                        int64_t* len_k) = 0;
  virtual void EndStep() = 0;
  // Bytes held by the cache (for memory reports).
  virtual int64_t bytes() const = 0;
  // Caches that choose what to keep by the attention it receives (scored_cache.h): after each
  // layer's attention over the views Update handed out, the model passes the new rows' queries
  // q ([1, heads_q, T, head_dim], after RoPE) and their log-sum-exp lse ([heads_q, T]), so
  // P[i, j] = exp(scale q_i . k_j - lse_i). Called between Update and the next layer's Update.
  virtual bool WantsAttention() const { return false; }
  virtual Status ObserveAttention(int64_t layer, const AttentionParams& params,
                                  const AttentionTensor& q, int64_t T, std::span<const float> lse) {
    (void)layer, (void)params, (void)q, (void)T, (void)lse;
    return Status::Ok();
  }
  // 16-bit caches (HalfKvCache): on a one-token step Update stores the token and hands out
  // EMPTY views (data == nullptr); the model then attends with AttentionDecode over these views
  // of every token held, in the cache's dtype. false for caches that always hand out fp32 views.
  virtual bool DecodeViews(int64_t layer, KvView* k, KvView* v, int64_t* len_k) const {
    (void)layer, (void)k, (void)v, (void)len_k;
    return false;
  }
};

namespace internal {

// The two dense caches (fp32 DenseKvCache, 16-bit HalfKvCache) share their growth and their
// positions: one buffer per layer for K and one for V, each [kv_heads, capacity, head_dim].

// Capacity for `needed` tokens: at least 64, doubling, so appends are amortised O(1).
inline int64_t DenseCacheCapacity(int64_t needed, int64_t capacity) {
  return std::max<int64_t>(needed, std::max<int64_t>(64, 2 * capacity));
}

// Re-lays every buffer from capacity `old_cap` to `new_cap` (> old_cap), keeping the first
// `size` tokens of each head. Buffer: AlignedBuffer<T> or std::vector<T> (constructible from
// a count, data()).
template <class Buffer>
void RelayoutDenseCache(std::vector<Buffer>* buffers, int64_t kv_heads, int64_t head_dim,
                        int64_t size, int64_t old_cap, int64_t new_cap) {
  using T = std::remove_reference_t<decltype(*(*buffers)[0].data())>;
  for (Buffer& buf : *buffers) {
    Buffer fresh(kv_heads * new_cap * head_dim);
    for (int64_t h = 0; h < kv_heads && size > 0; ++h) {
      std::memcpy(fresh.data() + h * new_cap * head_dim, buf.data() + h * old_cap * head_dim,
                  sizeof(T) * size * head_dim);
    }
    buf = std::move(fresh);
  }
}

// positions = size, size + 1, ..., size + T - 1 (sequence indices). InvalidArgument for T < 1.
Status SequencePositions(int64_t size, int64_t T, std::vector<int64_t>* positions);

}  // namespace internal

// Keeps every token: position = index in the sequence, keys rotated once on insertion.
class DenseKvCache : public KvCache {
 public:
  DenseKvCache(int64_t n_layer, int64_t kv_heads, int64_t head_dim);
  int64_t size() const override { return size_; }
  Status BeginStep(int64_t T, std::vector<int64_t>* positions) override;
  Status Update(int64_t layer, const float* k_new, const float* v_new, int64_t ld,
                const RopeTable* rope, AttentionTensor* k_all, AttentionTensor* v_all,
                int64_t* len_k) override;
  void EndStep() override;
  int64_t bytes() const override;
  void Clear() { size_ = 0; }
  // Only layers [first, last) will be updated: the others get no storage (an Update of one is
  // an error). For forwards that run a group of layers (Gpt::set_forward_start). Call before the
  // first step.
  Status HoldLayers(int64_t first, int64_t last);
  // Storage for `tokens` tokens at once (no doubling copies when the length is known).
  void Reserve(int64_t tokens) { Grow(tokens); }

 private:
  void Grow(int64_t needed);
  int64_t n_layer_, kv_heads_, head_dim_;
  int64_t first_layer_ = 0, last_layer_;  // the layers held
  int64_t size_ = 0, pending_ = 0, capacity_ = 0;
  // Per layer: [kv_heads, capacity, head_dim].
  std::vector<AlignedBuffer<float>> k_, v_;
};

// Linear attention's cache is its running state (linear_attention.h): per layer S' = [S | z],
// [kv_heads, head_dim, head_dim + 1] floats, the same size after 10 tokens or 10^6. Positions
// are sequence indices (as DenseKvCache), so RoPE rotates each new key once, before phi, and the
// model folds it into the state (Gpt::Forward); there are no keys to hand out, so Update, the
// softmax layers' entry point, is refused.
class LinearAttentionCache : public KvCache {
 public:
  LinearAttentionCache(int64_t n_layer, int64_t kv_heads, int64_t head_dim);
  int64_t size() const override { return size_; }
  Status BeginStep(int64_t T, std::vector<int64_t>* positions) override;
  Status Update(int64_t layer, const float* k_new, const float* v_new, int64_t ld,
                const RopeTable* rope, AttentionTensor* k_all, AttentionTensor* v_all,
                int64_t* len_k) override;
  void EndStep() override;
  int64_t bytes() const override;
  // Layer `layer`'s state, [kv_heads, head_dim, head_dim + 1]; updated in place by the model.
  std::span<float> State(int64_t layer) { return states_[layer]; }
  void Clear();

 private:
  int64_t n_layer_, kv_heads_, head_dim_;
  int64_t size_ = 0, pending_ = 0;
  std::vector<std::vector<float>> states_;
};

// Keeps every token like DenseKvCache, in bf16 or fp16 (half the bytes per decode step and half
// the memory; attention_decode.h). Keys are rotated in fp32 at insertion, then rounded. A
// one-token step leaves the attention to AttentionDecode (KvCache::DecodeViews); a longer step
// (prefill) gets fp32 views of the whole cache converted back, so prefill and decode attend to
// the same rounded values. Only plain causal softmax attention can use it
// (CheckHalfKvCacheSupported): the decode kernel has no window, sink or first-key masks.
class HalfKvCache : public KvCache {
 public:
  HalfKvCache(int64_t n_layer, int64_t kv_heads, int64_t head_dim, KvDtype dtype);
  int64_t size() const override { return size_; }
  Status BeginStep(int64_t T, std::vector<int64_t>* positions) override;
  Status Update(int64_t layer, const float* k_new, const float* v_new, int64_t ld,
                const RopeTable* rope, AttentionTensor* k_all, AttentionTensor* v_all,
                int64_t* len_k) override;
  void EndStep() override;
  int64_t bytes() const override;
  bool DecodeViews(int64_t layer, KvView* k, KvView* v, int64_t* len_k) const override;
  KvDtype dtype() const { return dtype_; }

 private:
  void Grow(int64_t needed);
  int64_t n_layer_, kv_heads_, head_dim_;
  KvDtype dtype_;
  int64_t size_ = 0, pending_ = 0, capacity_ = 0;
  // Per layer [kv_heads, capacity, head_dim], 64-byte aligned: a std::vector of this size comes
  // from mmap at a page + 16 bytes, so every 128-byte row (head_dim 64) crossed three cache
  // lines; aligned, the decode step reading 32k keys from DRAM took 5-15% less time.
  std::vector<AlignedBuffer<uint16_t>> k_, v_;
  std::vector<float> k32_, v32_, rot_;          // scratch: fp32 copies for prefill, new keys
};

// OK when `c` can decode with a HalfKvCache; else why not.
Status CheckHalfKvCacheSupported(const ModelConfig& c);

// A cache in `dtype` for `c`: MakeKvCache(c) for f32, else a HalfKvCache (checked).
Result<std::unique_ptr<KvCache>> MakeKvCache(const ModelConfig& c, KvDtype dtype);

// The cache a model decodes with when no streaming policy is asked for: LinearAttentionCache for
// attention_type linear, DenseKvCache otherwise.
std::unique_ptr<KvCache> MakeKvCache(const ModelConfig& c);

}  // namespace attnlab

#endif  // ATTNLAB_CACHE_KV_CACHE_H_
