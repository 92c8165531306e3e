// The bench JSON document's writer (bench_json.h states the schema).
#include "bench_json.h"

#include <omp.h>

#include <cstdio>
#include <ctime>

#include "attnlab/thread_pool.h"
#include "bench_util.h"
#include "build_info.h"
#include "core/json_number.h"

namespace attnlab::bench {
namespace {

std::string UtcIso8601() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}


}  // namespace

BenchDocument::BenchDocument(const std::string& command)
    : command_(command),
      cpu_(CpuModel()),
      date_(UtcIso8601()),
      version_(cli::BuildVersion() + " (commit " + cli::BuildCommit() + ")"),
      simd_compiled_(cli::CompiledSimd()),
      simd_cpu_(cli::CpuSimd()),
      simd_kernels_(cli::KernelSimd()) {
  MatchOneDnnThreads();
  threads_ = DefaultThreadCount();
  onednn_threads_ = omp_get_max_threads();
}

nlohmann::ordered_json RowJson(const TableRow& r) {
  nlohmann::ordered_json j;
  j["kernel"] = r.kernel;
  j["shape"] = r.shape_json;
  j["shape_text"] = r.shape;
  const bool ran = r.time_ms >= 0;
  j["time_ms"] = ran ? JsonNumber<nlohmann::ordered_json>(r.time_ms) : nullptr;
  j["rate"] = ran ? JsonNumber<nlohmann::ordered_json>(r.rate) : nullptr;
  j["unit"] = r.unit;
  const bool has_ratio = ran && !r.baseline.empty() && r.ratio > 0;
  j["baseline"] = has_ratio ? nlohmann::ordered_json(r.baseline) : nullptr;
  j["ratio"] = has_ratio ? JsonNumber<nlohmann::ordered_json>(r.ratio) : nullptr;
  j["rate_in_baseline_unit"] =
      has_ratio && r.rate_in_baseline_unit > 0 ? JsonNumber<nlohmann::ordered_json>(r.rate_in_baseline_unit) : nullptr;
  j["checks"] = nlohmann::ordered_json::array();
  for (const RowCheck& c : r.checks) {
    j["checks"].push_back(
        {{"name", c.name}, {"holds", c.holds}, {"value", JsonNumber<nlohmann::ordered_json>(c.value)}, {"bound", JsonNumber<nlohmann::ordered_json>(c.bound)}});
  }
  j["note"] = ran ? r.note : std::string();
  j["skipped"] = ran ? nlohmann::ordered_json() : nlohmann::ordered_json(r.note);
  return j;
}

void BenchDocument::AddBaseline(const std::string& id, const TableRow& r) {
  nlohmann::ordered_json j;
  j["id"] = id;
  j["kernel"] = r.kernel;
  j["shape"] = r.shape_json;
  j["shape_text"] = r.shape;
  j["time_ms"] = JsonNumber<nlohmann::ordered_json>(r.time_ms);
  j["rate"] = JsonNumber<nlohmann::ordered_json>(r.rate);
  j["unit"] = r.unit;
  j["note"] = r.note;
  baselines_.push_back(j);
}

void BenchDocument::AddRow(const TableRow& r) {
  for (const RowCheck& c : r.checks) passed_ = passed_ && c.holds;
  rows_.push_back(RowJson(r));
}

nlohmann::ordered_json BenchDocument::ToJson() const {
  nlohmann::ordered_json j;
  j["schema"] = kBenchSchema;
  j["command"] = command_;
  j["cpu"] = cpu_;
  j["threads"] = threads_;
  j["onednn_threads"] = onednn_threads_;
  j["date"] = date_;
  j["version"] = version_;
  j["simd"] = {{"compiled", simd_compiled_}, {"kernels", simd_kernels_}, {"cpu", simd_cpu_}};
  j["settings"] = settings_;
  j["memory_estimate_bytes"] =
      memory_estimate_ >= 0 ? nlohmann::ordered_json(memory_estimate_) : nlohmann::ordered_json();
  j["definitions"] = definitions_;
  j["baselines"] = baselines_;
  j["rows"] = rows_;
  j["passed"] = passed_;
  return j;
}

void BenchDocument::Print() const {
  std::printf("%s\n", ToJson().dump(2).c_str());
  std::fflush(stdout);
}

}  // namespace attnlab::bench
