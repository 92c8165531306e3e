// The first-token probe's curve over training, read back from a trainer's log (CKPT.log.jsonl;
// train/trainer.h writes one JSON object per line, and the lines of probe steps carry
// "probe": {"alpha1": [layer][head], "sink_rate": s, ...}; first_token_probe.h). `attnlab
// analyze` shows it in the report's note on the embedded default model (issue 35): how the
// sink it reports emerged.
//
// The log is untrusted input: the file is read up to kMaxProbeLogBytes, a line that is not a JSON
// object with a non-negative integer "step" and a rectangular, finite [layers][heads] "alpha1"
// under "probe" is skipped and counted (never an error: a log cut by a crash still has its
// curve), and the curve keeps at most kMaxProbePoints points.
#ifndef ATTNLAB_DIAGNOSTICS_PROBE_CURVE_H_
#define ATTNLAB_DIAGNOSTICS_PROBE_CURVE_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "attnlab/status.h"

namespace attnlab {

inline constexpr int64_t kMaxProbeLogBytes = int64_t{256} << 20;
inline constexpr int64_t kMaxProbePoints = 100000;

struct ProbePoint {
  int64_t step = 0;
  double max_alpha1 = 0;           // the largest head's alpha_1
  int64_t max_layer = 0, max_head = 0;
  std::vector<double> layer_mean;  // [layers] mean alpha_1 over each layer's heads
  double sink_rate = -1;           // Sink_1^0.3 when the line has it, else -1
};

struct ProbeCurve {
  std::vector<ProbePoint> points;  // in file order
  int64_t lines = 0;               // lines read
  int64_t probe_lines = 0;         // lines with a "probe" key
  int64_t skipped = 0;             // probe lines skipped as malformed
};

// Parses a log's text (the file's bytes).
ProbeCurve ParseProbeCurve(std::string_view text);
// Reads and parses a log file: NotFound when it does not exist, OutOfRange past
// kMaxProbeLogBytes (checked before reading), IoError when it cannot be read.
Result<ProbeCurve> ReadProbeCurve(const std::string& path);

}  // namespace attnlab

#endif  // ATTNLAB_DIAGNOSTICS_PROBE_CURVE_H_
