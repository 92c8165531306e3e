#include "experiments/recall_probe.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "attnlab/attention.h"
#include "attnlab/linear_attention.h"
#include "attnlab/tensor_view.h"
#include "train/token_data.h"

namespace attnlab::experiments {
namespace {

constexpr double kTwoPi = 6.283185307179586, kSqrtTwoPi = 2.5066282746310002;

double Phi(double x) { return x > 0 ? x + 1 : std::exp(x); }  // elu + 1

// Standard normal draws from a counter-based stream (Box-Muller), identical on every platform
// up to libm's log/cos/sin rounding, which is the same for a given build.
struct Normal {
  uint64_t state;
  double Unit() { return (static_cast<double>(SplitMix64(state++) >> 11) + 0.5) * 0x1.0p-53; }  // (0, 1)
  double Next() {
    const double u = Unit(), v = Unit();
    return std::sqrt(-2 * std::log(u)) * std::cos(kTwoPi * v);
  }
};

double RelDiff(double a, double b) { return std::fabs(a - b) / std::max(std::fabs(b), 1e-300); }

}  // namespace

double LinearTargetRatio(double beta) {
  // E[f(x)] for x ~ N(0, 1) by composite Simpson on [-12, 12] with a node at 0 (phi's kink).
  auto expect = [](auto f) {
    const int64_t n = 24000;  // even
    const double a = -12, h = 24.0 / static_cast<double>(n);
    double s = 0;
    for (int64_t i = 0; i <= n; ++i) {
      const double x = a + h * static_cast<double>(i);
      const double w = (i == 0 || i == n) ? 1 : (i % 2 ? 4 : 2);
      s += w * f(x) * std::exp(-0.5 * x * x);
    }
    return s * h / 3 / kSqrtTwoPi;
  };
  const double both = expect([&](double x) { return Phi(beta * x) * Phi(x); });
  const double q = expect([&](double x) { return Phi(beta * x); });
  const double k = expect([](double x) { return Phi(x); });
  return both / (q * k);
}

double PredictedSoftmaxMass(int64_t n, double beta, int64_t d) {
  // Given u = |k_t|^2 ~ chi^2_d: the target scores beta u / sqrt(d), every other key's score is
  // N(0, beta^2 u / d), whose exp has mean exp(beta^2 u / (2d)); the sum over the N - 1 others is
  // replaced by its mean. Then the expectation over u by Simpson's rule on the chi^2_d density.
  const double dd = static_cast<double>(d), lo = 0, hi = dd + 40 * std::sqrt(2 * dd) + 40;
  const int64_t steps = 20000;  // even
  const double h = (hi - lo) / static_cast<double>(steps);
  const double log_norm = -0.5 * dd * std::log(2.0) - std::lgamma(0.5 * dd);
  double s = 0;
  for (int64_t i = 1; i <= steps; ++i) {  // the density vanishes at u = 0 for d >= 3
    const double u = lo + h * static_cast<double>(i);
    const double w = i == steps ? 1 : (i % 2 ? 4 : 2);
    const double density = std::exp(log_norm + (0.5 * dd - 1) * std::log(u) - 0.5 * u);
    const double margin = beta * u / std::sqrt(dd) - beta * beta * u / (2 * dd);
    s += w * density / (1 + static_cast<double>(n - 1) * std::exp(-margin));
  }
  return s * h / 3;
}

double LogLogSlope(const std::vector<double>& x, const std::vector<double>& y) {
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  int64_t n = 0;
  for (size_t i = 0; i < std::min(x.size(), y.size()); ++i) {
    if (!(x[i] > 0 && y[i] > 0 && std::isfinite(x[i]) && std::isfinite(y[i]))) continue;
    const double lx = std::log(x[i]), ly = std::log(y[i]);
    sx += lx, sy += ly, sxx += lx * lx, sxy += lx * ly;
    ++n;
  }
  const double den = static_cast<double>(n) * sxx - sx * sx;
  if (n < 2 || !(den > 0)) return NAN;
  return (static_cast<double>(n) * sxy - sx * sy) / den;
}

Result<DilutionResult> RunDilutionProbe(const DilutionOptions& o) {
  if (o.head_dim < 3 || o.seeds < 1) {
    return Status::InvalidArgument("dilution probe: need head_dim >= 3 and seeds >= 1");
  }
  for (int64_t n : o.lengths) {
    if (n < 1) return Status::InvalidArgument("dilution probe: every length must be >= 1, got " + std::to_string(n));
  }
  for (double b : o.betas) {
    if (!(b > 0) || !std::isfinite(b)) return Status::InvalidArgument("dilution probe: every beta must be > 0");
  }
  const int64_t d = o.head_dim;
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  DilutionResult r;
  for (double beta : o.betas) {
    const double ratio = LinearTargetRatio(beta);
    for (int64_t n : o.lengths) {
      DilutionPoint p;
      p.n = n;
      p.beta = beta;
      p.predicted_linear = ratio / (ratio + static_cast<double>(n - 1));
      p.predicted_softmax = PredictedSoftmaxMass(n, beta, d);
      // Buffers: keys and one-hot values [n, d]; linear attention's queries [n, d] (every row q;
      // only the last, which sees all n keys, is read) and its output [n, d].
      std::vector<float> k(n * d), v(n * d, 0.0f), ql(n * d), ol(n * d), qs(d), os(d);
      for (int64_t s = 0; s < o.seeds; ++s) {
        // The same keys and target for every beta: one stream per (n, seed).
        Normal g{SplitMix64(o.seed * 0x9e3779b97f4a7c15ULL + static_cast<uint64_t>(n) * 1000003ULL +
                            static_cast<uint64_t>(s))};
        for (float& x : k) x = static_cast<float>(g.Next());
        const int64_t t = static_cast<int64_t>(SplitMix64(g.state++) % static_cast<uint64_t>(n));
        std::fill(v.begin(), v.end(), 0.0f);
        v[t * d] = 1.0f;
        for (int64_t e = 0; e < d; ++e) qs[e] = static_cast<float>(beta * k[t * d + e]);
        for (int64_t i = 0; i < n; ++i) std::copy(qs.begin(), qs.end(), ql.begin() + i * d);

        // Engine: softmax, one query row over n keys (no mask), default scale 1/sqrt(d).
        AttentionShape sh{1, 1, 1, 1, n, d};
        AttentionParams ap;
        ATTNLAB_RETURN_IF_ERROR(AttentionForwardFlash(
            sh, ap, ContiguousView<const float>(qs.data(), 1, 1, 1, d),
            ContiguousView<const float>(k.data(), 1, 1, n, d), ContiguousView<const float>(v.data(), 1, 1, n, d),
            ContiguousView<float>(os.data(), 1, 1, 1, d)));
        // Engine: causal linear attention over the n tokens; the last row sees every key.
        AttentionShape lsh{1, 1, 1, n, n, d};
        ATTNLAB_RETURN_IF_ERROR(LinearAttentionForwardChunked(
            lsh, LinearAttentionParams{}, ContiguousView<const float>(ql.data(), 1, 1, n, d),
            ContiguousView<const float>(k.data(), 1, 1, n, d), ContiguousView<const float>(v.data(), 1, 1, n, d),
            ContiguousView<float>(ol.data(), 1, 1, n, d)));
        const double soft = os[0], lin = ol[(n - 1) * d];

        // Plain double loops over the same fp32 inputs.
        std::vector<double> score(n);
        double m = -INFINITY, wsum = 0, wt = 0;
        for (int64_t j = 0; j < n; ++j) {
          double dot = 0, w = 0;
          for (int64_t e = 0; e < d; ++e) {
            dot += static_cast<double>(qs[e]) * k[j * d + e];
            w += Phi(qs[e]) * Phi(k[j * d + e]);
          }
          score[j] = dot * scale;
          m = std::max(m, score[j]);
          wsum += w;
          if (j == t) wt = w;
        }
        double z = 0;
        for (int64_t j = 0; j < n; ++j) z += std::exp(score[j] - m);
        const double soft_plain = std::exp(score[t] - m) / z, lin_plain = wt / wsum;

        p.softmax += soft;
        p.linear += lin;
        p.softmax_plain += soft_plain;
        p.linear_plain += lin_plain;
        r.max_rel_diff = std::max({r.max_rel_diff, RelDiff(soft, soft_plain), RelDiff(lin, lin_plain)});
      }
      const double inv = 1.0 / static_cast<double>(o.seeds);
      p.softmax *= inv, p.linear *= inv, p.softmax_plain *= inv, p.linear_plain *= inv;
      r.points.push_back(p);
    }
  }
  return r;
}

}  // namespace attnlab::experiments
