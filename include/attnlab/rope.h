// attnlab/rope.h: rotary position embeddings (RoPE; Su et al. 2021, arXiv:2104.09864), with the
// two common memory layouts, partial rotary, and the context-extension scalings (linear
// interpolation, NTK-aware, YaRN). Forward and backward rotate a strided
// [batch, heads, len, head_dim] view in place at arbitrary integer positions per token.
//
// ----------------------------------------------------------------------------------------------
// Semantics (the one place they are defined).
//
// Let d = rotary_dim (even, 2 <= d <= head_dim) and i in [0, d/2). Dimensions [d, head_dim) pass
// through unchanged ("partial rotary", GPT-NeoX / Phi).
//
// Frequencies (radians per position): theta_i = base^(-2i/d).
//
// Pairs. Pair i is rotated by the angle m * theta'_i at position m:
//   kNeox (GPT-NeoX, Llama in Hugging Face, "rotate_half"):  (x[i], x[i + d/2])
//   kGptJ (GPT-J, Meta's original Llama, interleaved):       (x[2i], x[2i + 1])
// A pair (a, b) becomes (a cos - b sin, a sin + b cos) times the attention factor A:
//
//   head_dim = 6, d = 4:  kNeox pairs (0,2) (1,3), 4 5 pass    kGptJ pairs (0,1) (2,3), 4 5 pass
//                                     theta_0 theta_1                      theta_0 theta_1
//
// Scalings (factor s >= 1, L = original_context, the training context length):
//   kNone:   theta'_i = theta_i.                                  A = 1.   (requires s == 1)
//   kLinear: position interpolation, m -> m / s (Chen et al. 2023, arXiv:2306.15595):
//            theta'_i = theta_i / s.                              A = 1.
//   kNtk:    NTK-aware base change (bloc97 2023; Code Llama's larger base is the same idea):
//            base' = base * s^(d / (d - 2)), theta'_i = base'^(-2i/d). The highest frequency
//            (i = 0) is unchanged and the lowest (i = d/2 - 1) is exactly theta_i / s.
//            A = 1. Requires d >= 4 (with d = 2 the one frequency is both highest and lowest).
//   kYarn:   YaRN (Peng et al. 2023, arXiv:2309.00071, eqs. 16-20 and sec. 3.4):
//            lambda_i = 2 pi / theta_i, r_i = L / lambda_i (rotations over the training context),
//            gamma(r) = 0 if r < alpha, 1 if r > beta, (r - alpha) / (beta - alpha) otherwise,
//            theta'_i = (1 - gamma(r_i)) * theta_i / s + gamma(r_i) * theta_i
//            (high-frequency pairs extrapolate unchanged, low-frequency pairs interpolate).
//            A = YarnAttentionFactor(s) = 0.1 ln(s) + 1, the paper's sqrt(1/t): multiplying both
//            q and k by A scales the logits q.k by A^2 = 1/t. As in Hugging Face / vLLM
//            ("mscale"), A is folded into the stored cos and sin, so it multiplies the ROTATED
//            dimensions [0, d) only; pass-through dimensions [d, head_dim) are not scaled (with
//            partial rotary the logit temperature therefore applies to the rotary part only).
//            The ramp is the paper's continuous gamma(r_i); Hugging Face instead rounds the
//            ramp's end points to whole dimension indices, so its theta' can differ slightly.
//   kYarnHf: YaRN exactly as Hugging Face transformers computes it (_compute_yarn_parameters,
//            the rope_scaling type "yarn" of config.json): the ramp runs over pair indices,
//            low = floor(D(beta)), high = ceil(D(alpha)) with D(r) = d ln(L / (2 pi r)) /
//            (2 ln base), clamped to [0, d - 1] (high += 0.001 when equal); ramp_i =
//            clamp((i - low) / (high - low), 0, 1), theta'_i = theta_i / s * ramp_i +
//            theta_i (1 - ramp_i). A = attention_factor if > 0, else 0.1 ln(s) + 1.
//   kDynamicHf: transformers' dynamic NTK (rope_type "dynamic", _compute_dynamic_ntk_parameters):
//            the frequencies depend on the length S = max(dynamic_length, L) of the sequence
//            they serve: base' = base * (s S / L - (s - 1))^(d / (d - 2)), theta'_i =
//            base'^(-2i/d). Up to L this is plain RoPE. A = 1. The model (model/gpt.h) sets
//            dynamic_length to each forward's last position + 1, as transformers does; keys
//            cached by an earlier, shorter step keep the rotation they were cached with (also as
//            transformers' cache does), so decoding past L differs from one full forward there.
//   kLlama3: Llama 3.1's rule (rope_type "llama3"): with wavelength w_i = 2 pi / theta_i,
//            w_lo = L / low_freq_factor, w_hi = L / high_freq_factor: theta'_i = theta_i if
//            w_i < w_hi, theta_i / s if w_i > w_lo, else (1 - k) theta_i / s + k theta_i
//            with k = (L / w_i - low_freq_factor) / (high_freq_factor - low_freq_factor). A = 1.
//
// Precision. theta'_i and every angle m * theta'_i are computed in double; the table stores
// A*cos and A*sin as float. Kernels on double views widen those float values (so a double view is
// rotated by exactly the same numbers as a float view; useful for gradient checks).
// ----------------------------------------------------------------------------------------------
#ifndef ATTNLAB_ROPE_H_
#define ATTNLAB_ROPE_H_

#include <cstdint>
#include <span>
#include <vector>

#include "attnlab/status.h"
#include "attnlab/tensor_view.h"

