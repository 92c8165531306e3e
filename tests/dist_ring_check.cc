// Ring attention under mpirun (issue 40; src/dist/ring_attention.h) against the single-process
// flash kernel on the whole sequence, which every rank computes itself from the same seeded
// inputs. Run as
//   mpirun -np 3 --oversubscribe --mca btl self,vader build/tests/dist_ring_check
// (ctest: mpi.ring_check.np1/2/3). Exit 0 when every rank's checks hold.
//
// Checked on every rank for its striped rows and tokens (token t on rank t % P): out, lse, dQ,
// dK, dV within 1e-5 of the reference's largest magnitude, and d sink_logits summed over ranks;
// over lengths equal to P, not divisible by P or by the kernels' blocks (7, 33, 130), MHA / GQA
// / MQA heads, no mask / causal / causal + mask_first_key (query 0 then sees no key: an
// all-masked row), and the softmax variants ring attention supports. Errors: fewer tokens than
// ranks, a refused mask, and ranks that disagree on the length (one rank asks for one more
// token) end with the same error on every rank, never a hang.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "attnlab/attention.h"
#include "dist/comm.h"
#include "dist_check_util.h"
#include "dist/ring_attention.h"

namespace {

using attnlab::AttentionParams;
using attnlab::AttentionShape;
using attnlab::AttentionTensor;
using attnlab::AttentionTensorMut;
using attnlab::ContiguousView;
using attnlab::SoftmaxKind;
using attnlab::Status;
namespace dist = attnlab::dist;

using attnlab::dist_check::Expect;

std::vector<float> Random(int64_t n, uint32_t seed, float sd) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, sd);
  std::vector<float> x(n);
  for (float& e : x) e = nd(rng);
  return x;
}

// Rows of the global [B, H, N, D] tensor that rank r holds: t = r, r + P, ...
std::vector<float> Stripe(const std::vector<float>& g, int64_t B, int64_t H, int64_t N,
                          int64_t D, int r, int P) {
  const int64_t n = dist::RingLocalLength(N, r, P);
  std::vector<float> out(B * H * n * D);
  for (int64_t bh = 0; bh < B * H; ++bh) {
    for (int64_t i = 0; i < n; ++i) {
      std::copy_n(g.data() + (bh * N + r + i * P) * D, D, out.data() + (bh * n + i) * D);
    }
  }
  return out;
}

double MaxAbs(const std::vector<float>& x) {
  double m = 0;
  for (float e : x) m = std::max(m, std::isfinite(e) ? std::abs(static_cast<double>(e)) : 0.0);
  return m;
}

// got vs want within tol of want's largest magnitude (-inf must match exactly).
void Near(const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
  Expect(got.size() == want.size(), what + ": size");
  const double scale = std::max(1e-30, MaxAbs(want));
  double worst = 0;
  for (size_t i = 0; i < got.size() && i < want.size(); ++i) {
    if (std::isinf(want[i]) || std::isinf(got[i])) {
      if (got[i] != want[i]) worst = INFINITY;
      continue;
    }
    worst = std::max(worst, std::abs(static_cast<double>(got[i]) - want[i]) / scale);
  }
  Expect(worst <= 1e-5, what + ": max error " + std::to_string(worst) + " of the largest |x|");
}

struct Case {
  int64_t B, Hq, Hkv, N, D;
  bool causal, mask_first;
  SoftmaxKind softmax;
  int64_t query_chunk = 1024;  // RingShape::query_chunk: small ones cross chunk boundaries
};

