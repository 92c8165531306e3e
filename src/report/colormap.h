// Colours for plots, chosen so that readers with colour-vision deficiencies can tell them apart.
//
//   series   Okabe & Ito (2008), "Color Universal Design": eight colours distinguishable under
//            the common deficiencies; the plotters add dash patterns after the eighth series
//   viridis  sequential, perceptually uniform, monotonic in lightness (van der Walt & Smith,
//            matplotlib 1.5), so it also survives greyscale printing
//   blue-orange  diverging through a light neutral, for signed quantities (differences)
#ifndef ATTNLAB_REPORT_COLORMAP_H_
#define ATTNLAB_REPORT_COLORMAP_H_

#include <cstddef>
#include <cstdint>
#include <string>

namespace attnlab::report {

struct Rgb {
  uint8_t r = 0, g = 0, b = 0;
  bool operator==(const Rgb&) const = default;
};

enum class ColorMap { kViridis, kBlueOrange };

// The colour at t in [0, 1] (clamped; NaN gives the missing-value colour).
Rgb SampleColorMap(ColorMap map, double t);

// Drawn for missing values (NaN, or <= 0 on a log colour scale): a mid grey that neither map
// contains.
inline constexpr Rgb kMissingColor{160, 160, 160};

// Series i's colour: the Okabe-Ito palette in an order that puts the strongest contrasts first
// (blue, orange, bluish green, vermillion, reddish purple, sky blue, black, yellow), cycling.
Rgb SeriesColor(size_t i);

// "#0072b2".
std::string RgbHex(Rgb c);

}  // namespace attnlab::report

#endif  // ATTNLAB_REPORT_COLORMAP_H_
