// ParseProbeCurve (probe_curve.h): the points of well-formed probe lines, malformed ones skipped
// and counted (never an error), and the committed default model's log read whole.
#include "diagnostics/probe_curve.h"

#include <gtest/gtest.h>

#include "core/resources.h"

namespace attnlab {
namespace {

TEST(ProbeCurve, ReadsProbeLinesAndSkipsMalformedOnes) {
  const std::string log =
      "{\"step\":1,\"loss\":8.4}\n"
      "{\"step\":100,\"probe\":{\"alpha1\":[[0.1,0.5],[0.2,0.3]],\"sink_rate\":0.25}}\n"
      "\n"
      "{\"step\":200,\"probe\":{\"alpha1\":[[0.1,0.5],[0.2]]}}\n"        // ragged
      "{\"step\":-3,\"probe\":{\"alpha1\":[[0.1]]}}\n"                  // negative step
      "{\"step\":300,\"probe\":{\"alpha1\":[[0.1,\"x\"]]}}\n"           // not a number
      "{\"step\":400,\"probe\":{\"alpha1\":[]}}\n"                      // empty
      "{\"step\":500,\"probe\":\n"                                      // cut by a crash
      "not json at all \"probe\"\n"
      "{\"step\":600,\"probe\":{\"alpha1\":[[0.7,0.2],[0.1,0.0]]}}";   // no newline at the end
  const ProbeCurve c = ParseProbeCurve(log);
  EXPECT_EQ(c.lines, 9);
  EXPECT_EQ(c.probe_lines, 8);
  EXPECT_EQ(c.skipped, 6);
  ASSERT_EQ(c.points.size(), 2u);
  EXPECT_EQ(c.points[0].step, 100);
  EXPECT_DOUBLE_EQ(c.points[0].max_alpha1, 0.5);
  EXPECT_EQ(c.points[0].max_layer, 0);
  EXPECT_EQ(c.points[0].max_head, 1);
  EXPECT_DOUBLE_EQ(c.points[0].layer_mean[1], 0.25);
  EXPECT_DOUBLE_EQ(c.points[0].sink_rate, 0.25);
  EXPECT_EQ(c.points[1].step, 600);
  EXPECT_DOUBLE_EQ(c.points[1].max_alpha1, 0.7);
  EXPECT_DOUBLE_EQ(c.points[1].sink_rate, -1);
  EXPECT_TRUE(ParseProbeCurve("").points.empty());
}

TEST(ProbeCurve, TheDefaultModelsLogHasItsCurve) {
  Result<ProbeCurve> c = ReadProbeCurve(FindResource(std::string(kDefaultModelPath) + "/train_log.jsonl"));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ASSERT_GE(c->points.size(), 10u);
  EXPECT_EQ(c->skipped, 0);
  for (size_t i = 1; i < c->points.size(); ++i) EXPECT_GT(c->points[i].step, c->points[i - 1].step);
  EXPECT_EQ(c->points.front().layer_mean.size(), 4u);
  EXPECT_FALSE(ReadProbeCurve("/nonexistent/train_log.jsonl").ok());
}

}  // namespace
}  // namespace attnlab
