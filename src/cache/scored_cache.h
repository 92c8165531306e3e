// KV caches that choose which tokens to keep by the attention they receive (issue 38;
// docs/KV_POLICIES.md), beside StreamingLLM's sinks + window (streaming_cache.h):
//
//   kH2O   Heavy-Hitter Oracle (Zhang et al. 2023, arXiv:2306.14048, Algorithm 1): each cached
//          token's score is the attention it has received, summed over every query that saw it
//          (per KV head: the query heads of a GQA group add up). When the cache is over budget
//          the token with the lowest score leaves, among the tokens older than the `recent`
//          most recent ones (which always stay: H2O's local window). Per KV head: each head
//          keeps its own heavy hitters, as in the paper.
//   kTova  Token Omission Via Attention (Oren et al. 2024, arXiv:2401.06104, section 3): after
//          each step the token with the lowest attention from the CURRENT query, averaged over
//          the layer's heads, leaves; one choice per layer (every head of the layer drops it).
//
//   kSnapKV  SnapKV (Li et al. 2024, arXiv:2404.14469, section 4): the observation window, the
//          step's last snap_window queries (the end of a prompt), votes: key j's score is the
//          attention it gets from those rows, summed (per KV head over the group's query heads);
//          the votes are average-pooled over the older candidates in order (kernel snap_kernel,
//          zero padding counted, torch's avg_pool1d as in the paper's code) and the lowest leave,
//          all in one selection per step, while the window's own tokens stay. Applied at every
//          step that overflows: a prompt is compressed once, at prefill, as in the paper; a
//          one-token step has a window of one query (the paper does not evict while decoding;
//          this is the natural continuation for streaming).
//
// All optionally pin the first n_sink tokens (never evicted): the sink question, measured by
// running each policy with and without them.
//
// Budget. `window` W is the most keys a query attends to, as for the window and sink policies:
// between steps the cache holds W - 1 tokens, the step's new token joins them (W keys for its
// query), and after the step's attention the policy drops one (the papers' order: the new token
// is scored with the rest and may leave at once). A step of T > 1 tokens (a prompt) attends
// over size + T keys and then evicts down to W - 1; its positions must stay below the context.
//
// Positions (StreamingCacheConfig::scored_positions). kDistance (the default): the newest token
// sits at P = min(its arrival number, context - 1) and every kept key j at P - (newest - a_j),
// its true distance to the newest token, clamped at 0: the papers keep each key at its original
// position, and this keeps the same distances while they fit the trained range (a key older
// than the context sits at the farthest trained distance). kRank: as in StreamingLLM
// (streaming_cache.h), the i-th kept token of a head, oldest first, sits at position i, which
// compresses the distance to an old kept token (contiguous windows keep their distances; a
// scattered selection does not). Either way keys are stored unrotated and rotated into a scratch
// buffer at every step (as kRotateAtAttention does); different heads and layers may keep
// different tokens, each at its own positions.
//
// Ties (equal scores) evict the oldest token, so every choice is deterministic.
//
// Scores come from the model: after each layer's attention over the views Update handed out,
// Gpt::Forward passes the new rows' queries (after RoPE) and their log-sum-exp
// (KvCache::ObserveAttention); P[i, j] = exp(scale q_i . k_j - lse_i), causal within the step.
// Plain softmax attention only (ValidateStreamingConfig says what else is refused and why).
#ifndef ATTNLAB_CACHE_SCORED_CACHE_H_
#define ATTNLAB_CACHE_SCORED_CACHE_H_

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "attnlab/model_config.h"
#include "cache/kv_cache.h"
#include "cache/streaming_cache.h"

