// The Bigram-Backcopy generator: the copy rule holds everywhere, bigram steps follow the sparse
// matrix, rows are distributions, and streams are pure functions of the seeds.
#include "experiments/bigram_backcopy.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

namespace attnlab::experiments {
namespace {

BigramBackcopy Make(uint64_t seed = 1) {
  BigramBackcopyOptions o;
  o.seed = seed;
  auto t = BigramBackcopy::Create(o);
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return std::move(t).value();
}

TEST(BigramBackcopyTest, CopyRuleAndBigramSupport) {
  const BigramBackcopy task = Make();
  const std::vector<int32_t> x = task.Generate(20000, 7);
  ASSERT_EQ(x.size(), 20000u);
  int64_t copies = 0;
  for (size_t t = 0; t < x.size(); ++t) {
    ASSERT_GE(x[t], 0);
    ASSERT_LT(x[t], task.options().vocab);
    if (t >= 2 && task.IsTrigger(x[t - 1])) {
      ASSERT_EQ(x[t], x[t - 2]) << "the token after a trigger copies the one before it, t = " << t;
      ++copies;
    } else if (t >= 1) {
      ASSERT_GT(task.Transition(x[t - 1], x[t]), 0.0) << "a bigram step outside P's support";
    }
  }
  // Triggers carry trigger_mass of every row: about 20% of the bigram steps (plus copies of them).
  const double share = static_cast<double>(copies) / static_cast<double>(x.size());
  EXPECT_GT(share, 0.12);
  EXPECT_LT(share, 0.30);
  // A copy costs 0 nats, so the floor is below the bigram-only entropy but positive.
  const double h = task.ConditionalEntropy(x);
  EXPECT_GT(h, 0.5);
  EXPECT_LT(h, std::log(static_cast<double>(task.options().vocab)));
}

TEST(BigramBackcopyTest, RowsAreSparseDistributions) {
  const BigramBackcopy task = Make();
  const BigramBackcopyOptions& o = task.options();
  for (int32_t a = 0; a < o.vocab; ++a) {
    double sum = 0, trig = 0;
    int64_t support = 0;
    for (int32_t b = 0; b < o.vocab; ++b) {
      const double p = task.Transition(a, b);
      ASSERT_GE(p, 0.0);
      sum += p;
      support += p > 0;
      if (task.IsTrigger(b)) trig += p;
    }
    EXPECT_NEAR(sum, 1.0, 1e-12);
    EXPECT_NEAR(trig, o.trigger_mass, 1e-12);
    EXPECT_EQ(support, o.successors + o.triggers);
  }
}

TEST(BigramBackcopyTest, DeterministicUnderSeeds) {
  const BigramBackcopy a = Make(3), b = Make(3), c = Make(4);
  EXPECT_EQ(a.Generate(5000, 11), b.Generate(5000, 11));
  EXPECT_NE(a.Generate(5000, 11), a.Generate(5000, 12));  // another stream
  EXPECT_NE(a.Generate(5000, 11), c.Generate(5000, 11));  // another matrix
  // A prefix of a longer stream is the shorter stream.
  const std::vector<int32_t> long_stream = a.Generate(6000, 11), short_stream = a.Generate(5000, 11);
  EXPECT_TRUE(std::equal(short_stream.begin(), short_stream.end(), long_stream.begin()));
}

TEST(BigramBackcopyTest, RejectsBadOptions) {
  BigramBackcopyOptions o;
  o.triggers = 0;
  EXPECT_FALSE(BigramBackcopy::Create(o).ok());
  o = {};
  o.successors = o.vocab;  // no room for the triggers
  EXPECT_FALSE(BigramBackcopy::Create(o).ok());
  o = {};
  o.trigger_mass = 1.0;
  EXPECT_FALSE(BigramBackcopy::Create(o).ok());
}

}  // namespace
}  // namespace attnlab::experiments
