#include "experiments/mqar.h"

#include <limits>
#include <string>
#include <utility>

#include "train/token_data.h"

namespace attnlab::experiments {
namespace {

// A counter-based uniform stream: value i is SplitMix64(seed + i).
struct Uniform {
  uint64_t state;
  uint64_t Next() { return SplitMix64(state++); }
  int64_t Below(int64_t n) { return static_cast<int64_t>(Next() % static_cast<uint64_t>(n)); }
};

}  // namespace

Result<Mqar> Mqar::Create(const MqarOptions& o) {
  if (o.keys < 1 || o.values < 1 ||
      o.keys + o.values + 1 > std::numeric_limits<int32_t>::max()) {
    return Status::InvalidArgument("mqar: need keys >= 1, values >= 1 and keys + values + 1 < 2^31 (got keys " +
                                   std::to_string(o.keys) + ", values " + std::to_string(o.values) + ")");
  }
  Mqar m;
  m.options_ = o;
  return m;
}

Result<MqarBatch> Mqar::MakeBatch(int64_t pairs, int64_t batch, uint64_t stream_seed) const {
  if (pairs < 1 || pairs > options_.keys || batch < 1) {
    return Status::InvalidArgument("mqar: need 1 <= pairs <= keys (" + std::to_string(options_.keys) +
                                   ") and batch >= 1 (got pairs " + std::to_string(pairs) + ", batch " +
                                   std::to_string(batch) + ")");
  }
  MqarBatch b;
  b.batch = batch;
  b.pairs = pairs;
  b.len = SequenceLength(pairs);
  b.tokens.assign(batch * b.len, bos());
  b.targets.assign(batch * b.len, -1);
  Uniform u{SplitMix64(stream_seed ^ 0x6d71617200000001ULL)};
  std::vector<int32_t> pool(options_.keys), value(pairs);
  std::vector<int64_t> order(pairs);
  for (int64_t r = 0; r < batch; ++r) {
    int32_t* x = b.tokens.data() + r * b.len;
    int32_t* y = b.targets.data() + r * b.len;
    // Distinct keys: a partial Fisher-Yates shuffle of [0, keys).
    for (int64_t i = 0; i < options_.keys; ++i) pool[i] = static_cast<int32_t>(i);
    for (int64_t i = 0; i < pairs; ++i) {
      std::swap(pool[i], pool[i + u.Below(options_.keys - i)]);
      value[i] = static_cast<int32_t>(options_.keys + u.Below(options_.values));
      x[1 + 2 * i] = pool[i];
      x[2 + 2 * i] = value[i];
    }
    // The query order: a uniformly random permutation of the pairs.
    for (int64_t i = 0; i < pairs; ++i) order[i] = i;
    for (int64_t i = pairs - 1; i > 0; --i) std::swap(order[i], order[u.Below(i + 1)]);
    for (int64_t i = 0; i < pairs; ++i) {
      const int64_t t = FirstQuery(pairs) + i;
      x[t] = pool[order[i]];
      y[t] = value[order[i]];
    }
  }
  return b;
}

}  // namespace attnlab::experiments
