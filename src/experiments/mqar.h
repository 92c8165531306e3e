// Multi-query associative recall (MQAR; Arora et al. 2023, "Zoology: measuring and improving
// recall in efficient language models", arXiv:2312.04927, section 3.1), scaled down: a context
// of n key-value pairs followed by n queries, each a key of the context; the model must answer
// every query with the value that followed that key.
//
// Token ids: keys [0, keys), values [keys, keys + values), BOS = keys + values; a model needs a
// vocabulary of vocab() = keys + values + 1. One sequence of n pairs has 1 + 3n tokens:
//   position 0              BOS
//   positions 1 .. 2n       k_1 v_1 k_2 v_2 ... k_n v_n   (distinct keys, values with repetition)
//   positions 2n+1 .. 3n    k_pi(1) ... k_pi(n)           (every key once, in a random order pi)
// targets[t] is the value of the key at t for the n query positions and -1 (ignored by the
// model's loss, gpt.h) everywhere else: keys and values are random, so nothing else is
// predictable. The answer to a query is not the next input token (that is the next query), as
// in Zoology, where the labels sit on the query positions.
// Why this layout: every query's key is within 3n tokens behind it, so a sliding window of w
// keys sees all of them while 3n <= w and fewer as n grows; queries right after the context
// keep the sequence (and the compute) proportional to n.
//
// Everything is a pure function of (options, pairs, batch, stream_seed) through SplitMix64,
// identical on every platform.
#ifndef ATTNLAB_EXPERIMENTS_MQAR_H_
#define ATTNLAB_EXPERIMENTS_MQAR_H_

#include <cstdint>
#include <vector>

#include "attnlab/status.h"

namespace attnlab::experiments {

struct MqarOptions {
  int64_t keys = 128;    // key ids [0, keys); pairs per sequence <= keys
  int64_t values = 128;  // value ids [keys, keys + values)
};

// batch sequences of len = 1 + 3 * pairs tokens, row-major [batch, len].
struct MqarBatch {
  int64_t batch = 0, len = 0, pairs = 0;
  std::vector<int32_t> tokens;   // [batch, len]
  std::vector<int32_t> targets;  // [batch, len]: the value at query positions, else -1
};

class Mqar {
 public:
  // REQUIRES (else InvalidArgument): keys >= 1, values >= 1, keys + values + 1 <= 2^31 - 1.
  static Result<Mqar> Create(const MqarOptions& options);

  const MqarOptions& options() const { return options_; }
  int64_t vocab() const { return options_.keys + options_.values + 1; }
  int32_t bos() const { return static_cast<int32_t>(options_.keys + options_.values); }
  bool IsKey(int32_t t) const { return t >= 0 && t < options_.keys; }
  bool IsValue(int32_t t) const { return t >= options_.keys && t < options_.keys + options_.values; }
  static int64_t SequenceLength(int64_t pairs) { return 1 + 3 * pairs; }
  static int64_t FirstQuery(int64_t pairs) { return 1 + 2 * pairs; }

  // REQUIRES (else InvalidArgument): 1 <= pairs <= keys, batch >= 1.
  Result<MqarBatch> MakeBatch(int64_t pairs, int64_t batch, uint64_t stream_seed) const;

 private:
  MqarOptions options_;
};

}  // namespace attnlab::experiments

#endif  // ATTNLAB_EXPERIMENTS_MQAR_H_
