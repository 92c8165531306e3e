// `attnlab bench decode`: one decode step (a query per head against a KV cache) in fp32, bf16
// and fp16, as GB/s of cache read, against a STREAM triad measured in the same run
// (bench_decode.h states the method).
//
//   attnlab bench decode [--len 4096,32768] [--heads 12] [--heads-kv H] [--head-dim 64]
//       [--dtype f32,bf16,f16] [--repeats 20] [--triad-mib MiB] [--no-cold] [--json]
//       [--threads T]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <sstream>

#include "attnlab/attention.h"
#include "attnlab/thread_pool.h"
#include "bench_decode.h"
#include "bench_json.h"
#include "bench_util.h"
#include "commands.h"
#include "core/aligned_buffer.h"
#include "core/process_memory.h"
#include "report/format_number.h"

namespace attnlab::cli {
namespace {

constexpr int64_t kMaxLen = int64_t{1} << 24;
constexpr int64_t kMiB = int64_t{1} << 20;

std::string ShapeText(const DecodeShape& s, KvDtype dtype, const char* mode) {
  std::string t = "H=" + std::to_string(s.heads_q);
  if (s.heads_kv != s.heads_q) t += "/" + std::to_string(s.heads_kv);
  return t + " KV=" + std::to_string(s.len_k) + " D=" + std::to_string(s.head_dim) + " " +
         std::string(KvDtypeName(dtype)) + " " + mode;
}

// a = b + s c over n floats per array, split over the pool's threads (each thread owns a
// contiguous slice, as STREAM's OpenMP loop does).
struct Triad {
  std::vector<float> a, b, c;
  explicit Triad(int64_t n) : a(n, 0.0f), b(n, 1.0f), c(n, 2.0f) {}
  void Run(ThreadPool& pool) {
    const int64_t n = static_cast<int64_t>(a.size());
    const int64_t tasks = pool.num_threads();
    pool.ParallelFor(tasks, [&](int64_t t, int) {
      const int64_t lo = n * t / tasks, hi = n * (t + 1) / tasks;
      float* __restrict pa = a.data();
      const float* __restrict pb = b.data();
      const float* __restrict pc = c.data();
      for (int64_t i = lo; i < hi; ++i) pa[i] = pb[i] + 3.0f * pc[i];
    });
  }
  double Bytes() const { return 12.0 * static_cast<double>(a.size()); }
};

// Reads one float per cache line of `bufs` so whatever was cached is evicted; returns a checksum
// so the compiler cannot drop the loop.
float Evict(const std::vector<const std::vector<float>*>& bufs, ThreadPool& pool) {
  std::vector<float> partial(pool.num_threads(), 0.0f);
  for (const std::vector<float>* buf : bufs) {
    const int64_t n = static_cast<int64_t>(buf->size()), tasks = pool.num_threads();
    pool.ParallelFor(tasks, [&](int64_t t, int thread) {
      float s = 0;
      for (int64_t i = n * t / tasks; i < n * (t + 1) / tasks; i += 16) s += (*buf)[i];
      partial[thread] += s;
    });
  }
  float s = 0;
  for (float x : partial) s += x;
  return s;
}

}  // namespace

DecodePlan PlanDecode(const DecodeBenchConfig& c) {
  DecodePlan p;
  p.llc_bytes = bench::LastLevelCacheBytes();
  if (c.triad_mib > 0) {
    p.triad_array_bytes = c.triad_mib * kMiB;
    p.triad_reason = "--triad-mib";
    if (p.llc_bytes > 0 && 3 * p.triad_array_bytes < 2 * p.llc_bytes) {
      p.triad_reason += "; smaller than twice the " + report::FormatBytes(double(p.llc_bytes)) +
                        " last-level cache: it measures cache, not DRAM, bandwidth";
    }
  } else if (p.llc_bytes > 0) {
    // The three arrays together 4x the LLC, rounded up to whole MiB.
    p.triad_array_bytes = (4 * p.llc_bytes / 3 + kMiB - 1) / kMiB * kMiB;
    p.triad_reason = "3 arrays = 4x the " + report::FormatBytes(double(p.llc_bytes)) +
                     " last-level cache (DRAM bandwidth)";
    // A huge cache on a small machine: at most half the available memory.
    const int64_t available = MemAvailableBytes();
    if (available > 0 && 3 * p.triad_array_bytes > available / 2) {
      p.triad_array_bytes = std::max<int64_t>(kMiB, available / 6 / kMiB * kMiB);
      p.triad_reason += ", capped at half the available memory";
    }
  } else {
    p.triad_array_bytes = 512 * kMiB;
    p.triad_reason = "last-level cache unknown: 512 MiB per array";
  }
  int64_t kv = 0, eb = 0;
  for (int64_t len : c.lens) kv = std::max(kv, c.heads_kv * len * c.head_dim);
  for (KvDtype d : c.dtypes) eb = std::max(eb, KvDtypeBytes(d));
  // The triad's three arrays; then (cold) two of them, kept for eviction, with K and V in fp32
  // and the cache's copy at the longest length; plus the process (binary and libraries).
  p.peak_bytes = std::max(3 * p.triad_array_bytes,
                          (c.cold ? 2 * p.triad_array_bytes : 0) + 2 * kv * (4 + eb)) +
                 32 * kMiB;
  return p;
}

DecodeResult DecodeRows(const DecodeBenchConfig& c) {
  ThreadPool& pool = DefaultThreadPool();
  const DecodePlan plan = PlanDecode(c);
  DecodeResult result;
  auto triad = std::make_unique<Triad>(plan.triad_array_bytes / 4);
  {
    bench::TableRow& r = result.triad;
    r.kernel = "triad";
    r.shape = "3 x " + report::FormatBytes(double(plan.triad_array_bytes)) + " fp32";
    r.shape_json = {{"arrays", 3},
                    {"elements", plan.triad_array_bytes / 4},
                    {"bytes_per_array", plan.triad_array_bytes},
                    {"llc_bytes", plan.llc_bytes > 0 ? nlohmann::ordered_json(plan.llc_bytes)
                                                     : nlohmann::ordered_json()}};
    r.time_ms = bench::MedianMs(std::max(3, c.repeats / 4), [&] { triad->Run(pool); });
    r.rate = triad->Bytes() / (r.time_ms * 1e6);
    r.unit = "GB/s";
    r.note = "STREAM triad, 12 bytes per element; " + plan.triad_reason;
  }
  const double triad_gbs = result.triad.rate;
  // Cold steps read the triad's b and c first; a goes now, and without cold rows all of them.
  std::vector<float>().swap(triad->a);
  const std::vector<const std::vector<float>*> evict = {&triad->b, &triad->c};
  const bool evicts_llc = plan.llc_bytes <= 0 || 2 * plan.triad_array_bytes > plan.llc_bytes;
  if (!c.cold) triad.reset();
  volatile float sink = 0;
  const int cold_repeats = std::max(3, c.repeats / 4);
  for (const int64_t len : c.lens) {
    const DecodeShape s{c.heads, c.heads_kv, len, c.head_dim};
    const int64_t kn = s.heads_kv * len * s.head_dim, qn = s.heads_q * s.head_dim;
    std::mt19937_64 rng(static_cast<uint64_t>(len));
    std::normal_distribution<float> nd(0, 1);
    std::vector<float> q(qn), k(kn), v(kn);
    for (auto* x : {&q, &k, &v})
      for (float& e : *x) e = nd(rng);
    std::vector<float> out_f32(qn);
    bool have_f32 = false;  // out_f32 holds the f32 cache's output
    double f32_warm_ms = 0;
    for (const KvDtype dtype : c.dtypes) {
      const int64_t eb = KvDtypeBytes(dtype);
      AlignedBuffer<uint8_t> kb(kn * eb), vb(kn * eb);  // as the caches hold them (64-byte rows)
      ConvertToKvDtype(k.data(), kn, dtype, kb.data());
      ConvertToKvDtype(v.data(), kn, dtype, vb.data());
      const KvView kv{kb.data(), dtype, kn, len * s.head_dim, s.head_dim};
      const KvView vv{vb.data(), dtype, kn, len * s.head_dim, s.head_dim};
      std::vector<float> out(qn);
      DecodeParams dp;
      dp.pool = &pool;
      Check(AttentionDecode(s, dp, q, kv, vv, out), "decode");
      // Validation: the double reference on the values the cache holds, one KV head (and its
      // group of query heads) at a time, so the fp32 copy of the cache is one head's.
      double err = 0, tol = 0;
      {
        const int64_t G = s.heads_q / s.heads_kv, D = s.head_dim, hn = len * D;
        const double scale = 1.0 / std::sqrt(double(D));
        double cond = 0, vmax = 0;
        std::vector<float> kd(hn), vd(hn), ref(G * D);
        for (int64_t hk = 0; hk < s.heads_kv; ++hk) {
          ConvertFromKvDtype(kb.data() + hk * hn * eb, hn, dtype, kd.data());
          ConvertFromKvDtype(vb.data() + hk * hn * eb, hn, dtype, vd.data());
          const float* qh = q.data() + hk * G * D;
          AttentionShape as{1, G, 1, 1, len, D};
          AttentionParams ap;
          ap.pool = &pool;
          Check(AttentionForwardReference(as, ap, ContiguousView<const float>(qh, 1, G, 1, D),
                                          ContiguousView<const float>(kd.data(), 1, 1, len, D),
                                          ContiguousView<const float>(vd.data(), 1, 1, len, D),
                                          ContiguousView<float>(ref.data(), 1, G, 1, D)),
                "reference");
          // Tolerance as bench_util.h: 16 u kappa max M, with M <= max |v|.
          for (int64_t h = 0; h < G; ++h) {
            for (int64_t t = 0; t < len; ++t) {
              double a = 0;
              for (int64_t d = 0; d < D; ++d) a += std::abs(double(qh[h * D + d]) * kd[t * D + d]);
              cond = std::max(cond, scale * a);
            }
          }
          for (float x : vd) vmax = std::max(vmax, double(std::abs(x)));
          for (int64_t i = 0; i < G * D; ++i) {
            err = std::max(err, double(std::abs(out[hk * G * D + i] - ref[i])));
          }
        }
        tol = bench::kC * bench::kU * (cond + std::log2(len + 1.0) + 1) * vmax;
      }
      if (!(err <= tol)) {
        throw CommandError("validation failed for decode " + ShapeText(s, dtype, "") +
                           ": max abs error " + std::to_string(err) + " exceeds " +
                           std::to_string(tol));
      }
      // Accuracy cost against the fp32 cache.
      std::string accuracy;
      double rel_f32 = -1;
      if (dtype == KvDtype::kF32) {
        out_f32 = out;
        have_f32 = true;
      } else if (have_f32) {
        double d = 0, m = 0;
        for (int64_t i = 0; i < qn; ++i) {
          d = std::max(d, double(std::abs(out[i] - out_f32[i])));
          m = std::max(m, double(std::abs(out_f32[i])));
        }
        rel_f32 = d / m;
        char buf[64];
        std::snprintf(buf, sizeof buf, "err vs f32 %.2e", rel_f32);
        accuracy = buf;
      }
      const double bytes = static_cast<double>(AttentionDecodeBytes(s, dtype));
      for (const bool cold : {false, true}) {
        if (cold && !c.cold) continue;
        bench::TableRow r;
        r.kernel = "decode";
        r.shape = ShapeText(s, dtype, cold ? "cold" : "warm");
        r.shape_json = {{"heads_q", s.heads_q},
                        {"heads_kv", s.heads_kv},
                        {"len_k", s.len_k},
                        {"head_dim", s.head_dim},
                        {"dtype", std::string(KvDtypeName(dtype))},
                        {"cache", cold ? "cold" : "warm"},
                        {"cache_bytes", bytes}};
        r.time_ms = bench::MedianMsWith(
            cold ? cold_repeats : c.repeats,
            [&] { Check(AttentionDecode(s, dp, q, kv, vv, out), "decode"); },
            [&] {
              if (cold) sink = sink + Evict(evict, pool);
            });
        r.rate = bytes / (r.time_ms * 1e6);
        r.unit = "GB/s";
        r.baseline = "triad";
        r.ratio = r.rate / triad_gbs;
        r.checks.push_back({"out vs double reference (16 u kappa max|v|)", err <= tol, err, tol});
        if (dtype == KvDtype::kF32 && !cold) f32_warm_ms = r.time_ms;
        std::string note = accuracy;
        if (dtype != KvDtype::kF32 && !cold && f32_warm_ms > 0) {
          char buf[48];
          std::snprintf(buf, sizeof buf, "%sspeedup vs f32 %.2fx", note.empty() ? "" : "; ",
                        f32_warm_ms / r.time_ms);
          note += buf;
        }
        if (cold && !evicts_llc) {
          note += std::string(note.empty() ? "" : "; ") +
                  "not cold: the eviction read (2 triad arrays) is smaller than the LLC";
        }
        r.note = note;
        result.rows.push_back(r);
      }
    }
  }
  return result;
}

namespace {

struct DecodeOptions {
  std::string lens = "4096,32768", dtypes = "f32,bf16,f16";
  int64_t heads = 12, heads_kv = -1, head_dim = 64, triad_mib = 0;
  int repeats = 20;
  bool no_cold = false, json = false;
};

std::vector<KvDtype> ParseDtypes(const std::string& text) {
  std::vector<KvDtype> out;
  std::stringstream ss(text);
  for (std::string item; std::getline(ss, item, ',');) {
    Result<KvDtype> d = ParseKvDtype(item);
    if (d.ok()) out.push_back(*d);
  }
  return out;
}

CLI::Validator DtypeListCheck() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        std::stringstream ss(text);
        int n = 0;
        for (std::string item; std::getline(ss, item, ',');) {
          Result<KvDtype> d = ParseKvDtype(item);
          if (!d.ok()) return d.status().message();
          ++n;
        }
        return n > 0 && text.back() != ',' ? std::string()
                                           : "expected f32, bf16 or f16 separated by commas";
      },
      "LIST");
}

