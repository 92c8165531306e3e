// scaling: how do time and memory grow with the sequence length N for materialised, flash,
// sliding-window and linear attention, and are the widely quoted cost figures right?
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
// runs when one run is short. Memory, three numbers per point:
//   counted  the bytes this file allocates for the method (Q, K, V, O and its own buffer: S for
//            materialised, lse for flash and window, the denominators for linear), each on fresh
//            pages of its own (PageBuffer: mmap / munmap, never malloc's heap, so no allocator
//            threshold or arena decides whether a reused block shows up in the reading);
//   held     measured: the process' resident bytes after the kernel returned (its buffers still
//            alive, malloc_trim'd), minus before the inputs were allocated, read by walking the
//            page tables (/proc/self/smaps_rollup: exact, unlike the batched RSS counters);
//   peak     measured: the peak resident bytes over allocating, filling and running (VmHWM,
//            reset between points by core/process_memory.h) minus the resident bytes before;
//            peak - held is the kernel's transient scratch.
// The memory checks compare `held` with the exact formula (materialised: Q, K, V, O plus
// 4 H N^2 bytes of scores; flash, window, linear: Q, K, V, O plus 4 H N bytes) within a slack
// derived from malloc's thresholds (HeldSlack: what it may keep resident for the libraries), at
// every N measured, so the verdict cannot flip with the allocator, the load or a two-point fit.
// (Fitting exponents to peaks did: Q, K, V, O alone put materialised's at 1.85 between N = 2k
// and 4k, against a bound of 1.7, and the threads' scratch put linear's at 0.5 on 64 threads.)
// Exponents: least squares of log y on log N; time over the points with N >= 2 * the smallest N
// (the smallest sizes are dominated by fixed costs), memory over every point (it is exact).
// Timings are measurements, not a function of --seed: checks test exponents with wide margins.
//
// The documents' figures checked against the measurement: "at N = 65536 a single attention
// matrix in BF16 needs 8 GB (batch 1, heads 32)" and "for N > 100K one attention layer can take
// seconds even with FlashAttention".
#include <malloc.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <new>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "attnlab/attention.h"
#include "attnlab/linear_attention.h"
#include "attnlab/thread_pool.h"
#include "core/process_memory.h"
#include "engine/gemm.h"
#include "experiments/experiment.h"
#include "experiments/experiment_report.h"
#include "experiments/recall_probe.h"
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
  int64_t peak_bytes = 0;     // measured: peak resident growth (transient scratch included)
  int64_t held_bytes = 0;     // measured: resident growth with the buffers alive, after the run
  int64_t counted_bytes = 0;  // allocated by this file (page-rounded), = the formula below
  int64_t io_bytes = 0;       // the Q, K, V, O part of counted_bytes
  int64_t own_bytes = 0;      // the method's own buffer: 4 H N^2 (materialised) or 4 H N
  int64_t expected_bytes = 0; // the formula: io_bytes + own_bytes before page rounding
  double gflops = 0;          // flash and materialised: AttentionForwardFlops / seconds
  // The memory the method holds beyond Q, K, V, O, measured (held - io_bytes).
  int64_t OwnHeld() const { return held_bytes - io_bytes; }
};

// The method's own buffer in bytes: S for materialised ([H, N, N]), lse for flash and window
// ([H, N]), the denominators for linear ([H, N]).
int64_t OwnBytes(Method m, const Sizes& s, int64_t n) {
  return m == Method::kMaterialised ? s.heads * n * n * 4 : s.heads * n * 4;
}

// Bytes each method must hold: Q, K, V, O (4 * H * N * D floats) plus its own buffer.
int64_t ExpectedBytes(Method m, const Sizes& s, int64_t n) {
  return 4 * s.heads * n * s.head_dim * 4 + OwnBytes(m, s, n);
}

// How far the measured held memory may be from the counted buffers: what the allocator keeps
// resident for the libraries after malloc_trim. Run() fixes glibc's thresholds at their
// defaults (mallopt: 128 KiB, which also stops glibc from raising them as large blocks are
// freed), so blocks of 128 KiB or more go straight back to the kernel and every thread's arena
// keeps at most 128 KiB of free top (malloc_trim does not trim the threads' arenas); plus 1 MiB
// for the main heap, the libraries' caches and stack pages. Measured: 0-100 KiB on 2 threads,
// <= 550 KiB on 64; the score matrix it must tell apart is 8 MiB at the smallest quick point.
constexpr int64_t kMallocThreshold = int64_t{128} << 10;
int64_t HeldSlack(int threads) { return (int64_t{1} << 20) + (threads + 1) * kMallocThreshold; }

