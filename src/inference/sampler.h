// Next-token sampling from logits: temperature, top-k, top-p (nucleus; Holtzman et al. 2020).
#ifndef ATTNLAB_INFERENCE_SAMPLER_H_
#define ATTNLAB_INFERENCE_SAMPLER_H_

#include <cstdint>
#include <random>
#include <span>

#include "attnlab/status.h"

namespace attnlab {

struct SamplerConfig {
  float temperature = 1.0f;  // 0: greedy (argmax)
  int64_t top_k = 0;         // 0: no limit
  float top_p = 1.0f;        // 1: no limit
  uint64_t seed = 0;
};

Status ValidateSampler(const SamplerConfig& c);

class Sampler {
 public:
  explicit Sampler(const SamplerConfig& c) : config_(c), rng_(c.seed) {}
  // Draws a token id from logits [vocab]. Deterministic for a fixed seed.
  int32_t Sample(std::span<const float> logits);

 private:
  SamplerConfig config_;
  std::mt19937_64 rng_;
};

}  // namespace attnlab

#endif  // ATTNLAB_INFERENCE_SAMPLER_H_
