#include "diagnostics/extreme_tokens.h"

#include <cmath>
#include <string>

#include "dist/comm.h"

namespace attnlab {
namespace {

double RowNorm(const float* x, int64_t n) {
  double s = 0;
  for (int64_t c = 0; c < n; ++c) s += static_cast<double>(x[c]) * x[c];
  return std::sqrt(s);
}

}  // namespace

Result<TokenZeroNorm> ComputeTokenZeroNorm(const TokenMatrix& x) {
  ATTNLAB_RETURN_IF_ERROR(ValidateTokenMatrix(x, "token-0 norm input"));
  if (x.rows < 2) {
    return Status::InvalidArgument("token-0 norm: needs at least 2 tokens, got " +
                                   std::to_string(x.rows));
  }
  TokenZeroNorm r;
  r.norm0 = RowNorm(x.row(0), x.cols);
  double sum = 0;
  for (int64_t t = 1; t < x.rows; ++t) sum += RowNorm(x.row(t), x.cols);
  r.mean_other = sum / static_cast<double>(x.rows - 1);
  r.ratio = r.mean_other > 0 ? r.norm0 / r.mean_other : std::nan("");
  return r;
}

Result<TokenZeroNorm> ComputeTokenZeroNormAcrossRanks(const TokenMatrix& local, dist::Comm& comm) {
  const Status mine = local.rows < 0   ? Status::InvalidArgument("token-0 norm: negative row count")
                      : local.rows > 0 ? ValidateTokenMatrix(local, "token-0 norm input")
                                       : Status::Ok();
  // [bad, rows, norm0 (rank 0's first row), the other rows' norms]
  std::vector<double> v = {mine.ok() ? 0.0 : 1.0, static_cast<double>(std::max<int64_t>(0, local.rows)),
                           0.0, 0.0};
  if (mine.ok()) {
    for (int64_t t = 0; t < local.rows; ++t) {
      const double n = RowNorm(local.row(t), local.cols);
      if (comm.rank() == 0 && t == 0) v[2] = n;
      else v[3] += n;
    }
  }
  ATTNLAB_RETURN_IF_ERROR(comm.AllReduceSum(std::span<double>(v), "token-0 norm"));
  ATTNLAB_RETURN_IF_ERROR(mine);
  if (v[0] > 0) return Status::InvalidArgument("token-0 norm: another rank's part is invalid");
  const int64_t T = static_cast<int64_t>(v[1]);
  if (T < 2) {
    return Status::InvalidArgument("token-0 norm: needs at least 2 tokens, got " + std::to_string(T));
  }
  TokenZeroNorm r;
  r.norm0 = v[2];
  r.mean_other = v[3] / static_cast<double>(T - 1);
  r.ratio = r.mean_other > 0 ? r.norm0 / r.mean_other : std::nan("");
  return r;
}

Result<std::vector<HeadActivity>> ClassifyHeadActivity(const TokenMatrix& att, int64_t heads,
                                                       std::span<const float> first, double eps) {
  ATTNLAB_RETURN_IF_ERROR(ValidateTokenMatrix(att, "head outputs"));
  if (heads < 1 || att.cols % heads != 0) {
    return Status::InvalidArgument("head activity: " + std::to_string(att.cols) +
                                   " output columns do not split into " + std::to_string(heads) +
                                   " heads");
  }
  if (static_cast<int64_t>(first.size()) != heads * att.rows) {
    return Status::InvalidArgument("head activity: expected " + std::to_string(heads * att.rows) +
                                   " key-0 weights (heads x rows), got " +
                                   std::to_string(first.size()));
  }
  const int64_t T = att.rows, hd = att.cols / heads;
  std::vector<double> first_sum(heads, 0.0), norm_sum(heads, 0.0);
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t i = 0; i < T; ++i) {
      first_sum[h] += first[h * T + i];
      norm_sum[h] += RowNorm(att.row(i) + h * hd, hd);
    }
  }
  return ClassifyHeadActivityFromSums(first_sum, norm_sum, T, eps);
}

Result<std::vector<HeadActivity>> ClassifyHeadActivityFromSums(std::span<const double> first_sum,
                                                               std::span<const double> norm_sum,
                                                               int64_t T, double eps) {
  const int64_t heads = static_cast<int64_t>(first_sum.size());
  if (heads < 1 || norm_sum.size() != first_sum.size() || T < 1) {
    return Status::InvalidArgument("head activity: " + std::to_string(first_sum.size()) +
                                   " key-0 sums, " + std::to_string(norm_sum.size()) +
                                   " norm sums and " + std::to_string(T) +
                                   " rows; need one of each per head and T >= 1");
  }
  std::vector<HeadActivity> out(heads);
  double all = 0;
  for (int64_t h = 0; h < heads; ++h) {
    out[h].alpha_1 = first_sum[h] / static_cast<double>(T);
    out[h].output_norm_ratio = norm_sum[h] / static_cast<double>(T);  // the mean norm, for now
    all += out[h].output_norm_ratio;
  }
  const double mean_all = all / static_cast<double>(heads);
  for (HeadActivity& x : out) {
    x.output_norm_ratio = mean_all > 0 ? x.output_norm_ratio / mean_all : std::nan("");
    x.dormant = x.alpha_1 > eps && x.output_norm_ratio < kDormantOutputRatio;
  }
  return out;
}

}  // namespace attnlab
