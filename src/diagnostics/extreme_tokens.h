// Extreme-token phenomena beside the attention sink (Guo et al. 2024, "Active-Dormant Attention
// Heads: Mechanistically Demystifying Extreme-Token Phenomena in LLMs", arXiv:2410.13835):
//   value-state drain   the sink token's value vectors are small (ratio << 1)
//   residual-state peak the sink token's residual stream is large (ratio >> 1)
//   active / dormant    on a given input, a head is dormant when it parks its attention on the
//                       sink and, the sink's value being small, outputs almost nothing
// docs/METRICS.md defines each number and its reading.
#ifndef ATTNLAB_DIAGNOSTICS_EXTREME_TOKENS_H_
#define ATTNLAB_DIAGNOSTICS_EXTREME_TOKENS_H_

#include <cstdint>
#include <span>
#include <vector>

#include "attnlab/status.h"
#include "diagnostics/representation_metrics.h"

namespace attnlab {

namespace dist {
class Comm;
}

// Token 0's norm against the others': norm0 = |x_0|, mean_other = mean_{t >= 1} |x_t|,
// ratio = norm0 / mean_other. Needs T >= 2 rows (else InvalidArgument); ratio is NaN when every
// other row is 0. On a kv head's values it measures the drain, on a residual stream the peak.
struct TokenZeroNorm {
  double norm0 = 0, mean_other = 0, ratio = 0;
};
Result<TokenZeroNorm> ComputeTokenZeroNorm(const TokenMatrix& x);
// The same of a matrix striped over the ranks of `comm` (rank r holds rows r, r + P, ... in
// `local`, which may have no rows; rank 0's first row is token 0): every rank gets the whole
// matrix's numbers (the other rows' norms summed in rank order). A bad part on any rank, or
// fewer than 2 rows in all, is an error on every rank.
Result<TokenZeroNorm> ComputeTokenZeroNormAcrossRanks(const TokenMatrix& local, dist::Comm& comm);

// One head on one input (a window).
struct HeadActivity {
  double alpha_1 = 0;            // mean over the rows of the head's weight on key 0
  double output_norm_ratio = 0;  // mean_i |o_{h,i}| / (mean over heads of the same); NaN when
                                 // every head outputs 0
  bool dormant = false;          // alpha_1 > eps and output_norm_ratio < kDormantOutputRatio
};
inline constexpr double kDormantOutputRatio = 0.5;

// att: [T, heads * hd] the heads' outputs (before any output gate), head h in columns
// [h hd, (h + 1) hd); first: [heads * T], first[h * T + i] = P[i, 0] of head h (row i); eps: the
// sink threshold (Gu et al.'s, 0.3 by default). InvalidArgument on inconsistent sizes.
Result<std::vector<HeadActivity>> ClassifyHeadActivity(const TokenMatrix& att, int64_t heads,
                                                       std::span<const float> first, double eps);
// The same from sums over the T rows (what a long window accumulates chunk by chunk instead of
// keeping [T, heads * hd]): first_sum[h] = sum_i P[i, 0], norm_sum[h] = sum_i |o_{h,i}|.
// InvalidArgument unless both have the same size >= 1 and T >= 1.
Result<std::vector<HeadActivity>> ClassifyHeadActivityFromSums(std::span<const double> first_sum,
                                                               std::span<const double> norm_sum,
                                                               int64_t T, double eps);

}  // namespace attnlab

#endif  // ATTNLAB_DIAGNOSTICS_EXTREME_TOKENS_H_
