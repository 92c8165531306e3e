// `attnlab bench attention`: validate, then time, then compare with a baseline measured in the
// same run (llm.c dev/cuda's habit).
//
//   attnlab [--threads T] bench attention [--n 4096[,8192...]] [--len-q L] [--head-dim 128[,64...]]
//       [--heads 8] [--heads-kv H] [--batch 1] [--causal] [--window W]
//       [--softmax standard|softmax1|sink|sigmoid] [--backward] [--repeats 5] [--json]
//       [--no-reference]
//
// For every (n, head_dim): validate flash on the last 64 query rows of every head (bench_util.h
// states the checks and the fp32 tolerance; a failure exits 1), then time (median of --repeats
// runs after a warm-up) flash forward, flash backward (--backward), the reference forward
// (N <= 1024) and a oneDNN sgemm S = Q K^T of matching size; plus a 2048^3 sgemm as the
// machine's practical peak. FLOPs: AttentionForwardFlops (backward 2.5x); ratio = GFLOP/s over
// the same-run matching sgemm's GFLOP/s. See bench/README.md.
#include <cinttypes>
#include <cstdio>
#include <ctime>
#include <nlohmann/json.hpp>
#include <sstream>

#include "bench_attention.h"
#include "bench_util.h"
#include "commands.h"

