// Shared by `attnlab bench attention` (cmd_bench.cc) and bench/attention_benchmark.cc: random
// attention problems, validation of the flash kernels before timing, the oneDNN sgemm baselines
// and a median timer. Header-only so the Google Benchmark drivers need no extra target.
//
// Validation. The reference is too slow for the whole problem at large N, so it checks the LAST
// kCheckRows query rows of every head: a sub-problem with len_q = kCheckRows and the same keys.
// Queries are bottom-right aligned (attention.h), so those rows see exactly the keys they see in
// the full problem under every mask. Two checks follow:
//   (1) flash on the sub-problem against the double-precision reference (O; with the backward
//       dQ, dK, dV and d sink_logits, where dK, dV are the 64 rows' contributions);
//   (2) the full flash run's last rows against the sub-run's rows (O, and dQ with the backward;
//       the full dK, dV sum over every row, so they have no sub-run counterpart).
// Tolerance, derived from fp32 as in attention_flash_test.cc (Higham's running error bound):
//   max |flash - truth| <= kC * u * kappa * max M   (gradients: twice that)
// with u = 2^-24, kC = 16, kappa = scale * max_ij sum_d |q_id k_jd| + log2(len_k + 1) + 1 (the
// condition of the logits plus the summation depth) and M each element's term-wise magnitude
// (the same sums with every term replaced by its absolute value), maximised over the tensor.
#ifndef ATTNLAB_TOOLS_BENCH_UTIL_H_
#define ATTNLAB_TOOLS_BENCH_UTIL_H_

#include <omp.h>
#include <oneapi/dnnl/dnnl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "attnlab/attention.h"
#include "attnlab/thread_pool.h"
#include "engine/attention_reference.h"

namespace attnlab::bench {

constexpr int64_t kCheckRows = 64;  // query rows of every head checked against the reference
constexpr double kU = 1.0 / (1 << 24);
constexpr double kC = 16.0;

// One problem in contiguous [batch, heads, len, head_dim] buffers. Not copyable: params
// points into `sinks`.
struct Problem {
  AttentionShape shape;
  AttentionParams params;
  std::vector<float> sinks;    // [heads_q] (kSinkLogit)
  std::vector<float> q, dout;  // [B, Hq, Lq, D]
  std::vector<float> k, v;     // [B, Hkv, Lk, D]
  std::vector<float> out, dq;  // [B, Hq, Lq, D]
  std::vector<float> lse;      // [B, Hq, Lq]
  std::vector<float> dk, dv;   // [B, Hkv, Lk, D]
  std::vector<float> dsink;    // [Hq] (kSinkLogit)

  Problem() = default;
  Problem(const Problem&) = delete;
  Problem& operator=(const Problem&) = delete;

