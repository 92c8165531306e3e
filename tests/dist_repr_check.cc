// The representation metrics of one matrix striped over the ranks (issue 40;
// ComputeRepresentationMetricsAcrossRanks) against ComputeRepresentationMetrics of the whole
// matrix in one process, which every rank computes itself from the same seeded rows. Run as
//   mpirun -np 3 --oversubscribe --mca btl self,vader build/tests/dist_repr_check
// (ctest: mpi.repr_check.np1/2/3). Exit 0 when every rank's checks hold.
//
// Checked on every rank: the counts (non-zero rows, numerical ranks, massive entries), the
// median, the largest entry and its position and the top entries exactly; the sums (residual,
// cosine, Dirichlet energy, effective ranks) within 1e-12 relative (the additions run in another
// order: each rank's part, then the ranks in order). Shapes: fewer rows than ranks (a rank with
// none), T below and above C (the token Gram gathers the rows, the feature Gram adds up), an
// odd and an even number of entries (the median's two middle values), identical rows (collapse:
// residual 0, cosine 1, effective rank 1 exactly), a zero row, ties at the largest |x| on two
// ranks (the earlier row wins), a massive channel. A rank whose part has NaN, another width or
// a row count that is not the striped layout's ends with an error on every rank, never a hang.
// The head CKA accumulator and the sink-key geometry fed striped rows chunk by chunk and merged
// (AllReduce) equal one accumulator fed every row (CKA 1e-10, geometry 1e-12), also with
// fewer rows than ranks. Token 0's norm against the others' (ComputeTokenZeroNormAcrossRanks)
// equals one process's (norm0 exactly, the mean 1e-12; T = 1 an error on both sides).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "diagnostics/extreme_tokens.h"
#include "diagnostics/representation_metrics.h"
#include "dist/comm.h"
#include "dist_check_util.h"