// An fp32 buffer on fresh anonymous pages of its own (mmap; munmap when destroyed), every page
// written when it is made. Nothing of it comes from or goes back to malloc's heap, so the
// resident-memory readings count it exactly: glibc would serve a freed-and-reused block from
// memory that is already resident, or not, depending on its mmap threshold (which moves as
// blocks are freed) and on the arena. Move-only.
class PageBuffer {
 public:
  PageBuffer() = default;
  ~PageBuffer() { Release(); }
  PageBuffer(PageBuffer&& o) noexcept { *this = std::move(o); }
  PageBuffer& operator=(PageBuffer&& o) noexcept {
    std::swap(data_, o.data_);
    std::swap(size_, o.size_);
    std::swap(bytes_, o.bytes_);
    return *this;
  }
  PageBuffer(const PageBuffer&) = delete;
  PageBuffer& operator=(const PageBuffer&) = delete;

  // n floats, each `value` (every page touched). Throws std::bad_alloc when mmap refuses.
  void Assign(int64_t n, float value) {
    Release();
    if (n <= 0) return;
    const int64_t page = sysconf(_SC_PAGESIZE) > 0 ? sysconf(_SC_PAGESIZE) : 4096;
    const int64_t bytes = (n * int64_t{sizeof(float)} + page - 1) / page * page;
    void* p = mmap(nullptr, static_cast<size_t>(bytes), PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    data_ = static_cast<float*>(p);
    size_ = n;
    bytes_ = bytes;
    std::fill(data_, data_ + n, value);
  }
  float* data() { return data_; }
  const float* data() const { return data_; }
  int64_t size() const { return size_; }
  int64_t bytes() const { return bytes_; }  // mapped: size * 4 rounded up to pages
  float* begin() { return data_; }
  float* end() { return data_ + size_; }
  const float* begin() const { return data_; }
  const float* end() const { return data_ + size_; }
  std::span<float> span() { return {data_, static_cast<size_t>(size_)}; }

 private:
  void Release() {
    if (data_) munmap(data_, static_cast<size_t>(bytes_));
    data_ = nullptr;
    size_ = bytes_ = 0;
  }
  float* data_ = nullptr;
  int64_t size_ = 0, bytes_ = 0;
};

// The process' resident bytes now, exactly: "Rss:" of /proc/self/smaps_rollup is summed over
// the page tables (Linux >= 4.14), while /proc/self/statm and VmHWM read RSS counters that the
// kernel updates in per-CPU or per-thread batches (off by up to a few pages per CPU). Falls back
// to ResidentBytes(). Frees malloc's free pages first, so the heap's leftovers do not count.
int64_t HeldResidentBytes() {
  malloc_trim(0);
  if (FILE* f = std::fopen("/proc/self/smaps_rollup", "r")) {
    char line[256];
    long long kb = -1;
    while (std::fgets(line, sizeof line, f)) {
      if (std::sscanf(line, "Rss: %lld kB", &kb) == 1) break;
    }
    std::fclose(f);
    if (kb >= 0) return static_cast<int64_t>(kb) * 1024;
  }
  return ResidentBytes();
}

// Uniform [-1, 1) from a splitmix64 stream: fast enough for 10^8 values, the same for a seed.
template <typename Buffer>
void Fill(Buffer& x, uint64_t seed) {
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
  PageBuffer q, k, v, o, aux;  // aux: S (materialised), lse (flash), den (linear)
  int64_t IoBytes() const { return q.bytes() + k.bytes() + v.bytes() + o.bytes(); }
  int64_t Bytes() const { return IoBytes() + aux.bytes(); }
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
  in.q.Assign(e, 0.0f);
  in.k.Assign(e, 0.0f);
  in.v.Assign(e, 0.0f);
  in.o.Assign(e, 0.0f);
  Fill(in.q, seed * 3 + 0);
  Fill(in.k, seed * 3 + 1);
  Fill(in.v, seed * 3 + 2);
  in.aux.Assign(OwnBytes(m, s, n) / 4, 0.0f);
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
      return AttentionForwardFlash(sh, p, q, k, v, o, in.aux.span());
    }
    case Method::kLinear: {
      LinearAttentionParams p;
      p.pool = &pool;
      return LinearAttentionForwardChunked(sh, p, q, k, v, o, in.aux.span());
    }
  }
  return Status::Internal("unknown method");
}

// A power law y ~ N^exponent fitted by least squares of log y on log N (LogLogSlope), over the
// points with x, y > 0.
struct Fit {
  double exponent = std::numeric_limits<double>::quiet_NaN();
  int points = 0;  // points used
};

Fit FitPowerLaw(const std::vector<double>& x, const std::vector<double>& y) {
  Fit f;
  for (size_t i = 0; i < std::min(x.size(), y.size()); ++i) f.points += x[i] > 0 && y[i] > 0;
  f.exponent = LogLogSlope(x, y);
  return f;
}

std::string Bytes(double b) {
  return b < 0 ? "-" + report::FormatBytes(-b) : report::FormatBytes(b);
}

// Max |a - b| over two outputs.
template <typename A, typename B>
double MaxDiff(const A& a, const B& b) {
  double d = 0;
  const int64_t n = static_cast<int64_t>(a.size());
  for (int64_t i = 0; i < n; ++i) {
    d = std::max(d, std::fabs(double(a.data()[i]) - double(b.data()[i])));
  }
  return d;
}

