// `attnlab bench suite`: every kernel the performance targets name, in one table
// (docs/PERFORMANCE.md keeps the latest --full one):
//   sgemm_peak                          the practical fp32 peak (2048^3, oneDNN)
//   flash_fwd / flash_bwd / sgemm_qk    N = 2048 (--full: 2048 and 4096), head_dim in {64, 128},
//                                       causal and not, 8 heads; ratio = GFLOP/s over the same
//                                       shape's sgemm_qk
//   triad / decode                      KV 4k and 32k (--full: 4k, 8k, 16k, 32k), 12 heads,
//                                       head_dim 64, f32 / bf16 / fp16, warm and cold; ratio =
//                                       GB/s over the same-run triad
// Every kernel is validated against its reference before it is timed (bench_util.h,
// bench_decode.h). The default takes about a minute on 2 cores; --full several; --quick: N = 256
// and KV 1k, warm only, a 3 x 64 MiB triad (a smoke test of the whole table in seconds).
// --json prints the bench document (bench_json.h): sgemm_peak, every sgemm_qk and the triad are
// its baselines, the flash and decode kernels its rows.
//
//   attnlab bench suite [--repeats 3] [--quick | --full] [--triad-mib MiB] [--json] [--threads T]
#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "attnlab/thread_pool.h"
#include "bench_attention.h"
#include "bench_decode.h"
#include "bench_json.h"
#include "bench_util.h"
#include "commands.h"
#include "report/format_number.h"

