// Plots as inline SVG for reports: line, scatter, grouped bar and heatmap.
//
// Every function is a pure function of its spec: the same spec gives the same bytes (numbers
// are printed with std::to_chars, nothing depends on the locale, the time or addresses). None of
// them fails: bad data is drawn as far as it can be and explained in a note under the plot
// ("3 non-finite values skipped"): a report written after hours of computation should show
// what went wrong rather than abort. Specifically:
//   - NaN and +-Inf are skipped (a line breaks at them) and counted in a note; so are values
//     <= 0 on a log axis;
//   - an empty plot (no series, or no drawable point) still gets axes and says "no data";
//   - a single point or a constant series gets a small range around its value;
//   - x and y of different lengths: the extra values are ignored, with a note.
// The SVG uses no ids (several plots can share one HTML page) and no external resources;
// clipping to the plot area is done with a nested <svg> viewport. Colours: colormap.h.
#ifndef ATTNLAB_REPORT_SVG_PLOT_H_
#define ATTNLAB_REPORT_SVG_PLOT_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "report/colormap.h"
#include "report/plot_scale.h"
#include "report/svg_image.h"

namespace attnlab::report {

struct Series {
  std::string name;       // legend entry (series with an empty name are not in the legend)
  std::vector<double> x;  // empty: x = 0, 1, 2, ...
  std::vector<double> y;
};

struct XyPlot {
  std::string title;  // drawn above the plot; empty: none
  Axis x, y;
  std::vector<Series> series;
  std::vector<ReferenceLine> reference_lines;
  bool markers = false;  // line plots: also a marker at each point (scatter plots always)
  double width = 720, height = 400;
};

// Lines through each series' points in the given order. Isolated points (a single point, or
// one between two skipped values) get a marker so that they do not vanish. A series with more
// points than ~4 per pixel column and sorted x is thinned to the first, min, max and last point
// of each column, which draws the same picture.
SvgImage RenderLinePlot(const XyPlot& plot);

// Markers only (semi-transparent, so overlaps show as darker areas).
SvgImage RenderScatterPlot(const XyPlot& plot);

// One bar per (category, series); series side by side within a category, in series order.
struct BarSeries {
  std::string name;
  std::vector<double> values;  // one per category; missing trailing values are not drawn
};

struct BarChart {
  std::string title;
  std::vector<std::string> categories;
  std::vector<BarSeries> series;
  std::string x_label;
  Axis y;  // linear axes always include 0; on a log axis bars rise from the axis' minimum
  std::vector<ReferenceLine> reference_lines;
  double width = 720, height = 400;
};

SvgImage RenderBarChart(const BarChart& chart);

enum class HeatmapRender {
  kAuto,   // <rect>s up to 4096 cells (with a hover tooltip per cell up to 1024), else kPng
  kRects,  // one <rect> per horizontal run of cells with the same colour
  kPng,    // one embedded PNG (png_encode.h), one pixel per cell
};

// Values of rows x cols, row 0 at the top, with a colour bar.
struct Heatmap {
  std::string title;
  int64_t rows = 0, cols = 0;
  std::vector<double> values;    // [rows, cols] row-major; NaN/Inf drawn as missing (grey)
  std::string x_label, y_label;  // e.g. "head", "layer"
  std::string value_label;       // the colour bar's label
  std::vector<std::string> row_labels, col_labels;  // optional tick labels; empty: indices
  ColorMap color_map = ColorMap::kViridis;
  ScaleType color_scale = ScaleType::kLinear;  // kLog10: values <= 0 are drawn as missing
  std::optional<double> value_min, value_max;  // colour range; default: the finite data's range
  HeatmapRender render = HeatmapRender::kAuto;
  double max_width = 720;        // the whole SVG
  double max_plot_height = 560;  // the matrix itself
  double max_cell_size = 36;     // pixels per cell for small matrices
};

// Matrices larger than the plot area in pixels are reduced by taking the maximum over square
// blocks of cells (thin features, e.g. an attention sink's column, stay visible), with a note.
SvgImage RenderHeatmap(const Heatmap& map);

}  // namespace attnlab::report

#endif  // ATTNLAB_REPORT_SVG_PLOT_H_