  int64_t QSize() const { return shape.batch * shape.heads_q * shape.len_q * shape.head_dim; }
  int64_t KSize() const { return shape.batch * shape.heads_kv * shape.len_k * shape.head_dim; }
  AttentionTensor QView(const std::vector<float>& x) const {
    return ContiguousView<const float>(x.data(), shape.batch, shape.heads_q, shape.len_q,
                                       shape.head_dim);
  }
  AttentionTensor KView(const std::vector<float>& x) const {
    return ContiguousView<const float>(x.data(), shape.batch, shape.heads_kv, shape.len_k,
                                       shape.head_dim);
  }
  AttentionTensorMut QViewMut(std::vector<float>& x) {
    x.resize(QSize());
    return ContiguousView(x.data(), shape.batch, shape.heads_q, shape.len_q, shape.head_dim);
  }
  AttentionTensorMut KViewMut(std::vector<float>& x) {
    x.resize(KSize());
    return ContiguousView(x.data(), shape.batch, shape.heads_kv, shape.len_k, shape.head_dim);
  }
};

// Inputs as in the kernel tests: q, k, v, dout ~ N(0, 1), sink logits ~ U(-10, 10), sigmoid
// bias -log(len_k).
inline std::unique_ptr<Problem> MakeProblem(const AttentionShape& s, const AttentionMask& mask,
                                            SoftmaxKind softmax, uint64_t seed = 1) {
  auto p = std::make_unique<Problem>();
  p->shape = s;
  p->params.mask = mask;
  p->params.softmax = softmax;
  std::mt19937_64 rng(seed);
  if (softmax == SoftmaxKind::kSinkLogit) {
    std::uniform_real_distribution<float> u(-10, 10);
    p->sinks.resize(s.heads_q);
    for (float& x : p->sinks) x = u(rng);
    p->params.sink_logits = p->sinks;
  }
  if (softmax == SoftmaxKind::kSigmoid) {
    p->params.sigmoid_bias = -std::log(static_cast<float>(s.len_k));
  }
  std::normal_distribution<float> nd(0, 1);
  for (auto* x : {&p->q, &p->dout, &p->k, &p->v}) {
    x->resize(x == &p->q || x == &p->dout ? p->QSize() : p->KSize());
    for (float& e : *x) e = nd(rng);
  }
  return p;
}

// The last `rows` query rows of every head of `full` (q and dout), with the same keys.
inline std::unique_ptr<Problem> LastRows(const Problem& full, int64_t rows) {
  auto p = std::make_unique<Problem>();
  p->shape = full.shape;
  p->shape.len_q = rows;
  p->params = full.params;
  p->sinks = full.sinks;
  if (!p->sinks.empty()) p->params.sink_logits = p->sinks;
  p->k = full.k;
  p->v = full.v;
  const int64_t D = full.shape.head_dim, skip = full.shape.len_q - rows;
  for (auto [src, dst] : {std::pair{&full.q, &p->q}, {&full.dout, &p->dout}}) {
    dst->resize(p->QSize());
    for (int64_t bh = 0; bh < full.shape.batch * full.shape.heads_q; ++bh) {
      const float* from = src->data() + (bh * full.shape.len_q + skip) * D;
      std::copy(from, from + rows * D, dst->data() + bh * rows * D);
    }
  }
  return p;
}

inline Status FlashForward(Problem& p) {
  p.lse.resize(p.shape.batch * p.shape.heads_q * p.shape.len_q);
  return AttentionForwardFlash(p.shape, p.params, p.QView(p.q), p.KView(p.k), p.KView(p.v),
                               p.QViewMut(p.out), p.lse);
}

// REQUIRES: FlashForward(p) ran (the backward reads out and lse).
inline Status FlashBackward(Problem& p) {
  if (p.params.softmax == SoftmaxKind::kSinkLogit) p.dsink.resize(p.shape.heads_q);
  return AttentionBackwardFlash(p.shape, p.params, p.QView(p.q), p.KView(p.k), p.KView(p.v),
                                p.QView(p.out), p.lse, p.QView(p.dout), p.QViewMut(p.dq),
                                p.KViewMut(p.dk), p.KViewMut(p.dv), p.dsink);
}

inline Status ReferenceForward(Problem& p) {
  return AttentionForwardReference(p.shape, p.params, p.QView(p.q), p.KView(p.k), p.KView(p.v),
                                   p.QViewMut(p.out));
}

// One validation result: the largest |got - truth| of a tensor and its tolerance.
struct Check {
  std::string name;
  bool grad = false;  // checks the backward
  double max_err = 0;
  double tol = 0;
  bool ok() const { return max_err <= tol; }  // false for NaN
};

// Largest error and largest magnitude M over a tensor (a non-finite value counts as infinite).
struct ErrMag {
  double err = 0, mag = 0;
  void Add(double got, double truth, double m) {
    const double e = std::isfinite(got) ? std::abs(got - truth) : INFINITY;
    err = std::max(err, e);
    mag = std::max(mag, m);
  }
  void Merge(const ErrMag& o) { err = std::max(err, o.err), mag = std::max(mag, o.mag); }
};

struct RefErrors {
  ErrMag out, dq, dk, dv, dsink;
  double kappa = 0;  // max scale * sum_d |q_id k_jd| over visible pairs, before the log term
};

// Flash outputs of `p` (run before) against the double-precision reference, with the term-wise
// magnitudes (see the top of the file). Threaded over (batch, kv head) on the default pool.
inline RefErrors CompareToReference(const Problem& p, bool backward) {
  const AttentionShape& s = p.shape;
  const int64_t D = s.head_dim, Lk = s.len_k, group = s.heads_q / s.heads_kv;
  const double scale = p.params.scale ? *p.params.scale : 1.0 / std::sqrt(double(D));
  const bool sigmoid = p.params.softmax == SoftmaxKind::kSigmoid;
  const bool sink = p.params.softmax == SoftmaxKind::kSinkLogit;
  const bool softpick = p.params.softmax == SoftmaxKind::kSoftpick;
  const AttentionTensor q = p.QView(p.q), k = p.KView(p.k), v = p.KView(p.v);
  const AttentionTensor dout = p.QView(p.dout);
  const int64_t tasks = s.batch * s.heads_kv;
  std::vector<RefErrors> part(tasks);
  std::vector<double> dsink(s.batch * s.heads_q, 0.0), msink(s.batch * s.heads_q, 0.0);
  DefaultThreadPool().ParallelFor(tasks, [&](int64_t task, int) {
    const int64_t b = task / s.heads_kv, hk = task % s.heads_kv;
    RefErrors& e = part[task];
    std::vector<double> pr(Lk), sc(Lk), dp(Lk), dpa(Lk), o(D), mo(D), dqi(D), mdq(D);
    std::vector<double> dk, mdk, dv, mdv;  // [Lk][D], summed over the group's rows
    if (backward) dk = mdk = dv = mdv = std::vector<double>(Lk * D, 0.0);
    for (int64_t h = hk * group; h < (hk + 1) * group; ++h) {
      for (int64_t i = 0; i < s.len_q; ++i) {
        double lse;
        internal::ReferenceRowProbs<float, double>(s, p.params, scale, p.sinks.data(), q, k, b, h,
                                                   i, pr, &lse, &sc);
        // Keys that take part in the gradient: P > 0, and for softpick every visible key (a
        // negative score has P = 0 but dS = E D, attention.h).
        auto active = [&](int64_t j) { return softpick ? !std::isinf(sc[j]) : pr[j] != 0; };
        const int64_t row = ((b * s.heads_q + h) * s.len_q + i) * D;  // contiguous offset
        const float *qi = q.at(b, h, i), *doi = dout.at(b, h, i);
        std::fill(o.begin(), o.end(), 0.0);
        std::fill(mo.begin(), mo.end(), 0.0);
        double dsum = 0, dsum_abs = 0;  // D_i = sum_j P_ij dP_ij, and its magnitude
        for (int64_t j = 0; j < Lk; ++j) {
          if (!active(j)) continue;
          const float *kj = k.at(b, hk, j), *vj = v.at(b, hk, j);
          double cond = 0, dpj = 0, dpaj = 0;
          for (int64_t d = 0; d < D; ++d) {
            cond += std::abs(double(qi[d]) * kj[d]);
            o[d] += pr[j] * vj[d];
            mo[d] += pr[j] * std::abs(vj[d]);
            dpj += double(doi[d]) * vj[d];
            dpaj += std::abs(double(doi[d]) * vj[d]);
          }
          e.kappa = std::max(e.kappa, scale * cond);
          dp[j] = dpj, dpa[j] = dpaj;
          dsum += pr[j] * dpj, dsum_abs += pr[j] * dpaj;
        }
        for (int64_t d = 0; d < D; ++d) e.out.Add(p.out[row + d], o[d], mo[d]);
        if (!backward) continue;
        if (sink && !std::isinf(lse)) {
          const double p_sink = std::exp(double(p.sinks[h]) - lse);
          dsink[b * s.heads_q + h] -= p_sink * dsum;
          msink[b * s.heads_q + h] += p_sink * dsum_abs;
        }
        // dS = P o (dP - D) (sigmoid: dP o P o (1 - P); softpick, with E = e^(s - lse):
        // E (dP - D) for s > 0, E D for s < 0); dQ = scale dS K, dK = scale dS^T Q, dV = P^T dO
        // (attention_reference.h).
        std::fill(dqi.begin(), dqi.end(), 0.0);
        std::fill(mdq.begin(), mdq.end(), 0.0);
        for (int64_t j = 0; j < Lk; ++j) {
          if (!active(j)) continue;
          double ds, dsa;
          if (softpick) {
            const double e = std::exp(sc[j] - lse);
            ds = sc[j] > 0 ? e * (dp[j] - dsum) : sc[j] < 0 ? e * dsum : 0.0;
            dsa = e * (dpa[j] + dsum_abs);
          } else {
            ds = sigmoid ? dp[j] * pr[j] * (1 - pr[j]) : pr[j] * (dp[j] - dsum);
            dsa = sigmoid ? dpa[j] * pr[j] : pr[j] * (dpa[j] + dsum_abs);
          }
          const float* kj = k.at(b, hk, j);
          for (int64_t d = 0; d < D; ++d) {
            dqi[d] += scale * ds * kj[d];
            mdq[d] += scale * dsa * std::abs(kj[d]);
            dk[j * D + d] += scale * ds * qi[d];
            mdk[j * D + d] += scale * dsa * std::abs(qi[d]);
            dv[j * D + d] += pr[j] * doi[d];
            mdv[j * D + d] += pr[j] * std::abs(doi[d]);
          }
        }
        for (int64_t d = 0; d < D; ++d) e.dq.Add(p.dq[row + d], dqi[d], mdq[d]);
      }
    }
    for (int64_t j = 0; backward && j < Lk; ++j) {
      const int64_t at = ((b * s.heads_kv + hk) * Lk + j) * D;
      for (int64_t d = 0; d < D; ++d) {
        e.dk.Add(p.dk[at + d], dk[j * D + d], mdk[j * D + d]);
        e.dv.Add(p.dv[at + d], dv[j * D + d], mdv[j * D + d]);
      }
    }
  });
  RefErrors all;
  for (const RefErrors& e : part) {
    for (auto [a, b] :
         {std::pair{&all.out, &e.out}, {&all.dq, &e.dq}, {&all.dk, &e.dk}, {&all.dv, &e.dv}}) {
      a->Merge(*b);
    }
    all.kappa = std::max(all.kappa, e.kappa);
  }
  all.kappa += std::log2(double(Lk) + 1) + 1;
  if (backward && sink) {  // d sink_logits[h] sums over the batch
    for (int64_t h = 0; h < s.heads_q; ++h) {
      double t = 0, m = 0;
      for (int64_t b = 0; b < s.batch; ++b)
        t += dsink[b * s.heads_q + h], m += msink[b * s.heads_q + h];
      all.dsink.Add(p.dsink[h], t, m);
    }
  }
  return all;
}

// max |a[row] - b[row']| over the last `sub.len_q` rows of every head of `full` (a) and the rows
// of `sub` (b). Both are [B, Hq, len_q, D] contiguous.
inline double MaxDiffLastRows(const Problem& full, const std::vector<float>& a, const Problem& sub,
                              const std::vector<float>& b) {
  const int64_t rows = sub.shape.len_q, D = full.shape.head_dim;
  const int64_t skip = full.shape.len_q - rows;
  double m = 0;
  for (int64_t bh = 0; bh < full.shape.batch * full.shape.heads_q; ++bh) {
    for (int64_t x = 0; x < rows * D; ++x) {
      const double d =
          std::abs(double(a[(bh * full.shape.len_q + skip) * D + x]) - b[bh * rows * D + x]);
      m = std::isnan(d) ? INFINITY : std::max(m, d);
    }
  }
  return m;
}

// Runs flash on `full` (forward; with `backward` the backward too), validates it as described at
// the top of the file and appends one Check per comparison. Leaves full's outputs in place, so
// a timed backward can follow.
inline Status Validate(Problem& full, bool backward, std::vector<Check>* checks) {
  ATTNLAB_RETURN_IF_ERROR(FlashForward(full));
  if (backward) ATTNLAB_RETURN_IF_ERROR(FlashBackward(full));
  auto sub = LastRows(full, std::min(kCheckRows, full.shape.len_q));
  ATTNLAB_RETURN_IF_ERROR(FlashForward(*sub));
  if (backward) ATTNLAB_RETURN_IF_ERROR(FlashBackward(*sub));
  const RefErrors r = CompareToReference(*sub, backward);
  const double tol = kC * kU * r.kappa;
  checks->push_back({"O vs reference", false, r.out.err, tol * r.out.mag});
  checks->push_back({"O full run vs last-rows run", false,
                     MaxDiffLastRows(full, full.out, *sub, sub->out), tol * r.out.mag});
  if (!backward) return Status::Ok();
  checks->push_back({"dQ vs reference", true, r.dq.err, 2 * tol * r.dq.mag});
  checks->push_back({"dK vs reference", true, r.dk.err, 2 * tol * r.dk.mag});
  checks->push_back({"dV vs reference", true, r.dv.err, 2 * tol * r.dv.mag});
  if (full.params.softmax == SoftmaxKind::kSinkLogit) {
    checks->push_back({"d sink_logits vs reference", true, r.dsink.err, 2 * tol * r.dsink.mag});
  }
  checks->push_back({"dQ full run vs last-rows run", true,
                     MaxDiffLastRows(full, full.dq, *sub, sub->dq), 2 * tol * r.dq.mag});
  return Status::Ok();
}

// Median wall time in ms of `repeats` calls of fn, after one warm-up call; `before` (not timed)
// runs ahead of each call, e.g. to evict the caches.
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

template <typename F>
double MedianMs(int repeats, F&& fn) {
  return MedianMsWith(repeats, fn, [] {});
}

// oneDNN runs its sgemm on OpenMP: give it the engine's thread count so the baseline is fair.
inline void MatchOneDnnThreads() { omp_set_num_threads(DefaultThreadCount()); }

// The matching baseline of the attention's first product: S = Q K^T for every query head with
// oneDNN (row-major 'N', 'T': M = len_q, N = len_k, K = head_dim), into one reused [Lq, Lk]
// buffer `s`. FLOPs 2 * B * Hq * Lq * Lk * D.
inline dnnl_status_t SgemmQK(const Problem& p, std::vector<float>& s) {
  const AttentionShape& sh = p.shape;
  const int64_t D = sh.head_dim, group = sh.heads_q / sh.heads_kv;
  s.resize(sh.len_q * sh.len_k);
  for (int64_t b = 0; b < sh.batch; ++b) {
    for (int64_t h = 0; h < sh.heads_q; ++h) {
      const float* qh = p.q.data() + (b * sh.heads_q + h) * sh.len_q * D;
      const float* kh = p.k.data() + (b * sh.heads_kv + h / group) * sh.len_k * D;
      const dnnl_status_t st =
          dnnl_sgemm('N', 'T', sh.len_q, sh.len_k, D, 1.0f, qh, D, kh, D, 0.0f, s.data(), sh.len_k);
      if (st != dnnl_success) return st;
    }
  }
  return dnnl_success;
}
inline double SgemmQKFlops(const AttentionShape& s) {
  return 2.0 * s.batch * s.heads_q * s.len_q * s.len_k * s.head_dim;
}

// C = A B for n x n matrices: the machine's practical fp32 peak. FLOPs 2 n^3.
struct SquareSgemm {
  int64_t n;
  std::vector<float> a, b, c;
  explicit SquareSgemm(int64_t n_) : n(n_), a(n * n, 0.5f), b(n * n, 0.25f), c(n * n) {}
  dnnl_status_t Run() {
    return dnnl_sgemm('N', 'N', n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
  }
  double Flops() const { return 2.0 * n * n * n; }
};

// "model name" from /proc/cpuinfo, or "unknown CPU".
inline std::string CpuModel() {
  std::ifstream f("/proc/cpuinfo");
  for (std::string line; std::getline(f, line);) {
    if (line.rfind("model name", 0) == 0) {
      const size_t c = line.find(':');
      if (c != std::string::npos) return line.substr(line.find_first_not_of(" \t", c + 1));
    }
  }
  return "unknown CPU";
}

// The machine's last-level cache in bytes: the highest-level data or unified cache of
// /sys/devices/system/cpu/cpu*/cache, summed over its instances (one per distinct
// shared_cpu_list: an EPYC has one L3 per CCX, a Xeon one per socket); sysconf's L3 (else L2)
// size when sysfs says nothing; 0 when unknown. What a STREAM-style array must exceed to measure
// DRAM rather than cache.
inline int64_t LastLevelCacheBytes() {
  namespace fs = std::filesystem;
  int best = 0;
  std::map<std::string, int64_t> instances;  // shared_cpu_list -> bytes
  std::error_code ec;
  for (const auto& cpu : fs::directory_iterator("/sys/devices/system/cpu", ec)) {
    const std::string name = cpu.path().filename().string();
    if (name.size() < 4 || name.compare(0, 3, "cpu") != 0 ||
        name.find_first_not_of("0123456789", 3) != std::string::npos) {
      continue;
    }
    std::error_code ec2;
    for (const auto& idx : fs::directory_iterator(cpu.path() / "cache", ec2)) {
      if (idx.path().filename().string().rfind("index", 0) != 0) continue;
      auto read = [&](const char* f) {
        std::ifstream in(idx.path() / f);
        std::string v;
        std::getline(in, v);
        return v;
      };
      const std::string type = read("type"), size = read("size"), shared = read("shared_cpu_list");
      if (type == "Instruction" || size.empty()) continue;
      const int level = std::atoi(read("level").c_str());
      int64_t bytes = std::atoll(size.c_str());
      const char unit = size.back();
      bytes *= unit == 'K' ? 1024 : unit == 'M' ? (1 << 20) : unit == 'G' ? (1 << 30) : 1;
      if (level > best) {
        best = level;
        instances.clear();
      }
      if (level == best && bytes > 0) instances[shared.empty() ? name : shared] = bytes;
    }
  }
  int64_t total = 0;
  for (const auto& [cpus, bytes] : instances) total += bytes;
  if (total > 0) return total;
#ifdef _SC_LEVEL3_CACHE_SIZE
  if (const long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE); l3 > 0) return l3;
  if (const long l2 = sysconf(_SC_LEVEL2_CACHE_SIZE); l2 > 0) return l2;
#endif
  return 0;
}

}  // namespace attnlab::bench

#endif  // ATTNLAB_TOOLS_BENCH_UTIL_H_
