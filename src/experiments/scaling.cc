// scaling: how do time and memory grow with the sequence length N for materialised, flash,
// sliding-window and linear attention, and are the mission's documents' figures right?
//
// One causal attention forward (batch 1, H heads, head_dim D, fp32) per method and N, on random
// inputs, N = 1k, 2k, ... up to 128k (--quick: 1k..8k on a smaller shape):
//   materialised  scores S = scale * Q K^T for every head at once ([H, N, N] fp32, as a framework
//                 that returns the attention maps or saves them for autograd holds them), a
//                 causal row softmax in place, O = P V (sgemm); the textbook O(N^2) memory form
//                 (Vaswani et al. 2017). Runs while S fits a memory budget (min of a cap and half
//                 of MemAvailable); beyond, the report says how much it would need and where it
//                 runs out of this machine's memory.
//   flash         attnlab's tiled online-softmax kernel (Dao et al. 2022, arXiv:2205.14135;
//                 FlashAttention-2 arXiv:2307.08691): exact, O(N) extra memory, O(N^2) time.
//   window        the same kernel with a causal sliding window of w keys (Longformer, Beltagy et
//                 al. 2020, arXiv:2004.05150; Mistral's SWA): blocks outside the band are skipped,
//                 so time ~ N * w.
//   linear        causal linear attention, phi = elu + 1, chunked form (Katharopoulos et al.
//                 2020, arXiv:2006.16236): time and memory ~ N.
// Time: the kernel call alone (inputs allocated and filled before), the minimum over up to 3
// runs when one run is short. Memory: the process' peak resident bytes over allocating the
// inputs and outputs, filling them and running the kernel, minus the resident bytes before
// (core/process_memory.h resets the kernel's peak counter between points), so it counts Q, K,
// V, O and whatever the method allocates. Exponents: least squares of log y on log N over the
// points with N >= 2 * the smallest N (the smallest sizes are dominated by fixed costs).
// Timings are measurements, not a function of --seed: checks test exponents with wide margins.
//
// The documents' figures checked against the measurement: "at N = 65536 a single attention
// matrix in BF16 needs 8 GB (batch 1, heads 32)" and "for N > 100K one attention layer can take
// seconds even with FlashAttention".
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <new>
#include <string>
#include <vector>

#include "attnlab/attention.h"
#include "attnlab/linear_attention.h"
#include "attnlab/thread_pool.h"
#include "core/process_memory.h"
#include "engine/gemm.h"
#include "experiments/experiment.h"
#include "report/format_number.h"
#include "report/svg_plot.h"

