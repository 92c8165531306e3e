// The plotters: well-formed SVG for every kind of input (NaN, Inf, empty, single points,
// constants, hostile text), the same bytes for the same input, and the features a reader relies
// on (log ticks, reference lines, notes for skipped data, heatmap modes and pooling).
#include "report/svg_plot.h"

#include <gtest/gtest.h>

#include <cmath>
#include <regex>
#include <string>

#include "report/report_test_util.h"

namespace attnlab::report {
namespace {

using testing::CheckXml;
using testing::XmlCheck;

// The base64 payload of the first embedded PNG ("" if none). (std::regex would overflow the stack
// on a payload this long.)
std::string PngPayload(const std::string& svg) {
  const std::string key = "href=\"data:image/png;base64,";
  const size_t p = svg.find(key);
  if (p == std::string::npos) return "";
  const size_t start = p + key.size();
  return svg.substr(start, svg.find('"', start) - start);
}

// The d attribute of the first <path>.
std::string PathData(const std::string& svg) {
  const std::string key = "<path d=\"";
  const size_t p = svg.find(key);
  if (p == std::string::npos) return "";
  const size_t start = p + key.size();
  return svg.substr(start, svg.find('"', start) - start);
}

size_t Count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) ++n;
  return n;
}

// Well-formed, an <svg> root, and no NaN/Inf in any attribute (a coordinate gone wrong).
XmlCheck ExpectGoodSvg(const SvgImage& img) {
  const XmlCheck x = CheckXml(img.markup);
  EXPECT_TRUE(x.ok()) << x.error << "\n" << img.markup.substr(0, 2000);
  EXPECT_EQ(x.root, "svg");
  for (const auto& a : x.attributes) {
    if (a.name == "href" || a.name == "aria-label") continue;
    EXPECT_EQ(a.value.find("nan"), std::string::npos)
        << a.element << " " << a.name << "=" << a.value;
    EXPECT_EQ(a.value.find("inf"), std::string::npos)
        << a.element << " " << a.name << "=" << a.value;
  }
  EXPECT_GT(img.width, 0);
  EXPECT_GT(img.height, 0);
  return x;
}

XyPlot SamplePlot() {
  XyPlot p;
  p.title = "entropy vs position";
  p.x = {"position", ScaleType::kLog10, {}, {}};
  p.y = {"normalised entropy", ScaleType::kLinear, {}, {}};
  for (int s = 0; s < 3; ++s) {
    Series series;
    series.name = "layer " + std::to_string(s);
    for (int i = 1; i <= 64; ++i) {
      series.x.push_back(i);
      series.y.push_back(1.0 / (1 + s * std::log(i + 1.0)));
    }
    p.series.push_back(series);
  }
  p.reference_lines.push_back({1.0, "uniform"});
  return p;
}

TEST(ReportSvgPlot, LinePlotIsWellFormedAndDeterministic) {
  const XyPlot p = SamplePlot();
  const SvgImage a = RenderLinePlot(p), b = RenderLinePlot(p);
  EXPECT_EQ(a.markup, b.markup);
  const XmlCheck x = ExpectGoodSvg(a);
  EXPECT_EQ(x.element_counts.at("path"), 3);
  EXPECT_NE(a.markup.find(">uniform</text>"), std::string::npos);
  EXPECT_NE(a.markup.find("stroke-dasharray=\"6 4\""), std::string::npos);  // the reference line
  for (const char* label : {">1</text>", ">10</text>", ">100</text>", ">layer 2</text>"}) {
    EXPECT_NE(a.markup.find(label), std::string::npos) << label;
  }
  EXPECT_EQ(a.markup.find("note:"), std::string::npos);  // nothing was skipped
  // Series colours come from the colour-blind-safe palette.
  EXPECT_NE(a.markup.find(RgbHex(SeriesColor(0))), std::string::npos);
  EXPECT_NE(a.markup.find(RgbHex(SeriesColor(2))), std::string::npos);
}

