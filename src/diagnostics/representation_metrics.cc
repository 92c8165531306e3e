#include "diagnostics/representation_metrics.h"

// Eigen only for the symmetric eigensolver and the Gram rank updates. The library is compiled
// with -fopenmp (for oneDNN); keep Eigen single-threaded: the ThreadPool is the engine's only
// threading. GCC 12 reports false -Wmaybe-uninitialized inside its own AVX-512 intrinsics when
// inlining Eigen's kernels (GCC bug 105593); silence it for those headers only.
#define EIGEN_DONT_PARALLELIZE
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <Eigen/Dense>
#pragma GCC diagnostic pop

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "attnlab/thread_pool.h"
#include "dist/comm.h"
#include "engine/kernel_table.h"

namespace attnlab {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// x / y with 0 / 0 = 0 and x / 0 = +infinity (x > 0).
double SafeRatio(double x, double y) {
  if (y > 0) return x / y;
  return x > 0 ? kInf : 0.0;
}

// Where a computation's rows are: x holds all T rows (comm null), or rows first, first + step, ...
// of a matrix of T rows whose other rows other ranks hold; then every sum and maximum below is
// completed over the ranks (added in rank order: one process's result up to the order of the
// additions). The first failed collective is kept in `status`; later ones are skipped (every
// rank fails the same collective: dist::Comm's contract), and the caller returns it.
struct Spread {
  dist::Comm* comm = nullptr;
  int64_t first = 0, step = 1;
  int64_t total_rows = 0;  // T
  Status status;
  static Spread Local(int64_t rows) {
    Spread s;
    s.total_rows = rows;
    return s;
  }
  int64_t Global(int64_t t) const { return first + t * step; }
  template <typename V>
  void Sum(std::span<V> v, const char* what) {
    if (comm && status.ok()) status = comm->AllReduceSum(v, std::string("representation metrics: ") + what);
  }
  void Max(std::span<double> v, const char* what) {
    if (comm && status.ok()) status = comm->AllReduceMax(v, std::string("representation metrics: ") + what);
  }
};

// Column means in double: [C]. Identical rows give their common value exactly (the partial sums
// k * v of a float v are exact in double for k < 2^29).
std::vector<double> ColumnMean(const TokenMatrix& x, Spread& sp) {
  std::vector<double> mean(x.cols, 0.0);
  for (int64_t t = 0; t < x.rows; ++t) {
    const float* r = x.row(t);
    for (int64_t c = 0; c < x.cols; ++c) mean[c] += r[c];
  }
  sp.Sum(std::span<double>(mean), "column sums");
  for (double& m : mean) m /= static_cast<double>(sp.total_rows);
  return mean;
}
std::vector<double> ColumnMean(const TokenMatrix& x) {
  Spread one = Spread::Local(x.rows);
  return ColumnMean(x, one);
}

double RowNorm(const float* r, int64_t n) {
  double s = 0;
  for (int64_t c = 0; c < n; ++c) s += static_cast<double>(r[c]) * r[c];
  return std::sqrt(s);
}

// ---- Gram matrices ----------------------------------------------------------------------------

// Column segments of equal row count, concatenated side by side: [T, sum of cols].
struct Segments {
  std::vector<TokenMatrix> parts;
  std::vector<const std::vector<double>*> means;  // per part, [cols] or nullptr (no centring)
  int64_t rows() const { return parts.front().rows; }
  int64_t cols() const {
    int64_t n = 0;
    for (const auto& p : parts) n += p.cols;
    return n;
  }
};

// How many chunks to split `n` units of work into: one per thread, at most 8 (each owns a Gram),
// at least 64 units per chunk.
int64_t NumChunks(int64_t n, ThreadPool* pool) {
  if (pool == nullptr) return 1;
  return std::max<int64_t>(1, std::min<int64_t>({pool->num_threads(), 8, n / 64}));
}

// Runs fn(chunk) for chunk in [0, chunks), on the pool if there is one.
template <typename Fn>
void ForChunks(int64_t chunks, ThreadPool* pool, Fn&& fn) {
  if (chunks == 1 || pool == nullptr) {
    for (int64_t i = 0; i < chunks; ++i) fn(i);
    return;
  }
  pool->ParallelFor(chunks, [&](int64_t i, int) { fn(i); });
}

// Sums per-chunk Grams in chunk order (reproducible for a fixed chunk count).
Eigen::MatrixXd SumInOrder(std::vector<Eigen::MatrixXd>& parts) {
  for (size_t i = 1; i < parts.size(); ++i) parts[0] += parts[i];
  return std::move(parts[0]);
}

constexpr int64_t kBlock = 128;

// Feature-side Gram G = Sc^T Sc, [n, n] with n = total columns; only the LOWER triangle is valid.
// Sc is S with each part's mean subtracted (in double). O(T n^2), in the active SIMD target's
// double kernel (engine/gram_kernel.cc): blocks of kBlock rows are packed into double (zero
// padding to a multiple of 16 columns) and every column tile of G adds the block's products, the
// tiles shared among the pool's threads. Each entry sums its T products in row order, so the
// result does not depend on the thread count.
// The leading dimension of the padded Gram buffers (a multiple of 16 columns).
int64_t GramLd(int64_t n) { return (n + 15) / 16 * 16; }

// Adds Sc^T Sc of s's rows into the lower triangle of g [n, ld] (ld = GramLd(n)); block: a
// scratch of kBlock * ld doubles.
void AddFeatureGram(const Segments& s, ThreadPool* pool, double* g, std::vector<double>& block) {
  const int64_t T = s.rows(), n = s.cols();
  const internal::GramTable& kernel = internal::ActiveKernels().gram;
  const int64_t width = kernel.gram_columns(), ld = GramLd(n);
  const int64_t tiles = (n + width - 1) / width;
  if (static_cast<int64_t>(block.size()) < kBlock * ld) block.assign(kBlock * ld, 0.0);
  for (int64_t t0 = 0; t0 < T; t0 += kBlock) {
    const int64_t rows = std::min(kBlock, T - t0);
    // The block in the kernel's panels (kernel_table.h), padding columns [n, ld) zero.
    int64_t col = 0;
    for (size_t p = 0; p < s.parts.size(); ++p) {
      const TokenMatrix& x = s.parts[p];
      const std::vector<double>* mean = s.means[p];
      for (int64_t i = 0; i < rows; ++i) {
        const float* r = x.row(t0 + i);
        for (int64_t c = 0; c < x.cols; ++c) {
          block[internal::GramPackedIndex(i, col + c, rows)] =
              static_cast<double>(r[c]) - (mean ? (*mean)[c] : 0.0);
        }
      }
      col += x.cols;
    }
    for (int64_t i = 0; i < rows; ++i) {
      for (int64_t c = n; c < ld; ++c) block[internal::GramPackedIndex(i, c, rows)] = 0.0;
    }
    auto tile = [&](int64_t j) {
      kernel.gram_lower_columns(block.data(), rows, n, j * width, g, ld);
    };
    if (pool && tiles > 1) {
      pool->ParallelFor(tiles, [&](int64_t j, int) { tile(j); });
    } else {
      for (int64_t j = 0; j < tiles; ++j) tile(j);
    }
  }
}

Eigen::MatrixXd FeatureGram(const Segments& s, ThreadPool* pool) {
  const int64_t n = s.cols(), ld = GramLd(n);
  std::vector<double> g(ld * ld, 0.0), block;
  AddFeatureGram(s, pool, g.data(), block);
  Eigen::MatrixXd out = Eigen::MatrixXd::Zero(n, n);
  for (int64_t a = 0; a < n; ++a) {
    for (int64_t b = 0; b <= a; ++b) out(a, b) = g[a * ld + b];
  }
  return out;
}

// Token-side Gram K = Xc Xc^T, [T, T], lower triangle valid. O(T^2 C).
Eigen::MatrixXd TokenGram(const TokenMatrix& x, const std::vector<double>* mean,
                          ThreadPool* pool) {
  const int64_t T = x.rows, C = x.cols;
  const int64_t chunks = NumChunks(C, pool);
  std::vector<Eigen::MatrixXd> g(chunks);
  ForChunks(chunks, pool, [&](int64_t chunk) {
    const int64_t begin = C * chunk / chunks, end = C * (chunk + 1) / chunks;
    g[chunk] = Eigen::MatrixXd::Zero(T, T);
    Eigen::MatrixXd block(T, std::min(kBlock, end - begin));
    for (int64_t c0 = begin; c0 < end; c0 += kBlock) {
      const int64_t cols = std::min(kBlock, end - c0);
      if (cols != block.cols()) block.resize(T, cols);
      for (int64_t t = 0; t < T; ++t) {
        const float* r = x.row(t) + c0;
        for (int64_t c = 0; c < cols; ++c) {
          block(t, c) = static_cast<double>(r[c]) - (mean ? (*mean)[c0 + c] : 0.0);
        }
      }
      g[chunk].selfadjointView<Eigen::Lower>().rankUpdate(block);
    }
  });
  return SumInOrder(g);
}

// Squared Frobenius norm of the block rows [r0, r0 + nr) x cols [c0, c0 + nc) of a symmetric
// matrix stored in its lower triangle.
double BlockFrobeniusSq(const Eigen::MatrixXd& g, int64_t r0, int64_t nr, int64_t c0,
                        int64_t nc) {
  double s = 0;
  for (int64_t i = r0; i < r0 + nr; ++i) {
    for (int64_t j = c0; j < c0 + nc; ++j) {
      const double v = i >= j ? g(i, j) : g(j, i);
      s += v * v;
    }
  }
  return s;
}

// ---- Unchecked implementations (inputs validated by the caller) -------------------------------

RankCollapseResidual ResidualImpl(const TokenMatrix& x, Spread& sp) {
  const std::vector<double> mean = ColumnMean(x, sp);
  std::vector<double> col_abs(x.cols, 0.0), col_abs_res(x.cols, 0.0);
  double row_max = 0, row_max_res = 0;
  for (int64_t t = 0; t < x.rows; ++t) {
    const float* r = x.row(t);
    double row = 0, row_res = 0;
    for (int64_t c = 0; c < x.cols; ++c) {
      const double v = std::fabs(static_cast<double>(r[c]));
      const double d = std::fabs(static_cast<double>(r[c]) - mean[c]);
      row += v, row_res += d;
      col_abs[c] += v, col_abs_res[c] += d;
    }
    row_max = std::max(row_max, row), row_max_res = std::max(row_max_res, row_res);
  }
  sp.Sum(std::span<double>(col_abs), "column abs sums");
  sp.Sum(std::span<double>(col_abs_res), "centred column abs sums");
  double row_maxes[2] = {row_max, row_max_res};
  sp.Max(std::span<double>(row_maxes), "row abs sums");
  row_max = row_maxes[0], row_max_res = row_maxes[1];
  const double col_max = *std::max_element(col_abs.begin(), col_abs.end());
  const double col_max_res = *std::max_element(col_abs_res.begin(), col_abs_res.end());
  RankCollapseResidual r;
  r.norm = std::sqrt(col_max * row_max);
  r.residual_norm = std::sqrt(col_max_res * row_max_res);
  r.relative = r.norm > 0 ? r.residual_norm / r.norm : 0.0;
  return r;
}

PairwiseCosine CosineImpl(const TokenMatrix& x, Spread& sp) {
  // Unit rows u_i = x_i / |x_i| of the K non-zero rows (norm[t] = 0 marks a zero row: a sum of
  // float squares in double is 0 only if every element is 0). u is always formed by a division,
  // which GCC cannot fuse into an FMA (it does fuse products under -ffp-contract=fast), so every
  // pass below sees the same rounded u_i.
  std::vector<double> norm(x.rows, 0.0);
  int64_t K = 0;
  for (int64_t t = 0; t < x.rows; ++t) {
    norm[t] = RowNorm(x.row(t), x.cols);
    K += norm[t] > 0;
  }
  sp.Sum(std::span<int64_t>(&K, 1), "non-zero rows");
  PairwiseCosine p;
  p.nonzero_rows = K;
  if (K < 2) return p;  // mean_cosine 1, mad 0
  // Their mean ubar, refined once (ubar += mean(u_i - ubar)) so that identical rows give
  // u_i - ubar = 0 exactly.
  std::vector<double> ubar(x.cols, 0.0), fix(x.cols, 0.0);
  for (int64_t t = 0; t < x.rows; ++t) {
    if (norm[t] == 0) continue;
    const float* r = x.row(t);
    for (int64_t c = 0; c < x.cols; ++c) ubar[c] += r[c] / norm[t];
  }
  sp.Sum(std::span<double>(ubar), "unit row sums");
  for (double& u : ubar) u /= static_cast<double>(K);
  for (int64_t t = 0; t < x.rows; ++t) {
    if (norm[t] == 0) continue;
    const float* r = x.row(t);
    for (int64_t c = 0; c < x.cols; ++c) fix[c] += r[c] / norm[t] - ubar[c];
  }
  sp.Sum(std::span<double>(fix), "unit row mean refinement");
  for (int64_t c = 0; c < x.cols; ++c) ubar[c] += fix[c] / static_cast<double>(K);
  // V = sum_i |u_i - ubar|^2; with |u_i| = 1, sum_{i != j} u_i . u_j = |sum_i u_i|^2 - K
  // = K (K - 1) - K V: the mean cosine without the cancellation of |sum u_i|^2 - K.
  double V = 0;
  for (int64_t t = 0; t < x.rows; ++t) {
    if (norm[t] == 0) continue;
    const float* r = x.row(t);
    for (int64_t c = 0; c < x.cols; ++c) {
      const double d = r[c] / norm[t] - ubar[c];
      V += d * d;
    }
  }
  sp.Sum(std::span<double>(&V, 1), "unit row spread");
  V = std::clamp(V, 0.0, static_cast<double>(K));  // |sum u_i|^2 = K^2 - K V >= 0
  p.mad = V / static_cast<double>(K - 1);
  p.mean_cosine = 1.0 - p.mad;
  return p;
}

DirichletEnergy DirichletImpl(const TokenMatrix& x, Spread& sp) {
  const std::vector<double> mean = ColumnMean(x, sp);
  double centred = 0, total = 0;
  for (int64_t t = 0; t < x.rows; ++t) {
    const float* r = x.row(t);
    for (int64_t c = 0; c < x.cols; ++c) {
      const double v = r[c], d = v - mean[c];
      centred += d * d, total += v * v;
    }
  }
  double sums[2] = {centred, total};
  sp.Sum(std::span<double>(sums), "squared norms");
  centred = sums[0], total = sums[1];
  DirichletEnergy e;
  const double T = static_cast<double>(sp.total_rows);
  e.energy = centred / T;
  e.mean_sq_norm = total / T;
  e.relative = total > 0 ? std::min(1.0, centred / total) : 0.0;
  return e;
}

// Across ranks (sp.comm) only with T >= C: the [C, C] Grams of the ranks' rows add up.
EffectiveRank EffectiveRankImpl(const TokenMatrix& x, bool centred, ThreadPool* pool, Spread& sp) {
  std::vector<double> mean;
  if (centred) mean = ColumnMean(x, sp);
  const std::vector<double>* m = centred ? &mean : nullptr;
  Eigen::MatrixXd g;
  if (x.cols <= sp.total_rows) {
    Segments s;
    s.parts = {x};
    s.means = {m};
    g = FeatureGram(s, pool);
    if (sp.comm) {  // the lower triangle, summed over the ranks
      const int64_t n = x.cols;
      std::vector<double> lower;
      lower.reserve(n * (n + 1) / 2);
      for (int64_t a = 0; a < n; ++a) {
        for (int64_t b = 0; b <= a; ++b) lower.push_back(g(a, b));
      }
      sp.Sum(std::span<double>(lower), "feature Gram");
      for (int64_t a = 0, i = 0; a < n; ++a) {
        for (int64_t b = 0; b <= a; ++b) g(a, b) = lower[i++];
      }
    }
  } else {
    g = TokenGram(x, m, pool);
  }
  // Eigenvalues of the Gram = squared singular values of X (the solver reads the lower triangle).
  Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> solver(g, Eigen::EigenvaluesOnly);
  const Eigen::VectorXd lambda = solver.eigenvalues();  // ascending
  EffectiveRank r;
  const double lmax = lambda.size() ? lambda(lambda.size() - 1) : 0.0;
  if (!(lmax > 0)) return r;  // X (or Xc) = 0: erank 0
  // Accumulation of T-term sums and the eigensolver each err by ~ (length) eps lambda_max.
  const double floor = static_cast<double>(sp.total_rows + x.cols) *
                       std::numeric_limits<double>::epsilon() * lmax;
  std::vector<double> sigma;
  for (int64_t i = lambda.size() - 1; i >= 0; --i) {
    if (lambda(i) > floor) sigma.push_back(std::sqrt(lambda(i)));
  }
  double sum = 0;
  for (double v : sigma) sum += v;
  double h = 0;
  for (double v : sigma) {
    const double p = v / sum;
    h -= p * std::log(p);
  }
  r.numerical_rank = static_cast<int64_t>(sigma.size());
  r.top_share = sigma.front() / sum;
  r.entropy = std::max(0.0, h);
  r.erank = std::exp(r.entropy);
  return r;
}

// |x| as order-preserving bits (non-negative floats compare like their bit patterns).
uint32_t AbsBits(float v) { return std::bit_cast<uint32_t>(v) & 0x7fffffffu; }

// The k-th smallest (0-based) |x_tc|, exactly: radix selection, 8 bits per pass, 4 passes.
uint32_t SelectAbsBits(const TokenMatrix& x, int64_t k, Spread& sp) {
  uint32_t prefix = 0, mask = 0;
  for (int shift = 24; shift >= 0; shift -= 8) {
    int64_t hist[256] = {};
    for (int64_t t = 0; t < x.rows; ++t) {
      const float* r = x.row(t);
      for (int64_t c = 0; c < x.cols; ++c) {
        const uint32_t b = AbsBits(r[c]);
        if ((b & mask) == prefix) ++hist[(b >> shift) & 0xffu];
      }
    }
    sp.Sum(std::span<int64_t>(hist, 256), "|x| histogram");
    if (!sp.status.ok()) return 0;
    uint32_t bucket = 0;
    while (k >= hist[bucket]) k -= hist[bucket++];
    prefix |= bucket << shift;
    mask |= 0xffu << shift;
  }
  return prefix;
}

// The ranks' parts of MassiveImpl's single pass, completed over the ranks: the largest |x| and
// its first position in row-major order of the whole matrix (global token numbers), the top-k
// among every rank's top-k (their union holds the global top-k), and for the median's upper
// neighbour the count of |x| <= lo and the smallest |x| above it.
template <typename Worse>
void MergeMassive(const TokenMatrix& x, int64_t top_k, const Worse& worse, Spread& sp,
                  MassiveActivations* m, std::vector<Activation>* heap, int64_t* count_le,
                  uint32_t* next_bits) {
  const double kNone = -std::numeric_limits<double>::infinity();
  double best = x.rows > 0 ? m->max_abs : kNone;
  sp.Max(std::span<double>(&best, 1), "largest |x|");
  // -(t C + c) of this rank's first entry at the maximum: the largest is the earliest.
  double pos = x.rows > 0 && m->max_abs == best
                   ? -static_cast<double>(m->max.token * x.cols + m->max.channel)
                   : kNone;
  sp.Max(std::span<double>(&pos, 1), "position of the largest |x|");
  double value = x.rows > 0 && m->max_abs == best &&
                         -static_cast<double>(m->max.token * x.cols + m->max.channel) == pos
                     ? m->max.value
                     : 0.0;
  sp.Sum(std::span<double>(&value, 1), "the largest entry");
  m->max_abs = best;
  const int64_t p = static_cast<int64_t>(-pos);
  m->max = {x.cols > 0 ? p / x.cols : 0, x.cols > 0 ? p % x.cols : 0, static_cast<float>(value)};
  sp.Sum(std::span<int64_t>(count_le, 1), "entries at most the median");
  double next = -static_cast<double>(*next_bits);
  sp.Max(std::span<double>(&next, 1), "the median's upper neighbour");
  *next_bits = static_cast<uint32_t>(-next);
  if (top_k == 0 || !sp.status.ok()) return;
  // Every rank's candidates (token, channel as int64; value as float), gathered and re-ranked.
  std::string mine(heap->size() * 20, '\0');
  for (size_t i = 0; i < heap->size(); ++i) {
    const Activation& a = (*heap)[i];
    std::memcpy(&mine[i * 20], &a.token, 8);
    std::memcpy(&mine[i * 20 + 8], &a.channel, 8);
    std::memcpy(&mine[i * 20 + 16], &a.value, 4);
  }
  std::vector<std::string> all;
  if (sp.status.ok()) sp.status = sp.comm->AllGather(mine, &all, "representation metrics: top entries");
  if (!sp.status.ok()) return;
  heap->clear();
  for (const std::string& part : all) {
    for (size_t i = 0; i + 20 <= part.size(); i += 20) {
      Activation a;
      std::memcpy(&a.token, &part[i], 8);
      std::memcpy(&a.channel, &part[i + 8], 8);
      std::memcpy(&a.value, &part[i + 16], 4);
      heap->push_back(a);
    }
  }
  std::sort(heap->begin(), heap->end(),
            [&](const Activation& a, const Activation& b) { return worse(b, a); });
  if (static_cast<int64_t>(heap->size()) > top_k) heap->resize(top_k);
}

MassiveActivations MassiveImpl(const TokenMatrix& x, const MassiveActivationOptions& opt,
                               Spread& sp) {
  const int64_t n = sp.total_rows * x.cols;
  // Median of |x|: the (n-1)/2-th value, averaged with the next one when n is even.
  const int64_t k = (n - 1) / 2;
  const uint32_t lo_bits = SelectAbsBits(x, k, sp);
  double median = std::bit_cast<float>(lo_bits);
  // Top-k as a min-heap on (|value| ascending, then later row-major position first), so the
  // heap's front is the entry to evict: smaller |x|, or equal |x| but later in row-major order.
  const int64_t top_k = std::max<int64_t>(0, std::min(opt.top_k, n));
  auto worse = [&](const Activation& a, const Activation& b) {  // a ranks below b
    const float fa = std::fabs(a.value), fb = std::fabs(b.value);
    if (fa != fb) return fa < fb;
    return a.token != b.token ? a.token > b.token : a.channel > b.channel;
  };
  auto heap_cmp = [&](const Activation& a, const Activation& b) { return worse(b, a); };
  std::vector<Activation> heap;
  heap.reserve(top_k);
  int64_t count_le = 0;
  uint32_t next_bits = 0xffffffffu;
  MassiveActivations m;
  for (int64_t t = 0; t < x.rows; ++t) {
    const float* r = x.row(t);
    for (int64_t c = 0; c < x.cols; ++c) {
      const uint32_t b = AbsBits(r[c]);
      if (b <= lo_bits) {
        ++count_le;
      } else {
        next_bits = std::min(next_bits, b);
      }
      const double a = std::fabs(static_cast<double>(r[c]));
      if (a > m.max_abs || (t == 0 && c == 0)) {
        m.max_abs = a;
        m.max = {sp.Global(t), c, r[c]};
      }
      if (top_k > 0) {
        const Activation cand{sp.Global(t), c, r[c]};
        if (static_cast<int64_t>(heap.size()) < top_k) {
          heap.push_back(cand);
          std::push_heap(heap.begin(), heap.end(), heap_cmp);
        } else if (worse(heap.front(), cand)) {
          std::pop_heap(heap.begin(), heap.end(), heap_cmp);
          heap.back() = cand;
          std::push_heap(heap.begin(), heap.end(), heap_cmp);
        }
      }
    }
  }
  if (sp.comm) MergeMassive(x, top_k, worse, sp, &m, &heap, &count_le, &next_bits);
  if (n % 2 == 0) {
    // The (n/2)-th value: lo again if it repeats, else the smallest value above it.
    const double hi = count_le >= k + 2 ? median : std::bit_cast<float>(next_bits);
    median = 0.5 * (median + hi);
  }
  m.median_abs = median;
  m.ratio = SafeRatio(m.max_abs, m.median_abs);
  std::sort(heap.begin(), heap.end(), [&](const Activation& a, const Activation& b) {
    return worse(b, a);
  });
  m.top = std::move(heap);
  // Entries past both of Sun et al.'s thresholds.
  const double threshold = std::max(opt.abs_threshold, opt.ratio_threshold * m.median_abs);
  for (int64_t t = 0; t < x.rows; ++t) {
    const float* r = x.row(t);
    for (int64_t c = 0; c < x.cols; ++c) m.massive_count += std::fabs(r[c]) > threshold;
  }
  sp.Sum(std::span<int64_t>(&m.massive_count, 1), "massive entries");
  return m;
}

double CkaFromGram(const Eigen::MatrixXd& g, int64_t x0, int64_t nx, int64_t y0, int64_t ny) {
  const double xx = std::sqrt(BlockFrobeniusSq(g, x0, nx, x0, nx));
  const double yy = std::sqrt(BlockFrobeniusSq(g, y0, ny, y0, ny));
  if (!(xx > 0) || !(yy > 0)) return 0.0;
  const double xy = BlockFrobeniusSq(g, y0, ny, x0, nx);
  return std::min(1.0, xy / (xx * yy));
}

Status CheckSameRows(const TokenMatrix& x, const TokenMatrix& y, const char* what) {
  if (x.rows == y.rows) return Status::Ok();
  return Status::InvalidArgument(std::string(what) + ": X has " + std::to_string(x.rows) +
                                 " rows and Y has " + std::to_string(y.rows) +
                                 "; both must hold the same tokens (same T)");
}

}  // namespace

