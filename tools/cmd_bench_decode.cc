// `attnlab bench decode`: one decode step (a query per head against a KV cache) in fp32, bf16
// and fp16, as GB/s of cache read, against a STREAM triad measured in the same run
// (bench_decode.h states the method).
//
//   attnlab [--threads T] bench decode [--len 4096,8192,16384,32768] [--heads 12]
//       [--heads-kv H] [--head-dim 64] [--dtype f32,bf16,f16] [--repeats 20] [--triad-mib 512]
//       [--no-cold] [--json]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <random>
#include <sstream>

#include "attnlab/attention.h"
#include "attnlab/thread_pool.h"
#include "bench_decode.h"
#include "bench_util.h"
#include "commands.h"

namespace attnlab::cli {
namespace {

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

// Reads `buf` (1 GiB) so whatever was cached is evicted; returns a checksum so the compiler
// cannot drop the loop.
float Evict(const std::vector<float>& buf, ThreadPool& pool) {
  std::vector<float> partial(pool.num_threads(), 0.0f);
  const int64_t n = static_cast<int64_t>(buf.size()), tasks = pool.num_threads();
  pool.ParallelFor(tasks, [&](int64_t t, int thread) {
    float s = 0;
    for (int64_t i = n * t / tasks; i < n * (t + 1) / tasks; i += 16) s += buf[i];
    partial[thread] += s;
  });
  float s = 0;
  for (float x : partial) s += x;
  return s;
}

// Median ms of `repeats` runs of fn, with `before` (not timed) ahead of each.
template <typename F, typename G>
double MedianMsWith(int repeats, F&& fn, G&& before) {
  before();
  fn();  // warm-up
  std::vector<double> ms;
  for (int r = 0; r < repeats; ++r) {
    before();
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    ms.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  const size_t n = ms.size();
  return n % 2 ? ms[n / 2] : (ms[n / 2 - 1] + ms[n / 2]) / 2;
}

}  // namespace

std::vector<bench::TableRow> DecodeRows(const DecodeBenchConfig& c) {
  ThreadPool& pool = DefaultThreadPool();
  std::vector<bench::TableRow> rows;
  double triad_gbs = 0;
  {
    Triad t(c.triad_mib * (int64_t{1} << 20) / 4);
    bench::TableRow r;
    r.kernel = "triad";
    r.shape = "3 x " + std::to_string(c.triad_mib) + " MiB fp32";
    r.time_ms = bench::MedianMs(std::max(3, c.repeats / 4), [&] { t.Run(pool); });
    r.rate = triad_gbs = t.Bytes() / (r.time_ms * 1e6);
    r.unit = "GB/s";
    r.note = "STREAM triad, 12 bytes per element";
    rows.push_back(r);
  }
  std::vector<float> evict_buf;
  if (c.cold) evict_buf.assign((int64_t{1} << 30) / 4, 1.0f);
  volatile float sink = 0;
  for (const int64_t len : c.lens) {
    const DecodeShape s{c.heads, c.heads_kv, len, c.head_dim};
    const int64_t kn = s.heads_kv * len * s.head_dim, qn = s.heads_q * s.head_dim;
    std::mt19937_64 rng(static_cast<uint64_t>(len));
    std::normal_distribution<float> nd(0, 1);
    std::vector<float> q(qn), k(kn), v(kn);
    for (auto* x : {&q, &k, &v})
      for (float& e : *x) e = nd(rng);
    std::vector<float> out_f32(qn);
    double f32_warm_ms = 0;
    for (const KvDtype dtype : c.dtypes) {
      const int64_t eb = KvDtypeBytes(dtype);
      std::vector<uint8_t> kb(kn * eb), vb(kn * eb);
      ConvertToKvDtype(k.data(), kn, dtype, kb.data());
      ConvertToKvDtype(v.data(), kn, dtype, vb.data());
      const KvView kv{kb.data(), dtype, kn, len * s.head_dim, s.head_dim};
      const KvView vv{vb.data(), dtype, kn, len * s.head_dim, s.head_dim};
      std::vector<float> out(qn);
      DecodeParams dp;
      dp.pool = &pool;
      Check(AttentionDecode(s, dp, q, kv, vv, out), "decode");
      // Validation: the double reference on the values the cache holds.
      std::vector<float> kd(kn), vd(kn), ref(qn);
      ConvertFromKvDtype(kb.data(), kn, dtype, kd.data());
      ConvertFromKvDtype(vb.data(), kn, dtype, vd.data());
      AttentionShape as{1, s.heads_q, s.heads_kv, 1, len, s.head_dim};
      AttentionParams ap;
      ap.pool = &pool;
      Check(AttentionForwardReference(
                as, ap, ContiguousView<const float>(q.data(), 1, s.heads_q, 1, s.head_dim),
                ContiguousView<const float>(kd.data(), 1, s.heads_kv, len, s.head_dim),
                ContiguousView<const float>(vd.data(), 1, s.heads_kv, len, s.head_dim),
                ContiguousView<float>(ref.data(), 1, s.heads_q, 1, s.head_dim)),
            "reference");
      // Tolerance as bench_util.h: 16 u kappa max M, with M <= max |v|.
      const double scale = 1.0 / std::sqrt(double(s.head_dim));
      double cond = 0, vmax = 0, err = 0;
      const int64_t G = s.heads_q / s.heads_kv;
      for (int64_t h = 0; h < s.heads_q; ++h) {
        for (int64_t t = 0; t < len; ++t) {
          double a = 0;
          for (int64_t d = 0; d < s.head_dim; ++d) {
            a += std::abs(double(q[h * s.head_dim + d]) *
                          kd[((h / G) * len + t) * s.head_dim + d]);
          }
          cond = std::max(cond, scale * a);
        }
      }
      for (float x : vd) vmax = std::max(vmax, double(std::abs(x)));
      for (int64_t i = 0; i < qn; ++i) err = std::max(err, double(std::abs(out[i] - ref[i])));
      const double tol = bench::kC * bench::kU * (cond + std::log2(len + 1.0) + 1) * vmax;
      if (!(err <= tol)) {
        throw CommandError("validation failed for decode " + ShapeText(s, dtype, "") +
                           ": max abs error " + std::to_string(err) + " exceeds " +
                           std::to_string(tol));
      }
      // Accuracy cost against the fp32 cache.
      std::string accuracy;
      if (dtype == KvDtype::kF32) {
        out_f32 = out;
      } else if (!out_f32.empty()) {
        double d = 0, m = 0;
        for (int64_t i = 0; i < qn; ++i) {
          d = std::max(d, double(std::abs(out[i] - out_f32[i])));
          m = std::max(m, double(std::abs(out_f32[i])));
        }
        char buf[64];
        std::snprintf(buf, sizeof buf, "err vs f32 %.2e", d / m);
        accuracy = buf;
      }
      const double bytes = static_cast<double>(AttentionDecodeBytes(s, dtype));
      for (const bool cold : {false, true}) {
        if (cold && !c.cold) continue;
        bench::TableRow r;
        r.kernel = "decode";
        r.shape = ShapeText(s, dtype, cold ? "cold" : "warm");
        r.time_ms = MedianMsWith(
            c.repeats, [&] { Check(AttentionDecode(s, dp, q, kv, vv, out), "decode"); },
            [&] {
              if (cold) sink = sink + Evict(evict_buf, pool);
            });
        r.rate = bytes / (r.time_ms * 1e6);
        r.unit = "GB/s";
        r.baseline = "triad";
        r.ratio = r.rate / triad_gbs;
        r.max_err = err;
        r.tol = tol;
        if (dtype == KvDtype::kF32 && !cold) f32_warm_ms = r.time_ms;
        std::string note = accuracy;
        if (dtype != KvDtype::kF32 && !cold && f32_warm_ms > 0) {
          char buf[48];
          std::snprintf(buf, sizeof buf, "%sspeedup vs f32 %.2fx", note.empty() ? "" : "; ",
                        f32_warm_ms / r.time_ms);
          note += buf;
        }
        r.note = note;
        rows.push_back(r);
      }
    }
  }
  return rows;
}

namespace {

struct DecodeOptions {
  std::string lens = "4096,8192,16384,32768", dtypes = "f32,bf16,f16";
  int64_t heads = 12, heads_kv = -1, head_dim = 64, triad_mib = 512;
  int repeats = 20;
  bool no_cold = false, json = false;
};

std::vector<int64_t> ParseLens(const std::string& text) {
  std::vector<int64_t> xs;
  std::stringstream ss(text);
  for (std::string item; std::getline(ss, item, ',');) {
    char* end = nullptr;
    const long long x = std::strtoll(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || x < 1 || x > (int64_t{1} << 24)) {
      throw CommandError("--len: expected cache lengths in [1, 2^24] separated by commas, got '" +
                         text + "'");
    }
    xs.push_back(x);
  }
  if (xs.empty()) throw CommandError("--len: expected at least one length");
  return xs;
}

void RunBenchDecode(const DecodeOptions& o) {
  DecodeBenchConfig c;
  c.lens = ParseLens(o.lens);
  c.dtypes.clear();
  std::stringstream ss(o.dtypes);
  for (std::string item; std::getline(ss, item, ',');) {
    Result<KvDtype> d = ParseKvDtype(item);
    if (!d.ok()) throw CommandError("--dtype: " + d.status().message());
    c.dtypes.push_back(*d);
  }
  if (c.dtypes.empty()) throw CommandError("--dtype: expected at least one of f32, bf16, f16");
  if (o.heads < 1 || o.head_dim < 1 || o.repeats < 1) {
    throw CommandError("--heads, --head-dim and --repeats must be >= 1");
  }
  c.heads = o.heads;
  c.heads_kv = o.heads_kv == -1 ? o.heads : o.heads_kv;
  if (c.heads_kv < 1 || c.heads % c.heads_kv != 0) {
    throw CommandError("--heads-kv must divide --heads");
  }
  if (o.triad_mib < 1 || o.triad_mib > 8192) throw CommandError("--triad-mib must be in [1, 8192]");
  c.head_dim = o.head_dim;
  c.repeats = o.repeats;
  c.triad_mib = o.triad_mib;
  c.cold = !o.no_cold;
  const std::string cpu = bench::CpuModel();
  const int threads = DefaultThreadCount();
  if (!o.json) {
    std::printf("# attnlab bench decode | CPU: %s | threads: %d\n", cpu.c_str(), threads);
    std::printf("# GB/s: cache bytes read per step (2 * Hkv * KV * D * dtype bytes) / time; "
                "ratio: over the same-run triad; validated first against the double reference "
                "(tol = 16 u kappa max|v|)\n");
    bench::PrintTableHeader();
  }
  const std::vector<bench::TableRow> rows = DecodeRows(c);
  if (o.json) {
    nlohmann::ordered_json doc = {{"cpu", cpu}, {"threads", threads},
                                  {"results", nlohmann::ordered_json::array()}};
    for (const auto& r : rows) doc["results"].push_back(bench::TableRowJson(r));
    std::printf("%s\n", doc.dump(2).c_str());
  } else {
    for (const auto& r : rows) bench::PrintTableRow(r);
  }
}

}  // namespace

void RegisterBenchDecodeCommand(CLI::App& app) {
  CLI::App* bench = app.get_subcommand("bench");
  auto o = std::make_shared<DecodeOptions>();
  CLI::App* cmd = bench->add_subcommand(
      "decode", "one decode step over an f32 / bf16 / f16 KV cache vs a STREAM triad");
  cmd->fallthrough();
  cmd->add_option("--len", o->lens, "cache lengths, comma-separated (default 4096,...,32768)");
  cmd->add_option("--heads", o->heads, "query heads (default 12)");
  cmd->add_option("--heads-kv", o->heads_kv, "key/value heads, divides --heads (default --heads)");
  cmd->add_option("--head-dim", o->head_dim, "head dim (default 64)");
  cmd->add_option("--dtype", o->dtypes, "cache dtypes, comma-separated (default f32,bf16,f16)");
  cmd->add_option("--repeats", o->repeats, "timed steps per row; the median is reported (20)");
  cmd->add_option("--triad-mib", o->triad_mib, "MiB per triad array (default 512)");
  cmd->add_flag("--no-cold", o->no_cold, "skip the cold-cache rows");
  cmd->add_flag("--json", o->json, "print JSON instead of the table");
  cmd->callback([o] { RunBenchDecode(*o); });
}

}  // namespace attnlab::cli
