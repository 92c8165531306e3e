// Statistics of gated attention's output gate (Qiu et al. 2025, arXiv:2505.06708, G1: each
// head's SDPA output times sigmoid(X W_g + b_g)), per head: how open the gate is on average,
// how much it varies between tokens (the paper's query-dependent sparsity), and the share of
// nearly closed gates. Streamed: O(heads) state whatever the number of rows.
#ifndef ATTNLAB_DIAGNOSTICS_GATE_STATS_H_
#define ATTNLAB_DIAGNOSTICS_GATE_STATS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "attnlab/status.h"
#include "dist/comm.h"

namespace attnlab {

// Over every gate value g of the head (each row; elementwise, each of the head's hd channels):
struct GateHeadStats {
  double mean = 0;          // mean g
  double std = 0;           // population standard deviation of g (the spread)
  double share_closed = 0;  // share of values g < kGateClosed
  int64_t values = 0;       // how many values (0: every field NaN)
};

inline constexpr double kGateClosed = 0.1;

class GateStatsAccumulator {
 public:
  // heads >= 1; gate_dim a positive multiple of heads (heads: headwise, heads * hd: elementwise).
  static Result<GateStatsAccumulator> Create(int64_t heads, int64_t gate_dim);
  // gate: [rows, gate_dim] sigmoid outputs; gate column e belongs to head e / (gate_dim / heads).
  Status Add(const float* gate, int64_t rows);
  std::vector<GateHeadStats> Finish() const;  // [heads]
  // Distributed runs: the sums and counts of every rank, added in rank order (every rank calls
  // it and holds the merged state after).
  Status AllReduce(dist::Comm& comm, const std::string& what);

 private:
  GateStatsAccumulator(int64_t heads, int64_t gate_dim);
  int64_t heads_, gate_dim_;
  std::vector<double> sum_, sum_sq_;
  std::vector<int64_t> closed_, count_;
};

}  // namespace attnlab

#endif  // ATTNLAB_DIAGNOSTICS_GATE_STATS_H_
