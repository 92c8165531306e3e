#include "report/plot_scale.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>

#include "attnlab/status.h"
#include "report/format_number.h"

namespace attnlab::report {
namespace {

constexpr double kMaxMagnitude = 1e300;  // data beyond this is clamped: spans stay finite
constexpr double kEps = 1e-9;            // slack for values that are integers up to rounding

// "1.5e6": scientific notation with `digits` significant digits, zeros trimmed.
std::string Scientific(double v, int digits) {
  if (v == 0) return "0";
  std::string s = FormatSignificant(v, digits);
  if (s.find('e') != std::string::npos) return s;
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof(buf), v, std::chars_format::scientific,
                         std::clamp(digits - 1, 0, 16));
  std::string t(buf, r.ptr);  // "1.50e+06"
  const size_t e = t.find('e');
  std::string mantissa = t.substr(0, e);
  if (mantissa.find('.') != std::string::npos) {
    while (mantissa.back() == '0') mantissa.pop_back();
    if (mantissa.back() == '.') mantissa.pop_back();
  }
  const int exponent = std::stoi(t.substr(e + 1));
  return mantissa + "e" + std::to_string(exponent);
}

// Ticks at k * step for the integers k with k * step in [lo, hi].
std::vector<Tick> TicksWithStep(double lo, double hi, double step) {
  const double k0 = std::ceil(lo / step - kEps), k1 = std::floor(hi / step + kEps);
  std::vector<Tick> ticks;
  if (!(k1 >= k0) || k1 - k0 > 1000) return ticks;  // cannot happen for a step from NiceStep
  const double max_abs = std::max(std::fabs(lo), std::fabs(hi));
  const bool exponent_form = max_abs >= 1e6 || max_abs < 1e-4;
  const int step_exp = static_cast<int>(std::floor(std::log10(step) + kEps));
  const int decimals = std::max(0, -step_exp);
  for (double k = k0; k <= k1; k += 1) {
    double v = k * step;
    if (std::fabs(v) < step * kEps) v = 0;
    Tick t;
    t.value = v;
    if (exponent_form) {
      const int digits =
          v == 0 ? 1 : static_cast<int>(std::floor(std::log10(std::fabs(v)) + kEps)) - step_exp + 1;
      t.label = Scientific(v, std::clamp(digits, 1, 17));
    } else {
      t.label = FormatFixed(v, decimals);
    }
    ticks.push_back(std::move(t));
  }
  return ticks;
}

// A nice step giving about `target` ticks over [lo, hi] and at least two.
double ChooseStep(double lo, double hi, int target) {
  const double span = hi - lo;
  double step = NiceStep(span / std::max(1, target - 1));
  for (int i = 0; i < 8; ++i) {
    const double k0 = std::ceil(lo / step - kEps), k1 = std::floor(hi / step + kEps);
    if (k1 - k0 + 1 >= 2) break;
    step = NiceStep(step / 2.5);  // the next smaller of 1, 2, 5 x 10^k
  }
  return step;
}

const char* const kSuperscriptDigits[10] = {"\u2070", "\u00B9", "\u00B2", "\u00B3", "\u2074",
                                            "\u2075", "\u2076", "\u2077", "\u2078", "\u2079"};

// "10⁻⁵" for 10^p; "2×10⁻⁵" for m * 10^p.
std::string PowerLabel(int mantissa, int p) {
  std::string s = mantissa == 1 ? "10" : std::to_string(mantissa) + "\u00D710";
  if (p < 0) s += "\u207B";
  for (char c : std::to_string(std::abs(p))) s += kSuperscriptDigits[c - '0'];
  return s;
}

double Pow10(int p) { return std::pow(10.0, p); }

}  // namespace

double NiceStep(double raw_step) {
  ATTNLAB_CHECK(raw_step > 0 && std::isfinite(raw_step));
  const double magnitude = Pow10(static_cast<int>(std::floor(std::log10(raw_step))));
  const double f = raw_step / magnitude;  // in [1, 10) up to rounding
  double nice;
  if (f <= 1 + kEps) {
    nice = 1;
  } else if (f <= 2 + kEps) {
    nice = 2;
  } else if (f <= 5 + kEps) {
    nice = 5;
  } else {
    nice = 10;
  }
  return nice * magnitude;
}

std::vector<Tick> LinearTicks(double lo, double hi, int target) {
  if (!(lo < hi) || !std::isfinite(hi - lo)) {
    if (lo == hi && std::isfinite(lo)) return {Tick{lo, FormatSignificant(lo, 6), true}};
    return {};
  }
  return TicksWithStep(lo, hi, ChooseStep(lo, hi, target));
}

