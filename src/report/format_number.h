// Numbers as report text: locale-independent (std::to_chars), so the same value gives the same
// bytes everywhere, and never "-0", "-nan" or "1e+06".
#ifndef ATTNLAB_REPORT_FORMAT_NUMBER_H_
#define ATTNLAB_REPORT_FORMAT_NUMBER_H_

#include <string>

namespace attnlab::report {

// The shortest text that reads back as exactly `v` ("0.1", "1e-05" -> "1e-5", "123456789").
// Non-finite values: "nan", "inf", "-inf". For data files (CSV, JSON-like text).
std::string FormatShortest(double v);

// `decimals` digits after the point ("3.14"). decimals is clamped to [0, 17].
std::string FormatFixed(double v, int decimals);

// `digits` significant digits, trailing zeros dropped; plain notation from 1e-4 up to 1e15
// (integer parts are never abbreviated: 123456 with 3 digits stays "123456"), exponent form
// outside ("0.0123", "1.5e-7", "12300", "2e20"). For tables and labels.
std::string FormatSignificant(double v, int digits = 4);

// An SVG coordinate: two decimals, trailing zeros dropped ("12.5", "3", "-0.25").
std::string FormatCoordinate(double v);

// A percentage of a fraction: FormatPercent(0.1234, 1) == "12.3%".
std::string FormatPercent(double fraction, int decimals = 1);

// A byte count in binary units with 3 significant digits: "512 B", "1.5 KiB", "4 GiB",
// "256 GiB". Negative or non-finite: as FormatSignificant.
std::string FormatBytes(double bytes);

}  // namespace attnlab::report

#endif  // ATTNLAB_REPORT_FORMAT_NUMBER_H_
