#include "diagnostics/probe_curve.h"

#include <cmath>
#include <nlohmann/json.hpp>

#include "core/files.h"

namespace attnlab {

namespace {

// One probe line's point, or false when it is malformed.
bool ParsePoint(const nlohmann::json& j, ProbePoint* p) {
  if (!j.is_object()) return false;
  const auto step = j.find("step");
  const auto probe = j.find("probe");
  if (step == j.end() || !step->is_number_integer() || step->get<int64_t>() < 0) return false;
  if (probe == j.end() || !probe->is_object()) return false;
  const auto alpha = probe->find("alpha1");
  if (alpha == probe->end() || !alpha->is_array() || alpha->empty()) return false;
  size_t heads = 0;
  p->step = step->get<int64_t>();
  p->max_alpha1 = -1;
  p->layer_mean.clear();
  for (size_t l = 0; l < alpha->size(); ++l) {
    const nlohmann::json& row = (*alpha)[l];
    if (!row.is_array() || row.empty() || (heads != 0 && row.size() != heads)) return false;
    heads = row.size();
    double sum = 0;
    for (size_t h = 0; h < row.size(); ++h) {
      if (!row[h].is_number()) return false;
      const double a = row[h].get<double>();
      if (!std::isfinite(a)) return false;
      sum += a;
      if (a > p->max_alpha1) {
        p->max_alpha1 = a;
        p->max_layer = static_cast<int64_t>(l);
        p->max_head = static_cast<int64_t>(h);
      }
    }
    p->layer_mean.push_back(sum / static_cast<double>(row.size()));
  }
  const auto rate = probe->find("sink_rate");
  p->sink_rate = rate != probe->end() && rate->is_number() && std::isfinite(rate->get<double>())
                     ? rate->get<double>()
                     : -1;
  return true;
}

}  // namespace

ProbeCurve ParseProbeCurve(std::string_view text) {
  ProbeCurve c;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    ++c.lines;
    if (line.find("\"probe\"") == std::string_view::npos) continue;  // most lines: no probe
    ++c.probe_lines;
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    ProbePoint p;
    if (static_cast<int64_t>(c.points.size()) < kMaxProbePoints && ParsePoint(j, &p)) {
      c.points.push_back(std::move(p));
    } else {
      ++c.skipped;
    }
  }
  return c;
}

Result<ProbeCurve> ReadProbeCurve(const std::string& path) {
  ATTNLAB_ASSIGN_OR_RETURN(std::string text, ReadFileToString(path, kMaxProbeLogBytes));
  return ParseProbeCurve(text);
}

}  // namespace attnlab
