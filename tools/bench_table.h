// One row format for every benchmark table (`attnlab bench suite`, `bench decode`): a kernel on a
// shape, its time, its rate (GFLOP/s for compute-bound kernels, GB/s for memory-bound ones), the
// same-run baseline it is compared with (an sgemm of matching size, or a STREAM triad) and the
// validation that ran before it was timed.
#ifndef ATTNLAB_TOOLS_BENCH_TABLE_H_
#define ATTNLAB_TOOLS_BENCH_TABLE_H_

#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace attnlab::bench {

struct TableRow {
  std::string kernel, shape;
  double time_ms = -1;  // < 0: not run (note says why)
  double rate = 0;      // in `unit`
  std::string unit;     // "GFLOP/s" or "GB/s"
  std::string baseline; // the row it is divided by ("sgemm_qk", "triad"); empty: none
  double ratio = 0;     // rate / baseline's rate; 0: none
  double max_err = -1, tol = -1;  // validation before timing; < 0: none
  std::string note;
};

inline void PrintTableHeader() {
  std::printf("%-14s %-40s %10s %10s %-8s %-9s %6s  %9s %9s  %s\n", "kernel", "shape", "time_ms",
              "rate", "unit", "baseline", "ratio", "max_err", "tol", "note");
}

inline void PrintTableRow(const TableRow& r) {
  if (r.time_ms < 0) {
    std::printf("%-14s %-40s %10s %10s %-8s %-9s %6s  %9s %9s  %s\n", r.kernel.c_str(),
                r.shape.c_str(), "-", "-", "", "", "", "", "", r.note.c_str());
    return;
  }
  char ratio[16] = "-", err[16] = "", tol[16] = "";
  if (r.ratio > 0) std::snprintf(ratio, sizeof ratio, "%.3f", r.ratio);
  if (r.max_err >= 0) std::snprintf(err, sizeof err, "%.2e", r.max_err);
  if (r.tol >= 0) std::snprintf(tol, sizeof tol, "%.2e", r.tol);
  std::printf("%-14s %-40s %10.3f %10.1f %-8s %-9s %6s  %9s %9s  %s\n", r.kernel.c_str(),
              r.shape.c_str(), r.time_ms, r.rate, r.unit.c_str(), r.baseline.c_str(), ratio, err,
              tol, r.note.c_str());
  std::fflush(stdout);
}

inline nlohmann::ordered_json TableRowJson(const TableRow& r) {
  nlohmann::ordered_json j = {{"kernel", r.kernel}, {"shape", r.shape}};
  if (r.time_ms < 0) {
    j["time_ms"] = nullptr;
    j["note"] = r.note;
    return j;
  }
  j["time_ms"] = r.time_ms;
  j["rate"] = r.rate;
  j["unit"] = r.unit;
  if (!r.baseline.empty()) j["baseline"] = r.baseline;
  if (r.ratio > 0) j["ratio"] = r.ratio;
  if (r.max_err >= 0) j["max_abs_err"] = r.max_err;
  if (r.tol >= 0) j["tol"] = r.tol;
  if (!r.note.empty()) j["note"] = r.note;
  return j;
}

}  // namespace attnlab::bench

#endif  // ATTNLAB_TOOLS_BENCH_TABLE_H_