namespace attnlab {

enum class RopeLayout { kNeox, kGptJ };
enum class RopeScaling { kNone, kLinear, kNtk, kYarn, kYarnHf, kLlama3, kDynamicHf };

struct RopeConfig {
  int64_t head_dim = 0;    // elements per head vector
  int64_t rotary_dim = 0;  // leading dimensions rotated; even, 2 <= rotary_dim <= head_dim
  double base = 10000.0;   // > 1
  RopeLayout layout = RopeLayout::kNeox;
  RopeScaling scaling = RopeScaling::kNone;
  double factor = 1.0;           // s >= 1; must be 1 for kNone
  int64_t original_context = 0;  // L, the training context; required (> 0) for kYarn
  double yarn_alpha = 1.0;       // kYarn ramp start (r below: interpolate), >= 0
  double yarn_beta = 32.0;       // kYarn ramp end (r above: extrapolate), > yarn_alpha
  double attention_factor = 0.0;  // kYarnHf: A (0: 0.1 ln(s) + 1)
  double low_freq_factor = 1.0;   // kLlama3
  double high_freq_factor = 4.0;  // kLlama3, > low_freq_factor
  int64_t dynamic_length = 0;     // kDynamicHf: S, the sequence length served (0: L)
};

// Checks every field; the error says which field, what was found and what is allowed.
Status ValidateRope(const RopeConfig& config);

// The YaRN paper's sqrt(1/t) = 0.1 ln(s) + 1 (the factor applied to q and k). REQUIRES: s >= 1.
double YarnAttentionFactor(double s);

// Scaled frequencies theta'_i (radians per position), i in [0, rotary_dim / 2).
Result<std::vector<double>> RopeFrequencies(const RopeConfig& config);

// cos and sin of every (position, pair), precomputed in double, stored as float, with the
// attention factor folded in.
class RopeTable {
 public:
  // REQUIRES: 1 <= max_position; max_position * rotary_dim <= 2^31 (else kOutOfRange).
  static Result<RopeTable> Make(const RopeConfig& config, int64_t max_position);

  const RopeConfig& config() const { return config_; }
  int64_t max_position() const { return max_position_; }  // valid positions: [0, max_position)
  int64_t head_dim() const { return config_.head_dim; }
  int64_t rotary_dim() const { return config_.rotary_dim; }
  int64_t pairs() const { return config_.rotary_dim / 2; }

  // theta'_i in double: [pairs()].
  const std::vector<double>& Frequencies() const { return freqs_; }
  // A: YarnAttentionFactor(factor) for kYarn (kYarnHf: attention_factor or that), else 1.
  double AttentionFactor() const { return attention_factor_; }

  // A * cos(position * theta'_i) and A * sin(...), i in [0, pairs()).
  // REQUIRES: 0 <= position < max_position().
  std::span<const float> Cos(int64_t position) const {
    return {cos_.data() + position * pairs(), static_cast<size_t>(pairs())};
  }
  std::span<const float> Sin(int64_t position) const {
    return {sin_.data() + position * pairs(), static_cast<size_t>(pairs())};
  }

 private:
  RopeTable() = default;
  RopeConfig config_;
  int64_t max_position_ = 0;
  std::vector<double> freqs_;  // [pairs]
  double attention_factor_ = 1.0;
  std::vector<float> cos_;  // [max_position, pairs]
  std::vector<float> sin_;  // [max_position, pairs]
};

// Rotates x in place: token t of every (batch, head) is rotated to position positions[t] and its
// rotary dimensions are multiplied by the attention factor (see the header comment).
// x: [batch, heads, len, head_dim] with head_dim = table.head_dim(); positions: [len].
// REQUIRES (else a Status): batch, heads, len >= 0; positions.size() == len; every position in
// [0, table.max_position()); strides inside x.size with no two elements at one address.
Status RopeForward(const RopeTable& table, const TensorView4<float>& x, int64_t batch,
                   int64_t heads, int64_t len, std::span<const int64_t> positions);
Status RopeForward(const RopeTable& table, const TensorView4<double>& x, int64_t batch,
                   int64_t heads, int64_t len, std::span<const int64_t> positions);

// Backward of RopeForward, in place on the gradient. In the forward pass this was
// y = A R(m theta') x per pair, a linear map; so dx = A R(-m theta') dy (its transpose), with the
// pass-through dimensions' gradient unchanged. Same arguments and requirements as RopeForward.
Status RopeBackward(const RopeTable& table, const TensorView4<float>& grad, int64_t batch,
                    int64_t heads, int64_t len, std::span<const int64_t> positions);
Status RopeBackward(const RopeTable& table, const TensorView4<double>& grad, int64_t batch,
                    int64_t heads, int64_t len, std::span<const int64_t> positions);

// Re-rotates ONE already-rotated vector by position_delta positions (any int64, negative moves it
// back), e.g. cached keys when a streaming KV cache shifts positions. A pure rotation: the
// attention factor is NOT applied again, and the position need not be inside the table. The
// angle position_delta * theta'_i and its cos/sin are computed in double from Frequencies() (not
// read from the float table), so repeated re-rotation accumulates no angle error; each call only
// rounds x to its storage type once (float: relative error ~6e-8 per call, a random walk; double
// storage is exact to ~1e-16 per call). A cache that shifts often should prefer one call with the
// total delta. x: [head_dim] contiguous. REQUIRES: x points to table.head_dim() elements.
void RopeRotateVector(const RopeTable& table, float* x, int64_t position_delta);
void RopeRotateVector(const RopeTable& table, double* x, int64_t position_delta);

}  // namespace attnlab

#endif  // ATTNLAB_ROPE_H_