TEST(ReportSvgPlot, NonFiniteValuesAreSkippedWithANoteAndBreakTheLine) {
  XyPlot p;
  p.series.push_back({"s", {0, 1, 2, 3, 4, 5}, {1, 2, NAN, 4, INFINITY, 6}});
  const SvgImage img = RenderLinePlot(p);
  const XmlCheck x = ExpectGoodSvg(img);
  EXPECT_NE(img.markup.find("note: 2 non-finite values (NaN or Inf) skipped"), std::string::npos);
  // Runs: (0,1) (3) (5): one path with two pieces; two isolated points get markers.
  EXPECT_EQ(x.element_counts.at("path"), 1);
  EXPECT_EQ(Count(PathData(img.markup), "M"), 1u);
  EXPECT_EQ(x.element_counts.at("circle"), 2);
}

TEST(ReportSvgPlot, LogAxesSkipNonPositiveValues) {
  XyPlot p;
  p.x.scale = ScaleType::kLog10;
  p.y.scale = ScaleType::kLog10;
  p.series.push_back({"", {0, 1, 10, 100, 1000}, {1, 0.1, -1, 0.001, 1e-4}});
  const SvgImage img = RenderLinePlot(p);
  ExpectGoodSvg(img);
  EXPECT_NE(img.markup.find("1 point with x &lt;= 0 not shown on the log x axis"),
            std::string::npos);
  EXPECT_NE(img.markup.find("1 value &lt;= 0 not shown on the log y axis"), std::string::npos);
  EXPECT_NE(img.markup.find(">10\u207B\u2074</text>"), std::string::npos);  // y: 10⁻⁴
  EXPECT_NE(img.markup.find(">1000</text>"), std::string::npos);            // x: plain
}

TEST(ReportSvgPlot, DegenerateInputsStillRender) {
  XyPlot empty;
  SvgImage img = RenderLinePlot(empty);
  ExpectGoodSvg(img);
  EXPECT_NE(img.markup.find(">no data</text>"), std::string::npos);

  XyPlot empty_series;
  empty_series.series.push_back({"nothing", {}, {}});
  empty_series.y.scale = ScaleType::kLog10;
  ExpectGoodSvg(RenderLinePlot(empty_series));
  ExpectGoodSvg(RenderScatterPlot(empty_series));

  XyPlot single;
  single.series.push_back({"one", {3}, {7}});
  img = RenderLinePlot(single);
  XmlCheck x = ExpectGoodSvg(img);
  EXPECT_EQ(x.element_counts.at("circle"), 1);  // a lone point is drawn as a marker

  XyPlot constant;
  constant.series.push_back({"flat", {1, 2, 3, 4}, {0.5, 0.5, 0.5, 0.5}});
  img = RenderLinePlot(constant);
  x = ExpectGoodSvg(img);
  EXPECT_GE(Count(img.markup, "text-anchor=\"end\""), 2u);  // y tick labels

  XyPlot all_nan;
  all_nan.series.push_back({"nan", {1, 2}, {NAN, NAN}});
  img = RenderScatterPlot(all_nan);
  ExpectGoodSvg(img);
  EXPECT_NE(img.markup.find(">no data</text>"), std::string::npos);

  XyPlot mismatched;
  mismatched.series.push_back({"m", {1, 2, 3}, {1, 2}});
  img = RenderLinePlot(mismatched);
  ExpectGoodSvg(img);
  EXPECT_NE(img.markup.find("has 3 x values and 2 y values"), std::string::npos);

  XyPlot huge;
  huge.series.push_back({"h", {-1e308, 1e308}, {1e308, -1e308}});
  ExpectGoodSvg(RenderLinePlot(huge));

  XyPlot bad_bounds;
  bad_bounds.y.min = 5;
  bad_bounds.y.max = 1;
  bad_bounds.series.push_back({"b", {1, 2}, {1, 2}});
  img = RenderLinePlot(bad_bounds);
  ExpectGoodSvg(img);
  EXPECT_NE(img.markup.find("the fixed y axis range is invalid"), std::string::npos);
}

