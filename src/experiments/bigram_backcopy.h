// The Bigram-Backcopy task (Guo et al. 2024, "Active-dormant attention heads: mechanistically
// demystifying extreme-token phenomena in LLMs", arXiv:2410.13835, section 2): a synthetic token
// stream on which small transformers develop attention sinks on the first token within seconds.
//
// Vocabulary [0, vocab); ids [0, triggers) are the trigger tokens. A fixed random bigram matrix P
// generates the stream, except right after a trigger:
//   x_t = x_{t-2}                 if t >= 2 and x_{t-1} is a trigger   (the back-copy rule)
//   x_t ~ P[x_{t-1}, .]           otherwise
// Row a of P is sparse: `successors` distinct non-trigger tokens carry 1 - trigger_mass in
// random proportions (u^2 + 0.05, u uniform, normalised), and each trigger trigger_mass /
// triggers. A head that copies the previous token helps only at triggers; elsewhere the best it
// can do is nothing, which a softmax head expresses by attending to a token whose value is
// useless - the first one (the paper's "dormant" heads).
//
// Everything is a pure function of the seeds (SplitMix64 streams), identical on every platform.
// The BOS token a model needs is not part of the task: use id `vocab` (a model vocabulary of
// vocab + 1).
#ifndef ATTNLAB_EXPERIMENTS_BIGRAM_BACKCOPY_H_
#define ATTNLAB_EXPERIMENTS_BIGRAM_BACKCOPY_H_

#include <cstdint>
#include <vector>

#include "attnlab/status.h"

namespace attnlab::experiments {

struct BigramBackcopyOptions {
  int64_t vocab = 64;          // task tokens (BOS excluded)
  int64_t triggers = 3;        // ids [0, triggers)
  int64_t successors = 6;      // non-trigger successors per row of P
  double trigger_mass = 0.2;   // probability mass of the triggers in every row of P
  uint64_t seed = 1;           // the matrix P
};

class BigramBackcopy {
 public:
  // REQUIRES (else InvalidArgument): 1 <= triggers, successors <= vocab - triggers,
  // 0 <= trigger_mass < 1, vocab <= 2^31 - 1.
  static Result<BigramBackcopy> Create(const BigramBackcopyOptions& options);

  const BigramBackcopyOptions& options() const { return options_; }
  bool IsTrigger(int32_t token) const { return token >= 0 && token < options_.triggers; }

  // n tokens of the process started from a uniformly random token; a pure function of
  // (the matrix, stream_seed).
  std::vector<int32_t> Generate(int64_t n, uint64_t stream_seed) const;

  // P[a, b], the bigram probability (the back-copy rule aside).
  double Transition(int32_t a, int32_t b) const;

  // Mean -log p(x_t | x_{<t}) over t >= 1 of `tokens` under the true process (copies cost 0
  // nats): the loss floor a model of the task approaches.
  double ConditionalEntropy(const std::vector<int32_t>& tokens) const;

 private:
  BigramBackcopyOptions options_;
  // Row a: next_[a][i] with cumulative probability cdf_[a][i] (the last is 1).
  std::vector<std::vector<int32_t>> next_;
  std::vector<std::vector<double>> cdf_;
};

}  // namespace attnlab::experiments

#endif  // ATTNLAB_EXPERIMENTS_BIGRAM_BACKCOPY_H_
