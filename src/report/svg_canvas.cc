#include "report/svg_canvas.h"

#include <algorithm>
#include <cmath>

#include "report/escape.h"
#include "report/format_number.h"

namespace attnlab::report::internal {
namespace {

constexpr std::string_view kFontFamily =
    "system-ui, -apple-system, 'Segoe UI', Roboto, 'Helvetica Neue', Arial, 'Noto Sans', "
    "'Liberation Sans', sans-serif";

const char* AnchorName(Anchor a) {
  switch (a) {
    case Anchor::kStart:
      return "start";
    case Anchor::kMiddle:
      return "middle";
    case Anchor::kEnd:
      return "end";
  }
  return "start";
}

double ClampPixel(double v) { return std::isnan(v) ? 0 : std::clamp(v, -1e6, 1e6); }

}  // namespace

std::string Num(double v) { return FormatCoordinate(v); }

double TextWidth(std::string_view text, double font_size) {
  return static_cast<double>(Utf8Length(SanitizeUtf8(text))) * font_size * 0.6;
}

SvgCanvas::SvgCanvas(double width, double height, std::string_view aria_label)
    : width_(width), height_(height) {
  out_ = "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"plot\" width=\"" + Num(width) +
         "\" height=\"" + Num(height) + "\" viewBox=\"0 0 " + Num(width) + " " + Num(height) +
         "\" role=\"img\" aria-label=\"" + EscapeHtml(aria_label) + "\" font-family=\"" +
         std::string(kFontFamily) + "\">\n";
  Rect(0, 0, width, height, "#ffffff");
}

void SvgCanvas::Rect(double x, double y, double w, double h, std::string_view fill,
                     std::string_view extra) {
  out_ += "<rect x=\"" + Num(x) + "\" y=\"" + Num(y) + "\" width=\"" + Num(std::max(0.0, w)) +
          "\" height=\"" + Num(std::max(0.0, h)) + "\" fill=\"" + std::string(fill) + "\"";
  if (!extra.empty()) AppendAttribute(extra);
  out_ += "/>\n";
}

void SvgCanvas::Line(double x1, double y1, double x2, double y2, std::string_view stroke,
                     double width, std::string_view dash) {
  out_ += "<line x1=\"" + Num(x1) + "\" y1=\"" + Num(y1) + "\" x2=\"" + Num(x2) + "\" y2=\"" +
          Num(y2) + "\" stroke=\"" + std::string(stroke) + "\" stroke-width=\"" + Num(width) + "\"";
  if (!dash.empty()) AppendAttribute("stroke-dasharray", dash);
  out_ += "/>\n";
}

void SvgCanvas::Circle(double cx, double cy, double r, std::string_view fill,
                       std::string_view extra) {
  out_ += "<circle cx=\"" + Num(cx) + "\" cy=\"" + Num(cy) + "\" r=\"" + Num(r) + "\" fill=\"" +
          std::string(fill) + "\"";
  if (!extra.empty()) AppendAttribute(extra);
  out_ += "/>\n";
}

void SvgCanvas::RectWithTitle(double x, double y, double w, double h, std::string_view fill,
                              std::string_view title) {
  out_ += "<rect x=\"" + Num(x) + "\" y=\"" + Num(y) + "\" width=\"" + Num(std::max(0.0, w)) +
          "\" height=\"" + Num(std::max(0.0, h)) + "\" fill=\"" + std::string(fill) + "\"><title>" +
          EscapeHtml(title) + "</title></rect>\n";
}

void SvgCanvas::Text(double x, double y, std::string_view text, Anchor anchor, double size,
                     std::string_view fill, std::string_view extra) {
  out_ += "<text x=\"" + Num(x) + "\" y=\"" + Num(y) + "\" font-size=\"" + Num(size) + "\"";
  if (anchor != Anchor::kStart) AppendAttribute("text-anchor", AnchorName(anchor));
  AppendAttribute("fill", fill);
  if (!extra.empty()) AppendAttribute(extra);
  out_ += '>';
  out_ += EscapeHtml(text);
  out_ += "</text>\n";
}

void SvgCanvas::VerticalText(double x, double y, std::string_view text, double size) {
  Text(x, y, text, Anchor::kMiddle, size, kTextColor,
       "transform=\"rotate(-90 " + Num(x) + " " + Num(y) + ")\"");
}

void SvgCanvas::Title(std::string_view text) {
  out_ += "<title>";
  out_ += EscapeHtml(text);
  out_ += "</title>";
}

void SvgCanvas::OpenGroup(std::string_view attributes) {
  out_ += "<g";
  if (!attributes.empty()) AppendAttribute(attributes);
  out_ += ">";
}

void SvgCanvas::CloseGroup() { out_ += "</g>\n"; }

void SvgCanvas::OpenClip(double x, double y, double w, double h) {
  out_ += "<svg x=\"" + Num(x) + "\" y=\"" + Num(y) + "\" width=\"" + Num(std::max(0.0, w)) +
          "\" height=\"" + Num(std::max(0.0, h)) + "\" overflow=\"hidden\">\n";
}

void SvgCanvas::CloseClip() { out_ += "</svg>\n"; }

SvgImage SvgCanvas::Finish() {
  SvgImage img;
  img.markup = std::move(out_);
  img.markup += "</svg>";
  img.width = width_;
  img.height = height_;
  out_.clear();
  return img;
}

double MapX(const PlotScale& s, const PlotArea& a, double v) {
  return ClampPixel(a.left + s.Fraction(v) * a.width());
}

double MapY(const PlotScale& s, const PlotArea& a, double v) {
  return ClampPixel(a.bottom - s.Fraction(v) * a.height());
}

double MaxTickLabelWidth(const PlotScale& s) {
  double w = 0;
  for (const Tick& t : s.ticks()) w = std::max(w, TextWidth(t.label, kTickFont));
  return w;
}

void DrawXAxis(SvgCanvas& c, const PlotArea& a, const PlotScale& s, std::string_view label) {
  for (const Tick& t : s.ticks()) {
    const double x = MapX(s, a, t.value);
    if (x < a.left - 0.5 || x > a.right + 0.5) continue;
    if (t.major) c.Line(x, a.top, x, a.bottom, kGridColor, 1);
    c.Line(x, a.bottom, x, a.bottom + (t.major ? 5 : 3), kAxisColor, 1);
    if (!t.label.empty())
      c.Text(x, a.bottom + 18, t.label, Anchor::kMiddle, kTickFont, kMutedColor);
  }
  if (!label.empty())
    c.Text(a.left + a.width() / 2, a.bottom + 38, label, Anchor::kMiddle, kLabelFont);
}

void DrawYAxis(SvgCanvas& c, const PlotArea& a, const PlotScale& s, std::string_view label) {
  for (const Tick& t : s.ticks()) {
    const double y = MapY(s, a, t.value);
    if (y < a.top - 0.5 || y > a.bottom + 0.5) continue;
    if (t.major) c.Line(a.left, y, a.right, y, kGridColor, 1);
    c.Line(a.left - (t.major ? 5 : 3), y, a.left, y, kAxisColor, 1);
    if (!t.label.empty()) c.Text(a.left - 8, y + 4, t.label, Anchor::kEnd, kTickFont, kMutedColor);
  }
  if (!label.empty()) {
    c.VerticalText(a.left - 14 - MaxTickLabelWidth(s), a.top + a.height() / 2, label, kLabelFont);
  }
}

void DrawFrame(SvgCanvas& c, const PlotArea& a) {
  c.Rect(a.left, a.top, a.width(), a.height(), "none",
         "stroke=\"" + std::string(kAxisColor) + "\" stroke-width=\"1\"");
}

double LegendWidth(const std::vector<LegendEntry>& entries) {
  double w = 0;
  for (const LegendEntry& e : entries) w = std::max(w, TextWidth(e.name, kLabelFont));
  return w == 0 ? 0 : std::min(240.0, 34 + w);
}

void DrawLegend(SvgCanvas& c, double x, double y, const std::vector<LegendEntry>& entries) {
  for (const LegendEntry& e : entries) {
    if (e.name.empty()) continue;
    if (e.line) {
      c.Line(x, y - 4, x + 22, y - 4, e.color, 2.5, e.dash);
    } else {
      c.Rect(x + 5, y - 10, 12, 12, e.color);
    }
    c.Text(x + 28, y, e.name, Anchor::kStart, kLabelFont);
    y += 20;
  }
}

std::string SeriesDash(size_t i) {
  switch ((i / 8) % 3) {
    case 1:
      return "7 4";
    case 2:
      return "2 3";
    default:
      return "";
  }
}

namespace {
bool Placeable(const PlotScale& y, double v) {
  if (!y.Accepts(v)) return false;
  const double f = y.Fraction(v);
  return f >= -1e-9 && f <= 1 + 1e-9;
}
}  // namespace

void DrawReferenceLines(SvgCanvas& c, const PlotArea& a, const PlotScale& y,
                        const std::vector<ReferenceLine>& lines) {
  for (const ReferenceLine& r : lines) {
    if (!Placeable(y, r.value)) continue;
    const double py = MapY(y, a, r.value);
    c.Line(a.left, py, a.right, py, "#4b5563", 1.25, "6 4");
    if (!r.label.empty()) {
      c.Text(a.right - 4, py - 5, r.label, Anchor::kEnd, kTickFont, "#374151",
             "paint-order=\"stroke\" stroke=\"#ffffff\" stroke-width=\"3\"");
    }
  }
}

void NoteReferenceLines(const PlotScale& y, const std::vector<ReferenceLine>& lines,
                        std::vector<std::string>* notes) {
  for (const ReferenceLine& r : lines) {
    if (Placeable(y, r.value)) continue;
    notes->push_back("reference line \"" + r.label + "\" (y = " + FormatSignificant(r.value) +
                     ") is outside the plotted range");
  }
}

double NotesHeight(const std::vector<std::string>& notes) {
  return notes.empty() ? 0 : 6 + 15 * static_cast<double>(notes.size());
}

void DrawNotes(SvgCanvas& c, double x, double y, const std::vector<std::string>& notes) {
  for (const std::string& n : notes) {
    y += 15;
    c.Text(x, y, "note: " + n, Anchor::kStart, kNoteFont, kMutedColor, "font-style=\"italic\"");
  }
}

double DrawTitle(SvgCanvas& c, double width, std::string_view title) {
  if (title.empty()) return 0;
  c.Text(width / 2, 20, title, Anchor::kMiddle, kTitleFont, kTextColor, "font-weight=\"600\"");
  return 28;
}

std::string Plural(int64_t n, std::string_view singular, std::string_view plural) {
  return std::to_string(n) + " " + std::string(n == 1 ? singular : plural);
}

PlotScale FitAxis(const Axis& axis, double data_lo, double data_hi, std::string_view axis_name,
                  std::vector<std::string>* notes) {
  std::optional<double> min = axis.min, max = axis.max;
  const bool log = axis.scale == ScaleType::kLog10;
  const auto valid = [&](const std::optional<double>& v) {
    return !v || (std::isfinite(*v) && (!log || *v > 0));
  };
  if (!valid(min) || !valid(max) || (min && max && !(*min < *max))) {
    notes->push_back("the fixed " + std::string(axis_name) + " axis range is invalid (" +
                     (min ? FormatSignificant(*min) : "auto") + " .. " +
                     (max ? FormatSignificant(*max) : "auto") + ") and was ignored");
    min.reset();
    max.reset();
  }
  if (!min && !max) return PlotScale::Fit(axis.scale, data_lo, data_hi, true);
  if (min && max) return PlotScale::Fit(axis.scale, *min, *max, false);
  // One fixed end: the other comes from the data, widened to a round value; if the data is
  // empty or lies entirely beyond the fixed end, from a small range around the fixed end.
  const double fixed = min ? *min : *max;
  const bool empty = !(data_lo <= data_hi);
  double lo = min ? *min : data_lo, hi = max ? *max : data_hi;
  const PlotScale free = (empty || !(lo < hi)) ? PlotScale::Fit(axis.scale, fixed, fixed, true)
                                               : PlotScale::Fit(axis.scale, lo, hi, true);
  return PlotScale::Fit(axis.scale, min ? *min : free.lo(), max ? *max : free.hi(), false);
}

}  // namespace attnlab::report::internal
