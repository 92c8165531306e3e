// One row format for every benchmark (`attnlab bench attention`, `suite`, `decode`, `model`): a
// kernel on a shape, its time, its rate (GFLOP/s for compute-bound kernels, GB/s for
// memory-bound ones, tokens/s for a model), the same-run baseline it is compared with (an sgemm,
// a STREAM triad) and the checks that ran before it was timed. The table prints it; bench_json.h
// turns it into the JSON document's row.
#ifndef ATTNLAB_TOOLS_BENCH_TABLE_H_
#define ATTNLAB_TOOLS_BENCH_TABLE_H_

#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

namespace attnlab::bench {

// One check behind a row: holds when value <= bound (validation errors against a tolerance).
struct RowCheck {
  std::string name;
  bool holds = true;
  double value = 0;
  double bound = 0;
};

struct TableRow {
  std::string kernel;
  std::string shape;  // as the table prints it (JSON: shape_text)
  nlohmann::ordered_json shape_json = nlohmann::ordered_json::object();  // the shape's fields
  double time_ms = -1;  // < 0: not run (note says why)
  double rate = 0;      // in `unit`
  std::string unit;     // "GFLOP/s", "GB/s" or "tokens/s"
  std::string baseline; // the id of the same-run baseline it is divided by; empty: none
  double ratio = 0;     // rate (in the baseline's unit) / the baseline's rate; 0: none
  double rate_in_baseline_unit = 0;  // > 0 when `unit` is not the baseline's (model rows)
  std::vector<RowCheck> checks;
  std::string note;

  // The check with the largest value / bound among those with a bound (the table's max_err and
  // tol columns); null when there is none.
  const RowCheck* Worst() const {
    const RowCheck* w = nullptr;
    for (const RowCheck& c : checks) {
      if (!(c.bound > 0) || !std::isfinite(c.bound)) continue;
      if (!w || !(c.value / c.bound <= w->value / w->bound)) w = &c;
    }
    return w;
  }
};

inline void PrintTableHeader() {
  std::printf("%-14s %-40s %10s %10s %-8s %-10s %6s  %9s %9s  %s\n", "kernel", "shape",
              "time_ms", "rate", "unit", "baseline", "ratio", "max_err", "tol", "note");
}

inline void PrintTableRow(const TableRow& r) {
  if (r.time_ms < 0) {
    std::printf("%-14s %-40s %10s %10s %-8s %-10s %6s  %9s %9s  %s\n", r.kernel.c_str(),
                r.shape.c_str(), "-", "-", "", "", "", "", "", r.note.c_str());
    return;
  }
  char ratio[16] = "-", err[16] = "", tol[16] = "";
  if (r.ratio > 0) std::snprintf(ratio, sizeof ratio, "%.3f", r.ratio);
  if (const RowCheck* w = r.Worst()) {
    std::snprintf(err, sizeof err, "%.2e", w->value);
    std::snprintf(tol, sizeof tol, "%.2e", w->bound);
  }
  std::string baseline = r.baseline.substr(0, r.baseline.find(' '));  // the kernel of the id
  std::printf("%-14s %-40s %10.3f %10.1f %-8s %-10s %6s  %9s %9s  %s\n", r.kernel.c_str(),
              r.shape.c_str(), r.time_ms, r.rate, r.unit.c_str(), baseline.c_str(), ratio, err,
              tol, r.note.c_str());
  std::fflush(stdout);
}

// What a command runs, said before it runs (docs/CLI.md: defaults say what they run): "# ..."
// lines on stdout above the table, on stderr with --json (stdout then holds only the document).
inline void Say(bool json, const std::string& line) {
  std::FILE* f = json ? stderr : stdout;
  std::fprintf(f, "# %s\n", line.c_str());
  std::fflush(f);
}

// Comma-separated integers, each in [lo, hi]; empty when `text` is not such a list.
inline std::vector<int64_t> ParseIntList(const std::string& text, int64_t lo, int64_t hi) {
  std::vector<int64_t> xs;
  std::stringstream ss(text);
  for (std::string item; std::getline(ss, item, ',');) {
    size_t used = 0;
    long long x = 0;
    try {
      x = std::stoll(item, &used);
    } catch (const std::exception&) {
      return {};
    }
    if (used == 0 || used != item.size() || x < lo || x > hi) return {};
    xs.push_back(x);
  }
  if (!text.empty() && text.back() == ',') return {};
  return xs;
}

// A CLI11 check for ParseIntList: a malformed or out-of-range list is a usage error (exit 2,
// docs/CLI.md). `what` names the values and their range in the message: "--len: expected
// <what> separated by commas, got 'x'".
inline CLI::Validator IntListCheck(int64_t lo, int64_t hi, const std::string& what) {
  return CLI::Validator(
      [lo, hi, what](std::string& text) -> std::string {
        if (ParseIntList(text, lo, hi).empty()) {
          return "expected " + what + " separated by commas, got '" + text + "'";
        }
        return std::string();
      },
      "LIST");
}

}  // namespace attnlab::bench

#endif  // ATTNLAB_TOOLS_BENCH_TABLE_H_
