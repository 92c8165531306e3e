// Decode benchmark rows (cmd_bench_decode.cc), shared with `attnlab bench suite`.
//
// Baseline: a STREAM triad a[i] = b[i] + s c[i] over three fp32 arrays of triad_mib MiB each
// (default 512, far larger than this CPU's caches), on the engine's thread pool; bytes counted
// as STREAM does, 12 per element (two reads, one write; write-allocate traffic not counted).
// Decode rows: one query per head over a cache of `len` tokens in each dtype, validated against
// the double reference on the cache's own values, then timed (median) twice:
//   warm  the same step repeated (the cache stays in the last-level cache when it fits, as in a
//         generation loop that touches little else between steps)
//   cold  a 1 GiB buffer is read before every step, evicting the cache
// GB/s = AttentionDecodeBytes / time; ratio = GB/s / triad GB/s. For bf16 / fp16 also the
// speedup over the fp32 row of the same length and the accuracy cost: max |out - out_f32| over
// max |out_f32| (the f32 cache's output on the same fp32 K, V).
#ifndef ATTNLAB_TOOLS_BENCH_DECODE_H_
#define ATTNLAB_TOOLS_BENCH_DECODE_H_

#include <string>
#include <vector>

#include "attnlab/attention_decode.h"
#include "bench_table.h"

namespace attnlab::cli {

struct DecodeBenchConfig {
  std::vector<int64_t> lens = {4096, 8192, 16384, 32768};
  int64_t heads = 12, heads_kv = 12, head_dim = 64;
  std::vector<KvDtype> dtypes = {KvDtype::kF32, KvDtype::kBF16, KvDtype::kF16};
  int repeats = 20;
  int64_t triad_mib = 512;
  bool cold = true;
};

// The triad row first, then the decode rows. Throws CommandError when a validation fails.
std::vector<bench::TableRow> DecodeRows(const DecodeBenchConfig& c);

}  // namespace attnlab::cli

#endif  // ATTNLAB_TOOLS_BENCH_DECODE_H_
