// `attnlab bench attention`: validate, then time, then compare with a baseline measured in the
// same run (llm.c dev/cuda's habit).
//
//   attnlab bench attention [--n 4096[,8192...]] [--len-q L] [--head-dim 128[,64...]]
//       [--heads 8] [--heads-kv H] [--batch 1] [--causal] [--window W]
//       [--softmax standard|softmax1|sink|sigmoid|softpick] [--backward] [--repeats 5] [--json]
//       [--no-reference] [--threads T]
//
// For every (n, head_dim): validate flash on the last 64 query rows of every head (bench_util.h
// states the checks and the fp32 tolerance; a failure exits 1), then time (median of --repeats
// runs after a warm-up) flash forward, flash backward (--backward), the reference forward
// (N <= 1024) and a oneDNN sgemm S = Q K^T of matching size; plus a 2048^3 sgemm as the
// machine's practical peak. FLOPs: AttentionForwardFlops (backward 2.5x); ratio = GFLOP/s over
// the same-run matching sgemm's GFLOP/s. --json prints the bench document (bench_json.h). See
// bench/README.md.
#include <cinttypes>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "bench_attention.h"
#include "bench_json.h"
#include "bench_util.h"
#include "commands.h"
#include "report/format_number.h"

namespace attnlab::cli {
namespace {

constexpr int64_t kReferenceMaxLen = 1024;  // the reference forward is timed up to this length
constexpr int64_t kPeakN = 2048;
constexpr int64_t kMaxLen = int64_t{1} << 24;

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

SoftmaxKind ParseSoftmax(const std::string& name) {
  if (name == "standard") return SoftmaxKind::kStandard;
  if (name == "softmax1") return SoftmaxKind::kSoftmax1;
  if (name == "sink") return SoftmaxKind::kSinkLogit;
  if (name == "softpick") return SoftmaxKind::kSoftpick;
  return SoftmaxKind::kSigmoid;  // the option's check allows nothing else
}

std::string ShapeText(const AttentionShape& s, bool causal, int64_t window,
                      const std::string& softmax) {
  std::string t = "B=" + std::to_string(s.batch) + " H=" + std::to_string(s.heads_q);
  if (s.heads_kv != s.heads_q) t += "/" + std::to_string(s.heads_kv);
  t += " Lq=" + std::to_string(s.len_q) + " Lk=" + std::to_string(s.len_k) +
       " D=" + std::to_string(s.head_dim);
  if (causal) t += " causal";
  if (window >= 0) t += " w=" + std::to_string(window);
  if (softmax != "standard") t += " " + softmax;
  return t;
}

nlohmann::ordered_json ShapeJson(const AttentionShape& s, bool causal, int64_t window,
                                 const std::string& softmax) {
  const nlohmann::ordered_json w =
      window < 0 ? nlohmann::ordered_json() : nlohmann::ordered_json(window);
  return {{"batch", s.batch}, {"heads_q", s.heads_q}, {"heads_kv", s.heads_kv},
          {"len_q", s.len_q}, {"len_k", s.len_k},     {"head_dim", s.head_dim},
          {"causal", causal}, {"window", w},          {"softmax", softmax}};
}

std::string Sci(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", x);
  return buf;
}

// Contradictory options (CLI11 checks each value's own range).
void CheckOptions(const BenchOptions& o) {
  const int64_t heads_kv = o.heads_kv == -1 ? o.heads : o.heads_kv;
  if (o.heads % heads_kv != 0) {
    throw UsageError("--heads (" + std::to_string(o.heads) + ") must be a multiple of " +
                     "--heads-kv (" + std::to_string(heads_kv) + ")");
  }
}

// The bytes one shape needs at once: the problem's tensors (bench_util.h's Problem), the
// last-rows sub-problem (a copy of K and V), the sgemm_qk buffer; the caller adds the peak
// sgemm's three 2048^2 matrices.
double ShapeBytes(const AttentionShape& s, bool backward) {
  const double qn = double(s.batch) * s.heads_q * s.len_q * s.head_dim;
  const double kn = double(s.batch) * s.heads_kv * s.len_k * s.head_dim;
  const double sub_q = double(s.batch) * s.heads_q * std::min<int64_t>(s.len_q, 64) * s.head_dim;
  const double floats = qn * (backward ? 4 : 3) + kn * (backward ? 4 : 2) + 2 * kn +
                        sub_q * (backward ? 4 : 3) + double(s.len_q) * s.len_k +
                        2.0 * s.batch * s.heads_q * s.len_q;
  return 4 * floats;
}

// Validates one shape (exits on failure), then times flash, the reference and the matching
// sgemm. Returns the sgemm_qk baseline (first) and the rows with ratios to it.
std::vector<bench::TableRow> BenchShape(const AttentionShape& s, const AttentionMask& mask,
                                        SoftmaxKind softmax, const BenchOptions& o) {
  const std::string shape = ShapeText(s, mask.causal, o.window, o.softmax);
  const nlohmann::ordered_json shape_json = ShapeJson(s, mask.causal, o.window, o.softmax);
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
  const auto row = [&](const char* kernel) {
    bench::TableRow r;
    r.kernel = kernel;
    r.shape = shape;
    r.shape_json = shape_json;
    r.unit = "GFLOP/s";
    return r;
  };
  const auto add_checks = [&](bench::TableRow& r, bool grad) {
    for (const bench::Check& c : checks) {
      if (c.grad == grad) r.checks.push_back({c.name, c.ok(), c.max_err, c.tol});
    }
  };
  bench::TableRow gemm = row("sgemm_qk");
  gemm.shape_json["gemm"] = {{"m", s.len_q}, {"n", s.len_k}, {"k", s.head_dim},
                             {"products", s.batch * s.heads_q}};
  gemm.note = "oneDNN S = Q K^T, every query head";
  std::vector<float> sbuf;
  gemm.time_ms = bench::MedianMs(o.repeats, [&] {
    if (bench::SgemmQK(*p, sbuf) != dnnl_success) throw CommandError("dnnl_sgemm failed");
  });
  gemm.rate = bench::SgemmQKFlops(s) / (gemm.time_ms * 1e6);
  std::vector<float>().swap(sbuf);

  std::vector<bench::TableRow> rows = {gemm};
  const std::string base_id = "sgemm_qk " + shape;
  const double fwd_flops = AttentionForwardFlops(s, mask.causal);
  const auto finish = [&](bench::TableRow& r, double flops) {
    r.rate = flops / (r.time_ms * 1e6);
    r.baseline = base_id;
    r.ratio = r.rate / gemm.rate;
  };
  bench::TableRow fwd = row("flash_fwd");
  fwd.time_ms = bench::MedianMs(o.repeats, [&] { Check(bench::FlashForward(*p)); });
  finish(fwd, fwd_flops);
  add_checks(fwd, false);
  rows.push_back(fwd);
  if (o.backward) {  // p holds the forward's out and lse
    bench::TableRow bwd = row("flash_bwd");
    bwd.time_ms = bench::MedianMs(o.repeats, [&] { Check(bench::FlashBackward(*p)); });
    finish(bwd, 2.5 * fwd_flops);
    add_checks(bwd, true);
    rows.push_back(bwd);
  }
  bench::TableRow ref = row("ref_fwd");
  if (o.no_reference) {
    ref.note = "--no-reference";
  } else if (s.len_q > kReferenceMaxLen || s.len_k > kReferenceMaxLen) {
    ref.note = "N > " + std::to_string(kReferenceMaxLen) + " (single-threaded reference)";
  } else {
    ref.time_ms = bench::MedianMs(o.repeats, [&] { Check(bench::ReferenceForward(*p)); });
    finish(ref, fwd_flops);
  }
  rows.push_back(ref);
  return rows;
}

void RunBenchAttention(const BenchOptions& o) {
  CheckOptions(o);
  const std::vector<int64_t> ns = bench::ParseIntList(o.n, 1, kMaxLen);
  const std::vector<int64_t> dims = bench::ParseIntList(o.head_dim, 1, 4096);
  const SoftmaxKind softmax = ParseSoftmax(o.softmax);
  AttentionMask mask;
  mask.causal = o.causal;
  mask.window_left = mask.window_right = o.window;  // causal already hides the right side

  bench::BenchDocument doc("bench attention");
  std::vector<AttentionShape> shapes;
  double bytes = 0;
  for (const int64_t n : ns) {
    for (const int64_t d : dims) {
      shapes.push_back({.batch = o.batch,
                        .heads_q = o.heads,
                        .heads_kv = o.heads_kv == -1 ? o.heads : o.heads_kv,
                        .len_q = o.len_q == -1 ? n : o.len_q,
                        .len_k = n,
                        .head_dim = d});
      bytes = std::max(bytes, ShapeBytes(shapes.back(), o.backward));
    }
  }
  bytes += 3.0 * kPeakN * kPeakN * 4;
  doc.SetMemoryEstimate(static_cast<int64_t>(bytes));
  nlohmann::ordered_json& set = doc.settings();
  set["n"] = ns;
  set["head_dim"] = dims;
  set["len_q"] = o.len_q == -1 ? nlohmann::ordered_json() : nlohmann::ordered_json(o.len_q);
  set["heads"] = o.heads;
  set["heads_kv"] = o.heads_kv == -1 ? o.heads : o.heads_kv;
  set["batch"] = o.batch;
  set["causal"] = o.causal;
  set["window"] = o.window < 0 ? nlohmann::ordered_json() : nlohmann::ordered_json(o.window);
  set["softmax"] = o.softmax;
  set["backward"] = o.backward;
  set["repeats"] = o.repeats;
  set["reference"] = !o.no_reference;
  set["validated_rows"] = bench::kCheckRows;
  const char* flops =
      "AttentionForwardFlops = 4*B*H*Lq*Lk*D, halved when causal with Lq == Lk; "
      "backward 2.5x forward; sgemm 2*M*N*K";
  const char* ratio = "GFLOP/s divided by that of the same-run sgemm_qk (S = Q K^T, every head)";
  doc.Define("flops", flops);
  doc.Define("ratio", ratio);
  doc.Define("checks",
             "validated before timing on the last 64 query rows of every head: max abs error "
             "<= 16 * 2^-24 * kappa * max M (gradients 2x), tools/bench_util.h");

  std::string what = std::to_string(shapes.size()) + " shape(s): N = " + o.n + ", head_dim " +
                     o.head_dim + ", " + std::to_string(o.heads) + " heads, batch " +
                     std::to_string(o.batch) + (o.causal ? ", causal" : "") +
                     (o.backward ? ", forward + backward" : ", forward") + ", " +
                     std::to_string(o.repeats) + " timed repeats; memory ~" +
                     report::FormatBytes(bytes);
  bench::Say(o.json, "attnlab bench attention: " + what);
  if (!o.json) {
    std::printf("# CPU: %s | threads: %d (oneDNN OpenMP: %d) | %s | kernels %s\n",
                doc.cpu().c_str(), doc.threads(), doc.onednn_threads(), doc.date().c_str(),
                doc.simd_kernels().c_str());
    std::printf("# FLOPs: %s\n# ratio: %s\n", flops, ratio);
    std::printf("# checked before timing on the last %" PRId64
                " query rows of every head: max_err vs the double reference, tol = 16 u kappa "
                "max M (u = 2^-24, gradients 2x); the worst check is shown\n",
                bench::kCheckRows);
    if (o.window >= 0) {
      std::printf(
          "# note: FLOPs ignore --window (dense convention): windowed GFLOP/s and ratios "
          "overstate the work done\n");
    }
    bench::PrintTableHeader();
  }
  {  // The machine's practical peak.
    const bench::TableRow r = SgemmPeakRow(o.repeats);
    if (o.json) {
      doc.AddBaseline("sgemm_peak", r);
    } else {
      bench::PrintTableRow(r);
    }
  }
  for (const AttentionShape& s : shapes) {
    const std::vector<bench::TableRow> rows = BenchShape(s, mask, softmax, o);
    for (size_t i = 0; i < rows.size(); ++i) {
      if (!o.json) {
        bench::PrintTableRow(rows[i]);
      } else if (i == 0) {
        doc.AddBaseline("sgemm_qk " + rows[i].shape, rows[i]);
      } else {
        doc.AddRow(rows[i]);
      }
    }
  }
  if (o.json) doc.Print();
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
  for (bench::TableRow& r : BenchShape(s, mask, SoftmaxKind::kStandard, o)) {
    if (r.kernel != "ref_fwd") out.push_back(std::move(r));
  }
  return out;
}

bench::TableRow SgemmPeakRow(int repeats) {
  bench::MatchOneDnnThreads();
  bench::SquareSgemm peak(kPeakN);
  bench::TableRow r;
  r.kernel = "sgemm_peak";
  r.shape = std::to_string(kPeakN) + "^3";
  r.shape_json = {{"m", kPeakN}, {"n", kPeakN}, {"k", kPeakN}};
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
  cmd->add_option("--n", o->n, "key length(s) N, comma-separated (default 4096)")
      ->check(bench::IntListCheck(1, kMaxLen, "key lengths in [1, 2^24]"));
  cmd->add_option("--len-q", o->len_q, "query length (default N; rows align to the last keys)")
      ->check(CLI::Range(int64_t{1}, kMaxLen));
  cmd->add_option("--head-dim", o->head_dim, "head dim(s), comma-separated (default 128)")
      ->check(bench::IntListCheck(1, 4096, "head dims in [1, 4096]"));
  cmd->add_option("--heads", o->heads, "query heads (default 8)")
      ->check(CLI::Range(int64_t{1}, int64_t{65536}));
  cmd->add_option("--heads-kv", o->heads_kv, "key/value heads, divides --heads (default --heads)")
      ->check(CLI::Range(int64_t{1}, int64_t{65536}));
  cmd->add_option("--batch", o->batch, "batch (default 1)")
      ->check(CLI::Range(int64_t{1}, int64_t{65536}));
  cmd->add_flag("--causal", o->causal, "causal mask");
  cmd->add_option("--window", o->window, "sliding window: keys within W positions of the query")
      ->check(CLI::Range(int64_t{0}, kMaxLen));
  cmd->add_option("--softmax", o->softmax, "standard (default), softmax1, sink, sigmoid or softpick")
      ->check(CLI::IsMember({"standard", "softmax1", "sink", "sigmoid", "softpick"}));
  cmd->add_flag("--backward", o->backward, "also validate and time the backward");
  cmd->add_option("--repeats", o->repeats, "timed runs per kernel; the median is reported (5)")
      ->check(CLI::Range(1, 1000000));
  cmd->add_flag("--json", o->json, "print the bench JSON document (bench/README.md) instead");
  cmd->add_flag("--no-reference", o->no_reference, "skip timing the reference forward");
  cmd->callback([o] { RunBenchAttention(*o); });
}

}  // namespace attnlab::cli