namespace attnlab::cli {
namespace {

struct SuiteOptions {
  int repeats = 3;
  bool quick = false, full = false, json = false;
  int64_t triad_mib = 0;
};

void RunSuite(const SuiteOptions& o) {
  bench::BenchDocument doc("bench suite");
  const std::vector<int64_t> ns = o.quick  ? std::vector<int64_t>{256}
                                  : o.full ? std::vector<int64_t>{2048, 4096}
                                           : std::vector<int64_t>{2048};
  const std::vector<int64_t> dims = {64, 128};
  constexpr int64_t kHeads = 8;
  DecodeBenchConfig c;
  c.lens = o.quick  ? std::vector<int64_t>{1024}
           : o.full ? std::vector<int64_t>{4096, 8192, 16384, 32768}
                    : std::vector<int64_t>{4096, 32768};
  c.cold = !o.quick;
  // --quick is a smoke test: a 3 x 64 MiB triad unless asked (it may fit the cache; its note says
  // so); the full suite sizes it from the last-level cache (bench_decode.h).
  c.triad_mib = o.triad_mib > 0 ? o.triad_mib : (o.quick ? 64 : 0);
  c.repeats = std::max(5, 4 * o.repeats);
  const DecodePlan plan = PlanDecode(c);
  // Attention: the largest shape's problem with its backward buffers, sub-problem, sgemm_qk
  // buffer, plus the peak sgemm's three 2048^2 matrices; the decode part runs after it.
  const double n_max = double(ns.back()), d_max = double(dims.back());
  const double attention_bytes =
      4.0 * (kHeads * n_max * d_max * 10 + n_max * n_max) + 3.0 * 2048 * 2048 * 4;
  const double bytes = std::max(attention_bytes, double(plan.peak_bytes));
  doc.SetMemoryEstimate(static_cast<int64_t>(bytes));
  nlohmann::ordered_json& set = doc.settings();
  set["quick"] = o.quick;
  set["full"] = o.full;
  set["repeats"] = o.repeats;
  set["attention"] = {{"n", ns}, {"head_dim", dims}, {"heads", kHeads}, {"causal", {false, true}},
                      {"backward", true}};
  set["decode"] = {{"len", c.lens},
                   {"heads", c.heads},
                   {"head_dim", c.head_dim},
                   {"dtype", {"f32", "bf16", "f16"}},
                   {"cold", c.cold},
                   {"repeats", c.repeats},
                   {"triad_bytes_per_array", plan.triad_array_bytes}};
  doc.Define("flops", "attention 4*B*H*Lq*Lk*D, halved when causal; backward 2.5x; sgemm 2*M*N*K");
  doc.Define("ratio",
             "attention: GFLOP/s over the same shape's sgemm_qk; decode: GB/s over the same-run "
             "triad");
  doc.Define("checks", "validation against the double reference before timing (bench_util.h, "
                       "bench_decode.h)");
  std::string nlist, llist;
  for (int64_t n : ns) nlist += (nlist.empty() ? "" : ",") + std::to_string(n);
  for (int64_t l : c.lens) llist += (llist.empty() ? "" : ",") + std::to_string(l);
  bench::Say(o.json, std::string("attnlab bench suite") +
                         (o.quick ? " --quick" : o.full ? " --full" : "") +
                         ": sgemm peak 2048^3; flash forward + backward at N = " + nlist +
                         ", head_dim 64,128, causal and not, 8 heads, vs same-shape sgemm; "
                         "decode at KV " + llist + " (12 heads, head_dim 64, f32/bf16/f16" +
                         (c.cold ? ", warm and cold" : ", warm") + ") vs a " +
                         report::FormatBytes(3.0 * plan.triad_array_bytes) + " triad; " +
                         std::to_string(o.repeats) + " repeats; memory ~" +
                         report::FormatBytes(bytes));
  if (!o.json) {
    std::printf("# CPU: %s | threads: %d | %s | kernels %s\n", doc.cpu().c_str(),
                doc.threads(), doc.date().c_str(), doc.simd_kernels().c_str());
    std::printf("# attention: GFLOP/s (4BHN^2D, halved when causal; backward 2.5x) / same-shape "
                "sgemm_qk; decode: GB/s of cache read / same-run STREAM triad; max_err/tol: "
                "validation against the double reference before timing\n");
    bench::PrintTableHeader();
  }
  const auto baseline = [&](const std::string& id, const bench::TableRow& r) {
    if (o.json) {
      doc.AddBaseline(id, r);
    } else {
      bench::PrintTableRow(r);
    }
  };
  const auto row = [&](const bench::TableRow& r) {
    if (o.json) {
      doc.AddRow(r);
    } else {
      bench::PrintTableRow(r);
    }
  };
  baseline("sgemm_peak", SgemmPeakRow(o.repeats));
  for (const int64_t d : dims) {
    for (const bool causal : {false, true}) {
      for (const int64_t n : ns) {
        const AttentionShape s{1, kHeads, kHeads, n, n, d};
        for (const auto& r : AttentionTableRows(s, causal, /*backward=*/true, o.repeats)) {
          if (r.kernel == "sgemm_qk") {
            baseline("sgemm_qk " + r.shape, r);
          } else {
            row(r);
          }
        }
      }
    }
  }
  const DecodeResult dec = DecodeRows(c);
  baseline("triad", dec.triad);
  for (const auto& r : dec.rows) row(r);
  if (o.json) doc.Print();
}

}  // namespace

void RegisterBenchSuiteCommand(CLI::App& app) {
  CLI::App* bench = app.get_subcommand("bench");
  auto o = std::make_shared<SuiteOptions>();
  CLI::App* cmd = bench->add_subcommand(
      "suite", "every kernel of the performance targets in one table (attention, decode)");
  cmd->fallthrough();
  cmd->add_option("--repeats", o->repeats, "timed runs per attention kernel; median (3)")
      ->check(CLI::Range(1, 1000000));
  CLI::Option* quick =
      cmd->add_flag("--quick", o->quick, "N = 256 and KV 1k only, warm (a smoke test in seconds)");
  cmd->add_flag("--full", o->full,
                "N = 2048 and 4096, KV 4k-32k: the docs/PERFORMANCE.md table (minutes)")
      ->excludes(quick);
  cmd->add_option("--triad-mib", o->triad_mib,
                  "MiB per triad array (default: the 3 arrays are 4x the last-level cache; "
                  "--quick: 64)")
      ->check(CLI::Range(int64_t{1}, int64_t{65536}));
  cmd->add_flag("--json", o->json, "print the bench JSON document (bench/README.md) instead");
  cmd->callback([o] { RunSuite(*o); });
}

}  // namespace attnlab::cli