namespace {

using namespace attnlab;
using dist_check::Expect;
using dist_check::ExpectOk;

struct Case {
  std::string name;
  int64_t T, C;
  int kind;  // 0 random, 1 identical rows, 2 a zero row + ties + a massive channel
};

std::vector<float> MakeRows(const Case& cs, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x(cs.T * cs.C);
  for (float& v : x) v = nd(rng);
  if (cs.kind == 1) {
    for (int64_t t = 1; t < cs.T; ++t) std::copy_n(x.data(), cs.C, x.data() + t * cs.C);
  } else if (cs.kind == 2) {
    if (cs.T > 2) std::fill_n(x.data() + 2 * cs.C, cs.C, 0.0f);  // a zero row
    for (int64_t t = 0; t < cs.T; ++t) x[t * cs.C + cs.C / 2] *= 200.0f;  // a massive channel
    // Ties at the largest |x| in rows 1 and T - 1 (on two ranks when P >= 2), opposite signs.
    const float big = 1e5f;
    x[1 * cs.C + 3 % cs.C] = -big;
    x[(cs.T - 1) * cs.C + 1 % cs.C] = big;
  }
  return x;
}

bool Close(double got, double want, double rtol) {
  if (std::isinf(want) || std::isinf(got)) return got == want;
  return std::abs(got - want) <= rtol * std::max(1.0, std::abs(want));
}

void RunCase(const Case& cs) {
  dist::Comm& w = dist::World();
  const int P = w.size(), r = w.rank();
  const std::vector<float> x = MakeRows(cs, static_cast<uint64_t>(cs.T * 131 + cs.C + cs.kind));
  RepresentationMetricsOptions opt;
  opt.massive.top_k = 7;
  auto one = ComputeRepresentationMetrics(MakeTokenMatrix(x.data(), cs.T, cs.C), opt);
  ExpectOk(one.status(), cs.name + ": one process");
  // This rank's rows r, r + P, ...
  std::vector<float> mine;
  int64_t n = 0;
  for (int64_t t = r; t < cs.T; t += P, ++n) {
    mine.insert(mine.end(), x.begin() + t * cs.C, x.begin() + (t + 1) * cs.C);
  }
  auto got = ComputeRepresentationMetricsAcrossRanks(
      MakeTokenMatrix(n > 0 ? mine.data() : nullptr, n, cs.C), w, opt);
  ExpectOk(got.status(), cs.name + ": across ranks");
  // Token 0's norm against the others' (the residual peak, the value drain).
  auto z1 = ComputeTokenZeroNorm(MakeTokenMatrix(x.data(), cs.T, cs.C));
  auto zr = ComputeTokenZeroNormAcrossRanks(MakeTokenMatrix(n > 0 ? mine.data() : nullptr, n, cs.C), w);
  Expect(z1.ok() == zr.ok(), cs.name + ": token-0 norm accepted on one side only");
  if (z1.ok() && zr.ok()) {
    Expect(zr.value().norm0 == z1.value().norm0 &&
               Close(zr.value().mean_other, z1.value().mean_other, 1e-12) &&
               (std::isnan(z1.value().ratio) ? std::isnan(zr.value().ratio)
                                             : Close(zr.value().ratio, z1.value().ratio, 1e-12)),
           cs.name + ": token-0 norm");
  }
  if (!one.ok() || !got.ok()) return;
  const RepresentationMetrics &a = got.value(), &b = one.value();
  const double tol = 1e-12;
  const auto near = [&](double g, double want, const char* what) {
    Expect(Close(g, want, tol), cs.name + ": " + what + " " + std::to_string(g) + " vs " +
                                    std::to_string(want));
  };
  near(a.residual.relative, b.residual.relative, "residual");
  near(a.residual.norm, b.residual.norm, "residual norm");
  near(a.cosine.mean_cosine, b.cosine.mean_cosine, "mean cosine");
  near(a.cosine.mad, b.cosine.mad, "mad");
  Expect(a.cosine.nonzero_rows == b.cosine.nonzero_rows, cs.name + ": non-zero rows");
  near(a.dirichlet.energy, b.dirichlet.energy, "dirichlet");
  near(a.dirichlet.relative, b.dirichlet.relative, "dirichlet relative");
  near(a.dirichlet.mean_sq_norm, b.dirichlet.mean_sq_norm, "mean squared norm");
  // The eigensolver sees Grams that differ by rounding: 1e-9 on the effective ranks.
  Expect(Close(a.erank.erank, b.erank.erank, 1e-9), cs.name + ": effective rank " +
                                                        std::to_string(a.erank.erank) + " vs " +
                                                        std::to_string(b.erank.erank));
  Expect(Close(a.erank_centred.erank, b.erank_centred.erank, 1e-9),
         cs.name + ": centred effective rank " + std::to_string(a.erank_centred.erank) + " vs " +
             std::to_string(b.erank_centred.erank));
  Expect(a.erank.numerical_rank == b.erank.numerical_rank &&
             a.erank_centred.numerical_rank == b.erank_centred.numerical_rank,
         cs.name + ": numerical ranks");
  const MassiveActivations &ma = a.massive, &mb = b.massive;
  Expect(ma.max_abs == mb.max_abs && ma.median_abs == mb.median_abs &&
             ma.max.token == mb.max.token && ma.max.channel == mb.max.channel &&
             ma.max.value == mb.max.value && ma.massive_count == mb.massive_count,
         cs.name + ": massive activations (max at " + std::to_string(ma.max.token) + "," +
             std::to_string(ma.max.channel) + " vs " + std::to_string(mb.max.token) + "," +
             std::to_string(mb.max.channel) + "; median " + std::to_string(ma.median_abs) +
             " vs " + std::to_string(mb.median_abs) + ")");
  bool same_top = ma.top.size() == mb.top.size();
  for (size_t i = 0; same_top && i < mb.top.size(); ++i) {
    same_top = ma.top[i].token == mb.top[i].token && ma.top[i].channel == mb.top[i].channel &&
               ma.top[i].value == mb.top[i].value;
  }
  Expect(same_top, cs.name + ": top entries");
  if (cs.kind == 1) {  // collapse, exactly
    Expect(a.residual.relative == 0 && a.cosine.mean_cosine == 1 && a.dirichlet.energy == 0 &&
               a.erank.erank == 1,
           cs.name + ": identical rows are collapse exactly");
  }
}

// The head CKA's Gram and the sink-key geometry of striped rows (chunk by chunk, as a forward
// feeds them), merged over the ranks, against one accumulator fed every row (1e-10: the Grams are
// re-centred on the global mean and summed in another order).
void RunAccumulatorCase(int64_t T, int64_t H, int64_t hd, int64_t chunk) {
  dist::Comm& w = dist::World();
  const int P = w.size(), r = w.rank();
  const std::string what = "accumulators T=" + std::to_string(T) + " chunk " + std::to_string(chunk);
  const int64_t A = H * hd;
  std::mt19937_64 rng(static_cast<uint64_t>(T * 7 + H));
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> att(T * A), q(T * hd), k(T * hd);
  for (float& v : att) v = nd(rng) + 3.0f;  // off-centre: the shifts matter
  for (float& v : q) v = nd(rng);
  for (float& v : k) v = nd(rng);
  std::fill_n(k.data() + std::min<int64_t>(T - 1, 2) * hd, hd, 0.0f);  // a zero key
  auto one = HeadCkaAccumulator::Create(H, A);
  auto mine = HeadCkaAccumulator::Create(H, A);
  ExpectOk(one.status(), what + ": create");
  if (!one.ok() || !mine.ok()) return;
  ExpectOk(one.value().Add(MakeTokenMatrix(att.data(), T, A)), what + ": one process");
  SinkKeyGeometryAccumulator gone(hd), gmine(hd);
  const TokenMatrix km = MakeTokenMatrix(k.data(), T, hd);
  ExpectOk(gone.Add(MakeTokenMatrix(q.data(), T, hd), km, 0), what + ": geometry, one process");
  // This rank's rows r, r + P, ... in chunks of `chunk` rows.
  std::vector<float> ra, rq;
  for (int64_t t = r; t < T; t += P) {
    ra.insert(ra.end(), att.begin() + t * A, att.begin() + (t + 1) * A);
    rq.insert(rq.end(), q.begin() + t * hd, q.begin() + (t + 1) * hd);
  }
  const int64_t n = static_cast<int64_t>(rq.size()) / hd;
  for (int64_t i0 = 0; i0 < n; i0 += chunk) {
    const int64_t m = std::min(chunk, n - i0);
    ExpectOk(mine.value().Add(MakeTokenMatrix(ra.data() + i0 * A, m, A)), what + ": striped CKA rows");
    ExpectOk(gmine.Add(MakeTokenMatrix(rq.data() + i0 * hd, m, hd), km, r + i0 * P, P),
             what + ": striped queries");
  }
  ExpectOk(mine.value().AllReduce(w, "head CKA"), what + ": CKA AllReduce");
  ExpectOk(gmine.AllReduce(w, "geometry"), what + ": geometry AllReduce");
  Expect(!gmine.Add(MakeTokenMatrix(q.data(), 1, hd), km, T - 1).ok(),
         what + ": an Add after AllReduce was accepted");
  auto a = mine.value().Finish(), b = one.value().Finish();
  ExpectOk(a.status(), what + ": CKA finish");
  if (a.ok() && b.ok()) {
    double worst = 0;
    for (size_t i = 0; i < b.value().size(); ++i) {
      worst = std::max(worst, std::abs(a.value()[i] - b.value()[i]));
    }
    Expect(worst <= 1e-10, what + ": head CKA differs by " + std::to_string(worst));
  }
  auto ga = gmine.Finish(km), gb = gone.Finish(km);
  ExpectOk(ga.status(), what + ": geometry finish");
  if (ga.ok() && gb.ok()) {
    const SinkKeyGeometry &x = ga.value(), &y = gb.value();
    Expect(Close(x.cos_key0, y.cos_key0, 1e-12) && Close(x.cos_key_other, y.cos_key_other, 1e-12) &&
               Close(x.cos_key_mean, y.cos_key_mean, 1e-12) &&
               Close(x.key_norm_ratio, y.key_norm_ratio, 1e-12),
           what + ": geometry (cos_key0 " + std::to_string(x.cos_key0) + " vs " +
               std::to_string(y.cos_key0) + ", cos_key_other " + std::to_string(x.cos_key_other) +
               " vs " + std::to_string(y.cos_key_other) + ")");
  }
}

// Every rank must get an error; rank 0 prints it.
void ExpectError(const TokenMatrix& local, const std::string& what) {
  dist::Comm& w = dist::World();
  auto got = ComputeRepresentationMetricsAcrossRanks(local, w);
  Expect(!got.ok(), what + ": accepted");
  if (w.root() && !got.ok()) {
    std::printf("  error, as expected (%s): %s\n", what.c_str(), got.status().message().c_str());
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (!dist_check::Start(&argc, &argv)) return 1;
  dist::Comm& w = dist::World();
  const int P = w.size(), r = w.rank();
  const std::vector<Case> cases = {
      {"T=1", 1, 5, 0},           {"T=2 (fewer rows than 3 ranks)", 2, 6, 0},
      {"T<C", 7, 16, 0},          {"T<C odd entries", 9, 11, 2},
      {"T>C", 70, 12, 0},         {"T>C even entries", 64, 9, 2},
      {"identical rows", 33, 8, 1}, {"identical rows T<C", 5, 12, 1},
      {"zero row, ties, massive", 301, 24, 2},
  };
  for (const Case& cs : cases) RunCase(cs);
  for (auto [T, chunk] : {std::pair<int64_t, int64_t>{1, 1}, {2, 1}, {37, 4}, {200, 64}}) {
    RunAccumulatorCase(T, 3, 8, chunk);
  }
  // Bad parts: an error on every rank.
  const int64_t T = 10, C = 4, n = (T - r + P - 1) / P;
  std::vector<float> rows((n + 2) * C, 1.0f);
  for (int64_t i = 0; i < static_cast<int64_t>(rows.size()); ++i) rows[i] = 0.5f * static_cast<float>(i % 7);
  std::vector<float> bad = rows;
  if (r == P - 1) bad[0] = std::nanf("");
  ExpectError(MakeTokenMatrix(bad.data(), n, C), "NaN on the last rank");
  if (P > 1) {
    ExpectError(MakeTokenMatrix(rows.data(), n, r == P - 1 ? C - 1 : C), "another width on the last rank");
    ExpectError(MakeTokenMatrix(rows.data(), r == 0 ? n + 2 : n, C), "two extra rows on rank 0");
  }
  ExpectError(MakeTokenMatrix(nullptr, 0, C), "no rows on any rank");
  // Still usable after the errors.
  RunCase({"after errors", 12, 5, 0});
  return dist_check::Finish("representation metrics across " + std::to_string(P) + " rank(s): " +
                                std::to_string(cases.size() + 1) + " cases",
                            "all match one process");
}
