#include "experiments/experiment_report.h"

namespace attnlab::experiments {

std::string Verdict(bool holds) { return holds ? "holds" : "does not hold"; }

std::string JoinNumbers(const std::vector<double>& v, const char* format, std::string_view sep) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) s += sep;
    s += Fmt(v[i], format);
  }
  return s;
}

std::string JoinInts(const std::vector<int64_t>& v, std::string_view sep) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) s += sep;
    s += std::to_string(v[i]);
  }
  return s;
}

double SecondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void AddSetupSection(report::HtmlReport& html, const std::vector<std::string>& bullets) {
  html.AddSection("setup", "Setup");
  html.AddBulletList(bullets);
}

}  // namespace attnlab::experiments
