// Internal to the plotters (svg_plot.cc, svg_heatmap.cc): an SVG element writer and the parts
// every plot shares (axes with ticks and grid, legend, notes).
#ifndef ATTNLAB_REPORT_SVG_CANVAS_H_
#define ATTNLAB_REPORT_SVG_CANVAS_H_

#include <string>
#include <string_view>
#include <vector>

#include "report/plot_scale.h"
#include "report/svg_image.h"

namespace attnlab::report::internal {

// Palette of the chrome around the data.
inline constexpr std::string_view kTextColor = "#1f2937";
inline constexpr std::string_view kMutedColor = "#6b7280";
inline constexpr std::string_view kAxisColor = "#9ca3af";
inline constexpr std::string_view kGridColor = "#e5e7eb";
inline constexpr double kTickFont = 11, kLabelFont = 12.5, kTitleFont = 14, kNoteFont = 11;

// Estimated width of text in a sans-serif font (no font metrics here; ~0.6 em per character).
double TextWidth(std::string_view text, double font_size);

enum class Anchor { kStart, kMiddle, kEnd };

// Appends elements to an <svg> document. Coordinates go through FormatCoordinate, text through
// EscapeHtml; `extra` is trusted attribute text written by the plotters themselves.
class SvgCanvas {
 public:
  SvgCanvas(double width, double height, std::string_view aria_label);

  void Rect(double x, double y, double w, double h, std::string_view fill,
            std::string_view extra = "");
  void Line(double x1, double y1, double x2, double y2, std::string_view stroke, double width,
            std::string_view dash = "");
  void Circle(double cx, double cy, double r, std::string_view fill, std::string_view extra = "");
  // A rect with a hover tooltip (<title> child).
  void RectWithTitle(double x, double y, double w, double h, std::string_view fill,
                     std::string_view title);
  void Text(double x, double y, std::string_view text, Anchor anchor, double size,
            std::string_view fill = kTextColor, std::string_view extra = "");
  // Text rotated by -90 degrees about (x, y) (a vertical axis label).
  void VerticalText(double x, double y, std::string_view text, double size);
  // <title> tooltip: call between an element opened with OpenGroup and CloseGroup.
  void Title(std::string_view text);
  void OpenGroup(std::string_view attributes = "");
  void CloseGroup();
  // A nested viewport that clips what is drawn inside; coordinates inside are relative to x, y.
  void OpenClip(double x, double y, double w, double h);
  void CloseClip();
  void Raw(std::string_view markup) { out_.append(markup); }

  SvgImage Finish();

 private:
  // " attributes" verbatim, or ' name="value"' (value not escaped: callers pass markup-safe
  // values). Appended piecewise: GCC 12 reports a false -Wrestrict (bug 105329) on the inlined
  // " " + std::string(...) this replaces.
  void AppendAttribute(std::string_view attributes) {
    out_ += ' ';
    out_ += attributes;
  }
  void AppendAttribute(std::string_view name, std::string_view value) {
    out_ += ' ';
    out_ += name;
    out_ += "=\"";
    out_ += value;
    out_ += '"';
  }
  std::string out_;
  double width_, height_;
};

std::string Num(double v);  // FormatCoordinate

// The rectangle the data is drawn in, in SVG pixels.
struct PlotArea {
  double left = 0, top = 0, right = 0, bottom = 0;
  double width() const { return right - left; }
  double height() const { return bottom - top; }
};

// Pixel position of v on an axis; the result is clamped to +-1e6 px so that a wild value
// cannot produce an unreadable coordinate.
double MapX(const PlotScale& s, const PlotArea& a, double v);
double MapY(const PlotScale& s, const PlotArea& a, double v);

// Widest tick label, for margins.
double MaxTickLabelWidth(const PlotScale& s);

// Grid lines at major ticks, tick marks (minor ticks shorter), tick labels and the axis label.
void DrawXAxis(SvgCanvas& c, const PlotArea& a, const PlotScale& s, std::string_view label);
void DrawYAxis(SvgCanvas& c, const PlotArea& a, const PlotScale& s, std::string_view label);
void DrawFrame(SvgCanvas& c, const PlotArea& a);

struct LegendEntry {
  std::string name;
  std::string color;
  std::string dash;  // stroke-dasharray, empty: solid
  bool line = true;  // a short line; otherwise a square swatch
};
// Width the legend needs (0 when there is nothing to show).
double LegendWidth(const std::vector<LegendEntry>& entries);
void DrawLegend(SvgCanvas& c, double x, double y, const std::vector<LegendEntry>& entries);

// Dash pattern for series i: solid for the first 8 (one per palette colour), then dashed,
// then dotted, so that series stay distinct beyond the palette.
std::string SeriesDash(size_t i);

// Horizontal reference lines with labels at the right end. Lines the scale cannot place (outside
// the range, or <= 0 on a log axis) are not drawn; NoteReferenceLines explains them.
void DrawReferenceLines(SvgCanvas& c, const PlotArea& a, const PlotScale& y,
                        const std::vector<ReferenceLine>& lines);
void NoteReferenceLines(const PlotScale& y, const std::vector<ReferenceLine>& lines,
                        std::vector<std::string>* notes);

// Height the notes need, and the notes themselves (one line each, muted, from y downwards).
double NotesHeight(const std::vector<std::string>& notes);
void DrawNotes(SvgCanvas& c, double x, double y, const std::vector<std::string>& notes);

// Title centred at the top; returns the height used (0 without a title).
double DrawTitle(SvgCanvas& c, double width, std::string_view title);

// "3 non-finite values skipped" style counts: "1 value" / "3 values".
std::string Plural(int64_t n, std::string_view singular, std::string_view plural);

// Fits a scale to [lo, hi] honouring an Axis' fixed bounds (nice bounds only on free ends).
// Invalid fixed bounds (min >= max, or <= 0 on a log axis) are ignored with a note.
PlotScale FitAxis(const Axis& axis, double data_lo, double data_hi, std::string_view axis_name,
                  std::vector<std::string>* notes);

}  // namespace attnlab::report::internal

#endif  // ATTNLAB_REPORT_SVG_CANVAS_H_