namespace attnlab::cli {
namespace {

constexpr int64_t kReferenceMaxLen = 1024;  // the reference forward is timed up to this length
constexpr int64_t kPeakN = 2048;

struct BenchOptions {
  std::string n = "4096", head_dim = "128";     // comma-separated lists
  int64_t len_q = -1;                           // -1: = n
  int64_t heads = 8, heads_kv = -1, batch = 1;  // heads_kv -1: = heads
  bool causal = false;
  int64_t window = -1;
  std::string softmax = "standard";
  bool backward = false, json = false, no_reference = false;
  int repeats = 5;
};

std::vector<int64_t> ParseList(const std::string& flag, const std::string& text) {
  std::vector<int64_t> xs;
  std::stringstream ss(text);
  for (std::string item; std::getline(ss, item, ',');) {
    size_t used = 0;
    int64_t x = 0;
    try {
      x = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != item.size() || x < 1) {
      throw CommandError(flag + ": expected positive integers separated by commas, got '" + text +
                         "'");
    }
    xs.push_back(x);
  }
  if (xs.empty()) throw CommandError(flag + ": expected at least one value");
  return xs;
}

SoftmaxKind ParseSoftmax(const std::string& name) {
  if (name == "standard") return SoftmaxKind::kStandard;
  if (name == "softmax1") return SoftmaxKind::kSoftmax1;
  if (name == "sink") return SoftmaxKind::kSinkLogit;
  if (name == "sigmoid") return SoftmaxKind::kSigmoid;
  throw CommandError("unknown --softmax '" + name +
                     "'; expected standard, softmax1, sink or sigmoid");
}

std::string ShapeText(const AttentionShape& s, const BenchOptions& o) {
  std::string t = "B=" + std::to_string(s.batch) + " H=" + std::to_string(s.heads_q);
  if (s.heads_kv != s.heads_q) t += "/" + std::to_string(s.heads_kv);
  t += " Lq=" + std::to_string(s.len_q) + " Lk=" + std::to_string(s.len_k) +
       " D=" + std::to_string(s.head_dim);
  if (o.causal) t += " causal";
  if (o.window >= 0) t += " w=" + std::to_string(o.window);
  if (o.softmax != "standard") t += " " + o.softmax;
  return t;
}

// One table row. time_ms < 0: skipped (reason in `note`).
struct Row {
  Row(std::string k, std::string s) : kernel(std::move(k)), shape(std::move(s)) {}
  std::string kernel, shape;
  double time_ms = -1, flops = 0, ratio = 0;
  std::vector<bench::Check> checks;  // the validation behind this row (flash rows)
  std::string note;
  double Gflops() const { return flops / (time_ms * 1e6); }
};

std::string Fixed(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f", x);
  return buf;
}

void PrintRow(const Row& r) {
  if (r.time_ms < 0) {
    std::printf("%-12s %-44s %10s  %s\n", r.kernel.c_str(), r.shape.c_str(), "skipped",
                r.note.c_str());
    return;
  }
  std::printf("%-12s %-44s %10.3f %9.1f %7s", r.kernel.c_str(), r.shape.c_str(), r.time_ms,
              r.Gflops(), r.ratio > 0 ? Fixed(r.ratio).c_str() : "-");
  // The worst check (largest error / tolerance) of each kind: against the reference, and the
  // full run against the last-rows run.
  const bench::Check* worst[2] = {nullptr, nullptr};
  for (const bench::Check& c : r.checks) {
    const bool vs_ref = c.name.find("reference") != std::string::npos;
    const bench::Check*& w = worst[vs_ref ? 0 : 1];
    if (!w || c.max_err / c.tol > w->max_err / w->tol) w = &c;
  }
  if (worst[0]) std::printf("  %9.2e %9.2e", worst[0]->max_err, worst[0]->tol);
  if (worst[1]) std::printf("  %9.2e", worst[1]->max_err);
  std::printf("\n");
  std::fflush(stdout);
}

// Shape fields for JSON; `s` null for the square sgemm.
nlohmann::ordered_json RowJson(const Row& r, const AttentionShape* s, const BenchOptions& o) {
  nlohmann::ordered_json j = {{"kernel", r.kernel}, {"shape_text", r.shape}};
  if (!s) {
    j["shape"] = {{"m", kPeakN}, {"n", kPeakN}, {"k", kPeakN}};
  } else {
    j["shape"] = {{"batch", s->batch},  {"heads_q", s->heads_q}, {"heads_kv", s->heads_kv},
                  {"len_q", s->len_q},  {"len_k", s->len_k},     {"head_dim", s->head_dim},
                  {"causal", o.causal}, {"window", o.window},    {"softmax", o.softmax}};
  }
  if (r.time_ms < 0) {
    j["time_ms"] = nullptr;
    j["skipped"] = r.note;
    return j;
  }
  j["time_ms"] = r.time_ms;
  j["flops"] = r.flops;
  j["gflops"] = r.Gflops();
  if (r.ratio > 0) j["ratio"] = r.ratio;
  for (const bench::Check& c : r.checks) {
    j["checks"].push_back({{"name", c.name}, {"max_abs_err", c.max_err}, {"tol", c.tol}});
  }
  return j;
}

std::string UtcNow() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S UTC", &tm);
  return buf;
}

std::string Sci(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", x);
  return buf;
}

void CheckOptions(const BenchOptions& o) {
  auto fail = [](const std::string& flag, int64_t got) {
    throw CommandError(flag + " must be >= 1, got " + std::to_string(got));
  };
  if (o.heads < 1) fail("--heads", o.heads);
  if (o.heads_kv != -1 && o.heads_kv < 1) fail("--heads-kv", o.heads_kv);
  if (o.batch < 1) fail("--batch", o.batch);
  if (o.len_q != -1 && o.len_q < 1) fail("--len-q", o.len_q);
  if (o.repeats < 1) fail("--repeats", o.repeats);
  const int64_t heads_kv = o.heads_kv == -1 ? o.heads : o.heads_kv;
  if (o.heads % heads_kv != 0) {
    throw CommandError("--heads (" + std::to_string(o.heads) + ") must be a multiple of " +
                       "--heads-kv (" + std::to_string(heads_kv) + ")");
  }
  if (o.window < -1) throw CommandError("--window must be >= 0, got " + std::to_string(o.window));
}

// Validates one shape (exits on failure), then times flash, the reference and the matching
// sgemm; returns the rows with ratios to that sgemm.
std::vector<Row> BenchShape(const AttentionShape& s, const AttentionMask& mask, SoftmaxKind softmax,
                            const BenchOptions& o) {
  const std::string shape = ShapeText(s, o);
  auto p = bench::MakeProblem(s, mask, softmax);
  std::vector<bench::Check> checks;
  Check(bench::Validate(*p, o.backward, &checks), "flash on " + shape);
  for (const bench::Check& c : checks) {
    if (!c.ok()) {
      throw CommandError("validation failed for " + shape + ": " + c.name + ": max abs error " +
                         Sci(c.max_err) + " exceeds the fp32 tolerance " + Sci(c.tol) +
                         " (see tools/bench_util.h)");
    }
  }
  std::vector<Row> rows;
  Row fwd{"flash_fwd", shape};
  fwd.flops = AttentionForwardFlops(s, mask.causal);
  fwd.time_ms = bench::MedianMs(o.repeats, [&] { Check(bench::FlashForward(*p)); });
  for (const bench::Check& c : checks) {
    if (!c.grad) fwd.checks.push_back(c);
  }
  rows.push_back(fwd);
  if (o.backward) {  // p holds the forward's out and lse
    Row bwd{"flash_bwd", shape};
    bwd.flops = 2.5 * fwd.flops;
    bwd.time_ms = bench::MedianMs(o.repeats, [&] { Check(bench::FlashBackward(*p)); });
    for (const bench::Check& c : checks) {
      if (c.grad) bwd.checks.push_back(c);
    }
    rows.push_back(bwd);
  }
  Row ref{"ref_fwd", shape};
  if (o.no_reference) {
    ref.note = "--no-reference";
  } else if (s.len_q > kReferenceMaxLen || s.len_k > kReferenceMaxLen) {
    ref.note = "N > " + std::to_string(kReferenceMaxLen);
  } else {
    ref.flops = fwd.flops;
    ref.time_ms = bench::MedianMs(o.repeats, [&] { Check(bench::ReferenceForward(*p)); });
  }
  rows.push_back(ref);
  Row gemm{"sgemm_qk", shape};
  gemm.flops = bench::SgemmQKFlops(s);
  std::vector<float> sbuf;
  gemm.time_ms = bench::MedianMs(o.repeats, [&] {
    if (bench::SgemmQK(*p, sbuf) != dnnl_success) throw CommandError("dnnl_sgemm failed");
  });
  rows.push_back(gemm);
  for (Row& r : rows) {
    if (r.time_ms >= 0) r.ratio = r.Gflops() / gemm.Gflops();
  }
  return rows;
}

void RunBenchAttention(const BenchOptions& o) {
  CheckOptions(o);
  const std::vector<int64_t> ns = ParseList("--n", o.n);
  const std::vector<int64_t> dims = ParseList("--head-dim", o.head_dim);
  const SoftmaxKind softmax = ParseSoftmax(o.softmax);
  AttentionMask mask;
  mask.causal = o.causal;
  mask.window_left = mask.window_right = o.window;  // causal already hides the right side

  bench::MatchOneDnnThreads();
  const int threads = DefaultThreadCount();
  const std::string cpu = bench::CpuModel(), date = UtcNow();
  const char* flops =
      "AttentionForwardFlops = 4*B*H*Lq*Lk*D, halved when causal with Lq == Lk; "
      "backward 2.5x forward; sgemm 2*M*N*K";
  const char* ratio = "GFLOP/s divided by that of the same-run sgemm_qk (S = Q K^T, every head)";
  nlohmann::ordered_json doc = {
      {"cpu", cpu},
      {"threads", threads},
      {"onednn_omp_threads", omp_get_max_threads()},
      {"date", date},
      {"flops_definition", flops},
      {"ratio_definition", ratio},
      {"validated_rows", bench::kCheckRows},
      {"tolerance", "max abs err <= 16 * 2^-24 * kappa * max M (gradients 2x), tools/bench_util.h"},
      {"results", nlohmann::ordered_json::array()}};
  if (!o.json) {
    std::printf("# attnlab bench attention | CPU: %s | threads: %d (oneDNN OpenMP: %d) | %s\n",
                cpu.c_str(), threads, omp_get_max_threads(), date.c_str());
    std::printf("# FLOPs: %s\n# ratio: %s\n", flops, ratio);
    std::printf("# checked before timing on the last %" PRId64
                " query rows of every head: "
                "max_err vs the double reference, tol = 16 u kappa max M (u = 2^-24, gradients "
                "2x); full-sub = max |full run - last-rows run|\n",
                bench::kCheckRows);
    if (o.window >= 0) {
      std::printf(
          "# note: FLOPs ignore --window (dense convention): windowed GFLOP/s and ratios "
          "overstate the work done\n");
    }
    std::printf("%-12s %-44s %10s %9s %7s  %9s %9s  %9s\n", "kernel", "shape", "time_ms", "GFLOP/s",
                "ratio", "max_err", "tol", "full-sub");
  }
  auto emit = [&](const Row& r, const AttentionShape* s) {
    if (o.json) {
      doc["results"].push_back(RowJson(r, s, o));
    } else {
      PrintRow(r);
    }
  };

  {  // The machine's practical peak.
    bench::SquareSgemm peak(kPeakN);
    Row r{"sgemm_peak", std::to_string(kPeakN) + "^3"};
    r.flops = peak.Flops();
    r.time_ms = bench::MedianMs(o.repeats, [&] {
      if (peak.Run() != dnnl_success) throw CommandError("dnnl_sgemm failed (square peak)");
    });
    emit(r, nullptr);
  }
  for (const int64_t n : ns) {
    for (const int64_t d : dims) {
      const AttentionShape s{.batch = o.batch,
                             .heads_q = o.heads,
                             .heads_kv = o.heads_kv == -1 ? o.heads : o.heads_kv,
                             .len_q = o.len_q == -1 ? n : o.len_q,
                             .len_k = n,
                             .head_dim = d};
      for (const Row& r : BenchShape(s, mask, softmax, o)) emit(r, &s);
    }
  }
  if (o.json) std::printf("%s\n", doc.dump(2).c_str());
}

}  // namespace