// Each kernel's largest |error| against its reference at one N, and the tolerance.
struct KernelValidation {
  int64_t n = 0;
  double tol = 0;
  std::vector<std::pair<std::string, double>> errs;  // (method, max |error|)
};

// Correctness before timing, at the smallest N: materialised and window-flash against the
// double-precision reference, linear chunked against the recurrent form.
Result<KernelValidation> ValidateKernels(const Sizes& s, uint64_t seed, ThreadPool& pool) {
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
    if (m == Method::kMaterialised) in.aux.Assign(s.heads * n, 0.0f);
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
  return KernelValidation{n, tol, std::move(errs)};
}

// The memory check of one method, from the exact `held` reading of every point it ran:
//   held - (Q, K, V, O) = its own buffer's formula (4 H N^2 materialised, 4 H N otherwise)
//   within HeldSlack, at every N (materialised needs >= 2 points: one cannot show growth);
// and for the O(N) methods also that the transient scratch (peak - held) does not grow like an
// N x N buffer: from the smallest to the largest N it grows by less than 1/8 of what an
// [H, N, N] fp32 matrix would (the peak reading is counter-based, so it gets a wide margin).
struct MemoryVerdict {
  bool passed = true;
  std::string detail;
};

MemoryVerdict MemoryCheck(Method m, const Sizes& s, const std::vector<Point>& pts, int threads) {
  MemoryVerdict v;
  const int64_t slack = HeldSlack(threads);
  std::vector<const Point*> ran;
  for (const Point& p : pts) {
    if (p.ran) ran.push_back(&p);
  }
  if (ran.size() < (m == Method::kMaterialised ? 2u : 1u)) {
    v.passed = false;
    v.detail = std::to_string(ran.size()) + " sizes ran: too few to say how memory grows";
    return v;
  }
  int64_t worst = 0;  // largest |held own - formula|
  for (const Point* p : ran) {
    const int64_t dev = std::llabs(p->OwnHeld() - p->own_bytes);
    worst = std::max(worst, dev);
    if (dev > slack) v.passed = false;
  }
  const Point& lo = *ran.front();
  const Point& hi = *ran.back();
  v.detail = std::string("held beyond Q, K, V, O (measured) vs ") +
             (m == Method::kMaterialised ? "4 H N^2 bytes of scores" : "4 H N bytes") + " at " +
             std::to_string(ran.size()) + " sizes: N = " + std::to_string(lo.n) + " " +
             Bytes(double(lo.OwnHeld())) + " vs " + Bytes(double(lo.own_bytes)) + ", N = " +
             std::to_string(hi.n) + " " + Bytes(double(hi.OwnHeld())) + " vs " +
             Bytes(double(hi.own_bytes)) + "; largest deviation " + Bytes(double(worst)) +
             " (allowed " + Bytes(double(slack)) + ")";
  if (m != Method::kMaterialised && ran.size() >= 2 && hi.peak_bytes > 0) {
    const double grew =
        double(hi.peak_bytes - hi.held_bytes) - double(lo.peak_bytes - lo.held_bytes);
    const double nxn = 4.0 * s.heads * (double(hi.n) * hi.n - double(lo.n) * lo.n);
    if (!(grew < nxn / 8)) v.passed = false;
    v.detail += "; transient scratch (peak - held) grew " + Bytes(std::max(0.0, grew)) +
                " from N = " + std::to_string(lo.n) + " to " + std::to_string(hi.n) +
                " (an N x N buffer: " + Bytes(nxn) + ", allowed 1/8 of it)";
  }
  return v;
}

// Time fits over N >= 2 * n_min (the smallest sizes are dominated by fixed costs); memory fits
// (held: exact) over every point.
struct MethodFit {
  Fit time, memory, own_memory, peak_memory;
};

MethodFit FitMethod(const std::vector<Point>& pts, const Sizes& s) {
  std::vector<double> xt, t, xm, held, own, peak;
  for (const Point& p : pts) {
    if (!p.ran) continue;
    xm.push_back(double(p.n));
    held.push_back(double(p.held_bytes));
    own.push_back(double(p.OwnHeld()));
    peak.push_back(double(p.peak_bytes));
    if (p.n < 2 * s.n_min) continue;
    xt.push_back(double(p.n));
    t.push_back(p.seconds);
  }
  return {FitPowerLaw(xt, t), FitPowerLaw(xm, held), FitPowerLaw(xm, own), FitPowerLaw(xm, peak)};
}

