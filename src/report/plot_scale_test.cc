// Nice ticks and scales: round values, inside the domain, enough of them, and no NaN or
// division by zero for degenerate data (one value, no value, huge or tiny spans).
#include "report/plot_scale.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <set>

namespace attnlab::report {
namespace {

std::vector<std::string> Labels(const std::vector<Tick>& ticks, bool major_only = true) {
  std::vector<std::string> out;
  for (const Tick& t : ticks) {
    if (!major_only || t.major) out.push_back(t.label);
  }
  return out;
}

TEST(ReportPlotScale, NiceStep) {
  EXPECT_DOUBLE_EQ(NiceStep(0.13), 0.2);
  EXPECT_DOUBLE_EQ(NiceStep(1), 1);
  EXPECT_DOUBLE_EQ(NiceStep(3), 5);
  EXPECT_DOUBLE_EQ(NiceStep(7), 10);
  EXPECT_DOUBLE_EQ(NiceStep(0.001), 0.001);
  EXPECT_DOUBLE_EQ(NiceStep(2.0000000001), 2);  // rounding slack
  EXPECT_DOUBLE_EQ(NiceStep(1234), 2000);
}

TEST(ReportPlotScale, LinearTicksAreRoundAndShareDecimals) {
  EXPECT_EQ(Labels(LinearTicks(0, 1)),
            (std::vector<std::string>{"0.0", "0.2", "0.4", "0.6", "0.8", "1.0"}));
  EXPECT_EQ(Labels(LinearTicks(0, 100)),
            (std::vector<std::string>{"0", "20", "40", "60", "80", "100"}));
  EXPECT_EQ(Labels(LinearTicks(-1, 1)),
            (std::vector<std::string>{"-1.0", "-0.5", "0.0", "0.5", "1.0"}));
  // 0.1 + 0.2 style rounding never leaks into labels.
  for (const Tick& t : LinearTicks(0, 0.7)) EXPECT_LE(t.label.size(), 3u) << t.label;
  // Exponent form for large magnitudes and tiny steps.
  EXPECT_EQ(Labels(LinearTicks(0, 3e6)), (std::vector<std::string>{"0", "1e6", "2e6", "3e6"}));
  EXPECT_EQ(Labels(LinearTicks(0, 2.5e6)),
            (std::vector<std::string>{"0", "5e5", "1e6", "1.5e6", "2e6", "2.5e6"}));
  EXPECT_EQ(Labels(LinearTicks(1e-5, 5e-5)).front(), "1e-5");
}

TEST(ReportPlotScale, FitWidensToNiceBounds) {
  PlotScale s = PlotScale::Fit(ScaleType::kLinear, 0.13, 0.87);
  EXPECT_DOUBLE_EQ(s.lo(), 0);
  EXPECT_DOUBLE_EQ(s.hi(), 1);
  EXPECT_DOUBLE_EQ(s.Fraction(0.5), 0.5);
  s = PlotScale::Fit(ScaleType::kLinear, 0.13, 0.87, /*nice_bounds=*/false);
  EXPECT_DOUBLE_EQ(s.lo(), 0.13);
  EXPECT_DOUBLE_EQ(s.hi(), 0.87);
  for (const Tick& t : s.ticks()) {
    EXPECT_GE(t.value, 0.13);
    EXPECT_LE(t.value, 0.87);
  }
  EXPECT_GE(s.ticks().size(), 2u);
}

TEST(ReportPlotScale, DegenerateDataStillGivesAUsableScale) {
  struct Case {
    ScaleType type;
    double lo, hi;
  };
  const double inf = INFINITY;
  for (const Case& c : std::vector<Case>{{ScaleType::kLinear, 5, 5},
                                         {ScaleType::kLinear, 0, 0},
                                         {ScaleType::kLinear, -3, -3},
                                         {ScaleType::kLinear, inf, -inf},  // no data
                                         {ScaleType::kLinear, NAN, NAN},
                                         {ScaleType::kLinear, 1, 1 + 1e-15},
                                         {ScaleType::kLinear, -1e308, 1e308},
                                         {ScaleType::kLinear, 1e-300, 2e-300},
                                         {ScaleType::kLog10, 5, 5},
                                         {ScaleType::kLog10, inf, -inf},
                                         {ScaleType::kLog10, 1e-320, 1e308},
                                         {ScaleType::kLog10, 0.3, 0.5}}) {
    for (bool nice : {true, false}) {
      const PlotScale s = PlotScale::Fit(c.type, c.lo, c.hi, nice);
      SCOPED_TRACE(std::to_string(c.lo) + " " + std::to_string(c.hi) + " nice " +
                   std::to_string(nice));
      EXPECT_TRUE(std::isfinite(s.lo()) && std::isfinite(s.hi()));
      EXPECT_LT(s.lo(), s.hi());
      if (c.type == ScaleType::kLog10) {
        EXPECT_GT(s.lo(), 0);
      }
      EXPECT_TRUE(std::isfinite(s.Fraction(s.lo())));
      EXPECT_GE(s.ticks().size(), 2u);
      for (const Tick& t : s.ticks()) {
        EXPECT_TRUE(std::isfinite(t.value));
        EXPECT_EQ(t.label.find("nan"), std::string::npos);
        EXPECT_EQ(t.label.find("inf"), std::string::npos);
      }
      if (c.lo == c.hi && std::isfinite(c.lo)) {
        EXPECT_LT(s.lo(), c.lo);
        EXPECT_GT(s.hi(), c.hi);
      }
    }
  }
  EXPECT_DOUBLE_EQ(PlotScale::Fit(ScaleType::kLinear, 0, 0).lo(), -1);
  EXPECT_DOUBLE_EQ(PlotScale::Fit(ScaleType::kLinear, 0, 0).hi(), 1);
}

TEST(ReportPlotScale, Log10TicksArePowersOfTen) {
  const PlotScale s = PlotScale::Fit(ScaleType::kLog10, 0.003, 700);
  EXPECT_DOUBLE_EQ(s.lo(), 0.001);
  EXPECT_DOUBLE_EQ(s.hi(), 1000);
  EXPECT_EQ(Labels(s.ticks()),
            (std::vector<std::string>{"0.001", "0.01", "0.1", "1", "10", "100", "1000"}));
  EXPECT_GT(s.ticks().size(), 7u);  // minor ticks at 2..9 x 10^k
  EXPECT_NEAR(s.Fraction(1), 0.5, 1e-12);
  EXPECT_FALSE(s.Accepts(0));
  EXPECT_FALSE(s.Accepts(-1));
  EXPECT_TRUE(s.Accepts(1e-9));
}

TEST(ReportPlotScale, Log10LabelsUseSuperscriptsForWideRanges) {
  const PlotScale s = PlotScale::Fit(ScaleType::kLog10, 1e-12, 1e3);
  const auto labels = Labels(s.ticks());
  EXPECT_LE(labels.size(), 8u);
  EXPECT_GE(labels.size(), 3u);
  EXPECT_EQ(labels.front(), "10\u207B\u00B9\u00B2");  // 10⁻¹²
  EXPECT_EQ(labels.back(), "10\u00B3");
}

TEST(ReportPlotScale, Log10WithinADecadeLabels2And5) {
  const PlotScale s = PlotScale::Fit(ScaleType::kLog10, 1.5, 9, false);
  EXPECT_EQ(Labels(s.ticks()), (std::vector<std::string>{"2", "5"}));
  const PlotScale t = PlotScale::Fit(ScaleType::kLog10, 0.3, 0.5, false);
  EXPECT_GE(Labels(t.ticks()).size(), 2u);
}

TEST(ReportPlotScale, RandomRangesGiveSortedDistinctTicksInside) {
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> exp10(-30, 30), u(0, 1);
  for (int iter = 0; iter < 2000; ++iter) {
    const bool log = iter % 2 == 1;
    double a = std::pow(10, exp10(rng)) * (log || u(rng) < 0.5 ? 1 : -1);
    double b = a + std::pow(10, exp10(rng)) * u(rng);
    if (log && b <= 0) continue;
    const PlotScale s =
        PlotScale::Fit(log ? ScaleType::kLog10 : ScaleType::kLinear, a, b, iter % 3 != 0);
    SCOPED_TRACE(std::to_string(a) + " .. " + std::to_string(b));
    ASSERT_GE(s.ticks().size(), 2u);
    ASSERT_LE(s.ticks().size(), 80u);
    std::set<std::string> labels;
    int majors = 0;
    for (size_t i = 0; i < s.ticks().size(); ++i) {
      const Tick& t = s.ticks()[i];
      if (i > 0) {
        ASSERT_GT(t.value, s.ticks()[i - 1].value);
      }
      const double f = s.Fraction(t.value);
      ASSERT_GE(f, -1e-6);
      ASSERT_LE(f, 1 + 1e-6);
      if (t.major) {
        ++majors;
        ASSERT_TRUE(labels.insert(t.label).second) << "duplicate label " << t.label;
      }
    }
    ASSERT_GE(majors, 2);
    ASSERT_LE(majors, 12);
  }
}

}  // namespace
}  // namespace attnlab::report