TEST(ReportSvgPlot, FixedBoundsAndOutOfRangeReferenceLines) {
  XyPlot p;
  p.y.min = 0;
  p.y.max = 1;
  p.series.push_back({"s", {0, 10, 20}, {0.2, 1.5, 0.4}});  // 1.5 is clipped, not rescaled
  p.reference_lines.push_back({2.0, "too high"});
  const SvgImage img = RenderLinePlot(p);
  ExpectGoodSvg(img);
  EXPECT_NE(img.markup.find(">1.0</text>"), std::string::npos);
  EXPECT_EQ(img.markup.find(">1.5</text>"), std::string::npos);
  EXPECT_NE(
      img.markup.find("reference line &quot;too high&quot; (y = 2) is outside the plotted range"),
      std::string::npos);
  EXPECT_NE(img.markup.find("overflow=\"hidden\""), std::string::npos);  // data is clipped
}

TEST(ReportSvgPlot, HostileTextIsEscaped) {
  XyPlot p;
  p.title = "<script>alert(1)</script>\xFF";
  p.x.label = "a & b";
  p.series.push_back({"\"quoted\" <b>", {1, 2}, {1, 2}});
  const SvgImage img = RenderLinePlot(p);
  ExpectGoodSvg(img);
  EXPECT_EQ(img.markup.find("<script"), std::string::npos);
  EXPECT_EQ(img.markup.find("<b>"), std::string::npos);
  EXPECT_NE(img.markup.find("&lt;script&gt;alert(1)&lt;/script&gt;\xEF\xBF\xBD"),
            std::string::npos);
}

TEST(ReportSvgPlot, LongSortedSeriesAreThinned) {
  XyPlot p;
  Series s;
  for (int i = 0; i < 200000; ++i) {
    s.x.push_back(i);
    s.y.push_back(std::sin(i * 0.01) + (i == 123457 ? 5 : 0));  // one spike must survive
  }
  p.series.push_back(s);
  const SvgImage img = RenderLinePlot(p);
  ExpectGoodSvg(img);
  EXPECT_LT(img.markup.size(), 200000u);
  const size_t points = Count(img.markup, "L") + 1;
  EXPECT_LE(points, 4 * 720u);
  // The one-sample spike survives thinning: the path reaches the top quarter of the plot (the
  // rest of the series, sin in [-1, 1], stays in the lower part of the [-2, 6] axis).
  const std::string d = PathData(img.markup);
  ASSERT_FALSE(d.empty());
  double min_y = 1e9;
  const std::regex point("[ML]([-0-9.]+) ([-0-9.]+)");
  for (auto it = std::sregex_iterator(d.begin(), d.end(), point); it != std::sregex_iterator();
       ++it) {
    min_y = std::min(min_y, std::stod((*it)[2].str()));
  }
  EXPECT_LT(min_y, 4 + 0.25 * 362);
}

TEST(ReportSvgPlot, ScatterDrawsEveryFinitePoint) {
  XyPlot p;
  p.series.push_back({"a", {1, 2, 3, 4}, {4, 3, NAN, 1}});
  p.series.push_back({"b", {1, 2}, {1, 1}});
  const SvgImage img = RenderScatterPlot(p);
  const XmlCheck x = ExpectGoodSvg(img);
  EXPECT_EQ(x.element_counts.at("circle"), 5);
  EXPECT_EQ(x.element_counts.count("path"), 0u);
  EXPECT_EQ(RenderScatterPlot(p).markup, img.markup);
}

