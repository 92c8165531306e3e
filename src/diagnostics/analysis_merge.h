// AnalyzeModel's distributed step (issue 36; docs/DISTRIBUTED.md): each rank has run the windows
// w with w % P == rank and holds their sums (not yet divided by the number of windows); this
// merges them over the ranks so that the result is the one-process result up to the order of the
// sums' additions. Sums and counts are added in rank order (dist::Comm::AllReduceSum); a "largest
// over windows" (massive activations) comes from the rank that holds the winning window, chosen
// by the one-process rule (the largest ratio, the earlier window on ties); the attention
// statistics merge themselves (AttentionStatsAccumulator::AllReduce). Window 0's products (the
// maps, first_window, the attention view) stay with rank 0, which runs window 0.
#ifndef ATTNLAB_DIAGNOSTICS_ANALYSIS_MERGE_H_
#define ATTNLAB_DIAGNOSTICS_ANALYSIS_MERGE_H_

#include <cstdint>
#include <vector>

#include "attnlab/status.h"
#include "diagnostics/analysis_result.h"
#include "diagnostics/attention_stats.h"
#include "diagnostics/gate_stats.h"
#include "dist/comm.h"

namespace attnlab {

// Every rank calls it, after its windows and before the divisions by the window count.
// windows_run: windows this rank ran (a rank with none takes part in no "largest" choice).
// massive_top_k: RepresentationMetricsOptions::massive.top_k (the entries each stream keeps).
Status MergeAnalysisRanks(dist::Comm& comm, const ModelConfig& c, int64_t windows_run,
                          int64_t massive_top_k, std::vector<AttentionStatsAccumulator>& stats,
                          std::vector<GateStatsAccumulator>& gates, AnalysisResult& r);

}  // namespace attnlab

#endif  // ATTNLAB_DIAGNOSTICS_ANALYSIS_MERGE_H_