// ---- What the report stages read: every point measured, the fits and the numbers derived.
struct Measured {
  Sizes s;
  bool quick = false;
  int threads = 0;                 // the pool's
  KernelValidation validation;     // at the smallest N, before any timing
  bool peak_ok = false;            // the peak-memory counter could be reset
  int64_t available = 0;           // MemAvailable at the start (0 when unknown)
  int64_t budget = 0;              // bytes of S that materialised may allocate
  std::vector<int64_t> ns;         // n_min, 2 n_min, ..., n_max
  std::vector<std::vector<Point>> points;  // [method (kMethods order)][ns]
  std::vector<MethodFit> fits;             // [method]
  // Materialised: bytes per score entry (held, at the largest run), the largest N it ran, and
  // the first N on the grid whose S no longer fits this machine's available memory (0: none).
  double bytes_per_entry = std::numeric_limits<double>::quiet_NaN();
  int64_t largest_materialised = 0, oom_n = 0;
  // The documents' figures: one 65536 x 65536 BF16 head's matrix, and 32 of them.
  double doc_per_head_bf16 = 0, measured_bf16_32 = 0;
  std::optional<Point> flash_max;  // flash's largest run
  double layer_seconds = NAN;      // a 32-head, head_dim 128 layer at flash_max's N and throughput

  const std::vector<Point>& PointsOf(Method m) const { return points[static_cast<size_t>(m)]; }
  const MethodFit& FitOf(Method m) const { return fits[static_cast<size_t>(m)]; }
};

// One method at one N: allocate and fill, time the kernel (the minimum over up to 3 runs when
// one is short), read the held and peak memory. A point that does not fit is skipped with why.
Status MeasurePoint(const ExperimentOptions& o, Method m, int64_t n, ThreadPool& pool, const Measured& ms,
                    Point& pt) {
  const Sizes& s = ms.s;
  pt.n = n;
  pt.expected_bytes = ExpectedBytes(m, s, n);
  pt.own_bytes = OwnBytes(m, s, n);
  if (m == Method::kMaterialised && s.heads * n * n * 4 > ms.budget) {
    pt.skipped = "S would need " + Bytes(double(s.heads) * n * n * 4) + " > budget " + Bytes(ms.budget);
    return Status::Ok();
  }
  ResetPeakResident();
  const int64_t held_before = HeldResidentBytes();
  const int64_t before = ResidentBytes();
  Inputs in;
  try {
    Allocate(m, s, n, o.seed + n, in);
  } catch (const std::bad_alloc&) {
    pt.skipped = "out of memory allocating " + Bytes(pt.expected_bytes);
    return Status::Ok();
  }
  double best = std::numeric_limits<double>::infinity();
  for (int rep = 0; rep < 3; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    ATTNLAB_RETURN_IF_ERROR(RunMethod(m, s, n, in, pool));
    const double t = SecondsSince(t0);
    best = std::min(best, t);
    if (t > 0.5) break;  // long runs are stable enough once
  }
  pt.ran = true;
  pt.seconds = best;
  pt.peak_bytes = ms.peak_ok ? std::max<int64_t>(0, PeakResidentBytes() - before) : 0;
  pt.held_bytes = HeldResidentBytes() - held_before;
  pt.counted_bytes = in.Bytes();
  pt.io_bytes = in.IoBytes();
  if (m == Method::kMaterialised || m == Method::kFlash) {
    pt.gflops = AttentionForwardFlops(ShapeOf(s, n), true) / best * 1e-9;
  }
  Progress(o, kName, "%-12s N=%-7lld %9.4f s  held %s (counted %s)  peak %s", MethodName(m),
           static_cast<long long>(n), best, Bytes(double(pt.held_bytes)).c_str(),
           Bytes(double(pt.counted_bytes)).c_str(), Bytes(double(pt.peak_bytes)).c_str());
  return Status::Ok();
}

// Validates the kernels, then measures every method at every N.
Status MeasureAll(const ExperimentOptions& o, ThreadPool& pool, Measured& m) {
  const Sizes& s = m.s;
  ATTNLAB_ASSIGN_OR_RETURN(m.validation, ValidateKernels(s, o.seed, pool));
  m.peak_ok = ResetPeakResident();
  m.available = MemAvailableBytes();
  m.budget = m.available > 0 ? std::min(s.materialised_cap, m.available / 2) : s.materialised_cap;
  for (int64_t n = s.n_min; n <= s.n_max; n *= 2) m.ns.push_back(n);
  m.points.assign(std::size(kMethods), {});
  for (size_t mi = 0; mi < std::size(kMethods); ++mi) {
    for (int64_t n : m.ns) {
      Point pt;
      ATTNLAB_RETURN_IF_ERROR(MeasurePoint(o, kMethods[mi], n, pool, m, pt));
      m.points[mi].push_back(pt);
    }
  }
  return Status::Ok();
}

