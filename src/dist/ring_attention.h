// Ring attention (issue 40): exact attention over a sequence split across the ranks of a
// dist::Comm, K/V blocks passed around the ring with non-blocking point-to-point transfers while
// the flash kernel works on the block in hand (Liu et al. 2023, "Ring Attention with Blockwise
// Transformers", arXiv:2310.01889). Partial results combine through the log-sum-exp; the
// backward passes dK/dV accumulators around the ring with the blocks, home after P steps.
//
// Layout: striped (Brandon et al. 2023, "Striped Attention", arXiv:2311.09431): global token t
// lives on rank t % P at local index t / P, so rank r holds RingLocalLength(N, r, P) =
// ceil((N - r) / P) tokens. Why striped and not contiguous or zig-zag: with a causal mask every
// (query rank, key rank) pair is a causal square of about N/P tokens (ranks' work differs by at
// most one row), so no rank idles on the triangle, and each block is a plain causal mask of the
// engine's flash kernels:
//   key rank s <= r: query i (global r + iP) sees key j (s + jP) iff j <= i: the causal square
//                    of queries [0, n_r) and keys [0, n_r) (n_s >= n_r);
//   key rank s >  r: iff j <= i - 1: the causal square of queries [1, n_r) and keys
//                    [0, n_r - 1) (n_s >= n_r - 1); query 0 sees nothing there.
// The caller applies positions (RoPE) for the global positions r + iP before calling.
//
// Semantics are attnlab/attention.h's on the global sequence (len_q = len_k = N): out and lse
// on every rank for its own rows; dQ, dK, dV for its own tokens. Supported: no mask or causal,
// mask_first_key, softmax kStandard, kSoftmax1, kSinkLogit (the extra term added once, after
// the ring) and kSigmoid (no normalisation: blocks add). Refused with an error (the same on
// every rank, before any transfer): windows, sinks, global tokens and explicit masks (their
// block masks are not causal squares), kSoftpick (its eps does not split over blocks).
// d_sink_logits: this rank's rows' share; the sum over ranks (what a gradient all-reduce does)
// is the single-process gradient.
//
// Every rank calls with the same shape (global_len, heads, head_dim, batch) and params; a
// mismatch is detected by an all-gather of the arguments and reported on every rank.
#ifndef ATTNLAB_DIST_RING_ATTENTION_H_
#define ATTNLAB_DIST_RING_ATTENTION_H_

#include <cstdint>
#include <span>

#include "attnlab/attention.h"
#include "attnlab/status.h"
#include "dist/comm.h"

namespace attnlab::dist {

struct RingShape {
  int64_t batch = 1;
  int64_t heads_q = 1;
  int64_t heads_kv = 1;
  int64_t global_len = 1;  // N, the whole sequence
  int64_t head_dim = 1;
  // Query rows per flash call in the forward (a local choice, not compared across ranks): the
  // forward's scratch is [batch, heads_q, query_chunk, head_dim] besides the K/V in flight.
  // Results do not depend on it beyond rounding (tests use small chunks to cross boundaries).
  int64_t query_chunk = 1024;
};

// Tokens rank r of P holds: ceil((N - r) / P) (0 when N <= r).
int64_t RingLocalLength(int64_t global_len, int rank, int ranks);

// Seconds spent, for the docs' overlap figures: compute (the flash kernels and the combine),
// waiting (transfers not hidden behind compute), and bytes moved by this rank.
struct RingStats {
  double compute_s = 0;
  double wait_s = 0;
  int64_t bytes_sent = 0;
};

// q: [batch, heads_q, n_r, head_dim], k, v: [batch, heads_kv, n_r, head_dim] (n_r this rank's
// RingLocalLength), any strides; out like q (it must not overlap them: it accumulates the
// blocks' outputs); lse: [batch * heads_q * n_r] or empty.
Status RingAttentionForward(Comm& comm, const RingShape& shape, const AttentionParams& params,
                            const AttentionTensor& q, const AttentionTensor& k,
                            const AttentionTensor& v, const AttentionTensorMut& out,
                            std::span<float> lse = {}, RingStats* stats = nullptr);

// out and lse: the forward's (lse required). dq like q, dk / dv like k (overwritten).
// d_sink_logits: [heads_q], required iff kSinkLogit (overwritten with this rank's share).
Status RingAttentionBackward(Comm& comm, const RingShape& shape, const AttentionParams& params,
                             const AttentionTensor& q, const AttentionTensor& k,
                             const AttentionTensor& v, const AttentionTensor& out,
                             std::span<const float> lse, const AttentionTensor& dout,
                             const AttentionTensorMut& dq, const AttentionTensorMut& dk,
                             const AttentionTensorMut& dv, std::span<float> d_sink_logits = {},
                             RingStats* stats = nullptr);

}  // namespace attnlab::dist

#endif  // ATTNLAB_DIST_RING_ATTENTION_H_
