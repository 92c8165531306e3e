#include "train/optimizer.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <vector>

#include "attnlab/thread_pool.h"

namespace attnlab {

float LearningRateAt(const AdamWConfig& c, int64_t step) {
  if (c.warmup_steps > 0 && step < c.warmup_steps) {
    return c.lr * static_cast<float>(step + 1) / static_cast<float>(c.warmup_steps);
  }
  if (step >= c.total_steps) return c.min_lr;
  const double span = std::max<int64_t>(1, c.total_steps - c.warmup_steps);
  const double progress = static_cast<double>(step - c.warmup_steps) / span;
  const double cosine = 0.5 * (1.0 + std::cos(std::numbers::pi * progress));
  return static_cast<float>(c.min_lr + (c.lr - c.min_lr) * cosine);
}

double GradientNorm(const ParameterStore& grads, ThreadPool* pool) {
  ThreadPool& tp = pool ? *pool : DefaultThreadPool();
  const auto& infos = grads.infos();
  std::vector<double> sums(infos.size(), 0.0);
  tp.ParallelFor(static_cast<int64_t>(infos.size()), [&](int64_t i, int) {
    const float* g = grads.Slice(infos[i]);
    double s = 0;
    for (int64_t j = 0; j < infos[i].size; ++j) s += double(g[j]) * g[j];
    sums[i] = s;
  });
  double total = 0;
  for (double s : sums) total += s;
  return std::sqrt(total);
}

AdamW::AdamW(const ModelConfig& model, const AdamWConfig& config)
    : config_(config), m_(model), v_(model) {}

double AdamW::Step(ParameterStore& params, ParameterStore& grads, ThreadPool* pool) {
  ThreadPool& tp = pool ? *pool : DefaultThreadPool();
  const double norm = GradientNorm(grads, &tp);
  if (!std::isfinite(norm)) return norm;  // NaN/Inf gradients: no update (the caller decides)
  float clip = 1.0f;
  if (config_.grad_clip > 0 && norm > config_.grad_clip) {
    clip = static_cast<float>(config_.grad_clip / norm);
  }
  const float lr = LearningRateAt(config_, step_);
  ++step_;
  const float b1 = config_.beta1, b2 = config_.beta2;
  const float c1 = 1.0f / (1.0f - std::pow(b1, static_cast<float>(step_)));
  const float c2 = 1.0f / (1.0f - std::pow(b2, static_cast<float>(step_)));
  const auto& infos = params.infos();
  // Chunks of at most 64k floats within a tensor: a fixed partition, elementwise updates.
  struct Chunk {
    size_t info;
    int64_t begin, end;
  };
  std::vector<Chunk> chunks;
  for (size_t i = 0; i < infos.size(); ++i) {
    for (int64_t b = 0; b < infos[i].size; b += 65536) {
      chunks.push_back({i, b, std::min(infos[i].size, b + 65536)});
    }
  }
  tp.ParallelFor(static_cast<int64_t>(chunks.size()), [&](int64_t ci, int) {
    const Chunk& ch = chunks[ci];
    const ParamInfo& info = infos[ch.info];
    float* p = params.Slice(info);
    float* g = grads.Slice(info);
    float* m = m_.Slice(info);
    float* v = v_.Slice(info);
    const float wd = info.decay ? config_.weight_decay : 0.0f;
    for (int64_t j = ch.begin; j < ch.end; ++j) {
      const float gj = g[j] * clip;
      m[j] = b1 * m[j] + (1.0f - b1) * gj;
      v[j] = b2 * v[j] + (1.0f - b2) * gj * gj;
      const float mhat = m[j] * c1, vhat = v[j] * c2;
      p[j] -= lr * (mhat / (std::sqrt(vhat) + config_.eps) + wd * p[j]);
    }
  });
  return norm;
}

}  // namespace attnlab