// The fits, materialised's bytes per entry and out-of-memory N, and the documents' figures.
void Derive(Measured& m) {
  const Sizes& s = m.s;
  for (size_t mi = 0; mi < std::size(kMethods); ++mi) m.fits.push_back(FitMethod(m.points[mi], s));
  for (const Point& p : m.PointsOf(Method::kMaterialised)) {
    if (!p.ran) continue;
    m.largest_materialised = p.n;
    m.bytes_per_entry = double(p.OwnHeld()) / (double(s.heads) * p.n * p.n);
  }
  for (int64_t n = s.n_min; n <= (int64_t{1} << 24); n *= 2) {
    if (m.available > 0 && double(s.heads) * n * n * 4 > double(m.available)) {
      m.oom_n = n;
      break;
    }
  }
  m.doc_per_head_bf16 = 65536.0 * 65536.0 * 2;  // bytes, one head
  // 2 bytes per BF16 entry; the measured fp32 bytes per entry (~4) confirm that S dominates.
  m.measured_bf16_32 = m.doc_per_head_bf16 * 32;
  for (const Point& p : m.PointsOf(Method::kFlash)) {
    if (p.ran) m.flash_max = p;
  }
  // A 32-head, head_dim 128 layer at the largest N measured, from the measured throughput.
  if (m.flash_max) {
    AttentionShape big = ShapeOf(s, m.flash_max->n);
    big.heads_q = big.heads_kv = 32;
    big.head_dim = 128;
    m.layer_seconds = AttentionForwardFlops(big, true) / (m.flash_max->gflops * 1e9);
  }
}

// ---- Checks and claims. Memory is a property of the code, so it is checked at every size,
// point by point against the exact formula (MemoryCheck); time depends on what else the machine
// runs, so its exponents are checks only at the default size (long runs average the noise out)
// and claims at --quick, which CI runs on shared machines (no timing thresholds in tests).
bool InRange(double x, double lo, double hi) { return x >= lo && x <= hi; }

// The time-exponent verdicts, in kMethods' report order: flash, linear, window.
std::vector<Check> TimeVerdicts(const Measured& m) {
  const MethodFit &ff = m.FitOf(Method::kFlash), &fw = m.FitOf(Method::kWindow), &fl = m.FitOf(Method::kLinear);
  return {{"flash time grows ~N^2", InRange(ff.time.exponent, 1.6, 2.4),
           "fitted exponent " + Fmt(ff.time.exponent, "%.2f")},
          {"linear attention time grows ~N", InRange(fl.time.exponent, 0.6, 1.35),
           "fitted exponent " + Fmt(fl.time.exponent, "%.2f")},
          {"sliding-window time grows ~N", InRange(fw.time.exponent, 0.6, 1.35),
           "fitted exponent " + Fmt(fw.time.exponent, "%.2f") + " (window " + std::to_string(m.s.window) + ")"}};
}

Status AddChecks(const Measured& m, ExperimentResult& r) {
  const KernelValidation& kv = m.validation;
  std::string detail;
  bool ok = true;
  for (const auto& [name, e] : kv.errs) {
    detail += (detail.empty() ? "" : ", ") + name + " " + Fmt(e, "%.2g");
    ok = ok && e <= kv.tol;
  }
  r.AddCheck("every kernel matches its reference before it is timed", ok,
             "max |error| at N = " + std::to_string(kv.n) + ": " + detail + " (tolerance " +
                 Fmt(kv.tol, "%.2g") + ")");
  const std::vector<Check> time = TimeVerdicts(m);
  if (!m.quick) r.checks.push_back(time[0]);
  const MethodFit &fm = m.FitOf(Method::kMaterialised), &ff = m.FitOf(Method::kFlash),
                  &fw = m.FitOf(Method::kWindow), &fl = m.FitOf(Method::kLinear);
  const auto memory = [&](Method me) { return MemoryCheck(me, m.s, m.PointsOf(me), m.threads); };
  {
    const MemoryVerdict v = memory(Method::kFlash);
    r.AddCheck("flash memory grows ~N (no N x N buffer)", v.passed,
               v.detail + "; held-memory exponent " + Fmt(ff.memory.exponent, "%.2f"));
  }
  {
    const MemoryVerdict v = memory(Method::kMaterialised);
    r.AddCheck("materialised memory grows ~N^2", v.passed,
               v.detail + "; exponent of the measured score memory " +
                   Fmt(fm.own_memory.exponent, "%.2f") + " over " +
                   std::to_string(fm.own_memory.points) + " points (with Q, K, V, O " +
                   Fmt(fm.memory.exponent, "%.2f") + ")");
  }
  {
    const MemoryVerdict v = memory(Method::kLinear);
    r.AddCheck("linear attention memory grows ~N", v.passed,
               v.detail + "; held-memory exponent " + Fmt(fl.memory.exponent, "%.2f"));
  }
  {
    const MemoryVerdict v = memory(Method::kWindow);
    r.AddCheck("sliding-window memory grows ~N", v.passed,
               v.detail + "; held-memory exponent " + Fmt(fw.memory.exponent, "%.2f"));
  }
  if (!m.quick) r.checks.push_back(time[1]), r.checks.push_back(time[2]);
  if (!m.peak_ok) {
    r.AddCheck("the peak-memory counter can be reset", false,
               "/proc/self/clear_refs refused: per-point peak memory is not measurable here");
  }
  return Status::Ok();
}

