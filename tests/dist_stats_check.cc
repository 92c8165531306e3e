// The attention statistics of one sequence striped over the ranks (issue 40;
// AttentionStatsAccumulator::AddStripedRows, then AllReduce) against one process's AddRows of
// the whole sequence, which every rank computes itself from the same seeded inputs. Run as
//   mpirun -np 3 --oversubscribe --mca btl self,vader build/tests/dist_stats_check
// (ctest: mpi.stats_check.np1/2/3). Exit 0 when every rank's checks hold.
//
// Checked on every rank after the merge: the row, live, entropy, alpha and diagonal counts and
// the JSD sample size exactly; every statistic within the accumulator's fp32 tolerance (1e-6
// relative, the JSD 1e-6 absolute: a row is scored in another row block than in one process);
// over lengths below the rank count (a rank without rows), not divisible by it, and past a score
// block, GQA, causal masks with a window, sinks and a masked first key, every softmax variant,
// and two sequences in a row (the kept last row: the longer sequence's). Ranks that disagree on
// the length end with the same error on every rank, never a hang.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "attnlab/attention.h"
#include "diagnostics/attention_stats.h"
#include "dist/comm.h"
#include "dist_check_util.h"

namespace {

using namespace attnlab;
using dist_check::Expect;
using dist_check::ExpectOk;

struct Case {
  int64_t hq, hkv, hd;
  std::vector<int64_t> lengths;  // sequences added in this order
  int64_t window_left = -1, n_sink = 0;
  bool mask_first_key = false;
  SoftmaxKind kind = SoftmaxKind::kStandard;
};

// (Appended piece by piece: GCC 12's -Wrestrict misfires on "literal" + std::string chains.)
std::string Name(const Case& c) {
  std::string s = "hq ";
  s += std::to_string(c.hq);
  s += " hkv ";
  s += std::to_string(c.hkv);
  s += " lengths";
  for (int64_t n : c.lengths) s += ' ' + std::to_string(n);
  s += " window ";
  s += std::to_string(c.window_left);
  s += " sinks ";
  s += std::to_string(c.n_sink);
  if (c.mask_first_key) s += " mask_first_key";
  s += " kind ";
  s += std::to_string(static_cast<int>(c.kind));
  return s;
}

bool Near(double got, double want, double rtol, double atol) {
  if (std::isnan(want) || std::isnan(got)) return std::isnan(want) && std::isnan(got);
  return std::abs(got - want) <= rtol * std::abs(want) + atol;
}

void Compare(const AttentionLayerStats& got, const AttentionLayerStats& want, const std::string& what) {
  Expect(got.rows == want.rows, what + ": rows");
  Expect(got.alpha_rows == want.alpha_rows, what + ": alpha rows");
  Expect(got.diagonal_rows == want.diagonal_rows, what + ": diagonal rows");
  Expect(got.jsd_sample_rows == want.jsd_sample_rows, what + ": JSD sample rows");
  for (size_t h = 0; h < want.heads.size(); ++h) {
    const AttentionHeadStats &g = got.heads[h], &w = want.heads[h];
    const std::string hw = what + " head " + std::to_string(h) + ": ";
    Expect(g.live_rows == w.live_rows && g.entropy_rows == w.entropy_rows, hw + "row counts");
    Expect(g.last_visible == w.last_visible, hw + "last_visible");
    auto near = [&](double a, double b, const std::string& name) {
      Expect(Near(a, b, 1e-6, 1e-12), hw + name + " got " + std::to_string(a) + " want " +
                                          std::to_string(b));
    };
    near(g.entropy, w.entropy, "entropy");
    near(g.sink_mass, w.sink_mass, "sink_mass");
    Expect(Near(g.distance, w.distance, 1e-6, 1e-9), hw + "distance");
    near(g.last_key0, w.last_key0, "last_key0");
    for (size_t j = 0; j < w.alpha.size(); ++j) {
      near(g.alpha[j], w.alpha[j], "alpha");
      near(g.alpha_uniform[j], w.alpha_uniform[j], "alpha_uniform");
      near(g.first_mass[j], w.first_mass[j], "first_mass");
    }
    for (size_t d = 0; d < w.diagonal.size(); ++d) near(g.diagonal[d], w.diagonal[d], "diagonal");
  }
  for (size_t e = 0; e < want.jsd.size(); ++e) {
    Expect(Near(got.jsd[e], want.jsd[e], 0.0, 1e-6), what + ": jsd " + std::to_string(e));
  }
}

void RunCase(const Case& c, uint32_t seed) {
  dist::Comm& w = dist::World();
  const int64_t P = w.size(), rank = w.rank();
  AttentionStatsOptions o;
  o.first_k = 3;
  o.jsd_rows = 8;
  o.diagonals = {AttentionDiagonal{1, 0, -1}, AttentionDiagonal{3, 4, 40}};
  auto one = AttentionStatsAccumulator::Create(o, c.hq, c.hkv, c.hd);
  auto mine = AttentionStatsAccumulator::Create(o, c.hq, c.hkv, c.hd);
  if (!one.ok() || !mine.ok()) {
    Expect(false, Name(c) + ": Create");
    return;
  }
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (int64_t L : c.lengths) {
    const int64_t qs = c.hq * c.hd;
    std::vector<float> q(L * qs), k(c.hkv * L * c.hd), sinks(c.hq);
    for (float& x : q) x = nd(rng);
    for (float& x : k) x = nd(rng);
    for (float& x : sinks) x = 2.0f * nd(rng);
    AttentionParams p;
    p.mask.causal = true;
    p.mask.window_left = c.window_left;
    p.mask.n_sink = c.n_sink;
    p.mask.mask_first_key = c.mask_first_key;
    p.softmax = c.kind;
    if (c.kind == SoftmaxKind::kSinkLogit) p.sink_logits = sinks;
    const AttentionTensor kt = ContiguousView<const float>(k.data(), 1, c.hkv, L, c.hd);
    ExpectOk(one->AddRows(p, q.data(), qs, L, kt, L), Name(c) + ": one process");
    const int64_t n = StripedRowCount(L, rank, P);
    std::vector<float> local(n * qs);
    for (int64_t i = 0; i < n; ++i) std::copy_n(&q[(rank + P * i) * qs], qs, &local[i * qs]);
    ExpectOk(mine->AddStripedRows(p, n > 0 ? local.data() : nullptr, qs, rank, P, kt, L),
             Name(c) + ": striped");
  }
  ExpectOk(mine->AllReduce(w, "striped statistics"), Name(c) + ": AllReduce");
  Compare(mine->Finish(), one->Finish(), Name(c));
}

}  // namespace

