// The claim / report skeleton every experiment fills (the report.json schema and the HTML page's
// Checks and Claims sections are experiment.h's WriteExperimentReport).
//
// An experiment reads as configure -> run variants -> measure -> report: its Run function sizes
// the runs, trains or builds each variant, measures them into one object (the "measured" state),
// and hands that object to AssembleReport with its five report stages, which run in this order:
//   checks   invariants (ExperimentResult::AddCheck): qualitative facts that must hold at any
//            size; one that fails makes the command exit non-zero;
//   claims   the literature's statements (ExperimentResult::AddClaim), each with the numbers it
//            rests on and a verdict computed from them by the rule its `expected` text states;
//   results  the experiment-specific JSON (ExperimentResult::results);
//   summary  the answer in a few sentences (ExperimentResult::summary);
//   html     the page (ExperimentResult::html): title, summary facts, sections, setup.
// A stage returns a Status: it fails only on a programming error such as a variant id that no
// run has (FindById), which must not silently fall back to another run.
#ifndef ATTNLAB_EXPERIMENTS_EXPERIMENT_REPORT_H_
#define ATTNLAB_EXPERIMENTS_EXPERIMENT_REPORT_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "attnlab/status.h"
#include "experiments/experiment.h"

namespace attnlab::experiments {

template <typename Measured>
struct ReportStages {
  std::function<Status(const Measured&, ExperimentResult&)> checks, claims, results, summary, html;
};

// Runs the stages (a null stage is skipped) on `measured` into a fresh ExperimentResult; the
// first stage that fails ends it with that stage's Status.
template <typename Measured>
Result<ExperimentResult> AssembleReport(const Measured& measured, const ReportStages<Measured>& stages) {
  ExperimentResult r;
  for (const auto* stage : {&stages.checks, &stages.claims, &stages.results, &stages.summary, &stages.html}) {
    if (*stage) ATTNLAB_RETURN_IF_ERROR((*stage)(measured, r));
  }
  return r;
}

// The element of `items` whose `id` member (a const char* or std::string) equals `id`; `what`
// names the kind of element in the error ("sinks variant"). An unknown id is NotFound, never a
// fallback to some default element.
template <typename T>
Result<const T*> FindById(const std::vector<T>& items, std::string_view id, std::string_view what) {
  for (const T& item : items) {
    if (std::string_view(item.id) == id) return &item;
  }
  return Status::NotFound(std::string(what) + " '" + std::string(id) + "' does not exist");
}

// "holds" / "does not hold": a claim's verdict in summaries.
std::string Verdict(bool holds);

// "a / b / c" with each number formatted by Fmt(x, format) ("n/a" for NaN / Inf).
std::string JoinNumbers(const std::vector<double>& v, const char* format, std::string_view sep = " / ");
// "1 / 2 / 4".
std::string JoinInts(const std::vector<int64_t>& v, std::string_view sep = " / ");

// Seconds since t0 on the steady clock (progress lines and per-run wall times).
double SecondsSince(std::chrono::steady_clock::time_point t0);

// The page's closing "Setup" section: one bullet per item (model, training, data, ...).
void AddSetupSection(report::HtmlReport& html, const std::vector<std::string>& bullets);

}  // namespace attnlab::experiments

#endif  // ATTNLAB_EXPERIMENTS_EXPERIMENT_REPORT_H_
