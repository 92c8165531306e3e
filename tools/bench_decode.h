// Decode benchmark rows (cmd_bench_decode.cc), shared with `attnlab bench suite`.
//
// Baseline: a STREAM triad a[i] = b[i] + s c[i] over three fp32 arrays on the engine's thread
// pool; bytes counted as STREAM does, 12 per element (two reads, one write; write-allocate
// traffic not counted). The arrays are sized from the machine's last-level cache
// (bench_util.h's LastLevelCacheBytes): together 4x the LLC, so every pass streams from DRAM,
// whatever the request (--triad-mib sets them explicitly; without a known LLC, 512 MiB each).
// Decode rows: one query per head over a cache of `len` tokens in each dtype, validated against
// the double reference on the cache's own values, then timed (median) twice:
//   warm  the same step repeated (the cache stays in the last-level cache when it fits, as in a
//         generation loop that touches little else between steps)
//   cold  the triad's arrays b and c (8/3 of the LLC) are read before every step, evicting the
//         cache; no buffer of its own (a is freed after the triad; without cold rows all three)
// The validation converts one KV head at a time to fp32, so memory is the larger of the triad
// and b, c plus K, V in fp32 and the cache's copy at the longest length (PlanDecode).
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
  std::vector<int64_t> lens = {4096, 32768};
  int64_t heads = 12, heads_kv = 12, head_dim = 64;
  std::vector<KvDtype> dtypes = {KvDtype::kF32, KvDtype::kBF16, KvDtype::kF16};
  int repeats = 20;       // warm rows; cold rows time max(3, repeats / 4) steps
  int64_t triad_mib = 0;  // MiB per triad array; 0: from the last-level cache
  bool cold = true;
};

// What a run of `c` allocates: the triad's arrays and, at the longest length, K and V in fp32
// and the cache's copy.
struct DecodePlan {
  int64_t llc_bytes = 0;           // 0: unknown
  int64_t triad_array_bytes = 0;   // each of the three
  int64_t peak_bytes = 0;          // the estimate
  std::string triad_reason;        // how the triad was sized
};
DecodePlan PlanDecode(const DecodeBenchConfig& c);

// The triad baseline (id "triad") and the decode rows, each with its ratio to it. Throws
// CommandError when a validation fails.
struct DecodeResult {
  bench::TableRow triad;
  std::vector<bench::TableRow> rows;
};
DecodeResult DecodeRows(const DecodeBenchConfig& c);

}  // namespace attnlab::cli

#endif  // ATTNLAB_TOOLS_BENCH_DECODE_H_
