// Reproducible experiments (`attnlab experiment <name>`): each one asks a question the
// literature (or a widely quoted claim) answers, answers it with numbers and plots, and checks its own invariants.
//
// Contract of an experiment (docs/EXPERIMENTS.md lists them with their results):
//   - a pure function of its options: the same --seed and thread count give the same numbers;
//   - progress lines on stderr (Progress below), a few per minute at least;
//   - its default size runs in <= 10 minutes on 2 cores; --quick runs in seconds (CI) at a size
//     where the invariants still hold;
//   - it returns its results as JSON, an HTML report (report/html_report.h) whose summary answers
//     the question at a glance, `checks` (invariants: qualitative facts the experiment must
//     reproduce, not exact numbers; the command exits non-zero when one fails) and `claims`
//     (the literature's quantitative statements, with what we measured; reported, never fatal).
// The command writes OUT/report.json (the schema below) and OUT/report.html.
//
// report.json:
//   {"experiment": name, "description": ..., "quick": bool, "seed": S, "threads": n,
//    "seconds": wall time, "summary": text, "passed": all checks passed,
//    "checks": [{"name", "passed", "detail"}], "claims": [{"name", "source", "expected",
//    "measured", "holds"}], "results": {experiment-specific}}
#ifndef ATTNLAB_EXPERIMENTS_EXPERIMENT_H_
#define ATTNLAB_EXPERIMENTS_EXPERIMENT_H_

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "attnlab/status.h"
#include "report/html_report.h"

namespace attnlab::experiments {

struct ExperimentOptions {
  bool quick = false;    // the CI size
  uint64_t seed = 1;     // every random choice derives from it
  std::string out_dir;   // report directory (created by the caller)
  std::string data;      // a data directory (attnlab prepare) for experiments that train;
                         // "" = the experiment's default
  bool progress = true;  // progress lines on stderr
  int64_t layer = -1, head = -1;  // the head to study (experiments with takes_head); -1: chosen
};

struct Check {
  std::string name;
  bool passed = false;
  std::string detail;  // the numbers behind the verdict
};

struct Claim {
  std::string name;
  std::string source;    // the paper
  std::string expected;  // what it predicts, in words with numbers
  std::string measured;  // what we found
  bool holds = false;
};

struct ExperimentResult {
  std::string summary;  // the answer, a few sentences (also the report's summary box)
  nlohmann::json results = nlohmann::json::object();
  report::HtmlReport html{"experiment"};
  std::vector<Check> checks;
  std::vector<Claim> claims;

  void AddCheck(std::string name, bool passed, std::string detail) {
    checks.push_back({std::move(name), passed, std::move(detail)});
  }
  void AddClaim(std::string name, std::string source, std::string expected, std::string measured,
                bool holds) {
    claims.push_back({std::move(name), std::move(source), std::move(expected), std::move(measured), holds});
  }
  bool passed() const;
};

struct Experiment {
  std::string name;
  std::string description;  // one line
  std::function<Result<ExperimentResult>(const ExperimentOptions&)> run;
  bool takes_head = false;  // reads ExperimentOptions::layer / head (--layer, --head)
};

// Every experiment, in the order `attnlab experiment` lists them.
const std::vector<Experiment>& AllExperiments();
const Experiment* FindExperiment(std::string_view name);

// The registry's entries (one file each, src/experiments/<name>.cc).
Experiment CollapseDepthExperiment();     // collapse_depth.cc
Experiment CollapseTrainingExperiment();  // collapse_training.cc
Experiment SinksExperiment();  // sinks.cc
Experiment HeadsExperiment();  // heads.cc
Experiment InterventionsExperiment();  // interventions.cc
Experiment SinksCollapseExperiment();  // sinks_collapse.cc
Experiment ScalingExperiment();        // scaling.cc
Experiment RecallExperiment();         // recall.cc
Experiment ExtrapolationExperiment();  // extrapolation.cc
Experiment ManipulateExperiment();     // manipulate.cc
Experiment KvEvictionExperiment();     // kv_eviction.cc

// report.json (schema above) and report.html (with a "Checks" and a "Claims" section appended)
// into options.out_dir.
Status WriteExperimentReport(const Experiment& e, const ExperimentOptions& options,
                             ExperimentResult& result, double seconds);
nlohmann::json ExperimentReportJson(const Experiment& e, const ExperimentOptions& options,
                                    const ExperimentResult& result, double seconds);

// "[name] message" on stderr when options.progress (printf-style).
void Progress(const ExperimentOptions& options, const char* name, const char* format, ...)
    __attribute__((format(printf, 3, 4)));

// Number formatting for tables and summaries: "%.3g"-like, "n/a" for NaN/Inf.
std::string Fmt(double x, const char* format = "%.3g");

}  // namespace attnlab::experiments

#endif  // ATTNLAB_EXPERIMENTS_EXPERIMENT_H_