TokenMatrix MakeTokenMatrix(const float* data, int64_t rows, int64_t cols, int64_t stride) {
  return TokenMatrix{data, rows, cols, stride < 0 ? cols : stride};
}

Status ValidateTokenMatrix(const TokenMatrix& x, const char* name) {
  const std::string n = name ? name : "X";
  if (x.data == nullptr) return Status::InvalidArgument(n + ": data is null");
  if (x.rows < 1 || x.cols < 1) {
    return Status::InvalidArgument(n + ": shape [" + std::to_string(x.rows) + ", " +
                                   std::to_string(x.cols) +
                                   "] is empty; need at least one token and one channel");
  }
  if (x.stride < x.cols) {
    return Status::InvalidArgument(n + ": row stride " + std::to_string(x.stride) +
                                   " is smaller than the " + std::to_string(x.cols) +
                                   " columns; rows would overlap (contiguous: stride = cols)");
  }
  for (int64_t t = 0; t < x.rows; ++t) {
    const float* r = x.row(t);
    for (int64_t c = 0; c < x.cols; ++c) {
      if (!std::isfinite(r[c])) {
        return Status::InvalidArgument(n + ": element [" + std::to_string(t) + ", " +
                                       std::to_string(c) + "] is " + std::to_string(r[c]) +
                                       "; the metrics need finite values (a diverged run?)");
      }
    }
  }
  return Status::Ok();
}

