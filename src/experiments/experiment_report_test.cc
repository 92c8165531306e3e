// The report skeleton (experiment_report.h) and the shared sink-training helpers
// (sink_training.h): an unknown variant id is an error, never another run; the stages run in
// order and stop at the first error; Sink^eps, max and mean of an alpha matrix, the uniform
// reference H_T / T, and the training setup's contract (sizes checked, BOS = the data's vocab).
#include "experiments/experiment_report.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "experiments/sink_training.h"

namespace attnlab::experiments {
namespace {

struct Item {
  const char* id;
  int value;
};

TEST(FindByIdTest, FindsTheNamedElement) {
  const std::vector<Item> items = {{"baseline", 1}, {"softmax1", 2}, {"sigmoid", 3}};
  auto r = FindById(items, "softmax1", "variant");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ((*r)->value, 2);
  auto s = FindById(items, "sigmoid", "variant");
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(*s, &items[2]);
}

TEST(FindByIdTest, UnknownIdIsAnErrorNotTheFirstElement) {
  const std::vector<Item> items = {{"baseline", 1}, {"softmax1", 2}};
  for (const char* id : {"softmax", "Baseline", "", "softmax1 "}) {
    auto r = FindById(items, id, "sinks variant");
    ASSERT_FALSE(r.ok()) << "'" << id << "' found " << (*r)->id;
    EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
    EXPECT_NE(r.status().message().find("sinks variant '" + std::string(id) + "'"), std::string::npos)
        << r.status().ToString();
  }
  EXPECT_FALSE(FindById(std::vector<Item>{}, "baseline", "variant").ok());
}

TEST(FindByIdTest, WorksWithStringIds) {
  struct Named {
    std::string id;
  };
  const std::vector<Named> models = {{"baseline_L2_T32"}, {"softmax1_L2_T32"}};
  ASSERT_TRUE(FindById(models, "softmax1_L2_T32", "model").ok());
  EXPECT_FALSE(FindById(models, "softmax1_L2_T64", "model").ok());
}

TEST(AssembleReportTest, RunsTheStagesInOrderAndStopsAtAnError) {
  std::vector<std::string> order;
  ReportStages<int> stages;
  auto stage = [&](const char* name) {
    return [&order, name](const int&, ExperimentResult&) {
      order.push_back(name);
      return Status::Ok();
    };
  };
  stages.checks = stage("checks");
  stages.claims = stage("claims");
  stages.results = stage("results");
  stages.summary = stage("summary");
  stages.html = stage("html");
  ASSERT_TRUE(AssembleReport(0, stages).ok());
  EXPECT_EQ(order, (std::vector<std::string>{"checks", "claims", "results", "summary", "html"}));
  order.clear();
  stages.claims = [&order](const int&, ExperimentResult&) {
    order.push_back("claims");
    return Status::NotFound("unknown variant");
  };
  auto r = AssembleReport(0, stages);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(order, (std::vector<std::string>{"checks", "claims"}));
}

TEST(ReportHelpersTest, JoinAndVerdict) {
  EXPECT_EQ(JoinNumbers({0.25, NAN, 1.0}, "%.2f"), "0.25 / n/a / 1.00");
  EXPECT_EQ(JoinInts({1, 2, 4}), "1 / 2 / 4");
  EXPECT_EQ(JoinInts({}), "");
  EXPECT_EQ(Verdict(true), "holds");
  EXPECT_EQ(Verdict(false), "does not hold");
}

TEST(SinkSummaryTest, ShareAboveEpsMaxAndMean) {
  // 2 layers x 4 heads; entries > 0.3 are strict: 0.3 itself is not a sink.
  const std::vector<std::vector<double>> a = {{0.1, 0.3, 0.5, 0.0}, {0.9, 0.2, 0.31, 0.1}};
  const SinkSummary s = Summarise(a);
  EXPECT_EQ(s.count, 3.0);
  EXPECT_EQ(s.rate, 3.0 / 8.0);
  EXPECT_EQ(s.max, 0.9);
  EXPECT_NEAR(s.mean, 2.41 / 8.0, 1e-15);
  EXPECT_EQ(Summarise(a, 0.5).count, 1.0);
}

TEST(SinkSummaryTest, NanAndEmptyGiveANanMax) {
  EXPECT_TRUE(std::isnan(Summarise({{0.5, NAN}}).max));  // a diverged run fails "finite" checks
  EXPECT_TRUE(std::isnan(Summarise({}).max));
  EXPECT_EQ(Summarise({}).rate, 0.0);
  EXPECT_EQ(Summarise({{0.0, 0.0}}).max, 0.0);  // mask_first_key: exactly 0, not NaN
}

TEST(SinkSummaryTest, UniformAlphaIsHarmonicOverT) {
  EXPECT_EQ(UniformAlpha1(1), 1.0);
  EXPECT_DOUBLE_EQ(UniformAlpha1(4), (1 + 0.5 + 1.0 / 3 + 0.25) / 4);
  EXPECT_EQ(UniformAlpha1(0), 0.0);
}

TEST(SinkTrainingTest, ModelAndOptimiserOfTheSinkExperiments) {
  SinkModelSizes s;
  s.len = 32;
  auto c = SinkModelConfig(s, 64);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->vocab_size, 65);  // + the BOS
  EXPECT_FALSE(c->mlp);
  EXPECT_EQ(c->context, 32);
  auto t = SinkTrainOptions(s, 7, 64);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->bos, 64);
  EXPECT_EQ(t->seed, 7u);
  EXPECT_EQ(t->opt.warmup_steps, s.steps / 20);
  s.heads = 0;
  EXPECT_FALSE(SinkModelConfig(s, 64).ok());
  EXPECT_FALSE(SinkTrainOptions(SinkModelSizes{}, 1, 0).ok());
}

TEST(SinkTrainingTest, BigramBackcopyStreamsAreIndependentAndSeeded) {
  auto a = MakeBigramBackcopyData(3, 100, 500, 50);
  auto b = MakeBigramBackcopyData(3, 100, 500, 50);
  ASSERT_TRUE(a.ok() && b.ok()) << a.status().ToString();
  EXPECT_EQ(a->train.size(), static_cast<size_t>(1 << 16));  // at least 2^16 training tokens
  EXPECT_EQ(a->val.size(), 500u);
  EXPECT_EQ(a->stream.size(), 50u);
  EXPECT_EQ(a->val, b->val);
  EXPECT_NE(std::vector<int32_t>(a->train.begin(), a->train.begin() + 500), a->val);
  EXPECT_EQ(a->vocab, 64);
  EXPECT_TRUE(std::isfinite(a->floor));
  auto none = MakeBigramBackcopyData(3, 100, 500, 0);
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->stream.empty());
  EXPECT_EQ(none->val, a->val);
  EXPECT_FALSE(MakeBigramBackcopyData(3, 100, 1, 0).ok());
}

}  // namespace
}  // namespace attnlab::experiments
