// Two training-side remedies against attention / representation collapse, as auxiliary losses
// added to the language-modelling loss, with hand-written gradients (docs/EXPERIMENTS.md,
// "collapse-training", states them with their references).
//
// Head diversity (output disagreement; Li et al. 2018, "Multi-Head Attention with Disagreement
// Regularization", EMNLP, arXiv:1810.10183, section 3.3): for layer l with per-head attention
// outputs o_{n,h} (row n, head h, head_dim values, before the output projection),
//   D_l = 1/N sum_n 2/(H(H-1)) sum_{h<h'} cos(o_{n,h}, o_{n,h'})
//   D   = 1/L sum_l D_l                                   in [-1/(H-1), 1]; 1 = identical heads
// (Li et al. maximise -D; we minimise D.) A zero head vector has cosine 0 with everything and no
// gradient.
//
// Contrastive loss between consecutive layers (InfoNCE, van den Oord et al. 2018,
// arXiv:1807.03748; as an anti-collapse term it is the "uniformity" side of contrastive learning,
// Wang & Isola 2020, arXiv:2005.10242): for each sequence and each pair of consecutive layer
// outputs X = residual(l), Y = residual(l + 1), l = 1 .. L-1 (T rows each), with unit rows
// u_i = x_i / |x_i|, w_j = y_j / |y_j| and temperature tau,
//   s_ij = u_i . w_j / tau,     I_l = -1/T sum_i log( exp(s_ii) / sum_j exp(s_ij) )
//   I    = mean over sequences and pairs of I_l             in [0, ...); ln T if either layer's
//                                                           tokens are all identical
// Each token at layer l must pick out its own representation at layer l + 1 among the
// sequence's tokens: identical (collapsed) tokens cannot, so the loss pushes them apart while
// keeping each token's identity across depth. A zero row counts as u = 0 (no gradient).
//
// The first-token penalty R against attention sinks (train/first_token_penalty.h: the mean over
// layers and heads of alpha_1^p) is the third term.
//
// Total auxiliary loss A = diversity_weight * D + contrastive_weight * I + first_token_weight * R;
// its gradients go into Gpt::Backward through AuxiliaryGradients (model/gpt.h).
#ifndef ATTNLAB_TRAIN_AUXILIARY_LOSSES_H_
#define ATTNLAB_TRAIN_AUXILIARY_LOSSES_H_

#include <cstdint>
#include <vector>

#include "attnlab/status.h"
#include "model/gpt.h"

namespace attnlab {

// ---- The two losses on raw arrays (templated so that tests can check them in double) ----------

// D over `rows` rows of `heads` heads: att row n, head h at att + n * stride + h * head_dim.
// Returns 1/rows sum_n 2/(H(H-1)) sum_{h<h'} cos (0 when heads < 2). If grad is non-null, ADDS
// scale * dD/d att to it (same layout).
template <typename T>
double HeadCosineLoss(const T* att, int64_t rows, int64_t heads, int64_t head_dim, int64_t stride,
                      T* grad, double scale);

// I_l for one sequence: x, y [T, C] with row stride `stride`. If gx / gy are non-null, ADDS
// scale * dI/dx and scale * dI/dy. REQUIRES: T >= 1, C >= 1, tau > 0.
template <typename T>
double InfoNceLoss(const T* x, const T* y, int64_t rows, int64_t cols, int64_t stride, double tau,
                   T* gx, T* gy, double scale);

// ---- On a model's last Forward ----------------------------------------------------------------

struct AuxiliaryLossOptions {
  double diversity_weight = 0;    // weight of D
  double contrastive_weight = 0;  // weight of I
  double temperature = 0.1;       // tau
  double first_token_weight = 0;  // weight of R
  int first_token_power = 2;      // p of R: 1 (L1) or 2 (L2)
};

class AuxiliaryLosses {
 public:
  explicit AuxiliaryLosses(const AuxiliaryLossOptions& options) : options_(options) {}

  // Computes D, I and the gradients of A from the activations of model's last Forward (batch B,
  // Tm rows per sequence). A weight of 0 skips that loss.
  Status Compute(const Gpt& model);

  double diversity() const { return diversity_; }      // D (unweighted)
  double contrastive() const { return contrastive_; }  // I (unweighted)
  double first_token() const { return first_token_; }  // R (unweighted)
  double loss() const {                                // A
    return options_.diversity_weight * diversity_ + options_.contrastive_weight * contrastive_ +
           options_.first_token_weight * first_token_;
  }
  // dA/d activations, for Gpt::Backward(grad_scale, &gradients()).
  const AuxiliaryGradients& gradients() const { return grads_; }
  const AuxiliaryLossOptions& options() const { return options_; }

 private:
  AuxiliaryLossOptions options_;
  double diversity_ = 0, contrastive_ = 0, first_token_ = 0;
  std::vector<float> d_res_, d_att_, d_qkv_;  // [L + 1, N, C], [L, N, A], [L, N, Q]
  Status ComputeFirstToken(const Gpt& model);
  AuxiliaryGradients grads_;
};

}  // namespace attnlab

#endif  // ATTNLAB_TRAIN_AUXILIARY_LOSSES_H_
