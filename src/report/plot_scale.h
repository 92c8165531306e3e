// Axis scales for the SVG plots: map data values to [0, 1] and choose ticks with round values.
//
// Linear ticks are multiples of 1, 2 or 5 times a power of ten ("nice numbers", Heckbert,
// Graphics Gems I, 1990); log10 ticks are powers of ten, with 2x and 5x ticks added when the
// range spans about one decade and fewer labelled decades when it spans many.
#ifndef ATTNLAB_REPORT_PLOT_SCALE_H_
#define ATTNLAB_REPORT_PLOT_SCALE_H_

#include <optional>
#include <string>
#include <vector>

namespace attnlab::report {

enum class ScaleType { kLinear, kLog10 };

struct Tick {
  double value = 0;
  std::string label;  // empty for minor ticks
  bool major = true;  // major ticks get a label and a grid line
};

// The smallest of 1, 2, 5, 10 times a power of ten that is >= raw_step. REQUIRES: raw_step > 0
// and finite.
double NiceStep(double raw_step);

// Labelled ticks at multiples of a nice step inside [lo, hi] (both ends inclusive, up to
// rounding), about `target` of them (never fewer than 2 when lo < hi). Labels share one number
// of decimals ("0.0", "0.5", "1.0"); ranges reaching 1e6, or staying below 1e-4, use exponent
// form ("2.5e6", "3e-5").
std::vector<Tick> LinearTicks(double lo, double hi, int target = 6);

// Ticks for a log10 axis over [lo, hi], 0 < lo < hi: see the header comment. Labels are plain
// numbers ("0.01", "1000") while every labelled power lies in 1e-3..1e4, otherwise "10⁻⁵".
std::vector<Tick> Log10Ticks(double lo, double hi);

// An axis: a domain [lo, hi] and its ticks.
class PlotScale {
 public:
  // Fits a scale to data in [data_lo, data_hi]: finite values, positive for kLog10 (callers
  // drop the others and say so). With `nice_bounds` the domain widens to the outer ticks.
  // Degenerate inputs still give a usable scale: no data (data_lo > data_hi) gives [0, 1]
  // (log: [1, 10]); a single value v gives a small range around it; magnitudes past 1e300 are
  // clamped so that the span cannot overflow.
  static PlotScale Fit(ScaleType type, double data_lo, double data_hi, bool nice_bounds = true,
                       int target_ticks = 6);

  // 0 at lo(), 1 at hi(); outside [0, 1] for values outside the domain. For kLog10, v must be
  // > 0 (the result is -inf otherwise).
  double Fraction(double v) const;
  // True when v can be placed on this axis (finite, and > 0 on a log axis).
  bool Accepts(double v) const;

  ScaleType type() const { return type_; }
  double lo() const { return lo_; }
  double hi() const { return hi_; }
  const std::vector<Tick>& ticks() const { return ticks_; }

 private:
  ScaleType type_ = ScaleType::kLinear;
  double lo_ = 0, hi_ = 1;
  std::vector<Tick> ticks_;
};

// An axis as a plot spec gives it (svg_plot.h).
struct Axis {
  std::string label;
  ScaleType scale = ScaleType::kLinear;
  // Fixed bounds. When unset, the bound comes from the data, widened to a round tick value.
  std::optional<double> min, max;
};

// A horizontal reference line (y = value) drawn dashed across the plot with its label at the
// right end, e.g. {1.0 / n, "uniform"}.
struct ReferenceLine {
  double value = 0;
  std::string label;
};

}  // namespace attnlab::report

#endif  // ATTNLAB_REPORT_PLOT_SCALE_H_
