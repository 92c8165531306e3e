#include "inference/sampler.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <numeric>
#include <vector>

namespace attnlab {

namespace {
std::string Num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}
}  // namespace

// The messages name the CLI's flags (attnlab generate is the caller).
Status ValidateSampler(const SamplerConfig& c) {
  if (!(c.temperature >= 0.0f) || !std::isfinite(c.temperature)) {
    return Status::InvalidArgument("--temperature must be >= 0 (0 = greedy), got " +
                                   Num(c.temperature));
  }
  if (c.top_k < 0) {
    return Status::InvalidArgument("--top-k must be >= 0 (0 = no limit), got " +
                                   std::to_string(c.top_k));
  }
  if (!(c.top_p > 0.0f && c.top_p <= 1.0f)) {
    return Status::InvalidArgument("--top-p must be in (0, 1], got " + Num(c.top_p));
  }
  return Status::Ok();
}

int32_t Sampler::Sample(std::span<const float> logits) {
  const int64_t V = static_cast<int64_t>(logits.size());
  if (config_.temperature == 0.0f) {
    return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  }
  // Candidates sorted by logit (descending), cut by top-k.
  std::vector<int32_t> idx(V);
  std::iota(idx.begin(), idx.end(), 0);
  const int64_t k = config_.top_k > 0 ? std::min<int64_t>(config_.top_k, V) : V;
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  });
  idx.resize(k);
  const double m = logits[idx[0]];
  std::vector<double> p(k);
  double sum = 0;
  for (int64_t i = 0; i < k; ++i) {
    p[i] = std::exp((logits[idx[i]] - m) / config_.temperature);
    sum += p[i];
  }
  // Nucleus: the smallest prefix with mass >= top_p.
  int64_t keep = k;
  if (config_.top_p < 1.0f) {
    double acc = 0;
    for (int64_t i = 0; i < k; ++i) {
      acc += p[i] / sum;
      if (acc >= config_.top_p) {
        keep = i + 1;
        break;
      }
    }
  }
  double mass = 0;
  for (int64_t i = 0; i < keep; ++i) mass += p[i];
  std::uniform_real_distribution<double> u(0.0, mass);
  double r = u(rng_);
  for (int64_t i = 0; i < keep; ++i) {
    r -= p[i];
    if (r <= 0) return idx[i];
  }
  return idx[keep - 1];
}

}  // namespace attnlab