void RunBenchDecode(const DecodeOptions& o) {
  DecodeBenchConfig c;
  c.lens = bench::ParseIntList(o.lens, 1, kMaxLen);
  c.dtypes = ParseDtypes(o.dtypes);
  c.heads = o.heads;
  c.heads_kv = o.heads_kv == -1 ? o.heads : o.heads_kv;
  if (c.heads % c.heads_kv != 0) {
    throw UsageError("--heads-kv (" + std::to_string(c.heads_kv) + ") must divide --heads (" +
                     std::to_string(c.heads) + ")");
  }
  c.head_dim = o.head_dim;
  c.repeats = o.repeats;
  c.triad_mib = o.triad_mib;
  c.cold = !o.no_cold;
  const DecodePlan plan = PlanDecode(c);

  bench::BenchDocument doc("bench decode");
  doc.SetMemoryEstimate(plan.peak_bytes);
  nlohmann::ordered_json& set = doc.settings();
  set["len"] = c.lens;
  set["heads"] = c.heads;
  set["heads_kv"] = c.heads_kv;
  set["head_dim"] = c.head_dim;
  nlohmann::ordered_json dts = nlohmann::ordered_json::array();
  for (KvDtype d : c.dtypes) dts.push_back(std::string(KvDtypeName(d)));
  set["dtype"] = dts;
  set["repeats"] = c.repeats;
  set["cold_repeats"] = c.cold ? nlohmann::ordered_json(std::max(3, c.repeats / 4))
                               : nlohmann::ordered_json();
  set["cold"] = c.cold;
  set["triad_bytes_per_array"] = plan.triad_array_bytes;
  set["llc_bytes"] =
      plan.llc_bytes > 0 ? nlohmann::ordered_json(plan.llc_bytes) : nlohmann::ordered_json();
  doc.Define("rate", "GB/s: cache bytes read per step (2 * Hkv * KV * D * dtype bytes) / time");
  doc.Define("ratio", "decode GB/s over the same-run STREAM triad's GB/s");
  doc.Define("checks", "validated first against the double reference on the cache's values: "
                       "max abs error <= 16 u kappa max|v| (u = 2^-24)");

  bench::Say(o.json, "attnlab bench decode: KV lengths " + o.lens + ", " +
                         std::to_string(c.heads) + " heads (" + std::to_string(c.heads_kv) +
                         " KV), head_dim " + std::to_string(c.head_dim) + ", dtypes " +
                         o.dtypes + ", warm" + (c.cold ? " and cold" : "") + " steps, " +
                         std::to_string(c.repeats) + " repeats; triad " +
                         report::FormatBytes(3.0 * plan.triad_array_bytes) + " (" +
                         plan.triad_reason + "); memory ~" +
                         report::FormatBytes(double(plan.peak_bytes)));
  if (!o.json) {
    std::printf("# CPU: %s | threads: %d | %s | kernels %s\n", doc.cpu().c_str(),
                doc.threads(), doc.date().c_str(), doc.simd_kernels().c_str());
    std::printf("# GB/s: cache bytes read per step (2 * Hkv * KV * D * dtype bytes) / time; "
                "ratio: over the same-run triad; validated first against the double reference "
                "(tol = 16 u kappa max|v|)\n");
    bench::PrintTableHeader();
  }
  const DecodeResult res = DecodeRows(c);
  if (o.json) {
    doc.AddBaseline("triad", res.triad);
    for (const auto& r : res.rows) doc.AddRow(r);
    doc.Print();
  } else {
    bench::PrintTableRow(res.triad);
    for (const auto& r : res.rows) bench::PrintTableRow(r);
  }
}

}  // namespace