TEST(ReportSvgPlot, GroupedBarChart) {
  BarChart c;
  c.title = "perplexity by policy";
  c.categories = {"full", "window", "sinks + window", "recompute"};
  c.series = {{"2k tokens", {12.1, 55.3, 12.4, 12.2}}, {"8k tokens", {11.8, NAN, 12.0, -1}}};
  c.y.label = "perplexity";
  c.reference_lines = {{12, "baseline"}};
  const SvgImage img = RenderBarChart(c);
  const XmlCheck x = ExpectGoodSvg(img);
  EXPECT_EQ(Count(img.markup, "<title>"), 7u);  // 8 bars, one NaN
  EXPECT_NE(img.markup.find("<title>8k tokens, recompute: -1</title>"), std::string::npos);
  EXPECT_NE(img.markup.find("1 non-finite value (NaN or Inf) skipped"), std::string::npos);
  EXPECT_NE(img.markup.find(">sinks + window</text>"), std::string::npos);
  EXPECT_EQ(RenderBarChart(c).markup, img.markup);

  c.y.scale = ScaleType::kLog10;
  const SvgImage log_img = RenderBarChart(c);
  ExpectGoodSvg(log_img);
  EXPECT_NE(log_img.markup.find("1 value &lt;= 0 not shown on the log y axis"), std::string::npos);

  BarChart empty;
  ExpectGoodSvg(RenderBarChart(empty));
  BarChart many;
  for (int i = 0; i < 300; ++i) many.categories.push_back("category number " + std::to_string(i));
  many.series.push_back({"", std::vector<double>(310, 1.0)});
  const SvgImage many_img = RenderBarChart(many);
  ExpectGoodSvg(many_img);
  EXPECT_NE(many_img.markup.find("10 values beyond the last category ignored"), std::string::npos);
}

Heatmap SinkMap(int rows, int cols) {
  Heatmap m;
  m.title = "attention on token 0";
  m.rows = rows;
  m.cols = cols;
  m.x_label = "head";
  m.y_label = "layer";
  m.value_label = "A[T-1, 0]";
  for (int i = 0; i < rows * cols; ++i) m.values.push_back(std::fmod(i * 0.37, 1.0));
  return m;
}

TEST(ReportSvgPlot, SmallHeatmapHasOneTooltipPerCell) {
  Heatmap m = SinkMap(12, 12);
  for (int i = 0; i < 12; ++i) m.row_labels.push_back(std::string("L").append(std::to_string(i)));
  m.values[5] = NAN;
  const SvgImage img = RenderHeatmap(m);
  ExpectGoodSvg(img);
  EXPECT_EQ(Count(img.markup, "<title>"), 144u);
  EXPECT_NE(img.markup.find("<title>layer L0, head 5: nan</title>"), std::string::npos);
  EXPECT_NE(img.markup.find(RgbHex(kMissingColor)), std::string::npos);
  EXPECT_NE(img.markup.find("1 cell is NaN or Inf (drawn grey)"), std::string::npos);
  EXPECT_NE(img.markup.find(">L11</text>"), std::string::npos);
  EXPECT_EQ(img.markup.find("<image"), std::string::npos);
  EXPECT_EQ(RenderHeatmap(m).markup, img.markup);
}

TEST(ReportSvgPlot, MediumHeatmapMergesRuns) {
  Heatmap m = SinkMap(60, 60);
  for (int r = 0; r < 60; ++r) {
    for (int c = 0; c < 60; ++c) m.values[r * 60 + c] = c < 30 ? 0.0 : 1.0;  // two runs per row
  }
  const SvgImage img = RenderHeatmap(m);
  const XmlCheck x = ExpectGoodSvg(img);
  EXPECT_EQ(Count(img.markup, "<title>"), 0u);
  // 120 runs + background + frame + colour bar steps and frame.
  EXPECT_LT(x.element_counts.at("rect"), 120 + 80);
}