Result<RankCollapseResidual> ComputeRankCollapseResidual(const TokenMatrix& x) {
  ATTNLAB_RETURN_IF_ERROR(ValidateTokenMatrix(x));
  Spread one = Spread::Local(x.rows);
  return ResidualImpl(x, one);
}

Result<PairwiseCosine> ComputePairwiseCosine(const TokenMatrix& x) {
  ATTNLAB_RETURN_IF_ERROR(ValidateTokenMatrix(x));
  Spread one = Spread::Local(x.rows);
  return CosineImpl(x, one);
}

Result<DirichletEnergy> ComputeDirichletEnergy(const TokenMatrix& x) {
  ATTNLAB_RETURN_IF_ERROR(ValidateTokenMatrix(x));
  Spread one = Spread::Local(x.rows);
  return DirichletImpl(x, one);
}

Result<EffectiveRank> ComputeEffectiveRank(const TokenMatrix& x, bool centred, ThreadPool* pool) {
  ATTNLAB_RETURN_IF_ERROR(ValidateTokenMatrix(x));
  Spread one = Spread::Local(x.rows);
  return EffectiveRankImpl(x, centred, pool, one);
}

Result<MassiveActivations> ComputeMassiveActivations(const TokenMatrix& x,
                                                     const MassiveActivationOptions& opt) {
  ATTNLAB_RETURN_IF_ERROR(ValidateTokenMatrix(x));
  if (opt.top_k < 0) {
    return Status::InvalidArgument("massive activations: top_k is " + std::to_string(opt.top_k) +
                                   "; need >= 0");
  }
  Spread one = Spread::Local(x.rows);
  return MassiveImpl(x, opt, one);
}

