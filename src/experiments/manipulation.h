// Steering one head's attention without steering the predictions (the mission's document on
// attention's limits: attention weights can be moved by a small input change while the output
// stays put, so they are a weak explanation; Jain & Wallace 2019, "Attention is not
// Explanation", arXiv:1902.10186; Serrano & Smith 2019, arXiv:1906.03731; Wiegreffe & Pinter
// 2019, "Attention is not not Explanation", arXiv:1908.04626, for the counterpoint).
//
// For B windows of T tokens of a model (positions Tm = T, +1 with a dedicated sink token) and a
// head (layer l, head h), an additive perturbation delta [B, Tm, C] of the stream entering layer
// 0 (the embeddings, blocks.0.hook_resid_pre) is scored by
//   J(delta) = -m_c(delta) + w * max(0, KL(delta) - kl_free)
//   m_c = 1/B sum_b 1/(Tm - c) sum_{t >= c} P^{l,h}_b[t, c]          (train/first_token_penalty.h)
//   KL  = 1/(B Tm) sum_{b,t} KL(p_clean[b, t] || p_delta[b, t])       (next-token distributions)
// (kl_free = 0: a plain penalty; kl_free > 0: any change of the predictions up to that KL is
// free, so minimising J asks how far the attention moves within a KL allowance), with its
// gradient through the model's own backward: dm_c/d q|k of layer l by KeyShare
// (AuxiliaryGradients::qkv), dKL/d logits = (p_delta - p_clean) / (B Tm)
// (AuxiliaryGradients::logits), then Gpt::input_gradient(). MoveAttention minimises J over
// ||delta_b|| <= budget * ||x0_b|| (each window's Frobenius norm against its clean stream's) by
// projected, normalised gradient steps.
//
// The converse (Jain & Wallace's setting): the head's attention replaced directly
// (blocks.l.attn.hook_pattern) by a chosen distribution, and the output change it causes.
#ifndef ATTNLAB_EXPERIMENTS_MANIPULATION_H_
#define ATTNLAB_EXPERIMENTS_MANIPULATION_H_

#include <cstdint>
#include <vector>

#include "attnlab/status.h"
#include "model/gpt.h"

namespace attnlab::experiments {

struct ManipulationTarget {
  int64_t layer = 0, head = 0;
  int64_t key = 0;  // c, a model position (the dedicated sink token, if any, is position 0)
};

// What a forward at some delta (or with an imposed pattern) gives, against the clean forward.
struct ManipulationValue {
  double mass = 0;       // m_c: the head's attention share on key c (rows t >= c)
  double kl = 0;         // mean KL(p_clean || p) in nats over the B Tm rows
  double top1 = 0;       // share of rows whose most likely next token is the clean one
  double objective = 0;  // -mass + w * max(0, kl - kl_free)
};

// How the converse experiment rewrites head h's rows of layer l's pattern.
enum class ImposedPattern {
  kNone,      // unchanged (the explicit path against the flash kernel's clean forward)
  kOnTarget,  // rows t >= c: all attention on key c (rows t < c unchanged)
  kPermuted,  // each row's visible weights randomly permuted among its visible keys
  kUniform,   // each row uniform over its visible keys
};

class ManipulationObjective {
 public:
  // tokens [B, T]. InvalidArgument for a model whose attention KeyShare does not describe
  // (CheckKeyShareSupported), an inference-only model (Backward needs fp32 weights), a layer,
  // head or key out of range, a negative weight or allowance, or bad tokens (Gpt::Forward's
  // checks). Runs the clean forward. The model's hooks are set during each call and cleared after it.
  static Result<ManipulationObjective> Create(Gpt& g, std::vector<int32_t> tokens, int64_t B,
                                              int64_t T, const ManipulationTarget& target,
                                              double kl_weight, double kl_free = 0);

  // J and its parts at delta ([B, Tm, C]); with grad, dJ/d delta into *grad (resized).
  Result<ManipulationValue> Evaluate(const std::vector<float>& delta, std::vector<float>* grad);
  // The clean input with head h of layer l's pattern rewritten (permutations drawn from seed).
  Result<ManipulationValue> EvaluateImposed(ImposedPattern pattern, uint64_t seed);

  const std::vector<float>& clean_stream() const { return x0_; }  // [B, Tm, C]
  const ManipulationValue& clean() const { return clean_; }
  int64_t batch() const { return B_; }
  int64_t positions() const { return Tm_; }
  int64_t width() const { return C_; }

 private:
  ManipulationObjective(Gpt& g, std::vector<int32_t> tokens, int64_t B, int64_t T,
                        const ManipulationTarget& target, double kl_weight, double kl_free);
  // Runs the forward (targets all -1; delta and/or a pattern rewrite, where non-null) and
  // scores it; with grad, the backward.
  Result<ManipulationValue> Run(const std::vector<float>* delta, const ImposedPattern* pattern,
                                uint64_t seed, std::vector<float>* grad);

  Gpt* g_;
  std::vector<int32_t> tokens_, no_targets_;
  int64_t B_, T_, Tm_ = 0, C_ = 0, V_ = 0;
  ManipulationTarget target_;
  double w_, kl_free_;
  std::vector<float> x0_;           // [B, Tm, C] the clean stream entering layer 0
  std::vector<float> p_clean_;      // [B Tm, V] clean next-token probabilities
  std::vector<double> logp_clean_;  // [B Tm, V] their logs (floored at 1e-30)
  std::vector<int32_t> top_clean_;  // [B Tm] clean argmax
  ManipulationValue clean_;
};

// Projected, normalised gradient descent on J from delta = 0 with an adaptive step: each step
// moves window b by lr * R_b along -dJ/d delta_b / ||dJ/d delta_b|| (R_b = budget * ||x0_b||)
// and projects it back onto ||delta_b|| <= R_b; a step that lowers J is kept and the next one
// is 1.5x longer (at most R_b), one that does not is dropped and lr halves (lr starts at 0.05).
// J never rises; returns the last kept iterate and its value. It starts from delta 0, or from
// *start projected onto the ball (e.g. a smaller budget's result, so that a larger budget never
// ends worse). budget >= 0, steps >= 1 (one evaluation each, plus one at the start).
struct MoveResult {
  std::vector<float> delta;  // [B, Tm, C]
  ManipulationValue value;
  int64_t evaluations = 0;
};
Result<MoveResult> MoveAttention(ManipulationObjective& obj, double budget, int64_t steps,
                                 const std::vector<float>* start = nullptr);

// A random perturbation with the same per-window norms as `like` (Gaussian directions from
// seed): the control for an optimised one.
std::vector<float> RandomLike(const std::vector<float>& like, int64_t B, uint64_t seed);

// Per-window Frobenius norms of x [B, rows, C] (rows * C floats per window).
std::vector<double> WindowNorms(const std::vector<float>& x, int64_t B);

}  // namespace attnlab::experiments

#endif  // ATTNLAB_EXPERIMENTS_MANIPULATION_H_