namespace attnlab {

// H2O's default recent window: half of what the budget leaves after the pinned tokens,
// (W - 1 - n_sink) / 2 (the paper's equal heavy-hitter and recent shares).
int64_t DefaultH2oRecent(const StreamingCacheConfig& sc);

class ScoredKvCache : public KvCache {
 public:
  // REQUIRES: ValidateStreamingConfig ok; policy kH2O, kTova or kSnapKV.
  ScoredKvCache(const StreamingCacheConfig& sc, const ModelConfig& model);
  int64_t size() const override { return size_; }
  Status BeginStep(int64_t T, std::vector<int64_t>* positions) override;
  Status Update(int64_t layer, const float* k_new, const float* v_new, int64_t ld,
                const RopeTable* rope, AttentionTensor* k_all, AttentionTensor* v_all,
                int64_t* len_k) override;
  bool WantsAttention() const override { return true; }
  Status ObserveAttention(int64_t layer, const AttentionParams& params, const AttentionTensor& q,
                          int64_t T, std::span<const float> lse) override;
  void EndStep() override;
  int64_t bytes() const override;

  // The arrival numbers (0, 1, 2, ...) of the tokens KV head `head` of `layer` keeps, oldest
  // first, and their scores (H2O: accumulated attention; TOVA: the last query's head mean;
  // SnapKV: the last step's votes, before pooling).
  std::vector<int64_t> RetainedTokens(int64_t layer, int64_t head) const;
  std::vector<double> Scores(int64_t layer, int64_t head) const;
  int64_t evictions() const { return evictions_; }
  int64_t recent() const { return recent_; }

 private:
  void Grow(int64_t slots);
  // The step's newest token's position, and the position of the kept token of logical rank
  // `rank` that arrived as number `arrival` (scored_positions; during a step, with pending_).
  int64_t NewestPosition() const;
  int64_t KeyPosition(int64_t rank, int64_t arrival) const;
  int64_t Victim(int64_t layer, int64_t head, int64_t n) const;  // logical index to drop
  // SnapKV: the `drop` logical indices to remove from head g of layer l (n tokens), descending.
  std::vector<int64_t> SnapVictims(int64_t l, int64_t g, int64_t n, int64_t drop);
  // Removes logical index i of head g of layer l, which holds len tokens (slots stay compact).
  void Remove(int64_t l, int64_t g, int64_t i, int64_t len);

  StreamingCacheConfig sc_;
  int64_t n_layer_, kv_heads_, head_dim_, n_head_, context_;
  int64_t keep_;     // W - 1: tokens held between steps
  int64_t n_sink_;   // pinned first tokens
  int64_t recent_;   // H2O: the most recent tokens that always stay (0 for TOVA)
  int64_t cap_ = 0;  // slots per (layer, head)
  int64_t size_ = 0, pending_ = 0, arrivals_ = 0, evictions_ = 0;
  // Per layer: keys (unrotated) and values, [kv_heads][cap][head_dim].
  std::vector<std::vector<float>> k_, v_;
  // Per layer and head: the occupied slots [0, size) in logical order (oldest first), each
  // slot's arrival and score.
  std::vector<std::vector<std::vector<int32_t>>> order_;
  std::vector<std::vector<std::vector<int64_t>>> seq_;
  std::vector<std::vector<std::vector<double>>> score_;
  // This step's rotated keys of one layer in slot order, [kv_heads][cap][head_dim], kept until
  // ObserveAttention has read them; the positions of the slots being rotated.
  std::vector<float> k_scratch_;
  std::vector<int64_t> pos_;
  int64_t scratch_layer_ = -1;
  // ObserveAttention's buffers: base-2 scores [rows][n] of one head, fp32 probability sums
  // [n_head][n].
  std::vector<float> s2_, w_;
  std::vector<double> mean_;  // TOVA: the heads' mean per key
  // SnapVictims' buffers: the candidates' votes in logical order, their pooled values.
  std::vector<double> votes_;
  std::vector<std::pair<double, int64_t>> pooled_;
};

// The bounded caches by policy: StreamingKvCache (window, sink) or ScoredKvCache (h2o, tova,
// snapkv).
// REQUIRES: ValidateStreamingConfig ok and a bounded policy.
std::unique_ptr<KvCache> MakeBoundedKvCache(const StreamingCacheConfig& sc, const ModelConfig& model);

}  // namespace attnlab

#endif  // ATTNLAB_CACHE_SCORED_CACHE_H_