Result<double> ComputeLinearCka(const TokenMatrix& x, const TokenMatrix& y, ThreadPool* pool) {
  ATTNLAB_RETURN_IF_ERROR(ValidateTokenMatrix(x, "X"));
  ATTNLAB_RETURN_IF_ERROR(ValidateTokenMatrix(y, "Y"));
  ATTNLAB_RETURN_IF_ERROR(CheckSameRows(x, y, "linear CKA"));
  const std::vector<double> mx = ColumnMean(x), my = ColumnMean(y);
  Segments s;
  s.parts = {x, y};
  s.means = {&mx, &my};
  const Eigen::MatrixXd g = FeatureGram(s, pool);
  return CkaFromGram(g, 0, x.cols, x.cols, y.cols);
}

// The H x H CKA matrix from the centred feature Gram of [T, H hd] (lower triangle valid).
std::vector<double> HeadCkaFromGram(const Eigen::MatrixXd& g, int64_t H, int64_t hd) {
  std::vector<double> norms(H);  // |X_h^T X_h|_F
  for (int64_t h = 0; h < H; ++h) norms[h] = std::sqrt(BlockFrobeniusSq(g, h * hd, hd, h * hd, hd));
  std::vector<double> cka(H * H, 0.0);
  for (int64_t a = 0; a < H; ++a) {
    for (int64_t b = 0; b <= a; ++b) {
      double v = 0;
      if (norms[a] > 0 && norms[b] > 0) {
        v = a == b ? 1.0
                   : std::min(1.0, BlockFrobeniusSq(g, a * hd, hd, b * hd, hd) /
                                       (norms[a] * norms[b]));
      }
      cka[a * H + b] = cka[b * H + a] = v;
    }
  }
  return cka;
}

