// The heatmap: a matrix of colour cells with tick labels and a colour bar.
//
// Small matrices are <rect>s (one per run of equal colour in a row, or one per cell with a
// hover tooltip); large ones are one embedded PNG with one pixel per cell, scaled up with
// nearest-neighbour sampling. Both quantise to the same 254 colours, so the choice does not
// change the picture.
#include <algorithm>
#include <cmath>
#include <limits>

#include "report/format_number.h"
#include "report/png_encode.h"
#include "report/svg_canvas.h"
#include "report/svg_plot.h"

namespace attnlab::report {
namespace {

using internal::Anchor;
using internal::SvgCanvas;

constexpr int kLevels = 254;                // colour indices 0..253
constexpr uint8_t kMissingIndex = kLevels;  // index 254: kMissingColor
constexpr int64_t kMaxAutoRects = 4096, kMaxTooltips = 1024;
constexpr int kColorBarSteps = 64;

// A message instead of a plot, for specs that cannot be drawn at all.
SvgImage ErrorSvg(const Heatmap& m, const std::string& message) {
  SvgCanvas c(m.max_width, 60, m.title.empty() ? "heatmap" : m.title);
  c.Text(12, 24, m.title.empty() ? "heatmap" : m.title, Anchor::kStart, internal::kTitleFont);
  c.Text(12, 46, "cannot draw: " + message, Anchor::kStart, internal::kNoteFont, "#b91c1c");
  return c.Finish();
}

// 1, 2, 5, 10, 20, ...: the smallest such stride >= x.
int64_t NiceStride(double x) {
  if (x <= 1) return 1;
  int64_t s = static_cast<int64_t>(std::llround(NiceStep(x)));
  return std::max<int64_t>(1, s);
}

}  // namespace

SvgImage RenderHeatmap(const Heatmap& m) {
  constexpr int64_t kMaxCells = int64_t{1} << 32;
  if (m.rows <= 0 || m.cols <= 0 || m.rows > kMaxCells || m.cols > kMaxCells ||
      m.rows * m.cols > kMaxCells) {
    return ErrorSvg(m, "a " + std::to_string(m.rows) + " x " + std::to_string(m.cols) +
                           " matrix (both sizes must be >= 1 and the product at most 2^32)");
  }
  const int64_t rows = m.rows, cols = m.cols;
  if (static_cast<int64_t>(m.values.size()) != rows * cols) {
    return ErrorSvg(m, std::to_string(m.values.size()) + " values for a " + std::to_string(rows) +
                           " x " + std::to_string(cols) + " matrix (" +
                           std::to_string(rows * cols) + " expected)");
  }
  std::vector<std::string> notes;
  const bool log = m.color_scale == ScaleType::kLog10;
  const auto drawable = [&](double v) { return std::isfinite(v) && (!log || v > 0); };

  // Colour range from the data (or the caller), and what was left out.
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  int64_t non_finite = 0, non_positive = 0;
  for (double v : m.values) {
    if (!std::isfinite(v)) {
      ++non_finite;
    } else if (log && v <= 0) {
      ++non_positive;
    } else {
      lo = std::min(lo, v);
      hi = std::max(hi, v);
    }
  }
  if (non_finite > 0) {
    notes.push_back(internal::Plural(non_finite, "cell is", "cells are") +
                    " NaN or Inf (drawn grey)");
  }
  if (non_positive > 0) {
    notes.push_back(internal::Plural(non_positive, "cell is", "cells are") +
                    " <= 0, drawn grey on the log colour scale");
  }
  PlotScale cs = PlotScale::Fit(m.color_scale, lo, hi, false, 5);
  if (m.value_min || m.value_max) {
    const double fixed_lo = m.value_min.value_or(lo), fixed_hi = m.value_max.value_or(hi);
    if (std::isfinite(fixed_lo) && std::isfinite(fixed_hi) && fixed_lo < fixed_hi &&
        (!log || fixed_lo > 0)) {
      cs = PlotScale::Fit(m.color_scale, fixed_lo, fixed_hi, false, 5);
      if (lo < fixed_lo || hi > fixed_hi) {
        notes.push_back("values outside the colour range [" + FormatSignificant(fixed_lo) + ", " +
                        FormatSignificant(fixed_hi) + "] are drawn with the end colours");
      }
    } else {
      notes.push_back("the fixed colour range is invalid and was ignored");
    }
  }
  const auto color_index = [&](double v) -> uint8_t {
    if (!drawable(v)) return kMissingIndex;
    const double t = std::clamp(cs.Fraction(v), 0.0, 1.0);
    return static_cast<uint8_t>(std::lround(t * (kLevels - 1)));
  };
  std::vector<Rgb> palette(kLevels + 1);
  for (int i = 0; i < kLevels; ++i) {
    palette[i] = SampleColorMap(m.color_map, static_cast<double>(i) / (kLevels - 1));
  }
  palette[kMissingIndex] = kMissingColor;

  // Tick labels.
  const auto labels_for = [&](const std::vector<std::string>& given, int64_t n, const char* what) {
    std::vector<std::string> out;
    if (!given.empty() && static_cast<int64_t>(given.size()) != n) {
      notes.push_back(std::string(what) + " labels: " + std::to_string(given.size()) + " for " +
                      std::to_string(n) + " " + what + "s; showing indices");
    }
    if (static_cast<int64_t>(given.size()) == n) return given;
    return out;  // empty: indices
  };
  const std::vector<std::string> row_labels = labels_for(m.row_labels, rows, "row");
  const std::vector<std::string> col_labels = labels_for(m.col_labels, cols, "column");
  const auto label = [](const std::vector<std::string>& given, int64_t i) {
    return given.empty() ? std::to_string(i) : given[static_cast<size_t>(i)];
  };
  double row_label_w = 0, col_label_w = 0;
  for (int64_t i = 0; i < rows; i += std::max<int64_t>(1, rows / 64)) {
    row_label_w =
        std::max(row_label_w, internal::TextWidth(label(row_labels, i), internal::kTickFont));
  }
  row_label_w =
      std::max(row_label_w, internal::TextWidth(label(row_labels, rows - 1), internal::kTickFont));
  for (int64_t i = 0; i < cols; i += std::max<int64_t>(1, cols / 64)) {
    col_label_w =
        std::max(col_label_w, internal::TextWidth(label(col_labels, i), internal::kTickFont));
  }
  col_label_w =
      std::max(col_label_w, internal::TextWidth(label(col_labels, cols - 1), internal::kTickFont));
  row_label_w = std::min(row_label_w, 140.0);

  // Geometry.
  const double title_h = m.title.empty() ? 0 : 28;
  const double left = 12 + (m.y_label.empty() ? 0 : 20) + row_label_w + 10;
  const double top = title_h + 10;
  const double bar_tick_w = internal::MaxTickLabelWidth(cs);
  const double right_part = 16 + 14 + 8 + bar_tick_w + (m.value_label.empty() ? 0 : 22) + 12;
  const double avail_w = std::max(40.0, m.max_width - left - right_part);
  const double avail_h = std::max(40.0, m.max_plot_height);
  double cell_w = std::min({avail_w / cols, avail_h / rows, m.max_cell_size});
  double cell_h = cell_w;
  int64_t fr = 1, fc = 1;  // pooling factors
  if (cell_w < 1) {
    fr = static_cast<int64_t>(std::ceil(rows / std::floor(avail_h)));
    fc = static_cast<int64_t>(std::ceil(cols / std::floor(avail_w)));
  }
  const int64_t r2 = (rows + fr - 1) / fr, c2 = (cols + fc - 1) / fc;
  if (fr > 1 || fc > 1) {
    cell_w = std::min(avail_w / c2, m.max_cell_size);
    cell_h = std::min(avail_h / r2, m.max_cell_size);
    notes.push_back("reduced from " + std::to_string(rows) + " x " + std::to_string(cols) + " to " +
                    std::to_string(r2) + " x " + std::to_string(c2) +
                    " cells: each shows the maximum of a block of " + std::to_string(fr) + " x " +
                    std::to_string(fc));
  }
  const HeatmapRender mode = m.render != HeatmapRender::kAuto ? m.render
                             : r2 * c2 <= kMaxAutoRects       ? HeatmapRender::kRects
                                                              : HeatmapRender::kPng;
  if (mode == HeatmapRender::kPng && cell_w >= 1 && cell_h >= 1 && fr == 1 && fc == 1) {
    cell_w = cell_h = std::floor(cell_w);  // whole pixels per cell: crisp edges
  }
  const double plot_w = cell_w * c2, plot_h = cell_h * r2;
  const double bar_h = std::max(plot_h, 100.0);
  const double below = 22 + (m.x_label.empty() ? 0 : 22);
  const double height = top + std::max(plot_h, bar_h) + below + 8 + internal::NotesHeight(notes);
  const double width = left + plot_w + right_part;

  // Pooled colour indices (max over each block of drawable values).
  std::vector<uint8_t> idx(static_cast<size_t>(r2 * c2));
  for (int64_t i = 0; i < r2; ++i) {
    for (int64_t j = 0; j < c2; ++j) {
      double best = std::numeric_limits<double>::quiet_NaN();
      for (int64_t a = i * fr; a < std::min(rows, (i + 1) * fr); ++a) {
        for (int64_t b = j * fc; b < std::min(cols, (j + 1) * fc); ++b) {
          const double v = m.values[static_cast<size_t>(a * cols + b)];
          if (drawable(v) && !(best >= v)) best = v;
        }
      }
      idx[static_cast<size_t>(i * c2 + j)] = color_index(best);
    }
  }

  SvgCanvas c(width, height, m.title.empty() ? "heatmap" : m.title);
  if (!m.title.empty()) {
    c.Text(left + plot_w / 2, 20, m.title, Anchor::kMiddle, internal::kTitleFont,
           internal::kTextColor, "font-weight=\"600\"");
  }
  if (mode == HeatmapRender::kPng) {
    const std::string png =
        EncodePngIndexed(static_cast<int>(c2), static_cast<int>(r2), idx, palette);
    c.Raw("<image x=\"" + internal::Num(left) + "\" y=\"" + internal::Num(top) + "\" width=\"" +
          internal::Num(plot_w) + "\" height=\"" + internal::Num(plot_h) +
          "\" preserveAspectRatio=\"none\" style=\"image-rendering:pixelated\" href=\"" +
          PngDataUri(png) + "\"/>\n");
  } else {
    const bool tooltips = fr == 1 && fc == 1 && r2 * c2 <= kMaxTooltips;
    c.OpenGroup("shape-rendering=\"crispEdges\"");
    c.Raw("\n");
    for (int64_t i = 0; i < r2; ++i) {
      int64_t j = 0;
      while (j < c2) {
        const uint8_t k = idx[static_cast<size_t>(i * c2 + j)];
        int64_t run = 1;
        if (!tooltips) {
          while (j + run < c2 && idx[static_cast<size_t>(i * c2 + j + run)] == k) ++run;
        }
        const double x = left + cell_w * j, y = top + cell_h * i;
        const std::string fill = RgbHex(palette[k]);
        if (tooltips) {
          const std::string row_name =
              (m.y_label.empty() ? "" : m.y_label + " ") + label(row_labels, i);
          const std::string col_name =
              (m.x_label.empty() ? "" : m.x_label + " ") + label(col_labels, j);
          c.RectWithTitle(x, y, cell_w, cell_h, fill,
                          row_name + ", " + col_name + ": " +
                              FormatSignificant(m.values[static_cast<size_t>(i * cols + j)], 4));
        } else {
          c.Rect(x, y, cell_w * run, cell_h, fill);
        }
        j += run;
      }
    }
    c.CloseGroup();
  }
  c.Rect(left, top, plot_w, plot_h, "none",
         "stroke=\"" + std::string(internal::kAxisColor) + "\" stroke-width=\"1\"");

  // Tick labels at cell centres, thinned to a round stride so that they do not overlap.
  const double px_per_col = cell_w / fc, px_per_row = cell_h / fr;
  const int64_t col_stride = NiceStride((col_label_w + 8) / px_per_col);
  const int64_t row_stride = NiceStride(22 / px_per_row);
  for (int64_t j = 0; j < cols; j += col_stride) {
    const double x = left + (static_cast<double>(j) + 0.5) * px_per_col;
    c.Line(x, top + plot_h, x, top + plot_h + 4, internal::kAxisColor, 1);
    c.Text(x, top + plot_h + 16, label(col_labels, j), Anchor::kMiddle, internal::kTickFont,
           internal::kMutedColor);
  }
  for (int64_t i = 0; i < rows; i += row_stride) {
    const double y = top + (static_cast<double>(i) + 0.5) * px_per_row;
    c.Line(left - 4, y, left, y, internal::kAxisColor, 1);
    c.Text(left - 7, y + 4, label(row_labels, i), Anchor::kEnd, internal::kTickFont,
           internal::kMutedColor);
  }
  if (!m.x_label.empty()) {
    c.Text(left + plot_w / 2, top + plot_h + 38, m.x_label, Anchor::kMiddle, internal::kLabelFont);
  }
  if (!m.y_label.empty()) {
    c.VerticalText(left - 14 - row_label_w, top + plot_h / 2, m.y_label, internal::kLabelFont);
  }

  // Colour bar: top is the high end.
  const double bx = left + plot_w + 16;
  c.OpenGroup("shape-rendering=\"crispEdges\"");
  c.Raw("\n");
  for (int s = 0; s < kColorBarSteps; ++s) {
    const double t = (kColorBarSteps - 1 - s + 0.5) / kColorBarSteps;
    const uint8_t k = static_cast<uint8_t>(std::lround(t * (kLevels - 1)));
    const double y0 = top + bar_h * s / kColorBarSteps, y1 = top + bar_h * (s + 1) / kColorBarSteps;
    c.Rect(bx, y0, 14, y1 - y0 + 0.01, RgbHex(palette[k]));
  }
  c.CloseGroup();
  c.Rect(bx, top, 14, bar_h, "none",
         "stroke=\"" + std::string(internal::kAxisColor) + "\" stroke-width=\"1\"");
  for (const Tick& t : cs.ticks()) {
    const double f = cs.Fraction(t.value);
    if (!(f >= -1e-9 && f <= 1 + 1e-9)) continue;
    const double y = top + bar_h * (1 - f);
    c.Line(bx + 14, y, bx + (t.major ? 18 : 16), y, internal::kAxisColor, 1);
    if (!t.label.empty()) {
      c.Text(bx + 21, y + 4, t.label, Anchor::kStart, internal::kTickFont, internal::kMutedColor);
    }
  }
  if (!m.value_label.empty()) {
    const double x = bx + 14 + 8 + bar_tick_w + 14;
    c.Text(
        x, top + bar_h / 2, m.value_label, Anchor::kMiddle, internal::kLabelFont,
        internal::kTextColor,
        "transform=\"rotate(90 " + internal::Num(x) + " " + internal::Num(top + bar_h / 2) + ")\"");
  }
  internal::DrawNotes(c, 12, top + std::max(plot_h, bar_h) + below + 8 - 6, notes);
  return c.Finish();
}

}  // namespace attnlab::report
