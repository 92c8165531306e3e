// The training-free dilution probe of `attnlab experiment recall`: how much attention does one
// query put on the one key that matches it, among N keys, under softmax attention and under
// linear attention (phi = elu + 1, Katharopoulos et al. 2020), as N grows?
//
// Per (N, seed): N keys k_j ~ N(0, I_d) (d = head_dim), a target index t uniform in [0, N), the
// query q = beta * k_t (it matches its key; beta > 1 is a sharper query, as a trained model can
// learn by scaling W_q), values v_t = e_0 and v_j = 0 otherwise, so that output[0] is exactly the
// attention weight on the target:
//   softmax: p_t = exp(q.k_t / sqrt(d)) / sum_j exp(q.k_j / sqrt(d))
//   linear:  p_t = phi(q).phi(k_t) / sum_j phi(q).phi(k_j)
// Both are computed twice: by the engine's kernels (AttentionForwardFlash with one query row over
// N keys; LinearAttentionForwardChunked, causal, read at its last row, which sees all N keys)
// and by plain double loops, and the two must agree. Masses are averaged over seeds.
//
// What to expect (derived in the report): phi(q).phi(k_j) is a sum of d positive terms for every
// key, so the target's weight is only a constant factor r above the others' and
// p_t ~= r / (r + N - 1) ~ r / N: linear attention's mass falls as 1/N (log-log slope -1), with
// r = E[phi(beta x) phi(x)] / (E[phi(beta x)] E[phi(x)]), x ~ N(0, 1) (1.46 at beta = 1). Softmax
// separates the target by a margin in the exponent: with |k|^2 ~= d the target scores
// beta sqrt(d) and the others ~ N(0, beta^2), so p_t ~= 1 / (1 + (N - 1) exp(beta^2/2 -
// beta sqrt(d))): near 1 until N approaches exp(beta sqrt(d)) (~1800 at d = 64, beta = 1), and
// sharpening the query pushes that point out exponentially (PredictedSoftmaxMass averages this
// over the spread of |k_t|^2, which lowers the mean mass at large N: a key with a small norm has
// a small margin).
#ifndef ATTNLAB_EXPERIMENTS_RECALL_PROBE_H_
#define ATTNLAB_EXPERIMENTS_RECALL_PROBE_H_

#include <cstdint>
#include <vector>

#include "attnlab/status.h"

namespace attnlab::experiments {

struct DilutionOptions {
  int64_t head_dim = 64;
  std::vector<int64_t> lengths;  // N values, each >= 1
  std::vector<double> betas = {1.0};  // query sharpness; each > 0
  int64_t seeds = 8;
  uint64_t seed = 1;
};

struct DilutionPoint {
  int64_t n = 0;
  double beta = 1;
  double softmax = 0, linear = 0;              // mean mass on the target (engine kernels)
  double softmax_plain = 0, linear_plain = 0;  // the same from plain double loops
  double predicted_softmax = 0, predicted_linear = 0;  // PredictedSoftmaxMass, r / (r + N - 1)
};

struct DilutionResult {
  std::vector<DilutionPoint> points;  // betas-major: for each beta, every length in order
  double max_rel_diff = 0;  // max over (N, beta, seed, kind) of |engine - plain| / plain
};

// REQUIRES (else InvalidArgument): head_dim >= 3, seeds >= 1, every length >= 1, every beta > 0.
Result<DilutionResult> RunDilutionProbe(const DilutionOptions& options);

// r(beta) above, by quadrature over the standard normal density (|error| < 1e-9).
double LinearTargetRatio(double beta);

// Softmax's expected mass on the target: E over u = |k_t|^2 ~ chi^2_d of
// 1 / (1 + (N - 1) exp(beta^2 u / (2d) - beta u / sqrt(d))) (the other keys' sum replaced by its
// mean given u), by quadrature. REQUIRES: d >= 3 (the density must vanish at u = 0).
double PredictedSoftmaxMass(int64_t n, double beta, int64_t d);

// Least-squares slope of log(y) against log(x) (points with x, y > 0 and finite); NaN with
// fewer than two such points.
double LogLogSlope(const std::vector<double>& x, const std::vector<double>& y);

}  // namespace attnlab::experiments

#endif  // ATTNLAB_EXPERIMENTS_RECALL_PROBE_H_
