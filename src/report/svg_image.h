// Finished SVG markup, the product of every plotter (svg_plot.h) and of the canvas they draw on
// (svg_canvas.h).
#ifndef ATTNLAB_REPORT_SVG_IMAGE_H_
#define ATTNLAB_REPORT_SVG_IMAGE_H_

#include <string>

namespace attnlab::report {

// Finished SVG markup. A distinct type so that HtmlReport::AddFigure takes only markup that a
// plotter produced, never unescaped text by mistake.
struct SvgImage {
  std::string markup;  // "<svg xmlns=...>...</svg>"
  double width = 0, height = 0;
};

}  // namespace attnlab::report

#endif  // ATTNLAB_REPORT_SVG_IMAGE_H_