int main(int argc, char** argv) {
  if (!dist_check::Start(&argc, &argv)) return 1;
  dist::Comm& w = dist::World();
  const int64_t P = w.size();
  std::vector<Case> cases;
  for (int64_t L : {int64_t{1}, P, int64_t{7}, int64_t{70}, int64_t{300}}) {
    cases.push_back({4, 2, 8, {L}});
  }
  cases.push_back({3, 1, 16, {130, 40}});  // the kept last row: the first, longer sequence's
  cases.push_back({2, 2, 8, {40, 130}});
  cases.push_back({4, 2, 8, {90}, 9, 2});           // window + sinks
  cases.push_back({4, 4, 8, {90}, -1, 0, true});    // key 0 masked: row 0 sees nothing
  for (SoftmaxKind k : {SoftmaxKind::kSoftmax1, SoftmaxKind::kSinkLogit, SoftmaxKind::kSigmoid,
                        SoftmaxKind::kSoftpick}) {
    cases.push_back({4, 2, 8, {65}, -1, 0, false, k});
  }
  uint32_t seed = 1;
  for (const Case& c : cases) RunCase(c, seed++);
  // Ranks that disagree on the sequence's length: the row counts differ, AllReduce says so on
  // every rank.
  if (P > 1) {
    AttentionStatsOptions o;
    auto acc = AttentionStatsAccumulator::Create(o, 2, 1, 4);
    const int64_t L = 10 + (w.rank() == P - 1 ? 1 : 0);
    std::vector<float> q(L * 8, 0.5f), k(L * 4, 0.25f);
    AttentionParams p;
    p.mask.causal = true;
    const int64_t n = StripedRowCount(L, w.rank(), P);
    std::vector<float> local(std::max<int64_t>(1, n) * 8, 0.5f);
    ExpectOk(acc->AddStripedRows(p, local.data(), 8, w.rank(), P,
                                 ContiguousView<const float>(k.data(), 1, 1, L, 4), L),
             "mismatch: add");
    const Status st = acc->AllReduce(w, "mismatched lengths");
    Expect(!st.ok() && st.ToString().find("different rows") != std::string::npos,
           "ranks that disagree on the length get an error: " + st.ToString());
  }
  return dist_check::Finish("striped attention statistics: " + std::to_string(cases.size()) +
                                " cases on " + std::to_string(P) + " rank(s)",
                            "all match one process");
}