Status CheckHeadSplit(int64_t cols, int64_t num_heads) {
  if (num_heads < 1 || cols < 1 || cols % num_heads != 0) {
    return Status::InvalidArgument("head CKA: " + std::to_string(cols) +
                                   " columns do not split into " + std::to_string(num_heads) +
                                   " heads; pass [T, H * hd] with H >= 1");
  }
  return Status::Ok();
}

Result<std::vector<double>> ComputeHeadCkaMatrix(const TokenMatrix& heads, int64_t num_heads,
                                                 ThreadPool* pool) {
  ATTNLAB_RETURN_IF_ERROR(ValidateTokenMatrix(heads, "heads"));
  ATTNLAB_RETURN_IF_ERROR(CheckHeadSplit(heads.cols, num_heads));
  const std::vector<double> mean = ColumnMean(heads);
  Segments s;
  s.parts = {heads};
  s.means = {&mean};
  return HeadCkaFromGram(FeatureGram(s, pool), num_heads, heads.cols / num_heads);
}

Result<HeadCkaAccumulator> HeadCkaAccumulator::Create(int64_t num_heads, int64_t cols) {
  ATTNLAB_RETURN_IF_ERROR(CheckHeadSplit(cols, num_heads));
  HeadCkaAccumulator a;
  a.heads_ = num_heads;
  a.cols_ = cols;
  a.sum_.assign(cols, 0.0);
  a.gram_.assign(GramLd(cols) * GramLd(cols), 0.0);
  return a;
}

