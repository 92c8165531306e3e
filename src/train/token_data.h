// Tokenised corpora on disk and the batches the trainer draws from them.
//
// Token file (".tok"), little-endian:
//   bytes 0-7   magic "ATLTOKS1"
//   u32         version (1)
//   u32         bytes per token (2 or 4)
//   u32         vocab_size (every token < vocab_size)
//   u32         reserved (0)
//   u64         token count
//   ...         tokens
// The reader checks the size the header implies against the real file size before allocating.
#ifndef ATTNLAB_TRAIN_TOKEN_DATA_H_
#define ATTNLAB_TRAIN_TOKEN_DATA_H_

#include <cstdint>
#include <string>
#include <vector>

#include "attnlab/status.h"

namespace attnlab {

struct TokenFile {
  int64_t vocab_size = 0;
  std::vector<int32_t> tokens;
};

Status WriteTokenFile(const std::string& path, const std::vector<int32_t>& tokens,
                      int64_t vocab_size);
Result<TokenFile> ReadTokenFile(const std::string& path);

// Training batches: B random windows of T tokens. The window offsets are a pure function of
// (seed, step, row) (SplitMix64), so a resumed run draws exactly the batches the uninterrupted run
// would have, with no sampler state to save.
// With bos >= 0 every window starts with the BOS token (inputs = BOS, w0 .. w_{T-2}; targets =
// w0 .. w_{T-1}), as real LMs see a fixed first token; else inputs = w0 .. w_{T-1}, targets =
// w1 .. w_T.
// REQUIRES: tokens.size() > T + 1.
void SampleBatch(const std::vector<int32_t>& tokens, uint64_t seed, int64_t step, int64_t B,
                 int64_t T, int32_t bos, int32_t* inputs, int32_t* targets);

// Data augmentation of the first token (a proposed mitigation of attention
// sinks): with probability `replace` a sequence's BOS is replaced by a uniformly random token of
// [0, vocab), with probability `drop` the sequence has no BOS at all (inputs = w0 .. w_{T-1}).
// Decided per (seed, step, row), like the windows. REQUIRES: bos >= 0 when replace or drop > 0.
struct FirstTokenAugment {
  double replace = 0, drop = 0;
  int32_t vocab = 0;
};
void SampleBatchAugmented(const std::vector<int32_t>& tokens, uint64_t seed, int64_t step,
                          int64_t B, int64_t T, int32_t bos, const FirstTokenAugment& aug,
                          int32_t* inputs, int32_t* targets);

// Evaluation batches: consecutive non-overlapping windows from the start, batch `index` of at most
// `max_batches`; returns false when the data is exhausted.
bool EvalBatch(const std::vector<int32_t>& tokens, int64_t index, int64_t B, int64_t T,
               int32_t bos, int32_t* inputs, int32_t* targets);

uint64_t SplitMix64(uint64_t x);

}  // namespace attnlab

#endif  // ATTNLAB_TRAIN_TOKEN_DATA_H_