std::vector<Tick> Log10Ticks(double lo, double hi) {
  std::vector<Tick> ticks;
  if (!(lo > 0 && lo < hi) || !std::isfinite(hi)) return ticks;
  const double elo = std::log10(lo), ehi = std::log10(hi);
  const int pmin = static_cast<int>(std::ceil(elo - kEps));
  const int pmax = static_cast<int>(std::floor(ehi + kEps));
  const double decades = ehi - elo;
  const auto inside = [&](double v) { return v >= lo * (1 - kEps) && v <= hi * (1 + kEps); };

  // Candidates: (mantissa, power, major).
  struct Candidate {
    int m, p;
    bool major;
  };
  std::vector<Candidate> c;
  const int powers = pmax - pmin + 1;
  if (decades > 6) {
    const int stride = (pmax - pmin + 5) / 6;  // ceil((pmax - pmin) / 6), >= 1
    for (int p = pmin; p <= pmax; ++p) c.push_back({1, p, ((p % stride) + stride) % stride == 0});
  } else {
    const bool fine = decades <= 1.3 || powers < 2;  // label 2x and 5x too
    for (int p = pmin - 1; p <= pmax; ++p) {
      for (int m = 1; m <= 9; ++m) {
        c.push_back({m, p, m == 1 || (fine && (m == 2 || m == 5))});
      }
    }
  }
  int labelled = 0, min_p = 0, max_p = 0;
  for (const Candidate& k : c) {
    if (k.major && inside(k.m * Pow10(k.p))) {
      min_p = labelled == 0 ? k.p : std::min(min_p, k.p);
      max_p = labelled == 0 ? k.p : std::max(max_p, k.p);
      ++labelled;
    }
  }
  if (labelled < 2) {
    // Less than a factor of ~2.5 between lo and hi: round linear values, placed on the log axis.
    ticks = LinearTicks(lo, hi, 4);
    ticks.erase(
        std::remove_if(ticks.begin(), ticks.end(), [](const Tick& t) { return t.value <= 0; }),
        ticks.end());
    return ticks;
  }
  const bool plain = min_p >= -3 && max_p <= 4;  // labels from 0.001 to 90000
  for (const Candidate& k : c) {
    const double v = k.m * Pow10(k.p);
    if (!inside(v)) continue;
    Tick t;
    t.value = v;
    t.major = k.major;
    if (k.major) t.label = plain ? FormatSignificant(v, 6) : PowerLabel(k.m, k.p);
    ticks.push_back(std::move(t));
  }
  return ticks;
}

PlotScale PlotScale::Fit(ScaleType type, double data_lo, double data_hi, bool nice_bounds,
                         int target_ticks) {
  PlotScale s;
  s.type_ = type;
  const bool empty = !(data_lo <= data_hi);  // also NaN
  if (type == ScaleType::kLinear) {
    double lo = empty ? 0 : std::clamp(data_lo, -kMaxMagnitude, kMaxMagnitude);
    double hi = empty ? 1 : std::clamp(data_hi, -kMaxMagnitude, kMaxMagnitude);
    const double max_abs = std::max(std::fabs(lo), std::fabs(hi));
    if (hi - lo <= 1e-12 * max_abs) {  // one value (or a span lost in rounding)
      const double c = lo / 2 + hi / 2;
      const double pad = c == 0 ? 1 : std::fabs(c) * 0.1;
      lo = c - pad;
      hi = c + pad;
    }
    const double step = ChooseStep(lo, hi, target_ticks);
    if (nice_bounds) {
      lo = std::floor(lo / step + kEps) * step;
      hi = std::ceil(hi / step - kEps) * step;
    }
    s.lo_ = lo;
    s.hi_ = hi;
    s.ticks_ = TicksWithStep(lo, hi, step);
  } else {
    constexpr double kMinPositive = 1.0 / kMaxMagnitude;
    double lo = empty ? 1 : std::clamp(data_lo, kMinPositive, kMaxMagnitude);
    double hi = empty ? 10 : std::clamp(data_hi, kMinPositive, kMaxMagnitude);
    if (hi <= lo * (1 + 1e-9)) {
      lo /= 10;
      hi *= 10;
    }
    if (nice_bounds) {
      lo = Pow10(static_cast<int>(std::floor(std::log10(lo) + kEps)));
      hi = Pow10(static_cast<int>(std::ceil(std::log10(hi) - kEps)));
    }
    s.lo_ = lo;
    s.hi_ = hi;
    s.ticks_ = Log10Ticks(lo, hi);
  }
  return s;
}

double PlotScale::Fraction(double v) const {
  if (type_ == ScaleType::kLinear) return (v - lo_) / (hi_ - lo_);
  if (!(v > 0)) return -INFINITY;
  return (std::log10(v) - std::log10(lo_)) / (std::log10(hi_) - std::log10(lo_));
}

bool PlotScale::Accepts(double v) const {
  return std::isfinite(v) && (type_ == ScaleType::kLinear || v > 0);
}

}  // namespace attnlab::report
