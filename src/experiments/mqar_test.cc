// The MQAR generator: the layout of mqar.h holds for every sequence (BOS, distinct keys, values
// from their range, every key queried exactly once with its own value as the target, -1
// elsewhere), and batches are pure functions of the seeds.
#include "experiments/mqar.h"

#include <gtest/gtest.h>

#include <map>
#include <set>

namespace attnlab::experiments {
namespace {

Mqar Make(int64_t keys = 16, int64_t values = 8) {
  MqarOptions o;
  o.keys = keys;
  o.values = values;
  auto m = Mqar::Create(o);
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  return std::move(m).value();
}

TEST(MqarTest, LayoutOfEverySequence) {
  const Mqar task = Make();
  for (int64_t pairs : {1, 3, 16}) {  // 16 = keys: every key used
    auto b = task.MakeBatch(pairs, 50, 7);
    ASSERT_TRUE(b.ok()) << b.status().ToString();
    ASSERT_EQ(b->len, 1 + 3 * pairs);
    ASSERT_EQ(b->tokens.size(), static_cast<size_t>(50 * b->len));
    for (int64_t r = 0; r < 50; ++r) {
      const int32_t* x = b->tokens.data() + r * b->len;
      const int32_t* y = b->targets.data() + r * b->len;
      EXPECT_EQ(x[0], task.bos());
      EXPECT_EQ(y[0], -1);
      std::map<int32_t, int32_t> kv;
      for (int64_t i = 0; i < pairs; ++i) {
        const int32_t k = x[1 + 2 * i], v = x[2 + 2 * i];
        ASSERT_TRUE(task.IsKey(k)) << k;
        ASSERT_TRUE(task.IsValue(v)) << v;
        EXPECT_EQ(y[1 + 2 * i], -1);
        EXPECT_EQ(y[2 + 2 * i], -1);
        ASSERT_TRUE(kv.emplace(k, v).second) << "key " << k << " appears twice";
      }
      std::set<int32_t> queried;
      for (int64_t t = Mqar::FirstQuery(pairs); t < b->len; ++t) {
        ASSERT_TRUE(kv.count(x[t])) << "query " << x[t] << " is not a key of the context";
        EXPECT_EQ(y[t], kv[x[t]]) << "the target of a query is its key's value";
        queried.insert(x[t]);
      }
      EXPECT_EQ(queried.size(), static_cast<size_t>(pairs)) << "every key is queried once";
    }
  }
}

TEST(MqarTest, RandomOrderAndValues) {
  // Over many sequences the query order is not the context order and values repeat across keys
  // (drawn with replacement): the task cannot be solved by position or by exclusion.
  const Mqar task = Make(64, 8);
  auto b = task.MakeBatch(32, 100, 3);
  ASSERT_TRUE(b.ok());
  int64_t in_order = 0, repeated = 0;
  for (int64_t r = 0; r < 100; ++r) {
    const int32_t* x = b->tokens.data() + r * b->len;
    in_order += x[Mqar::FirstQuery(32)] == x[1];
    std::set<int32_t> values;
    for (int64_t i = 0; i < 32; ++i) values.insert(x[2 + 2 * i]);
    repeated += values.size() < 32u;
  }
  EXPECT_LT(in_order, 20);  // first query = first key with probability 1/32
  EXPECT_EQ(repeated, 100);  // 32 values from 8 ids always repeat
}

TEST(MqarTest, DeterministicUnderSeeds) {
  const Mqar task = Make();
  auto a = task.MakeBatch(5, 10, 11), b = task.MakeBatch(5, 10, 11), c = task.MakeBatch(5, 10, 12);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  EXPECT_EQ(a->tokens, b->tokens);
  EXPECT_EQ(a->targets, b->targets);
  EXPECT_NE(a->tokens, c->tokens);
}

TEST(MqarTest, RejectsBadArguments) {
  EXPECT_FALSE(Mqar::Create({0, 8}).ok());
  EXPECT_FALSE(Mqar::Create({8, 0}).ok());
  const Mqar task = Make(16, 8);
  EXPECT_FALSE(task.MakeBatch(0, 1, 1).ok());
  EXPECT_FALSE(task.MakeBatch(17, 1, 1).ok());  // more pairs than distinct keys
  EXPECT_FALSE(task.MakeBatch(4, 0, 1).ok());
  EXPECT_EQ(task.vocab(), 16 + 8 + 1);
  EXPECT_EQ(task.bos(), 24);
}

}  // namespace
}  // namespace attnlab::experiments
