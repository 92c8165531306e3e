// Training logs' probe curve (diagnostics/probe_curve.h): any bytes parse without a crash; every
// point has a non-negative step, a finite largest alpha_1 among its layers' heads and one mean
// per layer; every probe line is either a point or counted as skipped.
#include <cmath>

#include "diagnostics/probe_curve.h"
#include "fuzz_target.h"

using namespace attnlab;

ATTNLAB_FUZZ_TARGET(probe_log) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const ProbeCurve c = ParseProbeCurve(text);
  ATTNLAB_FUZZ_EXPECT(static_cast<int64_t>(c.points.size()) + c.skipped == c.probe_lines,
                      "probe lines neither read nor skipped");
  ATTNLAB_FUZZ_EXPECT(c.probe_lines <= c.lines, "more probe lines than lines");
  for (const ProbePoint& p : c.points) {
    ATTNLAB_FUZZ_EXPECT(p.step >= 0, "a negative step");
    ATTNLAB_FUZZ_EXPECT(std::isfinite(p.max_alpha1), "a non-finite alpha_1");
    ATTNLAB_FUZZ_EXPECT(!p.layer_mean.empty() && p.max_layer >= 0 &&
                            p.max_layer < static_cast<int64_t>(p.layer_mean.size()),
                        "the strongest head's layer is outside the layers");
  }
  return 0;
}