TEST(ReportSvgPlot, LargeHeatmapIsOnePng) {
  Heatmap m = SinkMap(512, 512);
  m.color_scale = ScaleType::kLog10;
  for (int r = 0; r < 512; ++r) {
    for (int c = 0; c < 512; ++c)
      m.values[r * 512 + c] = c > r ? 0.0 : (c == 0 ? 0.6 : 0.4 / (r + 1));
  }
  const SvgImage img = RenderHeatmap(m);
  const XmlCheck x = ExpectGoodSvg(img);
  EXPECT_EQ(x.element_counts.at("image"), 1);
  EXPECT_NE(img.markup.find("cells are &lt;= 0, drawn grey on the log colour scale"),
            std::string::npos);
  const std::string png = testing::Base64Decode(PngPayload(img.markup));
  const auto chunks = testing::ReadPngChunks(png);
  ASSERT_EQ(chunks.size(), 4u);
  EXPECT_EQ(chunks[0].data.substr(0, 8), std::string("\0\0\x02\0\0\0\x02\0", 8));  // 512 x 512
  bool ok = false;
  const std::string raw = testing::InflateStored(chunks[2].data, &ok);
  ASSERT_TRUE(ok);
  ASSERT_EQ(raw.size(), 512u * 513u);
  // Row 100: column 0 is the top colour (0.6 is the maximum), column 300 is missing (masked).
  EXPECT_EQ(static_cast<uint8_t>(raw[100 * 513 + 1 + 0]), 253);
  EXPECT_EQ(static_cast<uint8_t>(raw[100 * 513 + 1 + 300]), 254);
  EXPECT_LT(img.markup.size(), 400000u);
  EXPECT_EQ(RenderHeatmap(m).markup, img.markup);
}

TEST(ReportSvgPlot, HugeHeatmapIsMaxPooled) {
  Heatmap m;
  m.rows = m.cols = 2000;
  m.values.assign(2000 * 2000, 0.0);
  for (int r = 0; r < 2000; ++r) m.values[r * 2000 + 777] = 1.0;  // a one-cell-wide column
  const SvgImage img = RenderHeatmap(m);
  ExpectGoodSvg(img);
  EXPECT_NE(img.markup.find("reduced from 2000 x 2000 to "), std::string::npos);
  const auto chunks = testing::ReadPngChunks(testing::Base64Decode(PngPayload(img.markup)));
  ASSERT_EQ(chunks.size(), 4u);
  const auto u32 = [](const std::string& s, size_t k) {
    return static_cast<uint32_t>(
        static_cast<uint8_t>(s[k]) << 24 | static_cast<uint8_t>(s[k + 1]) << 16 |
        static_cast<uint8_t>(s[k + 2]) << 8 | static_cast<uint8_t>(s[k + 3]));
  };
  const uint32_t w = u32(chunks[0].data, 0), h = u32(chunks[0].data, 4);
  EXPECT_LE(w, 720u);
  EXPECT_LE(h, 560u);
  bool ok = false;
  const std::string raw = testing::InflateStored(chunks[2].data, &ok);
  ASSERT_TRUE(ok);
  for (uint32_t y = 0; y < h; y += 37) {  // the column is visible in every row
    int top = 0;
    for (uint32_t x = 0; x < w; ++x) top += static_cast<uint8_t>(raw[y * (w + 1) + 1 + x]) == 253;
    EXPECT_EQ(top, 1) << "row " << y;
  }
}

TEST(ReportSvgPlot, HeatmapBadShapesGiveAMessage) {
  Heatmap m = SinkMap(3, 3);
  m.values.pop_back();
  SvgImage img = RenderHeatmap(m);
  ExpectGoodSvg(img);
  EXPECT_NE(img.markup.find("cannot draw: 8 values for a 3 x 3 matrix (9 expected)"),
            std::string::npos);
  m.rows = 0;
  ExpectGoodSvg(RenderHeatmap(m));
  m.rows = -5;
  ExpectGoodSvg(RenderHeatmap(m));
  Heatmap constant = SinkMap(4, 4);
  constant.values.assign(16, 0.25);
  ExpectGoodSvg(RenderHeatmap(constant));
  Heatmap all_nan = SinkMap(4, 4);
  all_nan.values.assign(16, NAN);
  all_nan.color_scale = ScaleType::kLog10;
  ExpectGoodSvg(RenderHeatmap(all_nan));
  Heatmap forced = SinkMap(4, 4);
  forced.render = HeatmapRender::kPng;
  forced.color_map = ColorMap::kBlueOrange;
  forced.value_min = -1;
  forced.value_max = 0.5;
  img = RenderHeatmap(forced);
  ExpectGoodSvg(img);
  EXPECT_NE(img.markup.find("<image"), std::string::npos);
  EXPECT_NE(img.markup.find("values outside the colour range [-1, 0.5]"), std::string::npos);
}

}  // namespace
}  // namespace attnlab::report
