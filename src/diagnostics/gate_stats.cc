#include "diagnostics/gate_stats.h"

#include <cmath>
#include <string>

namespace attnlab {

GateStatsAccumulator::GateStatsAccumulator(int64_t heads, int64_t gate_dim)
    : heads_(heads), gate_dim_(gate_dim), sum_(heads, 0.0), sum_sq_(heads, 0.0),
      closed_(heads, 0), count_(heads, 0) {}

Result<GateStatsAccumulator> GateStatsAccumulator::Create(int64_t heads, int64_t gate_dim) {
  if (heads < 1 || gate_dim < heads || gate_dim % heads != 0) {
    return Status::InvalidArgument("gate statistics: gate_dim (" + std::to_string(gate_dim) +
                                   ") must be a positive multiple of the heads (" +
                                   std::to_string(heads) + ")");
  }
  return GateStatsAccumulator(heads, gate_dim);
}

Status GateStatsAccumulator::Add(const float* gate, int64_t rows) {
  if (rows < 0 || (rows > 0 && !gate)) {
    return Status::InvalidArgument("gate statistics: " + std::to_string(rows) +
                                   " rows and a null gate");
  }
  const int64_t per_head = gate_dim_ / heads_;
  for (int64_t n = 0; n < rows; ++n) {
    for (int64_t e = 0; e < gate_dim_; ++e) {
      const double g = gate[n * gate_dim_ + e];
      const int64_t h = e / per_head;
      sum_[h] += g;
      sum_sq_[h] += g * g;
      closed_[h] += g < kGateClosed;
      ++count_[h];
    }
  }
  return Status::Ok();
}

Status GateStatsAccumulator::AllReduce(dist::Comm& comm, const std::string& what) {
  ATTNLAB_RETURN_IF_ERROR(comm.AllReduceSum(sum_, what + " (sums)"));
  ATTNLAB_RETURN_IF_ERROR(comm.AllReduceSum(sum_sq_, what + " (squares)"));
  ATTNLAB_RETURN_IF_ERROR(comm.AllReduceSum(closed_, what + " (closed gates)"));
  return comm.AllReduceSum(count_, what + " (counts)");
}

std::vector<GateHeadStats> GateStatsAccumulator::Finish() const {
  std::vector<GateHeadStats> out(heads_);
  for (int64_t h = 0; h < heads_; ++h) {
    GateHeadStats& s = out[h];
    s.values = count_[h];
    if (count_[h] == 0) {
      s.mean = s.std = s.share_closed = std::nan("");
      continue;
    }
    const double n = static_cast<double>(count_[h]);
    s.mean = sum_[h] / n;
    // g in [0, 1]: the cancellation in E[g^2] - E[g]^2 costs at most ~1e-16 absolute.
    s.std = std::sqrt(std::max(0.0, sum_sq_[h] / n - s.mean * s.mean));
    s.share_closed = static_cast<double>(closed_[h]) / n;
  }
  return out;
}

}  // namespace attnlab
