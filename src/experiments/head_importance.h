// Head masks on an unmodified Gpt (Michel et al. 2019, "Are Sixteen Heads Really Better than
// One?", arXiv:1905.10650, section 2.3 and 4.1).
//
// Michel et al. multiply the output of each head h of a layer by a gate xi_h (= 1 normally)
// before the output projection: o = sum_h xi_h a_h W_h + b, where a_h [N, hd] is head h's
// attention output (after the output gate of gated models, i.e. what the projection reads) and
// W_h the hd rows of attn.proj.weight ([in, out] = [C, C] row-major) that head h feeds. Since
// (xi a_h) W_h = a_h (xi W_h), the gate is the same as scaling those rows, which gives both
// operations without touching the model:
//   - the mask gradient  dL/dxi_h |_{xi = 1} = sum_{n, d} a_h[n, d] dL/da_h[n, d]
//                                           = sum_{i in rows(h), j} W[i, j] dL/dW[i, j]
//     (LinearBackward: dW = a^T d_o and dL/da = d_o W^T), read from the gradients Backward left;
//   - pruning (xi_h = 0) = zeroing W_h (the projection bias stays, as in Michel et al.).
// Head importance I_h = E_x |dL(x)/dxi_h| (their eq. 2) is the mean over examples of the absolute
// mask gradient; head_importance_test.cc checks the gradient against finite differences.
#ifndef ATTNLAB_EXPERIMENTS_HEAD_IMPORTANCE_H_
#define ATTNLAB_EXPERIMENTS_HEAD_IMPORTANCE_H_

#include <cstdint>
#include <vector>

#include "attnlab/status.h"
#include "model/gpt.h"
#include "model/parameters.h"

namespace attnlab::experiments {

// dL/dxi_h for every head, [n_layer * n_head] (layer-major), from g's current parameters and the
// gradients in g.grads() (zero them, Forward with targets, Backward, then call this). Summed in
// double in a fixed order.
std::vector<double> HeadMaskGradient(Gpt& g);

// Sets g's parameters to `base` with the projection rows of head (l, h) scaled by
// mask[l * n_head + h] (mask.size() == n_layer * n_head; 1 = keep, 0 = prune). base must have
// g's layout. With an all-ones mask the parameters are bit-identical to base.
Status ApplyHeadMask(const ParameterStore& base, const std::vector<float>& mask, Gpt* g);

// Michel et al.'s per-layer normalisation of importance scores: I[l, h] / ||I[l, :]||_2 (a layer
// whose scores are all zero stays zero).
std::vector<double> NormalizeImportancePerLayer(const std::vector<double>& importance,
                                                int64_t n_layer, int64_t n_head);

}  // namespace attnlab::experiments

#endif  // ATTNLAB_EXPERIMENTS_HEAD_IMPORTANCE_H_
