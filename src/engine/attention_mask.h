// Row-wise visibility for the mask vocabulary of attnlab/attention.h, shared by every kernel.
//
// For query row i the visible keys (before the explicit mask and mask_first_key) are
//   [0, sink_end) U [lo, hi]      (either may be empty: sink_end == 0, or lo > hi)
// where sink_end covers the sink and global keys, and [lo, hi] is the window, or for a global
// row (position p(i) < n_global) every key up to the causal bound (lo = 0).
//
// Monotonicity, which lets tiled kernels classify a block of rows from its first and last row:
// global rows are a prefix of the rows (p(i) grows with i). Within the global rows and within
// the other rows, lo, hi and sink_end are non-decreasing in i. Across the boundary they stay
// non-decreasing too unless the mask is not causal and has window_right >= 0 (a global row's hi
// is len_k - 1, the next row's p + window_right may be smaller), so the block helpers below
// split a block at the boundary and never rely on monotonicity across it.
#ifndef ATTNLAB_ENGINE_ATTENTION_MASK_H_
#define ATTNLAB_ENGINE_ATTENTION_MASK_H_

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "attnlab/attention.h"

namespace attnlab::internal {

struct RowRange {
  int64_t sink_end;  // keys [0, sink_end) are visible through the sink / global prefix
  int64_t lo, hi;    // keys [lo, hi] (inclusive) are visible through the window (or globally)
};

// The first row that is not global: rows [0, FirstLocalRow) have p(i) < n_global.
inline int64_t FirstLocalRow(const AttentionMask& m, int64_t len_q, int64_t len_k) {
  return std::clamp<int64_t>(m.n_global - (len_k - len_q), 0, len_q);
}

inline RowRange RowVisibleRange(const AttentionMask& m, int64_t len_q, int64_t len_k, int64_t i) {
  const int64_t p = i + (len_k - len_q);  // bottom-right alignment
  const int64_t causal_hi = std::min(m.causal ? p : len_k - 1, len_k - 1);
  const int64_t sink_end =
      std::clamp<int64_t>(std::min(std::max(m.n_sink, m.n_global), causal_hi + 1), 0, len_k);
  if (p < m.n_global) return RowRange{sink_end, 0, causal_hi};  // a global query row
  int64_t hi = causal_hi;
  if (m.window_right >= 0) hi = std::min(hi, p + m.window_right);
  const int64_t lo = m.window_left >= 0 ? std::max<int64_t>(0, p - m.window_left) : 0;
  return RowRange{sink_end, lo, hi};
}

inline bool InRange(const RowRange& r, int64_t j) {
  return j < r.sink_end || (r.lo <= j && j <= r.hi);
}

// Full visibility of key j for (batch b, query head h, row i).
inline bool KeyVisible(const AttentionMask& m, const RowRange& r, int64_t b, int64_t h, int64_t i,
                       int64_t j) {
  if (!InRange(r, j)) return false;
  if (m.mask_first_key && j == 0) return false;
  if (m.explicit_mask) {
    const ExplicitMask& e = *m.explicit_mask;
    if (!e.data[b * e.stride_batch + h * e.stride_head + i * e.stride_row + j]) return false;
  }
  return true;
}

inline float DefaultScaleOf(const AttentionParams& p, int64_t head_dim) {
  return p.scale ? *p.scale : 1.0f / std::sqrt(static_cast<float>(head_dim));
}

}  // namespace attnlab::internal

#endif  // ATTNLAB_ENGINE_ATTENTION_MASK_H_
