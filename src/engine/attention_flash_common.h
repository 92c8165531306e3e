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
constexpr int64_t kSubRows = 24;  // query rows per S tile (a multiple of the micro-tile's 6)
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

inline int64_t RoundUp(int64_t x, int64_t m) { return (x + m - 1) / m * m; }
inline int64_t CeilDiv(int64_t x, int64_t m) { return (x + m - 1) / m; }

// How the forward splits work: tasks are (batch, kv head, chunk of `chunk` query rows).
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
  // About 192 rows per task across the group amortise packing each K/V block.
  int64_t chunk = RoundUp(CeilDiv(192, p.group), kSubRows);
  chunk = std::min(chunk, s.len_q);
  // Enough tasks to balance the threads (causal rows have unequal cost).
  while (chunk > kSubRows && s.batch * s.heads_kv * CeilDiv(s.len_q, chunk) < 4 * threads) {
    chunk = std::max(kSubRows, RoundUp(chunk / 2, kSubRows));
  }
  p.chunk = std::max<int64_t>(1, chunk);
  p.n_chunks = CeilDiv(s.len_q, p.chunk);
  return p;
}

// The keys any row in [i0, i0 + rows) may see: [0, sink_end) U [lo, hi].
struct KeySpan {
  int64_t sink_end, lo, hi;
  bool Intersects(int64_t k0, int64_t nk) const {
    return k0 < sink_end || (k0 <= hi && k0 + nk - 1 >= lo);
  }
};

inline KeySpan ChunkKeySpan(const AttentionMask& m, int64_t len_q, int64_t len_k, int64_t i0,
                            int64_t rows) {
  const RowRange first = RowVisibleRange(m, len_q, len_k, i0);
  const RowRange last = RowVisibleRange(m, len_q, len_k, i0 + rows - 1);
  return KeySpan{last.sink_end, first.lo, last.hi};
}

enum class BlockClass { kEmpty, kFull, kPartial };

// Classifies rows [i0, i0 + nr) x keys [k0, k0 + nk) using monotonicity of lo, hi and sink_end
// in the row index. kFull needs nk == kBlockK (padding columns must be masked).
inline BlockClass ClassifyBlock(const AttentionMask& m, int64_t len_q, int64_t len_k, int64_t i0,
                                int64_t nr, int64_t k0, int64_t nk) {
  const RowRange first = RowVisibleRange(m, len_q, len_k, i0);
  const RowRange last = RowVisibleRange(m, len_q, len_k, i0 + nr - 1);
  const int64_t k1 = k0 + nk - 1;
  if (k0 >= last.sink_end && (last.hi < k0 || first.lo > k1)) return BlockClass::kEmpty;
  if (nk == kBlockK && !m.explicit_mask && !(m.mask_first_key && k0 == 0)) {
    if ((last.lo <= k0 && first.hi >= k1) || k1 < first.sink_end) return BlockClass::kFull;
  }
  return BlockClass::kPartial;
}

// Sets s[r * lds + j] = -inf where key k0 + j is invisible to row i0 + r (or j >= nk).
inline void MaskTile(const AttentionMask& m, const AttentionShape& s, int64_t b, int64_t h,
                     int64_t i0, int64_t nr, int64_t k0, int64_t nk, float* tile, int64_t lds) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  for (int64_t r = 0; r < nr; ++r) {
    const RowRange range = RowVisibleRange(m, s.len_q, s.len_k, i0 + r);
    float* row = tile + r * lds;
    for (int64_t j = 0; j < kBlockK; ++j) {
      if (j >= nk || !KeyVisible(m, range, b, h, i0 + r, k0 + j)) row[j] = kNegInf;
    }
  }
}

// kt[d * kBlockK + j] = K[b, hk, k0 + j, d]; zero for j >= nk.
inline void PackKeysTransposed(const AttentionTensor& k, int64_t b, int64_t hk, int64_t k0,
                               int64_t nk, int64_t D, float* kt) {
  for (int64_t j = 0; j < nk; ++j) {
    const float* src = k.at(b, hk, k0 + j);
    for (int64_t d = 0; d < D; ++d) kt[d * kBlockK + j] = src[d];
  }
  for (int64_t d = 0; d < D; ++d) {
    for (int64_t j = nk; j < kBlockK; ++j) kt[d * kBlockK + j] = 0.0f;
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
