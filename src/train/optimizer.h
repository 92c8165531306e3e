// AdamW (Loshchilov & Hutter 2019, arXiv:1711.05101) with decoupled weight decay, a linear
// warmup + cosine learning-rate schedule, and gradient clipping by global norm.
#ifndef ATTNLAB_TRAIN_OPTIMIZER_H_
#define ATTNLAB_TRAIN_OPTIMIZER_H_

#include <cstdint>

#include "model/parameters.h"

namespace attnlab {

class ThreadPool;

struct AdamWConfig {
  float lr = 1e-3f;  // peak learning rate
  float min_lr = 1e-4f;
  float beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f;
  float weight_decay = 0.1f;  // applied to tensors with ParamInfo::decay
  int64_t warmup_steps = 100;
  int64_t total_steps = 1000;  // cosine reaches min_lr here
  float grad_clip = 1.0f;      // global-norm clipping; <= 0 disables
};

// lr(step) for step >= 0: linear warmup from lr/warmup to lr, then cosine decay to min_lr at
// total_steps, then min_lr.
float LearningRateAt(const AdamWConfig& c, int64_t step);

// Global L2 norm of every gradient, in a fixed summation order (bit-reproducible).
double GradientNorm(const ParameterStore& grads, ThreadPool* pool = nullptr);

class AdamW {
 public:
  AdamW(const ModelConfig& model, const AdamWConfig& config);
  const AdamWConfig& config() const { return config_; }
  ParameterStore& m() { return m_; }
  ParameterStore& v() { return v_; }
  int64_t step() const { return step_; }  // updates applied so far
  void set_step(int64_t s) { step_ = s; }

  // One update: clips grads by global norm (scaling them in place), then
  // m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2; p -= lr (m^ / (sqrt(v^) + eps) + wd p),
  // with bias-corrected m^, v^. Returns the pre-clipping gradient norm. If that norm is NaN or
  // Inf nothing is updated (step() does not advance).
  double Step(ParameterStore& params, ParameterStore& grads, ThreadPool* pool = nullptr);

 private:
  AdamWConfig config_;
  ParameterStore m_, v_;
  int64_t step_ = 0;
};

}  // namespace attnlab

#endif  // ATTNLAB_TRAIN_OPTIMIZER_H_
