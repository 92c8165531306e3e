// Attention rows for `attnlab bench suite` (implemented in cmd_bench.cc, which also runs
// `attnlab bench attention`): flash forward (and backward) validated against the reference,
// timed, and divided by the same-run oneDNN sgemm S = Q K^T of matching size.
#ifndef ATTNLAB_TOOLS_BENCH_ATTENTION_H_
#define ATTNLAB_TOOLS_BENCH_ATTENTION_H_

#include <vector>

#include "attnlab/attention.h"
#include "bench_table.h"

namespace attnlab::cli {

// sgemm_qk (the same-shape baseline, first), then flash_fwd[, flash_bwd] with their ratio to it
// and their validation checks, for one shape (standard softmax, causal or not). Throws
// CommandError when the validation fails.
std::vector<bench::TableRow> AttentionTableRows(const AttentionShape& s, bool causal,
                                                bool backward, int repeats);

// A 2048^3 oneDNN sgemm: the machine's practical fp32 peak.
bench::TableRow SgemmPeakRow(int repeats);

}  // namespace attnlab::cli

#endif  // ATTNLAB_TOOLS_BENCH_ATTENTION_H_