std::vector<bench::TableRow> AttentionTableRows(const AttentionShape& s, bool causal,
                                                bool backward, int repeats) {
  BenchOptions o;
  o.causal = causal;
  o.backward = backward;
  o.no_reference = true;
  o.repeats = repeats;
  AttentionMask mask;
  mask.causal = causal;
  std::vector<bench::TableRow> out;
  for (const Row& r : BenchShape(s, mask, SoftmaxKind::kStandard, o)) {
    if (r.kernel == "ref_fwd") continue;
    bench::TableRow t;
    t.kernel = r.kernel;
    t.shape = r.shape;
    t.time_ms = r.time_ms;
    t.rate = r.Gflops();
    t.unit = "GFLOP/s";
    if (r.kernel != "sgemm_qk") {
      t.baseline = "sgemm_qk";
      t.ratio = r.ratio;
    }
    for (const bench::Check& c : r.checks) {  // the worst check against the reference
      if (c.name.find("reference") == std::string::npos) continue;
      if (t.tol < 0 || c.max_err / c.tol > t.max_err / t.tol) {
        t.max_err = c.max_err;
        t.tol = c.tol;
      }
    }
    out.push_back(t);
  }
  return out;
}

bench::TableRow SgemmPeakRow(int repeats) {
  bench::MatchOneDnnThreads();
  bench::SquareSgemm peak(kPeakN);
  bench::TableRow r;
  r.kernel = "sgemm_peak";
  r.shape = std::to_string(kPeakN) + "^3";
  r.time_ms = bench::MedianMs(repeats, [&] {
    if (peak.Run() != dnnl_success) throw CommandError("dnnl_sgemm failed (square peak)");
  });
  r.rate = peak.Flops() / (r.time_ms * 1e6);
  r.unit = "GFLOP/s";
  r.note = "oneDNN, the practical fp32 peak";
  return r;
}

