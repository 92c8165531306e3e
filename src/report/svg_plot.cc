// Line, scatter and grouped bar plots (the heatmap is in svg_heatmap.cc).
#include "report/svg_plot.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "report/format_number.h"
#include "report/svg_canvas.h"

namespace attnlab::report {
namespace {

using internal::Anchor;
using internal::PlotArea;
using internal::SvgCanvas;

constexpr double kInf = std::numeric_limits<double>::infinity();

// A point that can be drawn, or a break (a skipped value) in its series.
struct Point {
  double x = 0, y = 0;
  bool valid = false;
};

// Running min/max of accepted values.
struct Extent {
  double lo = kInf, hi = -kInf;
  void Add(double v) {
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
};

// Counts of what was skipped, turned into notes.
struct Skipped {
  int64_t non_finite = 0, non_positive_x = 0, non_positive_y = 0;
  void AppendNotes(std::vector<std::string>* notes) const {
    if (non_finite > 0) {
      notes->push_back(internal::Plural(non_finite, "non-finite value", "non-finite values") +
                       " (NaN or Inf) skipped");
    }
    if (non_positive_x > 0) {
      notes->push_back(internal::Plural(non_positive_x, "point", "points") +
                       " with x <= 0 not shown on the log x axis");
    }
    if (non_positive_y > 0) {
      notes->push_back(internal::Plural(non_positive_y, "value", "values") +
                       " <= 0 not shown on the log y axis");
    }
  }
};

// Each series' points, with breaks where values were skipped.
std::vector<std::vector<Point>> PreparePoints(const XyPlot& p, Extent* ex, Extent* ey,
                                              Skipped* skipped, std::vector<std::string>* notes) {
  const bool log_x = p.x.scale == ScaleType::kLog10, log_y = p.y.scale == ScaleType::kLog10;
  std::vector<std::vector<Point>> out;
  for (const Series& s : p.series) {
    const bool implicit_x = s.x.empty();
    size_t n = s.y.size();
    if (!implicit_x && s.x.size() != s.y.size()) {
      n = std::min(s.x.size(), s.y.size());
      notes->push_back("series \"" + s.name + "\" has " + std::to_string(s.x.size()) +
                       " x values and " + std::to_string(s.y.size()) + " y values; the last " +
                       std::to_string(std::max(s.x.size(), s.y.size()) - n) + " were ignored");
    }
    std::vector<Point> pts(n);
    for (size_t i = 0; i < n; ++i) {
      const double x = implicit_x ? static_cast<double>(i) : s.x[i], y = s.y[i];
      if (!std::isfinite(x) || !std::isfinite(y)) {
        ++skipped->non_finite;
      } else if (log_x && x <= 0) {
        ++skipped->non_positive_x;
      } else if (log_y && y <= 0) {
        ++skipped->non_positive_y;
      } else {
        pts[i] = {x, y, true};
        ex->Add(x);
        ey->Add(y);
      }
    }
    out.push_back(std::move(pts));
  }
  return out;
}

// Thins a long series with non-decreasing x to at most 4 points per pixel column (first, min,
// max, last, in their original order): the polyline covers the same pixels. Breaks are kept.
std::vector<Point> Thin(const std::vector<Point>& pts, const PlotScale& xs, double width_px) {
  const size_t limit = static_cast<size_t>(std::max(1.0, width_px) * 4);
  if (pts.size() <= limit) return pts;
  double prev = -kInf;
  for (const Point& p : pts) {
    if (!p.valid) continue;
    if (p.x < prev) return pts;  // not sorted: draw every point
    prev = p.x;
  }
  std::vector<Point> out;
  size_t i = 0;
  while (i < pts.size()) {
    if (!pts[i].valid) {
      out.push_back(pts[i++]);
      continue;
    }
    const double column = std::floor(xs.Fraction(pts[i].x) * width_px);
    size_t j = i, lo = i, hi = i;
    while (j < pts.size() && pts[j].valid &&
           std::floor(xs.Fraction(pts[j].x) * width_px) == column) {
      if (pts[j].y < pts[lo].y) lo = j;
      if (pts[j].y > pts[hi].y) hi = j;
      ++j;
    }
    std::vector<size_t> keep = {i, lo, hi, j - 1};
    std::sort(keep.begin(), keep.end());
    keep.erase(std::unique(keep.begin(), keep.end()), keep.end());
    for (size_t k : keep) out.push_back(pts[k]);
    i = j;
  }
  return out;
}

SvgImage RenderXy(const XyPlot& p, bool lines, bool markers) {
  std::vector<std::string> notes;
  Extent ex, ey;
  Skipped skipped;
  const auto series = PreparePoints(p, &ex, &ey, &skipped, &notes);
  bool any_point = ey.lo <= ey.hi;
  for (const ReferenceLine& r : p.reference_lines) {  // keep reference lines in view
    if (std::isfinite(r.value) && (p.y.scale == ScaleType::kLinear || r.value > 0)) ey.Add(r.value);
  }
  const PlotScale xs = internal::FitAxis(p.x, ex.lo, ex.hi, "x", &notes);
  const PlotScale ys = internal::FitAxis(p.y, ey.lo, ey.hi, "y", &notes);
  skipped.AppendNotes(&notes);
  internal::NoteReferenceLines(ys, p.reference_lines, &notes);

  std::vector<internal::LegendEntry> legend;
  for (size_t i = 0; i < p.series.size(); ++i) {
    if (p.series[i].name.empty()) continue;
    legend.push_back({p.series[i].name, RgbHex(SeriesColor(i)), internal::SeriesDash(i), lines});
  }
  const double legend_w = internal::LegendWidth(legend);
  const double title_h = p.title.empty() ? 0 : 28;
  PlotArea a;
  a.left = 12 + (p.y.label.empty() ? 0 : 20) + internal::MaxTickLabelWidth(ys) + 10;
  a.right = std::max(a.left + 40, p.width - 16 - (legend_w > 0 ? legend_w + 12 : 0));
  a.top = title_h + 10;
  a.bottom = std::max(a.top + 40, p.height - (p.x.label.empty() ? 28 : 48));
  const double height = a.bottom + (p.x.label.empty() ? 28 : 48) + internal::NotesHeight(notes);
  const double width = std::max(p.width, a.right + 16 + (legend_w > 0 ? legend_w + 12 : 0));

  SvgCanvas c(width, height, p.title.empty() ? (lines ? "line plot" : "scatter plot") : p.title);
  internal::DrawTitle(c, width, p.title);
  internal::DrawXAxis(c, a, xs, p.x.label);
  internal::DrawYAxis(c, a, ys, p.y.label);
  internal::DrawReferenceLines(c, a, ys, p.reference_lines);
  if (!any_point) {
    c.Text(a.left + a.width() / 2, a.top + a.height() / 2, "no data", Anchor::kMiddle, 13,
           internal::kMutedColor);
  }

  // Data, clipped to the plot area plus a margin of pad pixels (markers on the edge stay whole).
  constexpr double pad = 4;
  c.OpenClip(a.left - pad, a.top - pad, a.width() + 2 * pad, a.height() + 2 * pad);
  PlotArea inner{pad, pad, pad + a.width(), pad + a.height()};
  for (size_t si = 0; si < series.size(); ++si) {
    const std::string color = RgbHex(SeriesColor(si));
    const std::vector<Point> pts = lines ? Thin(series[si], xs, a.width()) : series[si];
    c.OpenGroup();
    if (!p.series[si].name.empty()) c.Title(p.series[si].name);
    c.Raw("\n");
    if (lines) {
      // Unbroken runs of valid points: runs of two or more become path pieces, single points
      // markers (a one-point subpath draws nothing).
      std::string d;
      std::vector<Point> isolated;
      for (size_t i = 0; i < pts.size();) {
        if (!pts[i].valid) {
          ++i;
          continue;
        }
        size_t j = i;
        while (j < pts.size() && pts[j].valid) ++j;
        if (j - i == 1) {
          isolated.push_back(pts[i]);
        } else {
          for (size_t k = i; k < j; ++k) {
            d += k == i ? 'M' : 'L';
            d += internal::Num(internal::MapX(xs, inner, pts[k].x));
            d += ' ';
            d += internal::Num(internal::MapY(ys, inner, pts[k].y));
          }
        }
        i = j;
      }
      if (!d.empty()) {
        std::string dash = internal::SeriesDash(si);
        c.Raw("<path d=\"" + d + "\" fill=\"none\" stroke=\"" + color +
              "\" stroke-width=\"2\" stroke-linejoin=\"round\" stroke-linecap=\"round\"" +
              (dash.empty() ? "" : " stroke-dasharray=\"" + dash + "\"") + "/>\n");
      }
      if (!markers) {
        for (const Point& q : isolated) {
          c.Circle(internal::MapX(xs, inner, q.x), internal::MapY(ys, inner, q.y), 3, color);
        }
      }
    }
    if (markers) {
      for (const Point& q : pts) {
        if (!q.valid) continue;
        c.Circle(internal::MapX(xs, inner, q.x), internal::MapY(ys, inner, q.y), lines ? 3 : 3.5,
                 color,
                 lines ? "stroke=\"#ffffff\" stroke-width=\"1\""
                       : "fill-opacity=\"0.75\" stroke=\"#ffffff\" stroke-width=\"0.75\"");
      }
    }
    c.CloseGroup();
  }
  c.CloseClip();
  internal::DrawFrame(c, a);
  internal::DrawLegend(c, a.right + 16, a.top + 12, legend);
  internal::DrawNotes(c, 12, a.bottom + (p.x.label.empty() ? 28 : 48), notes);
  return c.Finish();
}

}  // namespace

SvgImage RenderLinePlot(const XyPlot& plot) { return RenderXy(plot, true, plot.markers); }

SvgImage RenderScatterPlot(const XyPlot& plot) { return RenderXy(plot, false, true); }

SvgImage RenderBarChart(const BarChart& chart) {
  std::vector<std::string> notes;
  const size_t n_cat = chart.categories.size();
  const bool log_y = chart.y.scale == ScaleType::kLog10;
  Extent ey;
  Skipped skipped;
  int64_t extra_values = 0;
  for (const BarSeries& s : chart.series) {
    for (size_t i = 0; i < s.values.size(); ++i) {
      const double v = s.values[i];
      if (i >= n_cat) {
        ++extra_values;
      } else if (!std::isfinite(v)) {
        ++skipped.non_finite;
      } else if (log_y && v <= 0) {
        ++skipped.non_positive_y;
      } else {
        ey.Add(v);
      }
    }
  }
  const bool any_bar = ey.lo <= ey.hi;
  if (!log_y) ey.Add(0);  // bars rise from zero
  for (const ReferenceLine& r : chart.reference_lines) {
    if (std::isfinite(r.value) && (!log_y || r.value > 0)) ey.Add(r.value);
  }
  const PlotScale ys = internal::FitAxis(chart.y, ey.lo, ey.hi, "y", &notes);
  skipped.AppendNotes(&notes);
  if (extra_values > 0) {
    notes.push_back(internal::Plural(extra_values, "value", "values") +
                    " beyond the last category ignored");
  }
  internal::NoteReferenceLines(ys, chart.reference_lines, &notes);

  std::vector<internal::LegendEntry> legend;
  bool named = false;
  for (const BarSeries& s : chart.series) named |= !s.name.empty();
  if (named) {
    for (size_t i = 0; i < chart.series.size(); ++i) {
      legend.push_back({chart.series[i].name, RgbHex(SeriesColor(i)), "", false});
    }
  }
  const double legend_w = internal::LegendWidth(legend);
  const double title_h = chart.title.empty() ? 0 : 28;
  PlotArea a;
  a.left = 12 + (chart.y.label.empty() ? 0 : 20) + internal::MaxTickLabelWidth(ys) + 10;
  a.right = std::max(a.left + 40, chart.width - 16 - (legend_w > 0 ? legend_w + 12 : 0));
  a.top = title_h + 10;

  // Category labels: horizontal if they fit their slot, else rotated; thinned if slots are tiny.
  const double slot = a.width() / static_cast<double>(std::max<size_t>(1, n_cat));
  double label_w = 0;
  for (const std::string& s : chart.categories) {
    label_w = std::max(label_w, internal::TextWidth(s, internal::kTickFont));
  }
  label_w = std::min(label_w, 160.0);
  const bool rotate = label_w > slot - 6;
  const size_t label_stride =
      rotate ? std::max<size_t>(1, static_cast<size_t>(std::ceil(14 / std::max(slot, 1e-9)))) : 1;
  const double label_h = rotate ? label_w * 0.6 + 16 : 20;
  const double below = label_h + (chart.x_label.empty() ? 8 : 26);
  a.bottom = std::max(a.top + 40, chart.height - below);
  const double height = a.bottom + below + internal::NotesHeight(notes);
  const double width = std::max(chart.width, a.right + 16 + (legend_w > 0 ? legend_w + 12 : 0));

  SvgCanvas c(width, height, chart.title.empty() ? "bar chart" : chart.title);
  internal::DrawTitle(c, width, chart.title);
  internal::DrawYAxis(c, a, ys, chart.y.label);
  if (!any_bar) {
    c.Text(a.left + a.width() / 2, a.top + a.height() / 2, "no data", Anchor::kMiddle, 13,
           internal::kMutedColor);
  }
  const double n_s = static_cast<double>(std::max<size_t>(1, chart.series.size()));
  const double group_w = slot * 0.8, bar_w = group_w / n_s;
  const double base = log_y ? ys.lo() : std::clamp(0.0, ys.lo(), ys.hi());
  c.OpenClip(a.left, a.top, a.width(), a.height());
  PlotArea inner{0, 0, a.width(), a.height()};
  const double y_base = internal::MapY(ys, inner, base);
  for (size_t si = 0; si < chart.series.size(); ++si) {
    const BarSeries& s = chart.series[si];
    const std::string color = RgbHex(SeriesColor(si));
    for (size_t i = 0; i < std::min(n_cat, s.values.size()); ++i) {
      const double v = s.values[i];
      if (!std::isfinite(v) || (log_y && v <= 0)) continue;
      const double y_v = internal::MapY(ys, inner, v);
      const double x = slot * static_cast<double>(i) + (slot - group_w) / 2 + bar_w * si;
      const std::string tip = (s.name.empty() ? "" : s.name + ", ") + chart.categories[i] + ": " +
                              FormatSignificant(v, 6);
      c.RectWithTitle(x + 0.5, std::min(y_v, y_base), std::max(0.0, bar_w - 1),
                      std::fabs(y_base - y_v), color, tip);
    }
  }
  c.CloseClip();
  if (!log_y && ys.lo() < 0 && ys.hi() > 0) {  // the zero line
    c.Line(a.left, internal::MapY(ys, a, 0), a.right, internal::MapY(ys, a, 0),
           internal::kMutedColor, 1);
  }
  internal::DrawReferenceLines(c, a, ys, chart.reference_lines);
  internal::DrawFrame(c, a);
  for (size_t i = 0; i < n_cat; i += label_stride) {
    const double x = a.left + slot * (static_cast<double>(i) + 0.5);
    c.Line(x, a.bottom, x, a.bottom + 4, internal::kAxisColor, 1);
    if (rotate) {
      c.Text(x, a.bottom + 12, chart.categories[i], Anchor::kEnd, internal::kTickFont,
             internal::kMutedColor,
             "transform=\"rotate(-35 " + internal::Num(x) + " " + internal::Num(a.bottom + 12) +
                 ")\"");
    } else {
      c.Text(x, a.bottom + 17, chart.categories[i], Anchor::kMiddle, internal::kTickFont,
             internal::kMutedColor);
    }
  }
  if (!chart.x_label.empty()) {
    c.Text(a.left + a.width() / 2, a.bottom + label_h + 16, chart.x_label, Anchor::kMiddle,
           internal::kLabelFont);
  }
  internal::DrawLegend(c, a.right + 16, a.top + 12, legend);
  internal::DrawNotes(c, 12, a.bottom + below, notes);
  return c.Finish();
}

}  // namespace attnlab::report