Status AddClaims(const Measured& m, ExperimentResult& r) {
  if (m.quick) {
    for (const Check& c : TimeVerdicts(m)) {
      r.AddClaim(c.name + " (timing: a check at the default size only)", "the algorithm's cost model", c.name,
                 c.detail, c.passed);
    }
  }
  const MethodFit &fm = m.FitOf(Method::kMaterialised), &ff = m.FitOf(Method::kFlash),
                  &fl = m.FitOf(Method::kLinear);
  const std::optional<Point>& flash_max = m.flash_max;
  r.claims.push_back(
      {"A single attention matrix at N = 65536 in BF16 needs 8 GB (batch 1, 32 heads)",
       "a widely quoted cost figure (8 GB for one N = 65536 attention matrix)",
       "8 GB for 32 heads",
       "measured " + Fmt(m.bytes_per_entry, "%.2f") + " bytes per fp32 score entry (4 in "
           "theory; held at N = " + std::to_string(m.largest_materialised) +
           "), so the matrix dominates and one 65536 x 65536 BF16 head (2 bytes) is " +
           Bytes(m.doc_per_head_bf16) + " and 32 heads are " + Bytes(m.measured_bf16_32) +
           ": the 8 GB figure is one head's matrix, 32x too small for 32 heads",
       false});
  r.claims.push_back(
      {"For N > 100K one attention layer takes seconds even with FlashAttention",
       "a widely quoted cost figure", "a layer's attention takes >= 1 s at N > 100k",
       flash_max ? "flash at N = " + std::to_string(flash_max->n) + " ran at " +
                       Fmt(flash_max->gflops, "%.0f") + " GFLOP/s here, so a 32-head, head_dim " +
                       "128 causal layer takes " + Fmt(m.layer_seconds, "%.0f") +
                       " s on this CPU (an accelerator 1000x faster would still take " +
                       Fmt(m.layer_seconds / 1000, "%.2f") + " s)"
                 : "not measured",
       flash_max && flash_max->n > 100000 && m.layer_seconds >= 1});
  r.claims.push_back({"FlashAttention's extra memory is linear in N", "Dao et al. 2022",
                      "memory exponent 1", "flash " + Fmt(ff.memory.exponent, "%.2f") +
                          ", materialised " + Fmt(fm.memory.exponent, "%.2f"),
                      InRange(ff.memory.exponent, 0.8, 1.2)});
  r.claims.push_back({"Linear attention is O(N) in time and memory",
                      "Katharopoulos et al. 2020", "exponents 1",
                      "time " + Fmt(fl.time.exponent, "%.2f") + ", memory " +
                          Fmt(fl.memory.exponent, "%.2f"),
                      InRange(fl.time.exponent, 0.8, 1.2) && InRange(fl.memory.exponent, 0.8, 1.2)});
  return Status::Ok();
}

// ---- Results JSON: per method its fits and every point (measured fields null where not run).
nlohmann::json MethodJson(const Measured& m, size_t mi) {
  nlohmann::json jp = nlohmann::json::array();
  const auto ran_only = [](bool ran, auto v) { return ran ? nlohmann::json(v) : nlohmann::json(); };
  for (const Point& p : m.points[mi]) {
    jp.push_back({{"n", p.n},
                  {"ran", p.ran},
                  {"skipped", p.skipped},
                  {"seconds", ran_only(p.ran, p.seconds)},
                  {"peak_bytes", ran_only(p.ran, p.peak_bytes)},
                  {"held_bytes", ran_only(p.ran, p.held_bytes)},
                  {"counted_bytes", ran_only(p.ran, p.counted_bytes)},
                  {"io_bytes", ran_only(p.ran, p.io_bytes)},
                  {"own_bytes", p.own_bytes},
                  {"own_held_bytes", ran_only(p.ran, p.OwnHeld())},
                  {"expected_bytes", p.expected_bytes},
                  {"gflops", p.gflops > 0 ? nlohmann::json(p.gflops) : nlohmann::json()}});
  }
  const MethodFit& f = m.fits[mi];
  return {{"method", MethodName(kMethods[mi])},
          {"time_exponent", f.time.exponent},
          {"memory_exponent", f.memory.exponent},
          {"own_memory_exponent", f.own_memory.exponent},
          {"peak_memory_exponent", f.peak_memory.exponent},
          {"fit_points", f.time.points},
          {"memory_fit_points", f.memory.points},
          {"points", jp}};
}

Status AddResults(const Measured& m, ExperimentResult& r) {
  const Sizes& s = m.s;
  nlohmann::json jm = nlohmann::json::array();
  for (size_t mi = 0; mi < std::size(kMethods); ++mi) jm.push_back(MethodJson(m, mi));
  r.results = {{"heads", s.heads},
               {"head_dim", s.head_dim},
               {"window", s.window},
               {"causal", true},
               {"threads", m.threads},
               {"materialised_budget_bytes", m.budget},
               {"mem_available_bytes", m.available},
               {"materialised_out_of_memory_n", m.oom_n},
               {"held_slack_bytes", HeldSlack(m.threads)},
               {"bytes_per_score_entry", m.bytes_per_entry},
               {"doc_claim_bf16_32_heads_bytes", m.measured_bf16_32},
               {"layer_32x128_seconds_at_max_n", m.layer_seconds},
               {"methods", jm}};
  return Status::Ok();
}