Status HeadCkaAccumulator::Add(const TokenMatrix& rows, ThreadPool* pool) {
  if (cols_ == 0) return Status::InvalidArgument("head CKA accumulator: not created");
  ATTNLAB_RETURN_IF_ERROR(ValidateTokenMatrix(rows, "heads"));
  if (rows.cols != cols_) {
    return Status::InvalidArgument("head CKA accumulator: rows have " + std::to_string(rows.cols) +
                                   " columns, the first had " + std::to_string(cols_));
  }
  if (rows_ == 0) shift_ = ColumnMean(rows);  // near the final mean: a well-conditioned shift
  Segments s;
  s.parts = {rows};
  s.means = {&shift_};
  AddFeatureGram(s, pool, gram_.data(), block_);
  for (int64_t t = 0; t < rows.rows; ++t) {
    const float* r = rows.row(t);
    for (int64_t c = 0; c < cols_; ++c) sum_[c] += r[c];
  }
  rows_ += rows.rows;
  return Status::Ok();
}

Result<std::vector<double>> HeadCkaAccumulator::Finish() const {
  if (rows_ == 0) return Status::InvalidArgument("head CKA accumulator: no rows added");
  const int64_t C = cols_, ld = GramLd(C);
  std::vector<double> d(C);  // mu - s
  for (int64_t c = 0; c < C; ++c) d[c] = sum_[c] / static_cast<double>(rows_) - shift_[c];
  Eigen::MatrixXd g = Eigen::MatrixXd::Zero(C, C);
  for (int64_t a = 0; a < C; ++a) {
    for (int64_t b = 0; b <= a; ++b) {
      g(a, b) = gram_[a * ld + b] - static_cast<double>(rows_) * d[a] * d[b];
    }
  }
  return HeadCkaFromGram(g, heads_, C / heads_);
}

Status HeadCkaAccumulator::AllReduce(dist::Comm& comm, const std::string& what) {
  // The ranks agree on the shape first (the Gram's size), then on the global rows and sums.
  std::vector<double> shape = {static_cast<double>(cols_), -static_cast<double>(cols_),
                               static_cast<double>(heads_), -static_cast<double>(heads_)};
  ATTNLAB_RETURN_IF_ERROR(comm.AllReduceMax(std::span<double>(shape), what + ": shapes"));
  if (shape[0] != -shape[1] || shape[2] != -shape[3] || cols_ == 0) {
    return Status::InvalidArgument(what + ": the ranks' head CKA accumulators differ in shape "
                                   "or were not created");
  }
  const int64_t C = cols_, ld = GramLd(C);
  std::vector<int64_t> n = {rows_};
  ATTNLAB_RETURN_IF_ERROR(comm.AllReduceSum(std::span<int64_t>(n), what + ": rows"));
  std::vector<double> total = sum_;
  ATTNLAB_RETURN_IF_ERROR(comm.AllReduceSum(std::span<double>(total), what + ": column sums"));
  std::vector<double> mu(C, 0.0);
  for (int64_t c = 0; c < C && n[0] > 0; ++c) mu[c] = total[c] / static_cast<double>(n[0]);
  // This rank's Gram around mu: sum (x - mu)(x - mu)^T = G_s - n (m - s)(m - s)^T
  // + n (m - mu)(m - mu)^T, m its rows' mean, s its shift.
  std::vector<double> lower(C * (C + 1) / 2, 0.0);
  if (rows_ > 0) {
    const double nr = static_cast<double>(rows_);
    std::vector<double> ds(C), dm(C);
    for (int64_t c = 0; c < C; ++c) {
      const double m = sum_[c] / nr;
      ds[c] = m - shift_[c], dm[c] = m - mu[c];
    }
    for (int64_t a = 0, i = 0; a < C; ++a) {
      for (int64_t b = 0; b <= a; ++b) {
        lower[i++] = gram_[a * ld + b] - nr * ds[a] * ds[b] + nr * dm[a] * dm[b];
      }
    }
  }
  ATTNLAB_RETURN_IF_ERROR(comm.AllReduceSum(std::span<double>(lower), what + ": Grams"));
  for (int64_t a = 0, i = 0; a < C; ++a) {
    for (int64_t b = 0; b <= a; ++b) gram_[a * ld + b] = lower[i++];
  }
  shift_ = mu;
  sum_ = std::move(total);
  rows_ = n[0];
  return Status::Ok();
}

