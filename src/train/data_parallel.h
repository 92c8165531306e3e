// Data parallelism for the trainer (issue 36): how a global batch is shared among the ranks and
// how the gradient buffer is cut into the buckets the backward finishes one by one.
//
// Exactness: every rank samples the whole global batch (a pure function of seed and step,
// token_data.h) and runs the contiguous share [begin, end) of its sequences. The model's loss is
// a mean over the valid targets of what it ran, so the global mean is sum_r weight_r loss_r with
// weight_r = (valid targets in share r) / (valid targets in the batch), and the global gradient
// is the sum over ranks of the shares' gradients scaled by weight_r. Both sums are taken in rank
// order (Comm::AllReduceSum), so P = 1 and P = 2 agree to rounding.
#ifndef ATTNLAB_TRAIN_DATA_PARALLEL_H_
#define ATTNLAB_TRAIN_DATA_PARALLEL_H_

#include <cstdint>
#include <vector>

#include "dist/grad_reducer.h"
#include "model/parameters.h"

namespace attnlab {

struct BatchShare {
  int64_t begin = 0, end = 0;  // sequences [begin, end) of the global batch
  double weight = 0;           // valid targets of the share / valid targets of the batch
};

// Rank r of P gets sequences [r B / P, (r + 1) B / P). targets: [B, T], -1 = ignored.
// REQUIRES: B >= P >= 1.
BatchShare ShareOfBatch(const int32_t* targets, int64_t B, int64_t T, int rank, int P);

// The buckets in the order Gpt::Backward finishes them (its backward listener): layer L-1, ...,
// layer 0, then every parameter outside the layers (embeddings, final norm, LM head).
std::vector<dist::GradientBucket> BackwardBuckets(const ParameterStore& grads, int64_t n_layer);

}  // namespace attnlab

#endif  // ATTNLAB_TRAIN_DATA_PARALLEL_H_