namespace attnlab::experiments {
namespace {

constexpr char kName[] = "scaling";

struct Sizes {
  int64_t heads, head_dim;
  int64_t n_min, n_max;          // powers of two
  int64_t window;                // sliding window: keys i-w..i
  int64_t materialised_cap;      // bytes of S at most
};

// Default: H=4, D=64, N = 1k..128k (flash at 128k is ~9 TFLOP, about a minute on 2 cores);
// materialised up to 4 GiB of scores (N = 16k). Quick: H=2, D=64, N = 1k..8k, 256 MiB.
Sizes SizesFor(bool quick) {
  return quick ? Sizes{2, 64, 1024, 8192, 128, int64_t{256} << 20}
               : Sizes{4, 64, 1024, 131072, 512, int64_t{4} << 30};
}

enum class Method { kMaterialised, kFlash, kWindow, kLinear };
constexpr Method kMethods[] = {Method::kMaterialised, Method::kFlash, Method::kWindow,
                               Method::kLinear};

const char* MethodName(Method m) {
  switch (m) {
    case Method::kMaterialised: return "materialised";
    case Method::kFlash: return "flash";
    case Method::kWindow: return "window";
    case Method::kLinear: return "linear";
  }
  return "?";
}

struct Point {
  int64_t n = 0;
  bool ran = false;
  std::string skipped;  // why not run
  double seconds = 0;
  int64_t peak_bytes = 0;     // measured
  int64_t expected_bytes = 0; // the formula below
  double gflops = 0;          // flash and materialised: AttentionForwardFlops / seconds
};

// Bytes each method must hold: Q, K, V, O (4 * H * N * D floats) plus S for materialised
// ([H, N, N]), lse for flash ([H, N]), the denominators for linear ([H, N]).
int64_t ExpectedBytes(Method m, const Sizes& s, int64_t n) {
  const int64_t io = 4 * s.heads * n * s.head_dim * 4;
  switch (m) {
    case Method::kMaterialised: return io + s.heads * n * n * 4;
    case Method::kFlash:
    case Method::kWindow:
    case Method::kLinear: return io + s.heads * n * 4;
  }
  return io;
}

// Uniform [-1, 1) from a splitmix64 stream: fast enough for 10^8 values, the same for a seed.
void Fill(std::vector<float>& x, uint64_t seed) {
  uint64_t z = seed * 0x9E3779B97F4A7C15ull + 1;
  for (float& v : x) {
    z += 0x9E3779B97F4A7C15ull;
    uint64_t r = z;
    r = (r ^ (r >> 30)) * 0xBF58476D1CE4E5B9ull;
    r = (r ^ (r >> 27)) * 0x94D049BB133111EBull;
    r ^= r >> 31;
    v = static_cast<float>(static_cast<double>(r >> 40) / 8388608.0 - 1.0);
  }
}

// The materialised form, batch 1, Q/K/V/O contiguous [H, N, D]; s holds [H, N, N].
void MaterialisedForward(int64_t H, int64_t N, int64_t D, const float* q, const float* k,
                         const float* v, float* s, float* o, ThreadPool& pool) {
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  using internal::Sgemm;
  using internal::Trans;
  for (int64_t h = 0; h < H; ++h) {
    Sgemm(Trans::kNo, Trans::kYes, N, N, D, scale, q + h * N * D, D, k + h * N * D, D, 0.0f,
          s + h * N * N, N, &pool);
  }
  // Causal softmax per row; keys j > i get probability 0.
  pool.ParallelFor(H * N, [&](int64_t row, int) {
    float* r = s + row * N;
    const int64_t i = row % N;
    float m = -std::numeric_limits<float>::infinity();
    for (int64_t j = 0; j <= i; ++j) m = std::max(m, r[j]);
    float sum = 0;
    for (int64_t j = 0; j <= i; ++j) {
      r[j] = std::exp(r[j] - m);
      sum += r[j];
    }
    const float inv = 1.0f / sum;
    for (int64_t j = 0; j <= i; ++j) r[j] *= inv;
    std::fill(r + i + 1, r + N, 0.0f);
  });
  for (int64_t h = 0; h < H; ++h) {
    Sgemm(Trans::kNo, Trans::kNo, N, D, N, 1.0f, s + h * N * N, N, v + h * N * D, D, 0.0f,
          o + h * N * D, D, &pool);
  }
}

struct Inputs {
  std::vector<float> q, k, v, o, aux;  // aux: S (materialised), lse (flash), den (linear)
};

AttentionShape ShapeOf(const Sizes& s, int64_t n) {
  AttentionShape sh;
  sh.batch = 1;
  sh.heads_q = sh.heads_kv = s.heads;
  sh.len_q = sh.len_k = n;
  sh.head_dim = s.head_dim;
  return sh;
}

// Allocates and fills the inputs for one point (the output and the method's buffer zeroed).
void Allocate(Method m, const Sizes& s, int64_t n, uint64_t seed, Inputs& in) {
  const int64_t e = s.heads * n * s.head_dim;
  in.q.assign(e, 0.0f);
  in.k.assign(e, 0.0f);
  in.v.assign(e, 0.0f);
  in.o.assign(e, 0.0f);
  Fill(in.q, seed * 3 + 0);
  Fill(in.k, seed * 3 + 1);
  Fill(in.v, seed * 3 + 2);
  in.aux.assign(m == Method::kMaterialised ? s.heads * n * n : s.heads * n, 0.0f);
}

Status RunMethod(Method m, const Sizes& s, int64_t n, Inputs& in, ThreadPool& pool) {
  const AttentionShape sh = ShapeOf(s, n);
  const AttentionTensor q = ContiguousView<const float>(in.q.data(), 1, s.heads, n, s.head_dim);
  const AttentionTensor k = ContiguousView<const float>(in.k.data(), 1, s.heads, n, s.head_dim);
  const AttentionTensor v = ContiguousView<const float>(in.v.data(), 1, s.heads, n, s.head_dim);
  const AttentionTensorMut o = ContiguousView<float>(in.o.data(), 1, s.heads, n, s.head_dim);
  switch (m) {
    case Method::kMaterialised:
      MaterialisedForward(s.heads, n, s.head_dim, in.q.data(), in.k.data(), in.v.data(),
                          in.aux.data(), in.o.data(), pool);
      return Status::Ok();
    case Method::kFlash:
    case Method::kWindow: {
      AttentionParams p;
      p.mask.causal = true;
      if (m == Method::kWindow) p.mask.window_left = s.window - 1;
      p.pool = &pool;
      return AttentionForwardFlash(sh, p, q, k, v, o, in.aux);
    }
    case Method::kLinear: {
      LinearAttentionParams p;
      p.pool = &pool;
      return LinearAttentionForwardChunked(sh, p, q, k, v, o, in.aux);
    }
  }
  return Status::Internal("unknown method");
}

double Seconds(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Least-squares slope and intercept of log y on log x.
struct Fit {
  double exponent = std::numeric_limits<double>::quiet_NaN();
  double log_coefficient = 0;
  int points = 0;
};

Fit FitPowerLaw(const std::vector<double>& x, const std::vector<double>& y) {
  Fit f;
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  int n = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    if (!(x[i] > 0) || !(y[i] > 0)) continue;
    const double lx = std::log(x[i]), ly = std::log(y[i]);
    sx += lx, sy += ly, sxx += lx * lx, sxy += lx * ly;
    ++n;
  }
  f.points = n;
  if (n < 2) return f;
  const double den = n * sxx - sx * sx;
  if (!(std::fabs(den) > 0)) return f;
  f.exponent = (n * sxy - sx * sy) / den;
  f.log_coefficient = (sy - f.exponent * sx) / n;
  return f;
}

std::string Bytes(double b) { return report::FormatBytes(b); }

// Max |a - b| over two outputs.
double MaxDiff(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0;
  for (size_t i = 0; i < a.size(); ++i) d = std::max(d, std::fabs(double(a[i]) - double(b[i])));
  return d;
}

// Correctness before timing, at the smallest N: materialised and window-flash against the
// double-precision reference, linear chunked against the recurrent form.
Status ValidateKernels(const Sizes& s, uint64_t seed, ThreadPool& pool, ExperimentResult& r) {
  const int64_t n = s.n_min;
  const AttentionShape sh = ShapeOf(s, n);
  Inputs in;
  Allocate(Method::kMaterialised, s, n, seed, in);
  const AttentionTensor q = ContiguousView<const float>(in.q.data(), 1, s.heads, n, s.head_dim);
  const AttentionTensor k = ContiguousView<const float>(in.k.data(), 1, s.heads, n, s.head_dim);
  const AttentionTensor v = ContiguousView<const float>(in.v.data(), 1, s.heads, n, s.head_dim);
  std::vector<float> ref(in.o.size()), out(in.o.size());
  const auto view = [&](std::vector<float>& x) {
    return ContiguousView<float>(x.data(), 1, s.heads, n, s.head_dim);
  };
  // fp32 tolerance: a few ulps of the output's magnitude (|o| <= max|v| = 1) per accumulated
  // term is far too loose; errors of fp32 dot products of length D and N grow ~ sqrt(len) eps.
  const double tol = 64 * std::numeric_limits<float>::epsilon() *
                     std::sqrt(static_cast<double>(std::max(n, s.head_dim)));
  std::vector<std::pair<std::string, double>> errs;
  for (Method m : {Method::kMaterialised, Method::kWindow}) {
    AttentionParams p;
    p.mask.causal = true;
    if (m == Method::kWindow) p.mask.window_left = s.window - 1;
    p.pool = &pool;
    ATTNLAB_RETURN_IF_ERROR(AttentionForwardReference(sh, p, q, k, v, view(ref)));
    ATTNLAB_RETURN_IF_ERROR(RunMethod(m, s, n, in, pool));
    errs.push_back({MethodName(m), MaxDiff(ref, in.o)});
    if (m == Method::kMaterialised) in.aux.assign(s.heads * n, 0.0f);
  }
  {
    AttentionParams p;
    p.mask.causal = true;
    p.pool = &pool;
    ATTNLAB_RETURN_IF_ERROR(AttentionForwardReference(sh, p, q, k, v, view(ref)));
    ATTNLAB_RETURN_IF_ERROR(RunMethod(Method::kFlash, s, n, in, pool));
    errs.push_back({"flash", MaxDiff(ref, in.o)});
  }
  {
    LinearAttentionParams p;
    p.pool = &pool;
    ATTNLAB_RETURN_IF_ERROR(LinearAttentionForwardRecurrent(sh, p, q, k, v, view(ref)));
    ATTNLAB_RETURN_IF_ERROR(LinearAttentionForwardChunked(sh, p, q, k, v, view(out)));
    errs.push_back({"linear", MaxDiff(ref, out)});
  }
  std::string detail;
  bool ok = true;
  for (const auto& [name, e] : errs) {
    detail += (detail.empty() ? "" : ", ") + name + " " + Fmt(e, "%.2g");
    ok = ok && e <= tol;
  }
  r.AddCheck("every kernel matches its reference before it is timed", ok,
             "max |error| at N = " + std::to_string(n) + ": " + detail + " (tolerance " +
                 Fmt(tol, "%.2g") + ")");
  return Status::Ok();
}

Result<ExperimentResult> Run(const ExperimentOptions& o) {
  const Sizes s = SizesFor(o.quick);
  ThreadPool& pool = DefaultThreadPool();
  ExperimentResult r;
  ATTNLAB_RETURN_IF_ERROR(ValidateKernels(s, o.seed, pool, r));

  const bool peak_ok = ResetPeakResident();
  const int64_t available = MemAvailableBytes();
  const int64_t budget = available > 0 ? std::min(s.materialised_cap, available / 2)
                                       : s.materialised_cap;
  std::vector<int64_t> ns;
  for (int64_t n = s.n_min; n <= s.n_max; n *= 2) ns.push_back(n);

  std::vector<std::vector<Point>> points(std::size(kMethods));
  for (size_t mi = 0; mi < std::size(kMethods); ++mi) {
    const Method m = kMethods[mi];
    for (int64_t n : ns) {
      Point pt;
      pt.n = n;
      pt.expected_bytes = ExpectedBytes(m, s, n);
      if (m == Method::kMaterialised && s.heads * n * n * 4 > budget) {
        pt.skipped = "S would need " + Bytes(double(s.heads) * n * n * 4) + " > budget " +
                     Bytes(budget);
        points[mi].push_back(pt);
        continue;
      }
      ResetPeakResident();
      const int64_t before = ResidentBytes();
      Inputs in;
      try {
        Allocate(m, s, n, o.seed + n, in);
      } catch (const std::bad_alloc&) {
        pt.skipped = "out of memory allocating " + Bytes(pt.expected_bytes);
        points[mi].push_back(pt);
        continue;
      }
      double best = std::numeric_limits<double>::infinity();
      for (int rep = 0; rep < 3; ++rep) {
        const auto t0 = std::chrono::steady_clock::now();
        ATTNLAB_RETURN_IF_ERROR(RunMethod(m, s, n, in, pool));
        const double t = Seconds(t0);
        best = std::min(best, t);
        if (t > 0.5) break;  // long runs are stable enough once
      }
      pt.ran = true;
      pt.seconds = best;
      pt.peak_bytes = peak_ok ? std::max<int64_t>(0, PeakResidentBytes() - before) : 0;
      if (m == Method::kMaterialised || m == Method::kFlash) {
        pt.gflops = AttentionForwardFlops(ShapeOf(s, n), true) / best * 1e-9;
      }
      Progress(o, kName, "%-12s N=%-7lld %9.4f s  peak %s", MethodName(m),
               static_cast<long long>(n), best, Bytes(double(pt.peak_bytes)).c_str());
      points[mi].push_back(pt);
    }
  }

  // Fits over N >= 2 * n_min.
  struct MethodFit {
    Fit time, memory;
  };
  std::vector<MethodFit> fits(std::size(kMethods));
  nlohmann::json jm = nlohmann::json::array();
  for (size_t mi = 0; mi < std::size(kMethods); ++mi) {
    std::vector<double> x, t, mem;
    nlohmann::json jp = nlohmann::json::array();
    for (const Point& p : points[mi]) {
      jp.push_back({{"n", p.n},
                    {"ran", p.ran},
                    {"skipped", p.skipped},
                    {"seconds", p.ran ? nlohmann::json(p.seconds) : nlohmann::json()},
                    {"peak_bytes", p.ran ? nlohmann::json(p.peak_bytes) : nlohmann::json()},
                    {"expected_bytes", p.expected_bytes},
                    {"gflops", p.gflops > 0 ? nlohmann::json(p.gflops) : nlohmann::json()}});
      if (!p.ran || p.n < 2 * s.n_min) continue;
      x.push_back(double(p.n));
      t.push_back(p.seconds);
      mem.push_back(double(p.peak_bytes));
    }
    fits[mi] = {FitPowerLaw(x, t), FitPowerLaw(x, mem)};
    jm.push_back({{"method", MethodName(kMethods[mi])},
                  {"time_exponent", fits[mi].time.exponent},
                  {"memory_exponent", fits[mi].memory.exponent},
                  {"fit_points", fits[mi].time.points},
                  {"points", jp}});
  }
  const auto idx = [](Method m) { return static_cast<size_t>(m); };
  const MethodFit& fm = fits[idx(Method::kMaterialised)];
  const MethodFit& ff = fits[idx(Method::kFlash)];
  const MethodFit& fw = fits[idx(Method::kWindow)];
  const MethodFit& fl = fits[idx(Method::kLinear)];

  // Materialised: bytes per score entry (fitted on the largest run), the first N on the grid
  // whose S no longer fits this machine's memory (MemTotal-like: available now + what we use).
  double bytes_per_entry = std::numeric_limits<double>::quiet_NaN();
  int64_t largest_materialised = 0;
  for (const Point& p : points[idx(Method::kMaterialised)]) {
    if (!p.ran) continue;
    largest_materialised = p.n;
    const double io = double(ExpectedBytes(Method::kFlash, s, p.n));
    bytes_per_entry = (double(p.peak_bytes) - io) / (double(s.heads) * p.n * p.n);
  }
  int64_t oom_n = 0;
  for (int64_t n = s.n_min; n <= (int64_t{1} << 24); n *= 2) {
    if (available > 0 && double(s.heads) * n * n * 4 > double(available)) {
      oom_n = n;
      break;
    }
  }

  // The documents' figures.
  const double doc_per_head_bf16 = 65536.0 * 65536.0 * 2;  // bytes, one head
  // 2 bytes per BF16 entry; the measured fp32 bytes per entry (~4) confirm that S dominates.
  const double measured_bf16_32 = doc_per_head_bf16 * 32;
  const Point* flash_max = nullptr;
  for (const Point& p : points[idx(Method::kFlash)]) {
    if (p.ran) flash_max = &p;
  }
  // A 32-head, head_dim 128 layer at the largest N measured, from the measured throughput.
  double layer_seconds = NAN;
  if (flash_max) {
    AttentionShape big = ShapeOf(s, flash_max->n);
    big.heads_q = big.heads_kv = 32;
    big.head_dim = 128;
    layer_seconds = AttentionForwardFlops(big, true) / (flash_max->gflops * 1e9);
  }

  // Checks: exponents with wide margins. Memory is a property of the code, so its exponents are
  // checked at every size; time depends on what else the machine runs, so its exponents are
  // checks only at the default size (long runs average the noise out) and claims at --quick,
  // which CI runs on shared machines (no timing thresholds in tests).
  const auto in = [](double x, double lo, double hi) { return x >= lo && x <= hi; };
  const auto time_check = [&](std::string name, bool passed, std::string detail) {
    if (!o.quick) {
      r.AddCheck(std::move(name), passed, std::move(detail));
    } else {
      r.claims.push_back({name + " (timing: a check at the default size only)",
                          "the algorithm's cost model", name, detail, passed});
    }
  };
  time_check("flash time grows ~N^2", in(ff.time.exponent, 1.6, 2.4),
             "fitted exponent " + Fmt(ff.time.exponent, "%.2f"));
  r.AddCheck("flash memory grows ~N (no N x N buffer)", in(ff.memory.exponent, 0.6, 1.3),
             "fitted exponent " + Fmt(ff.memory.exponent, "%.2f"));
  r.AddCheck("materialised memory grows ~N^2", in(fm.memory.exponent, 1.7, 2.3),
             "fitted exponent " + Fmt(fm.memory.exponent, "%.2f") + " over " +
                 std::to_string(fm.memory.points) + " points");
  r.AddCheck("linear attention memory grows ~N", in(fl.memory.exponent, 0.6, 1.3),
             "fitted exponent " + Fmt(fl.memory.exponent, "%.2f"));
  time_check("linear attention time grows ~N", in(fl.time.exponent, 0.6, 1.35),
             "fitted exponent " + Fmt(fl.time.exponent, "%.2f"));
  time_check("sliding-window time grows ~N", in(fw.time.exponent, 0.6, 1.35),
             "fitted exponent " + Fmt(fw.time.exponent, "%.2f") + " (window " +
                 std::to_string(s.window) + ")");
  if (!peak_ok) {
    r.AddCheck("the peak-memory counter can be reset", false,
               "/proc/self/clear_refs refused: per-point peak memory is not measurable here");
  }

  r.claims.push_back(
      {"A single attention matrix at N = 65536 in BF16 needs 8 GB (batch 1, 32 heads)",
       "the mission's documents (3.5, computational complexity)",
       "8 GB for 32 heads",
       "measured " + Fmt(bytes_per_entry, "%.2f") + " bytes per fp32 score entry (4 in "
           "theory; peak at N = " + std::to_string(largest_materialised) +
           "), so the matrix dominates and one 65536 x 65536 BF16 head (2 bytes) is " +
           Bytes(doc_per_head_bf16) + " and 32 heads are " + Bytes(measured_bf16_32) +
           ": the 8 GB figure is one head's matrix, 32x too small for 32 heads",
       false});
  r.claims.push_back(
      {"For N > 100K one attention layer takes seconds even with FlashAttention",
       "the mission's documents (3.5)", "a layer's attention takes >= 1 s at N > 100k",
       flash_max ? "flash at N = " + std::to_string(flash_max->n) + " ran at " +
                       Fmt(flash_max->gflops, "%.0f") + " GFLOP/s here, so a 32-head, head_dim " +
                       "128 causal layer takes " + Fmt(layer_seconds, "%.0f") +
                       " s on this CPU (an accelerator 1000x faster would still take " +
                       Fmt(layer_seconds / 1000, "%.2f") + " s)"
                 : "not measured",
       flash_max && flash_max->n > 100000 && layer_seconds >= 1});
  r.claims.push_back({"FlashAttention's extra memory is linear in N", "Dao et al. 2022",
                      "memory exponent 1", "flash " + Fmt(ff.memory.exponent, "%.2f") +
                          ", materialised " + Fmt(fm.memory.exponent, "%.2f"),
                      in(ff.memory.exponent, 0.8, 1.2)});
  r.claims.push_back({"Linear attention is O(N) in time and memory",
                      "Katharopoulos et al. 2020", "exponents 1",
                      "time " + Fmt(fl.time.exponent, "%.2f") + ", memory " +
                          Fmt(fl.memory.exponent, "%.2f"),
                      in(fl.time.exponent, 0.8, 1.2) && in(fl.memory.exponent, 0.8, 1.2)});

  // Results and report.
  r.results = {{"heads", s.heads},
               {"head_dim", s.head_dim},
               {"window", s.window},
               {"causal", true},
               {"threads", pool.num_threads()},
               {"materialised_budget_bytes", budget},
               {"mem_available_bytes", available},
               {"materialised_out_of_memory_n", oom_n},
               {"bytes_per_score_entry", bytes_per_entry},
               {"doc_claim_bf16_32_heads_bytes", measured_bf16_32},
               {"layer_32x128_seconds_at_max_n", layer_seconds},
               {"methods", jm}};

  const std::string shape = std::to_string(s.heads) + " heads, head_dim " +
                            std::to_string(s.head_dim) + ", causal, fp32, " +
                            std::to_string(pool.num_threads()) + " threads";
  r.summary = "Fitted exponents of time / memory against N (" + shape + "): materialised " +
              Fmt(fm.time.exponent, "%.2f") + " / " + Fmt(fm.memory.exponent, "%.2f") +
              ", flash " + Fmt(ff.time.exponent, "%.2f") + " / " +
              Fmt(ff.memory.exponent, "%.2f") + ", window " + Fmt(fw.time.exponent, "%.2f") +
              " / " + Fmt(fw.memory.exponent, "%.2f") + ", linear " +
              Fmt(fl.time.exponent, "%.2f") + " / " + Fmt(fl.memory.exponent, "%.2f") +
              ". Materialised attention stops at N = " + std::to_string(largest_materialised) +
              " (budget " + Bytes(budget) + ")" +
              (oom_n ? " and would exceed this machine's available memory from N = " +
                           std::to_string(oom_n)
                     : std::string()) +
              "; flash reaches N = " + (flash_max ? std::to_string(flash_max->n) : "-") +
              " with memory linear in N. The documents' 8 GB at N = 65536 is one head's BF16 "
              "matrix: 32 heads need " + Bytes(measured_bf16_32) + ".";

  report::HtmlReport& h = r.html;
  h.AddSummaryFact("shape", shape);
  h.AddSummaryFact("flash exponents (time / memory)", Fmt(ff.time.exponent, "%.2f") + " / " +
                                                           Fmt(ff.memory.exponent, "%.2f"));
  h.AddSummaryFact("materialised memory exponent", Fmt(fm.memory.exponent, "%.2f"));
  h.AddSummaryFact("linear exponents (time / memory)", Fmt(fl.time.exponent, "%.2f") + " / " +
                                                            Fmt(fl.memory.exponent, "%.2f"));
  h.AddSection("scaling", "Time and memory against N");
  h.AddParagraph("One causal attention forward per method and N on random inputs (" + shape +
                 "). Time is the kernel alone; memory is the peak resident bytes over allocating "
                 "the inputs and running the kernel, minus what was resident before. Lines are "
                 "measurements; exponents are least-squares fits over N >= " +
                 std::to_string(2 * s.n_min) + ".");
  report::XyPlot tp, mp;
  tp.title = "Time per forward";
  mp.title = "Peak memory per forward";
  tp.x = mp.x = {"sequence length N", report::ScaleType::kLog10, {}, {}};
  tp.y = {"seconds", report::ScaleType::kLog10, {}, {}};
  mp.y = {"bytes", report::ScaleType::kLog10, {}, {}};
  tp.markers = mp.markers = true;
  std::vector<std::string> cols = {"N"};
  for (size_t mi = 0; mi < std::size(kMethods); ++mi) {
    report::Series st, sm;
    st.name = std::string(MethodName(kMethods[mi])) + " (slope " +
              Fmt(fits[mi].time.exponent, "%.2f") + ")";
    sm.name = std::string(MethodName(kMethods[mi])) + " (slope " +
              Fmt(fits[mi].memory.exponent, "%.2f") + ")";
    for (const Point& p : points[mi]) {
      if (!p.ran) continue;
      st.x.push_back(double(p.n));
      st.y.push_back(p.seconds);
      sm.x.push_back(double(p.n));
      sm.y.push_back(std::max(1.0, double(p.peak_bytes)));
    }
    tp.series.push_back(st);
    mp.series.push_back(sm);
    cols.push_back(std::string(MethodName(kMethods[mi])) + " s");
    cols.push_back(std::string(MethodName(kMethods[mi])) + " memory");
  }
  h.AddFigure(report::RenderLinePlot(tp), "Time against N, log-log; the slope is the exponent.",
              "time");
  h.AddFigure(report::RenderLinePlot(mp),
              "Peak memory against N, log-log; materialised holds [H, N, N] fp32 scores.",
              "memory");
  std::vector<std::vector<std::string>> rows;
  for (size_t i = 0; i < ns.size(); ++i) {
    std::vector<std::string> row = {std::to_string(ns[i])};
    for (size_t mi = 0; mi < std::size(kMethods); ++mi) {
      const Point& p = points[mi][i];
      row.push_back(p.ran ? Fmt(p.seconds, "%.3g") : "-");
      row.push_back(p.ran ? Bytes(double(p.peak_bytes)) : "-");
    }
    rows.push_back(row);
  }
  h.AddTable(cols, rows, "Measured time (s) and peak memory; '-': not run (materialised: over "
                         "the memory budget).");
  std::vector<std::vector<std::string>> erows;
  for (size_t mi = 0; mi < std::size(kMethods); ++mi) {
    erows.push_back({MethodName(kMethods[mi]), Fmt(fits[mi].time.exponent, "%.2f"),
                     Fmt(fits[mi].memory.exponent, "%.2f"),
                     std::to_string(fits[mi].time.points)});
  }
  h.AddTable({"method", "time exponent", "memory exponent", "points fitted"}, erows,
             "Fitted exponents (theory: materialised 2 / 2, flash 2 / 1, window 1 / 1, linear "
             "1 / 1).");
  std::vector<std::vector<std::string>> mrows;
  for (size_t mi = 0; mi < std::size(kMethods); ++mi) {
    for (const Point& p : points[mi]) {
      if (p.ran && p.n == largest_materialised) {
        mrows.push_back({MethodName(kMethods[mi]), std::to_string(p.n),
                         Bytes(double(p.peak_bytes)), Bytes(double(p.expected_bytes)),
                         Fmt(double(p.peak_bytes) / double(p.expected_bytes), "%.2f")});
      }
    }
  }
  h.AddSection("memory", "Where the memory goes");
  h.AddTable({"method", "N", "measured", "expected", "ratio"}, mrows,
             "Measured peak against the bytes each method must hold (Q, K, V, O plus S for "
             "materialised, lse or denominators otherwise) at the largest N materialised ran.");
  h.AddParagraph(
      "Materialised attention's score matrix costs " + Fmt(bytes_per_entry, "%.2f") +
      " bytes per entry measured (4 in fp32). With " + std::to_string(s.heads) +
      " heads it would exceed the " + Bytes(available) + " available on this machine from N = " +
      (oom_n ? std::to_string(oom_n) : std::string("-")) +
      ". The documents' figure: a 65536 x 65536 BF16 matrix is " + Bytes(doc_per_head_bf16) +
      " per head, so with 32 heads " + Bytes(measured_bf16_32) + ", not 8 GB.");
  return r;
}

}  // namespace

Experiment ScalingExperiment() {
  return {kName,
          "time and peak memory against N (1k-128k) for materialised, flash, sliding-window and "
          "linear attention, with fitted exponents",
          Run};
}

}  // namespace attnlab::experiments
