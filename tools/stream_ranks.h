// `mpirun -np P attnlab stream` (docs/DISTRIBUTED.md): who runs which cache policy, and the
// merge that gives every rank the one-process results. The policies that read the stream in
// order (dense, window, sink) each run whole on one rank (the i-th of them on rank i mod P);
// recompute re-encodes every token's window on its own, so its tokens are shared (token t on
// rank t mod P, StreamEvalOptions::rank). The merge adds, per policy, one fixed-size array per
// rank in which only the rank that computed a value puts it (x + 0 is exact), then recomputes a
// shared policy's losses in token order: per-token losses, perplexities and verdicts equal one
// process's bit for bit. Times: a whole policy's are its rank's; a shared policy takes the
// slowest rank's seconds, and the sum of the ranks' per-chunk token rates.
#ifndef ATTNLAB_TOOLS_STREAM_RANKS_H_
#define ATTNLAB_TOOLS_STREAM_RANKS_H_

#include <cstdint>
#include <vector>

#include "attnlab/status.h"
#include "dist/comm.h"
#include "inference/stream_eval.h"

namespace attnlab::cli {

inline constexpr int kSharedPolicy = -1;

// The rank that runs each policy (kSharedPolicy: all of them, recompute), in order.
std::vector<int> StreamPolicyOwners(const std::vector<CachePolicy>& policies, int ranks);

// results[k]: this rank's result of policy k (a rank that does not own a whole policy passes an
// empty result with only `policy` set). scored: tokens every policy scores; chunk: tokens per
// progress record. Every rank calls it; afterwards every rank holds the merged results.
Status MergeStreamRanks(dist::Comm& comm, const std::vector<int>& owners, int64_t scored,
                        int64_t chunk, std::vector<StreamEvalResult>& results);

}  // namespace attnlab::cli

#endif  // ATTNLAB_TOOLS_STREAM_RANKS_H_
