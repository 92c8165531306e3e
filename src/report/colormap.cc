#include "report/colormap.h"

#include <cmath>

namespace attnlab::report {
namespace {

// Viridis sampled at t = 0, 0.1, ..., 1; linear interpolation between samples stays within one
// or two units of the full 256-entry table.
constexpr Rgb kViridis[11] = {{0x44, 0x01, 0x54}, {0x48, 0x24, 0x75}, {0x41, 0x44, 0x87},
                              {0x35, 0x5f, 0x8d}, {0x2a, 0x78, 0x8e}, {0x21, 0x91, 0x8c},
                              {0x22, 0xa8, 0x84}, {0x44, 0xbf, 0x70}, {0x7a, 0xd1, 0x51},
                              {0xbd, 0xdf, 0x26}, {0xfd, 0xe7, 0x25}};

// Blue (Okabe-Ito blue, darkened) through a light neutral to orange-brown, equally spaced.
constexpr Rgb kBlueOrange[5] = {{0x1f, 0x4e, 0x89},
                                {0x7f, 0xaa, 0xd6},
                                {0xf2, 0xf2, 0xf2},
                                {0xf0, 0xa8, 0x6a},
                                {0xa8, 0x4a, 0x0e}};

template <size_t N>
Rgb Interpolate(const Rgb (&stops)[N], double t) {
  const double x = t * (N - 1);
  size_t i = static_cast<size_t>(x);
  if (i >= N - 1) return stops[N - 1];
  const double f = x - static_cast<double>(i);
  const auto mix = [f](uint8_t a, uint8_t b) {
    return static_cast<uint8_t>(std::lround(a + (static_cast<double>(b) - a) * f));
  };
  return {mix(stops[i].r, stops[i + 1].r), mix(stops[i].g, stops[i + 1].g),
          mix(stops[i].b, stops[i + 1].b)};
}

constexpr Rgb kSeries[8] = {{0x00, 0x72, 0xB2}, {0xE6, 0x9F, 0x00}, {0x00, 0x9E, 0x73},
                            {0xD5, 0x5E, 0x00}, {0xCC, 0x79, 0xA7}, {0x56, 0xB4, 0xE9},
                            {0x00, 0x00, 0x00}, {0xF0, 0xE4, 0x42}};

}  // namespace

Rgb SampleColorMap(ColorMap map, double t) {
  if (std::isnan(t)) return kMissingColor;
  t = t < 0 ? 0 : t > 1 ? 1 : t;
  return map == ColorMap::kViridis ? Interpolate(kViridis, t) : Interpolate(kBlueOrange, t);
}

Rgb SeriesColor(size_t i) { return kSeries[i % 8]; }

std::string RgbHex(Rgb c) {
  static const char* kHex = "0123456789abcdef";
  std::string s = "#";
  for (uint8_t v : {c.r, c.g, c.b}) {
    s += kHex[v >> 4];
    s += kHex[v & 15];
  }
  return s;
}

}  // namespace attnlab::report