// "H heads, head_dim D, causal, fp32, T threads".
std::string ShapeText(const Measured& m) {
  return std::to_string(m.s.heads) + " heads, head_dim " + std::to_string(m.s.head_dim) + ", causal, fp32, " +
         std::to_string(m.threads) + " threads";
}

// ---- Summary.
Status AddSummary(const Measured& m, ExperimentResult& r) {
  const MethodFit &fm = m.FitOf(Method::kMaterialised), &ff = m.FitOf(Method::kFlash),
                  &fw = m.FitOf(Method::kWindow), &fl = m.FitOf(Method::kLinear);
  r.summary = "Fitted exponents of time / held memory against N (" + ShapeText(m) +
              "): materialised " + Fmt(fm.time.exponent, "%.2f") + " / " +
              Fmt(fm.memory.exponent, "%.2f") + " (its score memory alone " +
              Fmt(fm.own_memory.exponent, "%.2f") + ")" +
              ", flash " + Fmt(ff.time.exponent, "%.2f") + " / " +
              Fmt(ff.memory.exponent, "%.2f") + ", window " + Fmt(fw.time.exponent, "%.2f") +
              " / " + Fmt(fw.memory.exponent, "%.2f") + ", linear " +
              Fmt(fl.time.exponent, "%.2f") + " / " + Fmt(fl.memory.exponent, "%.2f") +
              ". Materialised attention stops at N = " + std::to_string(m.largest_materialised) +
              " (budget " + Bytes(m.budget) + ")" +
              (m.oom_n ? " and would exceed this machine's available memory from N = " +
                             std::to_string(m.oom_n)
                       : std::string()) +
              "; flash reaches N = " + (m.flash_max ? std::to_string(m.flash_max->n) : "-") +
              " with memory linear in N. The documents' 8 GB at N = 65536 is one head's BF16 "
              "matrix: 32 heads need " + Bytes(m.measured_bf16_32) + ".";
  return Status::Ok();
}

// ---- The page.
void AddScalingSection(const Measured& m, report::HtmlReport& h) {
  h.AddSection("scaling", "Time and memory against N");
  h.AddParagraph("One causal attention forward per method and N on random inputs (" + ShapeText(m) +
                 "). Time is the kernel alone. Held memory is the resident bytes after the run "
                 "with the method's buffers alive (Q, K, V, O and its own: S, lse or "
                 "denominators), minus what was resident before, read exactly from the page "
                 "tables; peak memory also counts the kernel's transient scratch. Lines are "
                 "measurements; time exponents are least-squares fits over N >= " +
                 std::to_string(2 * m.s.n_min) + ", memory exponents over every N.");
  report::XyPlot tp, mp;
  tp.title = "Time per forward";
  mp.title = "Held memory per forward";
  tp.x = mp.x = {"sequence length N", report::ScaleType::kLog10, {}, {}};
  tp.y = {"seconds", report::ScaleType::kLog10, {}, {}};
  mp.y = {"bytes", report::ScaleType::kLog10, {}, {}};
  tp.markers = mp.markers = true;
  std::vector<std::string> cols = {"N"};
  for (size_t mi = 0; mi < std::size(kMethods); ++mi) {
    report::Series st, sm;
    st.name = std::string(MethodName(kMethods[mi])) + " (slope " + Fmt(m.fits[mi].time.exponent, "%.2f") + ")";
    sm.name = std::string(MethodName(kMethods[mi])) + " (slope " + Fmt(m.fits[mi].memory.exponent, "%.2f") + ")";
    for (const Point& p : m.points[mi]) {
      if (!p.ran) continue;
      st.x.push_back(double(p.n));
      st.y.push_back(p.seconds);
      sm.x.push_back(double(p.n));
      sm.y.push_back(std::max(1.0, double(p.held_bytes)));
    }
    tp.series.push_back(st);
    mp.series.push_back(sm);
    cols.push_back(std::string(MethodName(kMethods[mi])) + " s");
    cols.push_back(std::string(MethodName(kMethods[mi])) + " held / peak");
  }
  h.AddFigure(report::RenderLinePlot(tp), "Time against N, log-log; the slope is the exponent.", "time");
  h.AddFigure(report::RenderLinePlot(mp),
              "Held memory against N, log-log; materialised holds [H, N, N] fp32 scores.", "memory");
  std::vector<std::vector<std::string>> rows;
  for (size_t i = 0; i < m.ns.size(); ++i) {
    std::vector<std::string> row = {std::to_string(m.ns[i])};
    for (size_t mi = 0; mi < std::size(kMethods); ++mi) {
      const Point& p = m.points[mi][i];
      row.push_back(p.ran ? Fmt(p.seconds, "%.3g") : "-");
      row.push_back(p.ran ? Bytes(double(p.held_bytes)) + " / " + Bytes(double(p.peak_bytes)) : "-");
    }
    rows.push_back(row);
  }
  h.AddTable(cols, rows, "Measured time (s) and held / peak memory; '-': not run "
                         "(materialised: over the memory budget).");
  std::vector<std::vector<std::string>> erows;
  for (size_t mi = 0; mi < std::size(kMethods); ++mi) {
    const MethodFit& f = m.fits[mi];
    erows.push_back({MethodName(kMethods[mi]), Fmt(f.time.exponent, "%.2f"), Fmt(f.memory.exponent, "%.2f"),
                     Fmt(f.own_memory.exponent, "%.2f"), Fmt(f.peak_memory.exponent, "%.2f"),
                     std::to_string(f.time.points) + " / " + std::to_string(f.memory.points)});
  }
  h.AddTable({"method", "time exponent", "held memory exponent", "own buffer exponent",
              "peak memory exponent", "points fitted (time / memory)"},
             erows,
             "Fitted exponents (theory: materialised 2 / 2, flash 2 / 1, window 1 / 1, linear "
             "1 / 1; materialised's held memory includes O(N) Q, K, V, O, so its exponent "
             "approaches 2 from below; its own buffer, the scores, is exactly N^2).");
}