void RunCase(const Case& c) {
  dist::Comm& w = dist::World();
  const int P = w.size(), r = w.rank();
  const std::string what = "N " + std::to_string(c.N) + " heads " + std::to_string(c.Hq) + "/" +
                           std::to_string(c.Hkv) + " causal " + std::to_string(c.causal) +
                           " mask_first " + std::to_string(c.mask_first) + " softmax " +
                           std::to_string(static_cast<int>(c.softmax)) + " query chunk " +
                           std::to_string(c.query_chunk);
  const int64_t B = c.B, Hq = c.Hq, Hkv = c.Hkv, N = c.N, D = c.D;
  const uint32_t seed = static_cast<uint32_t>(N * 131 + Hq * 7 + Hkv);
  std::vector<float> q = Random(B * Hq * N * D, seed, 1.0f), k = Random(B * Hkv * N * D, seed + 1, 1.0f);
  std::vector<float> v = Random(B * Hkv * N * D, seed + 2, 1.0f), dout = Random(B * Hq * N * D, seed + 3, 1.0f);
  std::vector<float> sinks = Random(Hq, seed + 4, 1.0f);
  AttentionParams p;
  p.mask.causal = c.causal;
  p.mask.mask_first_key = c.mask_first;
  p.softmax = c.softmax;
  if (c.softmax == SoftmaxKind::kSinkLogit) p.sink_logits = sinks;
  if (c.softmax == SoftmaxKind::kSigmoid) p.sigmoid_bias = -std::log(static_cast<float>(N));
  // The reference on the whole sequence.
  const AttentionShape gs{B, Hq, Hkv, N, N, D};
  std::vector<float> o(q.size()), lse(B * Hq * N), dq(q.size()), dk(k.size()), dv(v.size()), ds(Hq);
  auto cq = ContiguousView<const float>(q.data(), B, Hq, N, D);
  auto ck = ContiguousView<const float>(k.data(), B, Hkv, N, D);
  auto cv = ContiguousView<const float>(v.data(), B, Hkv, N, D);
  Status st = attnlab::AttentionForwardFlash(gs, p, cq, ck, cv, ContiguousView(o.data(), B, Hq, N, D), lse);
  Expect(st.ok(), what + ": reference forward " + st.ToString());
  st = attnlab::AttentionBackwardFlash(
      gs, p, cq, ck, cv, ContiguousView<const float>(o.data(), B, Hq, N, D), lse,
      ContiguousView<const float>(dout.data(), B, Hq, N, D), ContiguousView(dq.data(), B, Hq, N, D),
      ContiguousView(dk.data(), B, Hkv, N, D), ContiguousView(dv.data(), B, Hkv, N, D),
      c.softmax == SoftmaxKind::kSinkLogit ? std::span<float>(ds) : std::span<float>());
  Expect(st.ok(), what + ": reference backward " + st.ToString());
  // This rank's stripes through the ring.
  const int64_t n = dist::RingLocalLength(N, r, P);
  std::vector<float> lq = Stripe(q, B, Hq, N, D, r, P), lk = Stripe(k, B, Hkv, N, D, r, P);
  std::vector<float> lv = Stripe(v, B, Hkv, N, D, r, P), ld = Stripe(dout, B, Hq, N, D, r, P);
  // out starts as NaN: the forward must overwrite every element, not add to what was there.
  std::vector<float> lo(lq.size(), std::numeric_limits<float>::quiet_NaN()), llse(B * Hq * n), ldq(lq.size()), ldk(lk.size()), ldv(lv.size());
  std::vector<float> lds(Hq, 0.0f);
  const dist::RingShape rs{B, Hq, Hkv, N, D, c.query_chunk};
  auto vq = ContiguousView<const float>(lq.data(), B, Hq, n, D);
  auto vk = ContiguousView<const float>(lk.data(), B, Hkv, n, D);
  auto vv = ContiguousView<const float>(lv.data(), B, Hkv, n, D);
  st = dist::RingAttentionForward(w, rs, p, vq, vk, vv, ContiguousView(lo.data(), B, Hq, n, D), llse);
  Expect(st.ok(), what + ": ring forward " + st.ToString());
  st = dist::RingAttentionBackward(
      w, rs, p, vq, vk, vv, ContiguousView<const float>(lo.data(), B, Hq, n, D), llse,
      ContiguousView<const float>(ld.data(), B, Hq, n, D), ContiguousView(ldq.data(), B, Hq, n, D),
      ContiguousView(ldk.data(), B, Hkv, n, D), ContiguousView(ldv.data(), B, Hkv, n, D),
      c.softmax == SoftmaxKind::kSinkLogit ? std::span<float>(lds) : std::span<float>());
  Expect(st.ok(), what + ": ring backward " + st.ToString());
  Near(lo, Stripe(o, B, Hq, N, D, r, P), what + " out");
  Near(llse, Stripe(lse, B, Hq, N, 1, r, P), what + " lse");
  Near(ldq, Stripe(dq, B, Hq, N, D, r, P), what + " dq");
  Near(ldk, Stripe(dk, B, Hkv, N, D, r, P), what + " dk");
  Near(ldv, Stripe(dv, B, Hkv, N, D, r, P), what + " dv");
  if (c.softmax == SoftmaxKind::kSinkLogit) {
    Expect(w.AllReduceSum(std::span<float>(lds), "d sink logits").ok(), what + ": all-reduce");
    Near(lds, ds, what + " d sink_logits");
  }
}