Status SinkKeyGeometryAccumulator::AllReduce(dist::Comm& comm, const std::string& what) {
  std::vector<double> shape = {static_cast<double>(hd_), -static_cast<double>(hd_),
                               static_cast<double>(next_pos_)};
  ATTNLAB_RETURN_IF_ERROR(comm.AllReduceMax(std::span<double>(shape), what + ": shapes"));
  if (shape[0] != -shape[1]) {
    return Status::InvalidArgument(what + ": the ranks' sink key geometries differ in head_dim");
  }
  if (unit_q_.empty()) unit_q_.assign(hd_, 0.0);
  std::vector<double> sums = unit_q_;
  sums.push_back(sum_k0_);
  sums.push_back(sum_other_);
  ATTNLAB_RETURN_IF_ERROR(comm.AllReduceSum(std::span<double>(sums), what + ": sums"));
  std::vector<int64_t> counts = {queries_, n_other_};
  ATTNLAB_RETURN_IF_ERROR(comm.AllReduceSum(std::span<int64_t>(counts), what + ": counts"));
  unit_q_.assign(sums.begin(), sums.begin() + hd_);
  sum_k0_ = sums[hd_], sum_other_ = sums[hd_ + 1];
  queries_ = counts[0], n_other_ = counts[1];
  next_pos_ = static_cast<int64_t>(shape[2]);
  merged_ = true;
  return Status::Ok();
}

Result<SinkKeyGeometry> ComputeSinkKeyGeometry(const TokenMatrix& q, const TokenMatrix& k) {
  ATTNLAB_RETURN_IF_ERROR(ValidateTokenMatrix(q, "q"));
  ATTNLAB_RETURN_IF_ERROR(ValidateTokenMatrix(k, "k"));
  if (k.rows < q.rows) {
    return Status::InvalidArgument("sink key geometry: " + std::to_string(q.rows) +
                                   " queries but only " + std::to_string(k.rows) +
                                   " keys; the queries are the last rows of the key sequence "
                                   "(causal, bottom-right), so need Tk >= Tq");
  }
  SinkKeyGeometryAccumulator acc(q.cols);
  ATTNLAB_RETURN_IF_ERROR(acc.Add(q, k, k.rows - q.rows));
  return acc.Finish(k);
}

Status SinkKeyGeometryAccumulator::Add(const TokenMatrix& q, const TokenMatrix& k,
                                       int64_t first_pos, int64_t step) {
  if (merged_) {
    return Status::InvalidArgument("sink key geometry: queries added after AllReduce");
  }
  if (step < 1) return Status::InvalidArgument("sink key geometry: step must be >= 1");
  // Shapes here; values as they are read (a chunk must not rescan every earlier key).
  for (const TokenMatrix* m : {&q, &k}) {
    if (m->data == nullptr || m->rows < 1 || m->cols < 1 || m->stride < m->cols) {
      return Status::InvalidArgument("sink key geometry: " + std::string(m == &q ? "q" : "k") +
                                     " is empty, null or has a row stride below its columns");
    }
  }
  if (q.cols != hd_ || k.cols != hd_) {
    return Status::InvalidArgument("sink key geometry: q has head_dim " + std::to_string(q.cols) +
                                   " and k has " + std::to_string(k.cols) + ", expected " +
                                   std::to_string(hd_) + "; pass one head's q and k");
  }
  const int64_t last_pos = first_pos + (q.rows - 1) * step;
  if (first_pos < next_pos_ || k.rows < last_pos + 1) {
    return Status::InvalidArgument(
        "sink key geometry: queries at key positions " + std::to_string(first_pos) + ".." +
        std::to_string(last_pos) + " need " + std::to_string(last_pos + 1) +
        " keys (have " + std::to_string(k.rows) + ") and must come after position " +
        std::to_string(next_pos_ - 1));
  }
  const int64_t hd = hd_;
  if (seen_.empty()) seen_.assign(hd, 0.0), unit_q_.assign(hd, 0.0);
  const float* k0 = k.row(0);
  const double k0n = RowNorm(k0, hd);
  const Status not_finite = Status::InvalidArgument(
      "sink key geometry: a query or key is not finite; the metrics need finite values (a "
      "diverged run?)");
  if (!std::isfinite(k0n)) return not_finite;
  // Queries in order; seen_ is the running sum of the unit keys 1..p(t) (zero keys add 0).
  for (int64_t t = 0; t < q.rows; ++t) {
    const int64_t p = first_pos + t * step;  // last visible key
    for (; seen_upto_ < p; ++seen_upto_) {
      const float* r = k.row(seen_upto_ + 1);
      const double n = RowNorm(r, hd);
      if (!std::isfinite(n)) return not_finite;
      if (n == 0) continue;
      for (int64_t d = 0; d < hd; ++d) seen_[d] += r[d] / n;
    }
    const float* qt = q.row(t);
    const double qn = RowNorm(qt, hd);
    if (!std::isfinite(qn)) return not_finite;
    if (qn == 0) {
      if (p >= 1) ++n_other_;  // cos 0 with every key
      continue;
    }
    double dot0 = 0, doto = 0;
    for (int64_t d = 0; d < hd; ++d) {
      dot0 += static_cast<double>(qt[d]) * k0[d];
      doto += qt[d] * seen_[d];
      unit_q_[d] += qt[d] / qn;
    }
    if (k0n > 0) sum_k0_ += dot0 / (qn * k0n);
    if (p >= 1) {
      sum_other_ += doto / (qn * static_cast<double>(p));
      ++n_other_;
    }
  }
  queries_ += q.rows;
  next_pos_ = last_pos + 1;
  return Status::Ok();
}

Result<SinkKeyGeometry> SinkKeyGeometryAccumulator::Finish(const TokenMatrix& k) const {
  ATTNLAB_RETURN_IF_ERROR(ValidateTokenMatrix(k, "k"));
  if (queries_ == 0 || k.cols != hd_ || k.rows < next_pos_) {
    return Status::InvalidArgument("sink key geometry: no query added, or keys [" +
                                   std::to_string(k.rows) + ", " + std::to_string(k.cols) +
                                   "] do not cover the queries' positions");
  }
  const int64_t hd = hd_, Tk = k.rows;
  SinkKeyGeometry g;
  g.key0_norm = RowNorm(k.row(0), hd);
  std::vector<double> kbar(hd, 0.0);
  double other_norms = 0;
  for (int64_t j = 0; j < Tk; ++j) {
    const float* r = k.row(j);
    for (int64_t d = 0; d < hd; ++d) kbar[d] += r[d];
    if (j > 0) other_norms += RowNorm(r, hd);
  }
  for (double& v : kbar) v /= static_cast<double>(Tk);
  double kbar_norm = 0, dotm = 0;
  for (int64_t d = 0; d < hd; ++d) kbar_norm += kbar[d] * kbar[d], dotm += unit_q_[d] * kbar[d];
  kbar_norm = std::sqrt(kbar_norm);
  if (Tk > 1) {
    g.mean_other_key_norm = other_norms / static_cast<double>(Tk - 1);
    g.key_norm_ratio = SafeRatio(g.key0_norm, g.mean_other_key_norm);
  } else {
    g.mean_other_key_norm = g.key0_norm;
    g.key_norm_ratio = 1.0;
  }
  const double Tq = static_cast<double>(queries_);
  g.cos_key0 = sum_k0_ / Tq;
  g.cos_key_mean = kbar_norm > 0 ? dotm / kbar_norm / Tq : 0.0;
  g.cos_key_other = n_other_ ? sum_other_ / static_cast<double>(n_other_) : 0.0;
  return g;
}

