#include "report/format_number.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <system_error>

namespace attnlab::report {
namespace {

const char* NonFinite(double v) {
  if (std::isnan(v)) return "nan";
  return v > 0 ? "inf" : "-inf";
}

// "1.50000e+06" -> "1.5e6", "2e-05" -> "2e-5"; text without an exponent is returned unchanged
// except that trailing zeros after a decimal point are dropped when `trim` is set.
std::string Tidy(std::string s, bool trim) {
  const size_t e = s.find('e');
  std::string mantissa = s.substr(0, e), exponent = e == std::string::npos ? "" : s.substr(e + 1);
  if (trim && mantissa.find('.') != std::string::npos) {
    while (mantissa.back() == '0') mantissa.pop_back();
    if (mantissa.back() == '.') mantissa.pop_back();
  }
  if (mantissa == "-0") mantissa = "0";
  if (e == std::string::npos) return mantissa;
  bool negative = false;
  size_t k = 0;
  if (k < exponent.size() && (exponent[k] == '+' || exponent[k] == '-')) {
    negative = exponent[k] == '-';
    ++k;
  }
  while (k + 1 < exponent.size() && exponent[k] == '0') ++k;
  return mantissa + "e" + (negative ? "-" : "") + exponent.substr(k);
}

// "-0.000" -> "0.000": a value that rounds to zero prints without a sign.
std::string DropNegativeZero(std::string s) {
  if (s.empty() || s[0] != '-') return s;
  for (size_t i = 1; i < s.size(); ++i) {
    if (s[i] == 'e') break;
    if (s[i] != '0' && s[i] != '.') return s;
  }
  return s.substr(1);
}

}  // namespace

std::string FormatShortest(double v) {
  if (!std::isfinite(v)) return NonFinite(v);
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof(buf), v);
  return DropNegativeZero(Tidy(std::string(buf, r.ptr), false));
}

std::string FormatFixed(double v, int decimals) {
  if (!std::isfinite(v)) return NonFinite(v);
  decimals = std::clamp(decimals, 0, 17);
  char buf[400];  // 1e308 in fixed notation is 309 digits
  auto r = std::to_chars(buf, buf + sizeof(buf), v, std::chars_format::fixed, decimals);
  return DropNegativeZero(std::string(buf, r.ptr));
}

std::string FormatSignificant(double v, int digits) {
  if (!std::isfinite(v)) return NonFinite(v);
  if (v == 0) return "0";
  digits = std::clamp(digits, 1, 17);
  // Round to `digits` significant digits first: the exponent can change (9.9996 -> 10.00).
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof(buf), v, std::chars_format::scientific, digits - 1);
  const std::string sci(buf, r.ptr);
  const int exponent = std::stoi(sci.substr(sci.find('e') + 1));
  if (exponent < -4 || exponent >= 15) return DropNegativeZero(Tidy(sci, true));
  std::string fixed = FormatFixed(v, std::max(0, digits - 1 - exponent));
  if (fixed.find('.') != std::string::npos) {
    while (fixed.back() == '0') fixed.pop_back();
    if (fixed.back() == '.') fixed.pop_back();
  }
  return DropNegativeZero(fixed);
}

std::string FormatCoordinate(double v) {
  if (!std::isfinite(v)) v = 0;  // never reached by the plotters; keeps the output valid SVG
  std::string s = FormatFixed(v, 2);
  while (s.back() == '0') s.pop_back();
  if (s.back() == '.') s.pop_back();
  return DropNegativeZero(s);
}

std::string FormatPercent(double fraction, int decimals) {
  if (!std::isfinite(fraction)) return NonFinite(fraction);
  return FormatFixed(fraction * 100.0, decimals) + "%";
}

std::string FormatBytes(double bytes) {
  if (!std::isfinite(bytes) || bytes < 0) return FormatSignificant(bytes, 3);
  static const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  int u = 0;
  while (bytes >= 1023.5 && u < 6) {  // 1023.5 so that rounding never prints "1024 KiB"
    bytes /= 1024.0;
    ++u;
  }
  return FormatSignificant(bytes, 3) + " " + kUnits[u];
}

}  // namespace attnlab::report
