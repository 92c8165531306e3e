// The files `attnlab stream` writes: the per-policy results as JSON and CSV, and for --compare
// the report (report.html, report.json) whose every caption and verdict is computed from the
// numbers (inference/stream_eval.h: CompareStreamPolicies).
#ifndef ATTNLAB_TOOLS_CMD_STREAM_REPORT_H_
#define ATTNLAB_TOOLS_CMD_STREAM_REPORT_H_

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "inference/stream_eval.h"

namespace attnlab::cli {

struct StreamRunInfo {
  std::string model, text;  // the model's path; the text file (or "--prompt")
  int64_t text_tokens = 0, context = 0, window = 0, sinks = 0, chunk = 0;
  std::string rope_mode;
  int ranks = 1;  // processes that shared the policies (mpirun; tools/stream_ranks.h)
};

// One policy's result: totals and per-chunk numbers (not the per-token losses).
nlohmann::json StreamResultJson(const StreamEvalResult& r);
// The run: its settings and every policy's result ("results").
nlohmann::json StreamRunJson(const StreamRunInfo& info, const std::vector<StreamEvalResult>& results);
// Every number and sentence of a comparison.
nlohmann::json StreamComparisonJson(const StreamComparison& c);

// --compare's files in dir (created if missing): report.html, report.json (the numbers behind
// every caption and the verdict), stream.json (StreamRunJson), stream.csv (one row per policy and
// chunk). Returns their paths. Throws CommandError when a file cannot be written.
std::vector<std::string> WriteStreamReport(const std::string& dir, const StreamRunInfo& info,
                                           const std::vector<StreamEvalResult>& results,
                                           const StreamComparison& c);

// JSON text that survives invalid UTF-8 (model paths, token text): replaced by U+FFFD.
std::string DumpJson(const nlohmann::json& j, int indent = 2);

}  // namespace attnlab::cli

#endif  // ATTNLAB_TOOLS_CMD_STREAM_REPORT_H_
