#include "experiments/experiment.h"

#include <cmath>
#include <cstdarg>
#include <cstdio>

#include "attnlab/thread_pool.h"
#include "report/json_file.h"

namespace attnlab::experiments {

bool ExperimentResult::passed() const {
  for (const Check& c : checks) {
    if (!c.passed) return false;
  }
  return true;
}

const std::vector<Experiment>& AllExperiments() {
  static const std::vector<Experiment> all = {
      CollapseDepthExperiment(),
      CollapseTrainingExperiment(),
      SinksExperiment(),
      HeadsExperiment(),
      InterventionsExperiment(),
      SinksCollapseExperiment(),
      ScalingExperiment(),
      RecallExperiment(),
      ExtrapolationExperiment(),
      ManipulateExperiment(),
      KvEvictionExperiment(),
  };
  return all;
}

const Experiment* FindExperiment(std::string_view name) {
  for (const Experiment& e : AllExperiments()) {
    if (e.name == name) return &e;
  }
  return nullptr;
}

nlohmann::json ExperimentReportJson(const Experiment& e, const ExperimentOptions& o,
                                    const ExperimentResult& r, double seconds) {
  nlohmann::json checks = nlohmann::json::array(), claims = nlohmann::json::array();
  for (const Check& c : r.checks) {
    checks.push_back({{"name", c.name}, {"passed", c.passed}, {"detail", c.detail}});
  }
  for (const Claim& c : r.claims) {
    claims.push_back({{"name", c.name},
                      {"source", c.source},
                      {"expected", c.expected},
                      {"measured", c.measured},
                      {"holds", c.holds}});
  }
  return nlohmann::json{{"experiment", e.name},
                        {"description", e.description},
                        {"quick", o.quick},
                        {"seed", o.seed},
                        {"threads", DefaultThreadCount()},
                        {"seconds", seconds},
                        {"summary", r.summary},
                        {"passed", r.passed()},
                        {"checks", checks},
                        {"claims", claims},
                        {"results", r.results}};
}

Status WriteExperimentReport(const Experiment& e, const ExperimentOptions& o, ExperimentResult& r,
                             double seconds) {
  ATTNLAB_RETURN_IF_ERROR(
      report::WriteJsonFile(o.out_dir + "/report.json", ExperimentReportJson(e, o, r, seconds)));
  report::HtmlReport& html = r.html;
  html.SetSummary(r.summary);
  if (!r.claims.empty()) {
    html.AddSection("claims", "Claims from the literature");
    std::vector<std::vector<std::string>> rows;
    for (const Claim& c : r.claims) {
      rows.push_back({c.name, c.source, c.expected, c.measured, c.holds ? "holds" : "does not hold"});
    }
    html.AddTable({"claim", "source", "expected", "measured", "verdict"}, rows,
                  "What the papers predict and what this run measured (a claim that does not hold "
                  "is a finding, not a failure; the discussion is in docs/EXPERIMENTS.md).");
  }
  html.AddSection("checks", "Invariant checks");
  std::vector<std::vector<std::string>> rows;
  for (const Check& c : r.checks) rows.push_back({c.name, c.passed ? "pass" : "FAIL", c.detail});
  html.AddTable({"invariant", "result", "numbers"}, rows,
                "Qualitative facts this experiment must reproduce at any size; the command exits "
                "non-zero if one fails.");
  char buf[160];
  std::snprintf(buf, sizeof buf, "%s, seed %llu, %d threads, %.1f s", o.quick ? "quick" : "full",
                static_cast<unsigned long long>(o.seed), DefaultThreadCount(), seconds);
  html.AddParagraph(std::string("Run: ") + buf + ".");
  return html.WriteTo(o.out_dir + "/report.html");
}

void Progress(const ExperimentOptions& o, const char* name, const char* format, ...) {
  if (!o.progress) return;
  char buf[1024];
  va_list ap;
  va_start(ap, format);
  std::vsnprintf(buf, sizeof buf, format, ap);
  va_end(ap);
  std::fprintf(stderr, "[%s] %s\n", name, buf);
}

std::string Fmt(double x, const char* format) {
  if (!std::isfinite(x)) return "n/a";
  char buf[64];
  std::snprintf(buf, sizeof buf, format, x);
  return buf;
}

}  // namespace attnlab::experiments
