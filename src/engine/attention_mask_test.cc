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

// The two local + global (Longformer) pictures in attention.h, len_q = len_k = 8.
TEST(AttentionMask, GlobalTokensMatchTheHeaderDrawings) {
  AttentionMask causal;
  causal.causal = true;
  causal.window_left = 1;
  causal.n_global = 2;
  EXPECT_EQ(Draw(causal, 8, 8),
            (std::vector<std::string>{"x.......", "xx......", "xxx.....", "xxxx....", "xx.xx...",
                                      "xx..xx..", "xx...xx.", "xx....xx"}));
  AttentionMask encoder;
  encoder.window_left = 1;
  encoder.window_right = 1;
  encoder.n_global = 1;
  EXPECT_EQ(Draw(encoder, 8, 8),
            (std::vector<std::string>{"xxxxxxxx", "xxx.....", "xxxx....", "x.xxx...", "x..xxx..",
                                      "x...xxx.", "x....xxx", "x.....xx"}));
}

// Globality follows the query's position p(i) = i + len_k - len_q, so one decode row (len_q = 1)
// sees exactly what the same row of the full square mask sees; and n_global = 0 changes nothing.
TEST(AttentionMask, GlobalRowsFollowPositionsAndZeroGlobalsChangeNothing) {
  for (int64_t n_global : {0, 1, 3, 9}) {
    for (int causal = 0; causal < 2; ++causal) {
      AttentionMask m;
      m.causal = causal;
      m.window_left = 2;
      m.n_global = n_global;
      const std::vector<std::string> full = Draw(m, 8, 8);
      for (int64_t i = 0; i < 8; ++i) {
        const std::vector<std::string> decode = Draw(m, 1, i + 1);
        SCOPED_TRACE("n_global " + std::to_string(n_global) + " row " + std::to_string(i));
        if (causal) {
          EXPECT_EQ(decode[0], full[i].substr(0, i + 1));
        }
      }
    }
  }
  AttentionMask a;
  a.causal = true;
  a.window_left = 3;
  a.n_sink = 2;
  AttentionMask b = a;
  b.n_global = 0;
  EXPECT_EQ(Draw(a, 9, 12), Draw(b, 9, 12));
  // Global keys act like sinks: n_global = 2 equals n_sink = 2 for rows past the globals.
  AttentionMask g = a;
  g.n_sink = 0;
  g.n_global = 2;
  const std::vector<std::string> with_sinks = Draw(a, 12, 12), with_globals = Draw(g, 12, 12);
  for (int64_t i = 2; i < 12; ++i) EXPECT_EQ(with_sinks[i], with_globals[i]) << "row " << i;
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
    if (pick(rng) < 4) m.n_global = std::vector<int64_t>{1, 2, 3, 7, 20, 63, 64, 65, 100, 250}[pick(rng)];
    m.mask_first_key = pick(rng) < 2;
    const int64_t len_q = len(rng), len_k = len(rng);
    std::uniform_int_distribution<int64_t> row(0, len_q - 1), key(0, len_k - 1);
    // Half the blocks start near the boundary between global and local rows, so they often
    // straddle it (the case where monotonicity can break).
    int64_t i0 = row(rng), k0 = key(rng) / internal::kBlockK * internal::kBlockK;
    if (m.n_global > 0 && pick(rng) < 5) {
      i0 = std::clamp<int64_t>(internal::FirstLocalRow(m, len_q, len_k) - pick(rng), 0, len_q - 1);
    }
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
    if (cls == BlockClass::kEmpty) {
      EXPECT_FALSE(any);
    }
    if (cls == BlockClass::kFull) {
      EXPECT_TRUE(all && nk == internal::kBlockK);
    }
  }
}

// Every (row block, key block) pair of a few whole masks with global tokens, including the
// non-causal window_right case where hi drops after the last global row.
TEST(AttentionMask, BlockClassificationWithGlobalsOverWholeMasks) {
  struct Cfg {
    bool causal;
    int64_t wl, wr, n_global, n_sink, len_q, len_k;
  };
  for (const Cfg& c : {Cfg{true, 5, -1, 3, 0, 200, 200}, Cfg{false, 5, 5, 3, 0, 200, 200},
                       Cfg{false, 0, 0, 70, 0, 150, 190}, Cfg{true, 64, -1, 65, 2, 130, 260},
                       Cfg{false, -1, 2, 10, 0, 77, 77}, Cfg{true, 0, -1, 200, 0, 100, 150}}) {
    AttentionMask m;
    m.causal = c.causal, m.window_left = c.wl, m.window_right = c.wr;
    m.n_global = c.n_global, m.n_sink = c.n_sink;
    for (int64_t rows : {1, 16, 32, 64}) {
      for (int64_t i0 = 0; i0 < c.len_q; i0 += rows) {
        const int64_t nr = std::min(rows, c.len_q - i0);
        const internal::KeySpan span = internal::ChunkKeySpan(m, c.len_q, c.len_k, i0, nr);
        for (int64_t k0 = 0; k0 < c.len_k; k0 += internal::kBlockK) {
          const int64_t nk = std::min(internal::kBlockK, c.len_k - k0);
          const BlockClass cls = internal::ClassifyBlock(m, c.len_q, c.len_k, i0, nr, k0, nk);
          bool any = false, all = true;
          for (int64_t i = i0; i < i0 + nr; ++i) {
            const internal::RowRange r = internal::RowVisibleRange(m, c.len_q, c.len_k, i);
            for (int64_t j = k0; j < k0 + nk; ++j) {
              const bool vis = internal::KeyVisible(m, r, 0, 0, i, j);
              any |= vis;
              all &= vis;
              if (vis) {
                ASSERT_TRUE(span.Intersects(j, 1)) << "row " << i << " key " << j;
              }
            }
          }
          SCOPED_TRACE("rows [" + std::to_string(i0) + ", +" + std::to_string(nr) + ") keys " +
                       std::to_string(k0));
          if (cls == BlockClass::kEmpty) {
            EXPECT_FALSE(any);
          }
          if (cls == BlockClass::kFull) {
            EXPECT_TRUE(all && nk == internal::kBlockK);
          }
          if (!any) {  // tight: nothing seen, nothing done
            EXPECT_EQ(cls, BlockClass::kEmpty);
          }
        }
      }
    }
  }
}

// The point of local + global attention: the flash kernels visit O(N (window + n_global)) key
// blocks, not O(N^2). Counted structurally (no timing): the forward's 64-row blocks against
// 64-key blocks, for N = 8192, window 128 and 16 global tokens.
TEST(AttentionMask, LocalPlusGlobalVisitsLinearlyManyBlocks) {
  AttentionMask m;
  m.causal = true;
  m.window_left = 128;
  m.n_global = 16;
  const int64_t n = 8192, rb = 64, kb = internal::kBlockK;
  int64_t visited = 0;
  for (int64_t i0 = 0; i0 < n; i0 += rb) {
    for (int64_t k0 = 0; k0 < n; k0 += kb) {
      visited += internal::ClassifyBlock(m, n, n, i0, rb, k0, kb) != BlockClass::kEmpty;
    }
  }
  // Per row block: the global key block, at most ceil((rb + window) / kb) + 1 window blocks;
  // plus the row block holding the global rows, which sees every causal key block.
  const int64_t row_blocks = n / rb;
  const int64_t bound = row_blocks * (1 + (rb + m.window_left) / kb + 1) + n / kb;
  EXPECT_LE(visited, bound);
  EXPECT_LT(visited, row_blocks * (n / kb) / 10);  // far below the causal mask's ~N^2 / 2
}

}  // namespace
}  // namespace attnlab