void RegisterBenchCommand(CLI::App& app) {
  CLI::App* bench = app.add_subcommand("bench", "validate and time kernels against baselines");
  bench->require_subcommand(1);
  bench->fallthrough();  // lets the global --threads follow the subcommand
  auto o = std::make_shared<BenchOptions>();
  CLI::App* cmd = bench->add_subcommand(
      "attention", "flash attention forward/backward vs reference and a oneDNN sgemm baseline");
  cmd->fallthrough();
  cmd->add_option("--n", o->n, "key length(s) N, comma-separated (default 4096)");
  cmd->add_option("--len-q", o->len_q, "query length (default N; rows align to the last keys)");
  cmd->add_option("--head-dim", o->head_dim, "head dim(s), comma-separated (default 128)");
  cmd->add_option("--heads", o->heads, "query heads (default 8)");
  cmd->add_option("--heads-kv", o->heads_kv, "key/value heads, divides --heads (default --heads)");
  cmd->add_option("--batch", o->batch, "batch (default 1)");
  cmd->add_flag("--causal", o->causal, "causal mask");
  cmd->add_option("--window", o->window, "sliding window: keys within W positions of the query");
  cmd->add_option("--softmax", o->softmax, "standard (default), softmax1, sink or sigmoid");
  cmd->add_flag("--backward", o->backward, "also validate and time the backward");
  cmd->add_option("--repeats", o->repeats, "timed runs per kernel; the median is reported (5)");
  cmd->add_flag("--json", o->json, "print JSON instead of the table");
  cmd->add_flag("--no-reference", o->no_reference, "skip timing the reference forward");
  cmd->callback([o] { RunBenchAttention(*o); });
}

}  // namespace attnlab::cli