// Every rank must return an error (the same kind) and none may hang.
void ExpectError(const dist::RingShape& rs, const AttentionParams& p, const std::string& what) {
  dist::Comm& w = dist::World();
  const int64_t n = dist::RingLocalLength(rs.global_len, w.rank(), w.size());
  const int64_t B = rs.batch, Hq = rs.heads_q, Hkv = rs.heads_kv, D = rs.head_dim;
  const int64_t m = std::max<int64_t>(n, 1);
  std::vector<float> q(B * Hq * m * D, 0.5f), k(B * Hkv * m * D, 0.5f), o(q.size());
  const Status st = dist::RingAttentionForward(
      w, rs, p, ContiguousView<const float>(q.data(), B, Hq, n, D),
      ContiguousView<const float>(k.data(), B, Hkv, n, D),
      ContiguousView<const float>(k.data(), B, Hkv, n, D), ContiguousView(o.data(), B, Hq, n, D));
  Expect(!st.ok(), what + ": accepted");
  if (w.rank() == 0 && !st.ok()) std::printf("  error, as expected: %s\n", st.message().c_str());
}

}  // namespace

int main(int argc, char** argv) {
  if (!attnlab::dist_check::Start(&argc, &argv)) return 1;
  dist::Comm& w = dist::World();
  const int64_t P = w.size();
  std::vector<Case> cases;
  for (int64_t N : {P, int64_t{7}, int64_t{33}, int64_t{130}}) {
    for (auto [hq, hkv] : {std::pair<int64_t, int64_t>{2, 2}, {4, 2}, {3, 1}}) {
      for (int mask = 0; mask < 3; ++mask) {
        cases.push_back({1, hq, hkv, N, 8, mask >= 1, mask == 2, SoftmaxKind::kStandard});
      }
    }
  }
  for (SoftmaxKind sm : {SoftmaxKind::kSoftmax1, SoftmaxKind::kSinkLogit, SoftmaxKind::kSigmoid}) {
    cases.push_back({2, 4, 2, 33, 16, true, false, sm});
    cases.push_back({1, 2, 1, 70, 8, true, true, sm});
    cases.push_back({1, 2, 2, 19, 8, false, false, sm});
  }
  cases.push_back({1, 2, 1, 300, 64, true, false, SoftmaxKind::kStandard});  // several blocks
  // The forward's query chunks: boundaries inside every block (1 row, 5 rows, and one that
  // leaves a short last chunk), for each mask and softmax.
  for (int64_t qc : {int64_t{1}, int64_t{5}, int64_t{16}}) {
    for (int mask = 0; mask < 3; ++mask) {
      cases.push_back({2, 4, 2, 41, 8, mask >= 1, mask == 2, SoftmaxKind::kStandard, qc});
    }
    for (SoftmaxKind sm : {SoftmaxKind::kSoftmax1, SoftmaxKind::kSinkLogit, SoftmaxKind::kSigmoid}) {
      cases.push_back({1, 3, 1, 37, 8, true, qc == 5, sm, qc});
    }
  }
  for (const Case& c : cases) RunCase(c);
  // Bad input: an error on every rank.
  AttentionParams causal;
  causal.mask.causal = true;
  if (P > 1) ExpectError({1, 2, 1, P - 1, 8}, causal, "fewer tokens than ranks");
  AttentionParams window = causal;
  window.mask.window_left = 4;
  ExpectError({1, 2, 1, 20, 8}, window, "a window");
  AttentionParams softpick;
  softpick.softmax = SoftmaxKind::kSoftpick;
  ExpectError({1, 2, 1, 20, 8}, softpick, "softpick");
  if (P > 1) ExpectError({1, 2, 1, 20 + (w.rank() == P - 1 ? 1 : 0), 8}, causal, "ranks disagree");
  return attnlab::dist_check::Finish("ring attention: " + std::to_string(cases.size()) +
                                         " cases on " + std::to_string(w.size()) + " rank(s)",
                                     "all match the single-process kernel");
}
