#include "report/format_number.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <limits>

namespace attnlab::report {
namespace {

TEST(ReportFormatNumber, Shortest) {
  EXPECT_EQ(FormatShortest(0.1), "0.1");
  EXPECT_EQ(FormatShortest(1e-5), "1e-5");
  EXPECT_EQ(FormatShortest(1e21), "1e21");
  EXPECT_EQ(FormatShortest(123456789), "123456789");
  EXPECT_EQ(FormatShortest(-0.0), "0");
  EXPECT_EQ(FormatShortest(-2.5), "-2.5");
  EXPECT_EQ(FormatShortest(std::nan("")), "nan");
  EXPECT_EQ(FormatShortest(-std::nan("")), "nan");
  EXPECT_EQ(FormatShortest(INFINITY), "inf");
  EXPECT_EQ(FormatShortest(-INFINITY), "-inf");
  // Round trip.
  for (double v : {0.1 + 0.2, 1.0 / 3, 6.02214076e23, 5e-324, std::numeric_limits<double>::max()}) {
    EXPECT_EQ(std::strtod(FormatShortest(v).c_str(), nullptr), v);
  }
}

TEST(ReportFormatNumber, Fixed) {
  EXPECT_EQ(FormatFixed(3.14159, 2), "3.14");
  EXPECT_EQ(FormatFixed(-0.0001, 2), "0.00");
  EXPECT_EQ(FormatFixed(2.5, 0), "2");  // round half to even, as printf
  EXPECT_EQ(FormatFixed(1e308, 0).size(), 309u);
  EXPECT_EQ(FormatFixed(1, 99), "1.00000000000000000");  // decimals clamped to 17
}

TEST(ReportFormatNumber, Significant) {
  EXPECT_EQ(FormatSignificant(0.012345, 3), "0.0123");
  EXPECT_EQ(FormatSignificant(1.5e-7, 2), "1.5e-7");
  EXPECT_EQ(FormatSignificant(12300, 3), "12300");
  EXPECT_EQ(FormatSignificant(123456, 3), "123456");
  EXPECT_EQ(FormatSignificant(0.5, 4), "0.5");
  EXPECT_EQ(FormatSignificant(9.9996, 4), "10");
  EXPECT_EQ(FormatSignificant(2e20, 4), "2e20");
  EXPECT_EQ(FormatSignificant(-1.25, 2), "-1.2");
  EXPECT_EQ(FormatSignificant(-1e-9, 1), "-1e-9");
  EXPECT_EQ(FormatSignificant(0, 4), "0");
  EXPECT_EQ(FormatSignificant(-0.0, 4), "0");
}

TEST(ReportFormatNumber, CoordinateAndPercent) {
  EXPECT_EQ(FormatCoordinate(12.5), "12.5");
  EXPECT_EQ(FormatCoordinate(3.0), "3");
  EXPECT_EQ(FormatCoordinate(-0.001), "0");
  EXPECT_EQ(FormatCoordinate(-0.25), "-0.25");
  EXPECT_EQ(FormatCoordinate(100), "100");
  EXPECT_EQ(FormatCoordinate(std::nan("")), "0");
  EXPECT_EQ(FormatPercent(0.1234), "12.3%");
  EXPECT_EQ(FormatPercent(1, 0), "100%");
}

TEST(FormatNumber, BytesInBinaryUnits) {
  EXPECT_EQ(FormatBytes(0), "0 B");
  EXPECT_EQ(FormatBytes(512), "512 B");
  EXPECT_EQ(FormatBytes(1536), "1.5 KiB");
  EXPECT_EQ(FormatBytes(1023.9 * 1024), "1 MiB");  // never "1020 KiB"
  EXPECT_EQ(FormatBytes(4.0 * (1 << 30)), "4 GiB");
  EXPECT_EQ(FormatBytes(65536.0 * 65536.0 * 2 * 32), "256 GiB");
  EXPECT_EQ(FormatBytes(-1), "-1");
}

}  // namespace
}  // namespace attnlab::report
