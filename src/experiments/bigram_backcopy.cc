#include "experiments/bigram_backcopy.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "train/token_data.h"

namespace attnlab::experiments {
namespace {

// A counter-based uniform stream: value i is SplitMix64(seed + i).
struct Uniform {
  uint64_t state;
  uint64_t Next() { return SplitMix64(state++); }
  double Unit() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }  // [0, 1)
  int64_t Below(int64_t n) { return static_cast<int64_t>(Next() % static_cast<uint64_t>(n)); }
};

}  // namespace

Result<BigramBackcopy> BigramBackcopy::Create(const BigramBackcopyOptions& o) {
  if (o.vocab > std::numeric_limits<int32_t>::max() || o.triggers < 1 || o.successors < 1 ||
      o.triggers + o.successors > o.vocab) {
    return Status::InvalidArgument(
        "bigram-backcopy: need 1 <= triggers, 1 <= successors, triggers + successors <= vocab "
        "(got vocab " + std::to_string(o.vocab) + ", triggers " + std::to_string(o.triggers) +
        ", successors " + std::to_string(o.successors) + ")");
  }
  if (!(o.trigger_mass >= 0 && o.trigger_mass < 1)) {
    return Status::InvalidArgument("bigram-backcopy: trigger_mass must be in [0, 1)");
  }
  BigramBackcopy t;
  t.options_ = o;
  t.next_.resize(o.vocab);
  t.cdf_.resize(o.vocab);
  Uniform u{SplitMix64(o.seed ^ 0x5bd1e995ULL)};
  const int64_t plain = o.vocab - o.triggers;
  for (int64_t a = 0; a < o.vocab; ++a) {
    // `successors` distinct non-trigger ids: a partial Fisher-Yates shuffle of [triggers, vocab).
    std::vector<int32_t> pool(plain);
    for (int64_t i = 0; i < plain; ++i) pool[i] = static_cast<int32_t>(o.triggers + i);
    std::vector<double> w(o.successors);
    double z = 0;
    for (int64_t i = 0; i < o.successors; ++i) {
      std::swap(pool[i], pool[i + u.Below(plain - i)]);
      const double x = u.Unit();
      w[i] = x * x + 0.05;
      z += w[i];
    }
    std::vector<int32_t>& next = t.next_[a];
    std::vector<double>& cdf = t.cdf_[a];
    double c = 0;
    for (int64_t i = 0; i < o.successors; ++i) {
      next.push_back(pool[i]);
      c += (1 - o.trigger_mass) * w[i] / z;
      cdf.push_back(c);
    }
    for (int64_t g = 0; g < o.triggers; ++g) {
      next.push_back(static_cast<int32_t>(g));
      c += o.trigger_mass / static_cast<double>(o.triggers);
      cdf.push_back(c);
    }
    cdf.back() = 1.0;  // rounding: the last entry closes the row
  }
  return t;
}

std::vector<int32_t> BigramBackcopy::Generate(int64_t n, uint64_t stream_seed) const {
  std::vector<int32_t> x;
  if (n <= 0) return x;
  x.reserve(n);
  Uniform u{SplitMix64(stream_seed ^ 0x9e3779b97f4a7c15ULL)};
  x.push_back(static_cast<int32_t>(u.Below(options_.vocab)));
  while (static_cast<int64_t>(x.size()) < n) {
    const size_t t = x.size();
    if (t >= 2 && IsTrigger(x[t - 1])) {
      x.push_back(x[t - 2]);
      continue;
    }
    const std::vector<double>& cdf = cdf_[x[t - 1]];
    const double r = u.Unit();
    const size_t i = std::upper_bound(cdf.begin(), cdf.end(), r) - cdf.begin();
    x.push_back(next_[x[t - 1]][std::min(i, cdf.size() - 1)]);
  }
  return x;
}

double BigramBackcopy::Transition(int32_t a, int32_t b) const {
  if (a < 0 || a >= options_.vocab) return 0;
  const std::vector<int32_t>& next = next_[a];
  const std::vector<double>& cdf = cdf_[a];
  for (size_t i = 0; i < next.size(); ++i) {
    if (next[i] == b) return cdf[i] - (i ? cdf[i - 1] : 0.0);
  }
  return 0;
}

double BigramBackcopy::ConditionalEntropy(const std::vector<int32_t>& x) const {
  double nll = 0;
  int64_t n = 0;
  for (size_t t = 1; t < x.size(); ++t, ++n) {
    if (t >= 2 && IsTrigger(x[t - 1])) continue;  // determined: x[t - 2]
    nll -= std::log(Transition(x[t - 1], x[t]));
  }
  return n ? nll / static_cast<double>(n) : 0.0;
}

}  // namespace attnlab::experiments
