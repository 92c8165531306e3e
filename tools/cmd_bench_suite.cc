// `attnlab bench suite`: every kernel the performance targets name, in one table
// (docs/PERFORMANCE.md keeps the latest one):
//   sgemm_peak                          the practical fp32 peak (2048^3, oneDNN)
//   flash_fwd / flash_bwd / sgemm_qk    N in {2048, 4096}, head_dim in {64, 128}, causal and not,
//                                       8 heads; ratio = GFLOP/s over the same shape's sgemm_qk
//   triad / decode                      KV 4k-32k, 12 heads, head_dim 64, f32 / bf16 / fp16,
//                                       warm and cold; ratio = GB/s over the same-run triad
// Every kernel is validated against its reference before it is timed (bench_util.h,
// bench_decode.h). --quick: N = 1024 and KV 4k only (a smoke test of the whole table).
//
//   attnlab [--threads T] bench suite [--repeats 3] [--quick] [--json]
#include <algorithm>
#include <cstdio>
#include <ctime>
#include <nlohmann/json.hpp>

#include "attnlab/thread_pool.h"
#include "bench_attention.h"
#include "bench_decode.h"
#include "bench_util.h"
#include "commands.h"

namespace attnlab::cli {
namespace {

struct SuiteOptions {
  int repeats = 3;
  bool quick = false, json = false;
};

std::string UtcNow() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S UTC", &tm);
  return buf;
}

void RunSuite(const SuiteOptions& o) {
  if (o.repeats < 1) throw CommandError("--repeats must be >= 1, got " + std::to_string(o.repeats));
  const std::string cpu = bench::CpuModel(), date = UtcNow();
  const int threads = DefaultThreadCount();
  auto emit = [&](const bench::TableRow& r, nlohmann::ordered_json& doc) {
    if (o.json) {
      doc["results"].push_back(bench::TableRowJson(r));
    } else {
      bench::PrintTableRow(r);
    }
  };
  nlohmann::ordered_json doc = {
      {"cpu", cpu},
      {"threads", threads},
      {"date", date},
      {"flops_definition",
       "attention 4*B*H*Lq*Lk*D, halved when causal; backward 2.5x; sgemm 2*M*N*K"},
      {"ratio_definition",
       "attention: GFLOP/s over the same shape's sgemm_qk; decode: GB/s over the same-run triad"},
      {"results", nlohmann::ordered_json::array()}};
  if (!o.json) {
    std::printf("# attnlab bench suite | CPU: %s | threads: %d | %s\n", cpu.c_str(), threads,
                date.c_str());
    std::printf("# attention: GFLOP/s (4BHN^2D, halved when causal; backward 2.5x) / same-shape "
                "sgemm_qk; decode: GB/s of cache read / same-run STREAM triad; max_err/tol: "
                "validation against the double reference before timing\n");
    bench::PrintTableHeader();
  }
  emit(SgemmPeakRow(o.repeats), doc);
  const std::vector<int64_t> ns = o.quick ? std::vector<int64_t>{1024}
                                          : std::vector<int64_t>{2048, 4096};
  for (const int64_t d : {64, 128}) {
    for (const bool causal : {false, true}) {
      for (const int64_t n : ns) {
        const AttentionShape s{1, 8, 8, n, n, d};
        for (const auto& r : AttentionTableRows(s, causal, /*backward=*/true, o.repeats)) {
          emit(r, doc);
        }
      }
    }
  }
  DecodeBenchConfig c;
  if (o.quick) {
    c.lens = {4096};
    c.triad_mib = 64;
    c.cold = false;
  }
  c.repeats = std::max(5, 4 * o.repeats);
  for (const auto& r : DecodeRows(c)) emit(r, doc);
  if (o.json) std::printf("%s\n", doc.dump(2).c_str());
}

}  // namespace

void RegisterBenchSuiteCommand(CLI::App& app) {
  CLI::App* bench = app.get_subcommand("bench");
  auto o = std::make_shared<SuiteOptions>();
  CLI::App* cmd = bench->add_subcommand(
      "suite", "every kernel of the performance targets in one table (attention, decode)");
  cmd->fallthrough();
  cmd->add_option("--repeats", o->repeats, "timed runs per attention kernel; median (3)");
  cmd->add_flag("--quick", o->quick, "N = 1024 and KV 4k only (smoke test)");
  cmd->add_flag("--json", o->json, "print JSON instead of the table");
  cmd->callback([o] { RunSuite(*o); });
}

}  // namespace attnlab::cli