namespace {

// Every metric of ComputeRepresentationMetrics over the rows sp describes (x validated).
RepresentationMetrics AllMetrics(const TokenMatrix& x, const RepresentationMetricsOptions& opt,
                                 ThreadPool* pool, Spread& sp) {
  RepresentationMetrics m;
  m.residual = ResidualImpl(x, sp);
  m.cosine = CosineImpl(x, sp);
  m.dirichlet = DirichletImpl(x, sp);
  if (opt.effective_rank) {
    m.erank = EffectiveRankImpl(x, /*centred=*/false, pool, sp);
    m.erank_centred = EffectiveRankImpl(x, /*centred=*/true, pool, sp);
  }
  m.massive = MassiveImpl(x, opt.massive, sp);
  return m;
}

}  // namespace

Result<RepresentationMetrics> ComputeRepresentationMetrics(const TokenMatrix& x,
                                                           const RepresentationMetricsOptions& opt,
                                                           ThreadPool* pool) {
  ATTNLAB_RETURN_IF_ERROR(ValidateTokenMatrix(x));
  if (opt.massive.top_k < 0) {
    return Status::InvalidArgument("massive activations: top_k is " +
                                   std::to_string(opt.massive.top_k) + "; need >= 0");
  }
  Spread one = Spread::Local(x.rows);
  return AllMetrics(x, opt, pool, one);
}

Result<RepresentationMetrics> ComputeRepresentationMetricsAcrossRanks(
    const TokenMatrix& local, dist::Comm& comm, const RepresentationMetricsOptions& opt,
    ThreadPool* pool) {
  const int64_t first = comm.rank(), step = comm.size();
  // Every rank's verdict on its own part first, so that a bad part is an error on every rank:
  // [bad, rows, cols, -cols, first, step] summed / compared.
  Status mine = Status::Ok();
  if (local.rows < 0 || local.cols < 1 || (local.rows > 0 && local.stride < local.cols)) {
    mine = Status::InvalidArgument("representation metrics across ranks: this rank's part has "
                                   "shape [" + std::to_string(local.rows) + ", " +
                                   std::to_string(local.cols) + "], stride " +
                                   std::to_string(local.stride));
  } else if (local.rows > 0) {
    mine = ValidateTokenMatrix(local);
  }
  if (mine.ok() && opt.massive.top_k < 0) {
    mine = Status::InvalidArgument("massive activations: top_k is " +
                                   std::to_string(opt.massive.top_k) + "; need >= 0");
  }
  std::vector<double> agree = {mine.ok() ? 0.0 : 1.0, static_cast<double>(local.rows),
                               static_cast<double>(local.cols), -static_cast<double>(local.cols)};
  std::vector<double> hi = agree;
  ATTNLAB_RETURN_IF_ERROR(comm.AllReduceSum(std::span<double>(agree.data(), 2),
                                            "representation metrics: the ranks' parts"));
  ATTNLAB_RETURN_IF_ERROR(comm.AllReduceMax(std::span<double>(hi.data() + 2, 2),
                                            "representation metrics: the ranks' columns"));
  ATTNLAB_RETURN_IF_ERROR(mine);
  if (agree[0] > 0) {
    return Status::InvalidArgument("representation metrics across ranks: another rank's part is "
                                   "invalid (it reports why)");
  }
  if (hi[2] != -hi[3]) {
    return Status::InvalidArgument("representation metrics across ranks: the ranks' parts have "
                                   "different column counts (" +
                                   std::to_string(static_cast<int64_t>(-hi[3])) + " to " +
                                   std::to_string(static_cast<int64_t>(hi[2])) + ")");
  }
  const int64_t T = static_cast<int64_t>(agree[1]);
  if (T < 1) return Status::InvalidArgument("representation metrics across ranks: no rows at all");
  // The striped layout: rank r holds rows r, r + P, ... of the T rows.
  std::vector<int64_t> wrong = {local.rows != (T > first ? (T - first + step - 1) / step : 0)};
  ATTNLAB_RETURN_IF_ERROR(comm.AllReduceSum(std::span<int64_t>(wrong),
                                            "representation metrics: the ranks' row counts"));
  if (wrong[0] > 0) {
    return Status::InvalidArgument(
        "representation metrics across ranks: the rows are not striped over the ranks (rank r "
        "holds rows r, r + P, ... of all " + std::to_string(T) + "); this rank holds " +
        std::to_string(local.rows));
  }
  if (opt.effective_rank && T < local.cols) {
    // Fewer tokens than channels: the [T, T] token Gram needs every row, so gather them (T C
    // floats, fewer than C^2) into position order and compute as one process.
    std::vector<float> all(T * local.cols, 0.0f);
    for (int64_t t = 0; t < local.rows; ++t) {
      std::copy_n(local.row(t), local.cols, all.data() + (first + t * step) * local.cols);
    }
    ATTNLAB_RETURN_IF_ERROR(comm.AllReduceSum(std::span<float>(all),
                                              "representation metrics: gathering the rows"));
    return ComputeRepresentationMetrics(MakeTokenMatrix(all.data(), T, local.cols), opt, pool);
  }
  Spread sp = Spread::Local(T);
  sp.comm = &comm, sp.first = first, sp.step = step;
  RepresentationMetrics m = AllMetrics(local, opt, pool, sp);
  ATTNLAB_RETURN_IF_ERROR(sp.status);
  return m;
}

}  // namespace attnlab
