// The mask vocabulary: the drawn examples of attention.h, and the flash kernels' block
// classification checked exhaustively against per-element visibility.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "engine/attention_flash_common.h"
#include "engine/attention_mask.h"

namespace attnlab {
namespace {

using internal::BlockClass;

std::vector<std::string> Draw(const AttentionMask& m, int64_t len_q, int64_t len_k) {
  std::vector<std::string> rows;
  for (int64_t i = 0; i < len_q; ++i) {
    const internal::RowRange r = internal::RowVisibleRange(m, len_q, len_k, i);
    std::string row;
    for (int64_t j = 0; j < len_k; ++j) row += internal::KeyVisible(m, r, 0, 0, i, j) ? 'x' : '.';
    rows.push_back(row);
  }
  return rows;
}

// The four pictures in attention.h, len_q = 5, len_k = 8.
TEST(AttentionMask, MatchesTheHeaderDrawings) {
  AttentionMask causal;
  causal.causal = true;
  EXPECT_EQ(Draw(causal, 5, 8), (std::vector<std::string>{"xxxx....", "xxxxx...", "xxxxxx..",
                                                          "xxxxxxx.", "xxxxxxxx"}));
  AttentionMask window = causal;
  window.window_left = 2;
  EXPECT_EQ(Draw(window, 5, 8), (std::vector<std::string>{".xxx....", "..xxx...", "...xxx..",
                                                          "....xxx.", ".....xxx"}));
  AttentionMask sink = window;
  sink.n_sink = 1;
  EXPECT_EQ(Draw(sink, 5, 8), (std::vector<std::string>{"xxxx....", "x.xxx...", "x..xxx..",
                                                        "x...xxx.", "x....xxx"}));
  AttentionMask first = causal;
  first.mask_first_key = true;
  EXPECT_EQ(Draw(first, 5, 8), (std::vector<std::string>{".xxx....", ".xxxx...", ".xxxxx..",
                                                         ".xxxxxx.", ".xxxxxxx"}));
}

TEST(AttentionMask, MaskedSelfAttentionOfTheDocumentsLeavesRowZeroEmpty) {
  AttentionMask m;
  m.causal = true;
  m.mask_first_key = true;
  EXPECT_EQ(Draw(m, 3, 3), (std::vector<std::string>{"...", ".x.", ".xx"}));
}

TEST(AttentionMask, NonCausalWindowAndLenQLargerThanLenK) {
  AttentionMask m;
  m.window_left = 1;
  m.window_right = 1;
  EXPECT_EQ(Draw(m, 4, 4), (std::vector<std::string>{"xx..", "xxx.", ".xxx", "..xx"}));
  AttentionMask c;
  c.causal = true;  // len_q > len_k: the first rows see nothing (bottom-right alignment)
  EXPECT_EQ(Draw(c, 4, 2), (std::vector<std::string>{"..", "..", "x.", "xx"}));
}

// Every kEmpty block has no visible pair; every kFull block has all pairs visible; every
// visible key of a chunk lies in its KeySpan.
TEST(AttentionMask, BlockClassificationIsConsistentWithVisibility) {
  std::mt19937_64 rng(7);
  std::uniform_int_distribution<int64_t> len(1, 300), pick(0, 9);
  for (int trial = 0; trial < 3000; ++trial) {
    AttentionMask m;
    m.causal = pick(rng) < 5;
    if (pick(rng) < 5) m.window_left = std::vector<int64_t>{0, 1, 5, 23, 63, 64, 65, 100, 7, 2}[pick(rng)];
    if (!m.causal && pick(rng) < 4) m.window_right = std::vector<int64_t>{0, 1, 5, 63, 64, 65, 3, 2, 9, 30}[pick(rng)];
    if (pick(rng) < 4) m.n_sink = pick(rng) * 9;
    m.mask_first_key = pick(rng) < 2;
    const int64_t len_q = len(rng), len_k = len(rng);
    std::uniform_int_distribution<int64_t> row(0, len_q - 1), key(0, len_k - 1);
    int64_t i0 = row(rng), k0 = key(rng) / internal::kBlockK * internal::kBlockK;
    const int64_t nr = std::min<int64_t>(1 + pick(rng) * 3, len_q - i0);
    const int64_t nk = std::min<int64_t>(internal::kBlockK, len_k - k0);
    const BlockClass cls = internal::ClassifyBlock(m, len_q, len_k, i0, nr, k0, nk);
    const internal::KeySpan span = internal::ChunkKeySpan(m, len_q, len_k, i0, nr);
    bool any = false, all = true;
    for (int64_t i = i0; i < i0 + nr; ++i) {
      const internal::RowRange r = internal::RowVisibleRange(m, len_q, len_k, i);
      for (int64_t j = k0; j < k0 + nk; ++j) {
        const bool vis = internal::KeyVisible(m, r, 0, 0, i, j);
        any |= vis;
        all &= vis;
        if (vis) {
          ASSERT_TRUE(span.Intersects(j, 1)) << "trial " << trial << " key " << j;
        }
      }
    }
    SCOPED_TRACE("trial " + std::to_string(trial));
    if (cls == BlockClass::kEmpty) EXPECT_FALSE(any);
    if (cls == BlockClass::kFull) EXPECT_TRUE(all && nk == internal::kBlockK);
  }
}

}  // namespace
}  // namespace attnlab
