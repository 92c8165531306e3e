// KV caches that keep a bounded number of tokens, for generation and evaluation far beyond the
// training context at constant memory (StreamingLLM, Xiao et al. 2023, arXiv:2309.17453).
//
// Policies (capacity W tokens in total):
//   kWindow      the W most recent tokens; the oldest is evicted
//   kSinkWindow  the first S tokens stay pinned ("attention sinks"), plus the W - S most recent
// (Dense: DenseKvCache in kv_cache.h. Window-with-recompute re-encodes the last W tokens from
// scratch for every new token; it needs no cache and lives in the evaluator.)
//
// Positions are cache indices, as in StreamingLLM: the token in logical slot i of the retained
// sequence (sinks first, then the recent tokens oldest first) has position i, so a new token
// always sits at position <= W - 1, inside the training context. When a recent token is evicted
// every younger token moves down one position. For RoPE that changes the keys' rotation; two
// modes, which give the same logits:
//   kRotateAtAttention  (a) keys are stored before rotation; at every step the retained keys are
//                       rotated to their current positions into a scratch buffer
//   kStoreRotated       (b) keys are stored rotated; on each eviction every retained recent key is
//                       re-rotated by -1 position. Keys are kept as float pairs (hi + lo, about 48
//                       bits) and rotated in double, so 10^5 re-rotations leave no drift; the
//                       kernel reads hi.
// Learned absolute positions cannot be shifted (a key's position is baked into the residual
// stream that produced it): Create refuses such a model for these policies and says to use the
// recompute baseline instead.
//
// Storage is a ring buffer per layer: sink slots [0, S), recent slots [S, W) used circularly;
// eviction moves an index, never data, and nothing is allocated per token once the cache is full.
// Attention reads the slots in physical order when that is equivalent (one new query that sees
// every retained key: softmax does not care about order), else (chunks of several tokens) a
// logical-order copy.
#ifndef ATTNLAB_CACHE_STREAMING_CACHE_H_
#define ATTNLAB_CACHE_STREAMING_CACHE_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "attnlab/model_config.h"
#include "core/aligned_buffer.h"
#include "cache/kv_cache.h"

namespace attnlab {

// kH2O, kTova and kSnapKV choose by attention: scored_cache.h.
enum class CachePolicy { kDense, kWindow, kSinkWindow, kRecompute, kH2O, kTova, kSnapKV };
enum class RopeCacheMode { kRotateAtAttention, kStoreRotated };

struct StreamingCacheConfig {
  CachePolicy policy = CachePolicy::kSinkWindow;
  int64_t n_sink = 4;    // pinned tokens (kSinkWindow: >= 1; kH2O, kTova: >= 0, 0 = none)
  int64_t window = 256;  // W: tokens held in total, sinks included (the scored policies: the
                         // most keys a query sees; W - 1 held between steps)
  int64_t recent = -1;   // kH2O: the most recent tokens that always stay (-1: DefaultH2oRecent)
  int64_t snap_window = 32;  // kSnapKV: the observation window, the step's last rows that vote
  int64_t snap_kernel = 5;   // kSnapKV: the average-pooling kernel over the votes (odd)
  // kH2O, kTova: how kept keys are positioned (scored_cache.h). kDistance (default): each key
  // keeps its distance to the newest token, as far as the context reaches (the papers' original
  // positions, inside the trained range); kRank: the i-th kept token sits at position i.
  enum class ScoredPositions { kDistance, kRank } scored_positions = ScoredPositions::kDistance;
  RopeCacheMode rope_mode = RopeCacheMode::kRotateAtAttention;
};

// "dense", "window", "sink", "recompute", "h2o", "tova", "snapkv".
const char* CachePolicyName(CachePolicy p);
Result<CachePolicy> ParseCachePolicy(const std::string& name);

// True for kH2O, kTova and kSnapKV (scored_cache.h).
bool IsScoredPolicy(CachePolicy p);
// Checks the config against the model: window in [1, context], sinks < window (kSinkWindow),
// positions shiftable (RoPE or none) for the bounded policies; for the scored ones also a window
// of at least 2, sinks + recent <= window - 1 (kSnapKV: sinks < window - 1, an observation
// window >= 1 and an odd kernel >= 1), and plain softmax attention (scored_cache.h).
Status ValidateStreamingConfig(const StreamingCacheConfig& sc, const ModelConfig& model);

class StreamingKvCache : public KvCache {
 public:
  // REQUIRES: ValidateStreamingConfig ok; policy kWindow or kSinkWindow.
  StreamingKvCache(const StreamingCacheConfig& sc, const ModelConfig& model);

  int64_t size() const override { return size_; }
  Status BeginStep(int64_t T, std::vector<int64_t>* positions) override;
  Status Update(int64_t layer, const float* k_new, const float* v_new, int64_t ld,
                const RopeTable* rope, AttentionTensor* k_all, AttentionTensor* v_all,
                int64_t* len_k) override;
  void EndStep() override;
  int64_t bytes() const override;

  // The sequence numbers (0, 1, 2, ... in order of arrival) of the retained tokens, in logical
  // order (what a dense forward "over exactly the retained tokens" must see).
  std::vector<int64_t> RetainedTokens() const;
  int64_t evictions() const { return evictions_; }
  // Mode (b) only: the stored key of logical slot `slot`, head `h`, layer `l` as double (hi + lo).
  std::vector<double> StoredKey(int64_t layer, int64_t h, int64_t slot) const;

 private:
  int64_t Physical(int64_t logical) const;  // slot index of a logical position
  void EvictOldestRecent();

  StreamingCacheConfig sc_;
  int64_t n_layer_, kv_heads_, head_dim_, capacity_, n_sink_;
  int64_t size_ = 0;         // retained tokens
  int64_t head_ = 0;         // physical slot of the oldest recent token
  int64_t pending_ = 0;      // tokens being added by the current step
  int64_t evictions_ = 0, arrivals_ = 0;
  bool chunk_logical_ = false;  // this step attends through a logical-order copy
  std::vector<int64_t> seq_;    // [capacity] arrival number of the token in each physical slot
  // Per layer [capacity][kv_heads][head_dim]: values, keys (mode a: unrotated; mode b: hi),
  // key low parts (mode b).
  std::vector<AlignedBuffer<float>> k_, k_lo_, v_;
  AlignedBuffer<float> k_scratch_, v_scratch_;  // rotated / logical-order views for one layer
  std::vector<int64_t> pending_slots_;          // physical slots of the new tokens
  std::vector<int64_t> shift_pending_;          // per layer: evictions not yet applied (mode b)
};

}  // namespace attnlab

#endif  // ATTNLAB_CACHE_STREAMING_CACHE_H_