void RegisterBenchDecodeCommand(CLI::App& app) {
  CLI::App* bench = app.get_subcommand("bench");
  auto o = std::make_shared<DecodeOptions>();
  CLI::App* cmd = bench->add_subcommand(
      "decode", "one decode step over an f32 / bf16 / f16 KV cache vs a STREAM triad");
  cmd->fallthrough();
  cmd->add_option("--len", o->lens, "cache lengths, comma-separated (default 4096,32768)")
      ->check(bench::IntListCheck(1, kMaxLen, "cache lengths in [1, 2^24]"));
  cmd->add_option("--heads", o->heads, "query heads (default 12)")
      ->check(CLI::Range(int64_t{1}, int64_t{65536}));
  cmd->add_option("--heads-kv", o->heads_kv, "key/value heads, divides --heads (default --heads)")
      ->check(CLI::Range(int64_t{1}, int64_t{65536}));
  cmd->add_option("--head-dim", o->head_dim, "head dim (default 64)")
      ->check(CLI::Range(int64_t{1}, int64_t{4096}));
  cmd->add_option("--dtype", o->dtypes, "cache dtypes, comma-separated (default f32,bf16,f16)")
      ->check(DtypeListCheck());
  cmd->add_option("--repeats", o->repeats,
                  "timed warm steps per row, the median is reported (20); cold rows time "
                  "max(3, repeats / 4)")
      ->check(CLI::Range(1, 1000000));
  cmd->add_option("--triad-mib", o->triad_mib,
                  "MiB per triad array (default: the 3 arrays are 4x the last-level cache)")
      ->check(CLI::Range(int64_t{1}, int64_t{65536}));
  cmd->add_flag("--no-cold", o->no_cold, "skip the cold-cache rows");
  cmd->add_flag("--json", o->json, "print the bench JSON document (bench/README.md) instead");
  cmd->callback([o] { RunBenchDecode(*o); });
}

}  // namespace attnlab::cli