void AddMemorySection(const Measured& m, report::HtmlReport& h) {
  std::vector<std::vector<std::string>> mrows;
  for (size_t mi = 0; mi < std::size(kMethods); ++mi) {
    for (const Point& p : m.points[mi]) {
      if (p.ran && p.n == m.largest_materialised) {
        mrows.push_back({MethodName(kMethods[mi]), std::to_string(p.n), Bytes(double(p.held_bytes)),
                         Bytes(double(p.peak_bytes)), Bytes(double(p.expected_bytes)),
                         Fmt(double(p.held_bytes) / double(p.expected_bytes), "%.3f")});
      }
    }
  }
  h.AddSection("memory", "Where the memory goes");
  h.AddTable({"method", "N", "held", "peak", "expected", "held / expected"}, mrows,
             "Measured memory against the bytes each method must hold (Q, K, V, O plus S for "
             "materialised, lse or denominators otherwise) at the largest N materialised ran.");
  h.AddParagraph(
      "Materialised attention's score matrix costs " + Fmt(m.bytes_per_entry, "%.2f") +
      " bytes per entry measured (4 in fp32). With " + std::to_string(m.s.heads) +
      " heads it would exceed the " + Bytes(m.available) + " available on this machine from N = " +
      (m.oom_n ? std::to_string(m.oom_n) : std::string("-")) +
      ". The documents' figure: a 65536 x 65536 BF16 matrix is " + Bytes(m.doc_per_head_bf16) +
      " per head, so with 32 heads " + Bytes(m.measured_bf16_32) + ", not 8 GB.");
}

Status AddHtml(const Measured& m, ExperimentResult& r) {
  const MethodFit &fm = m.FitOf(Method::kMaterialised), &ff = m.FitOf(Method::kFlash),
                  &fl = m.FitOf(Method::kLinear);
  report::HtmlReport& h = r.html;
  h.AddSummaryFact("shape", ShapeText(m));
  h.AddSummaryFact("flash exponents (time / memory)",
                   Fmt(ff.time.exponent, "%.2f") + " / " + Fmt(ff.memory.exponent, "%.2f"));
  h.AddSummaryFact("materialised memory exponent (scores alone)",
                   Fmt(fm.memory.exponent, "%.2f") + " (" + Fmt(fm.own_memory.exponent, "%.2f") + ")");
  h.AddSummaryFact("linear exponents (time / memory)",
                   Fmt(fl.time.exponent, "%.2f") + " / " + Fmt(fl.memory.exponent, "%.2f"));
  AddScalingSection(m, h);
  AddMemorySection(m, h);
  return Status::Ok();
}

// configure -> validate the kernels -> measure every method at every N -> fit -> report.
Result<ExperimentResult> Run(const ExperimentOptions& o) {
  auto m = std::make_unique<Measured>();
  m->s = SizesFor(o.quick);
  m->quick = o.quick;
  ThreadPool& pool = DefaultThreadPool();
  m->threads = pool.num_threads();
  // Fixed malloc thresholds (see HeldSlack): a freed block never makes glibc keep more. For the
  // rest of this process (an experiment runs in its own `attnlab experiment` process).
  mallopt(M_MMAP_THRESHOLD, static_cast<int>(kMallocThreshold));
  mallopt(M_TRIM_THRESHOLD, static_cast<int>(kMallocThreshold));
  ATTNLAB_RETURN_IF_ERROR(MeasureAll(o, pool, *m));
  Derive(*m);
  return AssembleReport<Measured>(*m, {AddChecks, AddClaims, AddResults, AddSummary, AddHtml});
}

}  // namespace

Experiment ScalingExperiment() {
  return {kName,
          "time and memory against N (1k-128k) for materialised, flash, sliding-window and "
          "linear attention, with fitted exponents",
          Run};
}

}  // namespace attnlab::experiments
