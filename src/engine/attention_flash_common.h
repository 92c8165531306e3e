// Pieces shared by the flash forward and backward kernels: tile sizes, the work plan, block
// classification against the mask, and packing of K/V blocks.
#ifndef ATTNLAB_ENGINE_ATTENTION_FLASH_COMMON_H_
#define ATTNLAB_ENGINE_ATTENTION_FLASH_COMMON_H_

#include <algorithm>
#include <cstdint>
#include <limits>

#include "attnlab/attention.h"
#include "engine/attention_mask.h"

namespace attnlab::internal {

constexpr int64_t kBlockK = 64;   // keys per block (a multiple of 16)
constexpr int64_t kSubRows = 64;  // query rows per S^T tile (a multiple of 16)
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

inline int64_t RoundUp(int64_t x, int64_t m) { return (x + m - 1) / m * m; }
inline int64_t CeilDiv(int64_t x, int64_t m) { return (x + m - 1) / m; }

// How the forward splits work: tasks are (batch, kv head, chunk of `chunk` query rows); a task
// handles those rows for every query head of the group (group * chunk "flat" rows).
struct FlashPlan {
  int64_t group = 1;     // query heads per kv head
  int64_t d_pad = 16;    // head_dim rounded up to 16 lanes
  int64_t chunk = 1;     // query rows per task (per head)
  int64_t n_chunks = 1;  // ceil(len_q / chunk)
};

inline FlashPlan MakeFlashPlan(const AttentionShape& s, int threads) {
  FlashPlan p;
  p.group = s.heads_q / s.heads_kv;
  p.d_pad = RoundUp(s.head_dim, 16);
  // About 256 rows per task across the group amortise each K/V block's loads from memory.
  int64_t chunk = std::min(s.len_q, std::max<int64_t>(1, CeilDiv(256, p.group)));
  // Enough tasks to balance the threads (causal rows have unequal cost).
  while (chunk > 16 && s.batch * s.heads_kv * CeilDiv(s.len_q, chunk) < 4 * threads) {
    chunk = std::max<int64_t>(16, chunk / 2);
  }
  p.chunk = chunk;
  p.n_chunks = CeilDiv(s.len_q, p.chunk);
  return p;
}

// The forward kernel's per-thread scratch, buffer by buffer, in floats (the kernel allocates
// exactly this; `attnlab memory` reports it). max_rows = group * chunk rounded up to kSubRows.
struct FlashForwardScratchSizes {
  int64_t qt = 0, oacc = 0, m = 0, l = 0, alpha = 0, vp = 0, st = 0;
  int64_t row_index = 0;  // int64 entries (query head and index per flat row)
  int64_t Floats() const { return qt + oacc + m + l + alpha + vp + st; }
  // Bytes with every float buffer rounded up to 64 bytes (AlignedBuffer), plus the indices.
  int64_t Bytes() const {
    int64_t b = 0;
    for (int64_t f : {qt, oacc, m, l, alpha, vp, st}) b += (f * 4 + 63) / 64 * 64;
    return b + row_index * 8;
  }
};

inline FlashForwardScratchSizes FlashForwardScratch(const AttentionShape& s, const FlashPlan& p) {
  const int64_t max_rows = RoundUp(p.group * p.chunk, kSubRows);
  FlashForwardScratchSizes z;
  z.qt = max_rows * s.head_dim;
  z.oacc = max_rows * p.d_pad;
  z.m = z.l = max_rows;
  z.alpha = kSubRows;
  z.vp = s.head_dim % 16 != 0 ? kBlockK * p.d_pad : 0;
  z.st = kBlockK * kSubRows;
  z.row_index = 2 * max_rows;
  return z;
}

// How the backward splits work. A task owns (batch, kv head, chunk of keys), so dK and dV need
// no synchronisation. When batch * heads_kv < threads, keys are split into n_kchunks chunks for
// parallelism; each chunk's dQ contribution then goes to a partial buffer, and the partials are
// summed in chunk order (bit-reproducible for a fixed thread count). To bound those buffers the
// query heads of each group are then processed in `passes` passes of heads_per_pass = 1 head
// (a pass is one parallel region over the tasks followed by its dQ reduction; dK and dV carry
// over between passes), so the partials hold one query head per (batch, kv head, chunk), not a
// dQ copy per chunk. Unsplit: one pass over all heads of the group, dQ written directly.
struct FlashBackwardPlan {
  int64_t group = 1;           // query heads per kv head
  int64_t d_pad = 16;          // head_dim rounded up to 16 lanes
  int64_t kchunk = 1;          // keys per task (multiple of kBlockK, or all of len_k)
  int64_t n_kchunks = 1;       // ceil(len_k / kchunk)
  int64_t heads_per_pass = 1;  // query heads of each group per pass (group when n_kchunks == 1)
  int64_t passes = 1;          // group / heads_per_pass
};

constexpr int64_t kBackwardRows = 32;  // query rows per backward sub-block (multiple of 16)

inline FlashBackwardPlan MakeFlashBackwardPlan(const AttentionShape& s, int threads) {
  FlashBackwardPlan p;
  p.group = s.heads_q / s.heads_kv;
  p.d_pad = RoundUp(s.head_dim, 16);
  const int64_t bh = s.batch * s.heads_kv;
  p.n_kchunks = 1;
  if (bh < threads) {
    p.n_kchunks = std::min(CeilDiv(s.len_k, kBlockK), CeilDiv(2 * threads, bh));
  }
  p.kchunk = p.n_kchunks == 1 ? s.len_k : RoundUp(CeilDiv(s.len_k, p.n_kchunks), kBlockK);
  p.n_kchunks = CeilDiv(s.len_k, p.kchunk);
  p.heads_per_pass = p.n_kchunks == 1 ? p.group : 1;
  p.passes = p.group / p.heads_per_pass;
  return p;
}

// The backward's scratch, buffer by buffer (the kernel allocates exactly this). Per worker
// thread, in floats: packed keys / values and the dK / dV accumulators of one key chunk
// ([kchunk rounded up to kBlockK][d_pad] each), Q^T and dO^T ([head_dim][kBackwardRows]), Q, dO
// and the dQ accumulator ([kBackwardRows][d_pad]), the S^T and dP^T tiles ([kBlockK]
// [kBackwardRows]), lse and D per row; in int64: the query head and index of each row. Shared:
// the dQ partials ([n_kchunks][batch * heads_kv][len_q][head_dim] floats, one pass's heads, when
// keys are split) and the d sink partials (batch * heads_q doubles, kSinkLogit).
struct FlashBackwardScratchSizes {
  int64_t kp = 0, vp = 0, dk = 0, dv = 0, qt = 0, dot = 0, qp = 0, dop = 0, dq = 0, st = 0,
          dpt = 0, lse2 = 0, dd = 0;
  int64_t row_index = 0;      // int64 entries per thread
  int64_t dq_partial = 0;     // floats, shared
  int64_t dsink_partial = 0;  // doubles, shared
  // Per thread, every float buffer rounded up to 64 bytes (AlignedBuffer), plus the indices.
  int64_t BytesPerThread() const {
    int64_t b = 0;
    for (int64_t f : {kp, vp, dk, dv, qt, dot, qp, dop, dq, st, dpt, lse2, dd}) {
      b += (f * 4 + 63) / 64 * 64;
    }
    return b + row_index * 8;
  }
  int64_t SharedBytes() const { return dq_partial * 4 + dsink_partial * 8; }
  int64_t TotalBytes(int threads) const { return threads * BytesPerThread() + SharedBytes(); }
};

inline FlashBackwardScratchSizes FlashBackwardScratch(const AttentionShape& s,
                                                      const FlashBackwardPlan& p,
                                                      SoftmaxKind softmax) {
  FlashBackwardScratchSizes z;
  z.kp = z.vp = z.dk = z.dv = RoundUp(p.kchunk, kBlockK) * p.d_pad;
  z.qt = z.dot = s.head_dim * kBackwardRows;
  z.qp = z.dop = z.dq = kBackwardRows * p.d_pad;
  z.st = z.dpt = kBlockK * kBackwardRows;
  z.lse2 = z.dd = kBackwardRows;
  z.row_index = kBackwardRows + s.len_q;
  z.dq_partial =
      p.n_kchunks > 1 ? p.n_kchunks * s.batch * s.heads_kv * p.heads_per_pass * s.len_q * s.head_dim
                      : 0;
  z.dsink_partial = softmax == SoftmaxKind::kSinkLogit ? s.batch * s.heads_q : 0;
  return z;
}

// The keys any row in [i0, i0 + rows) may see: [0, sink_end) U [lo, hi] (a superset).
struct KeySpan {
  int64_t sink_end, lo, hi;
  bool Intersects(int64_t k0, int64_t nk) const {
    return k0 < sink_end || (k0 <= hi && k0 + nk - 1 >= lo);
  }
};

// Calls f(first_row, rows) for the part of [i0, i0 + rows) made of global rows and for the part
// made of the other rows (attention_mask.h: within each part lo, hi and sink_end are
// non-decreasing, so a part is summarised by its first and last row).
template <typename F>
inline void ForEachMonotoneRun(const AttentionMask& m, int64_t len_q, int64_t len_k, int64_t i0,
                               int64_t rows, F f) {
  const int64_t split = std::clamp(FirstLocalRow(m, len_q, len_k), i0, i0 + rows);
  if (split > i0) f(i0, split - i0);
  if (i0 + rows > split) f(split, i0 + rows - split);
}

inline KeySpan ChunkKeySpan(const AttentionMask& m, int64_t len_q, int64_t len_k, int64_t i0,
                            int64_t rows) {
  KeySpan span{0, std::numeric_limits<int64_t>::max(), -1};
  ForEachMonotoneRun(m, len_q, len_k, i0, rows, [&](int64_t r0, int64_t n) {
    const RowRange first = RowVisibleRange(m, len_q, len_k, r0);
    const RowRange last = RowVisibleRange(m, len_q, len_k, r0 + n - 1);
    span.sink_end = std::max(span.sink_end, last.sink_end);
    span.lo = std::min(span.lo, first.lo);
    span.hi = std::max(span.hi, last.hi);
  });
  return span;
}

enum class BlockClass { kEmpty, kFull, kPartial };

// Classifies rows [i0, i0 + nr) x keys [k0, k0 + nk) from the first and last row of each
// monotone run (global rows, other rows). kFull needs nk == kBlockK (padding columns must be
// masked).
inline BlockClass ClassifyBlock(const AttentionMask& m, int64_t len_q, int64_t len_k, int64_t i0,
                                int64_t nr, int64_t k0, int64_t nk) {
  const int64_t k1 = k0 + nk - 1;
  bool all_empty = true, all_full = true;
  ForEachMonotoneRun(m, len_q, len_k, i0, nr, [&](int64_t r0, int64_t n) {
    const RowRange first = RowVisibleRange(m, len_q, len_k, r0);
    const RowRange last = RowVisibleRange(m, len_q, len_k, r0 + n - 1);
    const bool empty = k0 >= last.sink_end && (last.hi < k0 || first.lo > k1);
    const bool full = nk == kBlockK && !m.explicit_mask && !(m.mask_first_key && k0 == 0) &&
                      ((last.lo <= k0 && first.hi >= k1) || k1 < first.sink_end);
    all_empty = all_empty && empty;
    all_full = all_full && full;
  });
  if (all_empty) return BlockClass::kEmpty;
  if (all_full) return BlockClass::kFull;
  return BlockClass::kPartial;
}

// For a transposed score tile st[j * ld + r] (keys j are rows, query rows r are columns): sets
// -inf where key k0 + j (j < nk) is invisible to query row r, which belongs to query head
// row_h[r] at index row_i[r].
inline void MaskTileTransposed(const AttentionMask& m, const AttentionShape& s, int64_t b,
                               const int64_t* row_h, const int64_t* row_i, int64_t nr, int64_t k0,
                               int64_t nk, float* st, int64_t ld) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  for (int64_t r = 0; r < nr; ++r) {
    const RowRange range = RowVisibleRange(m, s.len_q, s.len_k, row_i[r]);
    for (int64_t j = 0; j < nk; ++j) {
      if (!KeyVisible(m, range, b, row_h[r], row_i[r], k0 + j)) st[j * ld + r] = kNegInf;
    }
  }
}

// dst[j * d_pad + d] = X[b, h, k0 + j, d] for j < n; zero padding up to d_pad columns and
// rows_total rows.
inline void PackRowsPadded(const AttentionTensor& x, int64_t b, int64_t h, int64_t k0, int64_t n,
                           int64_t D, int64_t d_pad, int64_t rows_total, float* dst) {
  for (int64_t j = 0; j < n; ++j) {
    const float* src = x.at(b, h, k0 + j);
    float* row = dst + j * d_pad;
    std::copy(src, src + D, row);
    std::fill(row + D, row + d_pad, 0.0f);
  }
  std::fill(dst + n * d_pad, dst + rows_total * d_pad, 0.0f);
}

}  // namespace attnlab::internal

#endif  // ATTNLAB_ENGINE_ATTENTION_FLASH_COMMON_H_
