// Ring attention's time and how much of its communication the compute hides (issue 40;
// docs/DISTRIBUTED.md). Run under the launcher, one thread per rank on a 2-core machine:
//   mpirun -np 2 --mca btl self,vader build/tests/ring_attention_bench N HQ HKV D REPS
// and the single-process baseline on the same machine (all its threads):
//   ATTNLAB_NUM_THREADS=2 build/tests/ring_attention_bench N HQ HKV D REPS
// Prints, per causal forward and forward + backward over N tokens (batch 1): the wall time
// (slowest rank, best of REPS), the compute and the wait inside it, the bytes one rank sends, and
// the time the same transfers take with no compute beside them (the ring exchange alone). The
// waits (which also hold the ranks' imbalance) bound the unhidden communication from above. As
// one process it times the flash kernels.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "attnlab/attention.h"
#include "attnlab/thread_pool.h"
#include "core/process_memory.h"
#include "dist/comm.h"
#include "dist/ring_attention.h"

namespace {

using attnlab::ContiguousView;
namespace dist = attnlab::dist;

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::vector<float> Random(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x(n);
  for (float& e : x) e = nd(rng);
  return x;
}

// The slowest rank's value.
double Slowest(dist::Comm& w, double x) {
  std::vector<double> v{x};
  (void)w.AllReduceMax(v, "bench max");
  return v[0];
}

}  // namespace

int main(int argc, char** argv) {
  if (auto st = dist::InitWorld(&argc, &argv); !st.ok()) {
    std::fprintf(stderr, "%s\n", st.ToString().c_str());
    return 1;
  }
  if (argc != 6) {
    std::fprintf(stderr, "usage: ring_attention_bench N HEADS_Q HEADS_KV HEAD_DIM REPS\n");
    return 2;
  }
  const int64_t N = std::atoll(argv[1]), Hq = std::atoll(argv[2]), Hkv = std::atoll(argv[3]);
  const int64_t D = std::atoll(argv[4]);
  const int reps = std::max(1, std::atoi(argv[5]));
  dist::Comm& w = dist::World();
  const int P = w.size(), r = w.rank();
  if (N < P || Hq < 1 || Hkv < 1 || Hq % Hkv != 0 || D < 1) {
    std::fprintf(stderr, "ring_attention_bench: bad sizes\n");
    return 2;
  }
  const int64_t n = dist::RingLocalLength(N, r, P);
  std::vector<float> q = Random(Hq * n * D, 1 + r), k = Random(Hkv * n * D, 11 + r);
  std::vector<float> v = Random(Hkv * n * D, 21 + r), dout = Random(Hq * n * D, 31 + r);
  std::vector<float> o(q.size()), lse(Hq * n), dq(q.size()), dk(k.size()), dv(v.size());
  attnlab::AttentionParams p;
  p.mask.causal = true;
  const dist::RingShape rs{1, Hq, Hkv, N, D};
  auto cq = ContiguousView<const float>(q.data(), 1, Hq, n, D);
  auto ck = ContiguousView<const float>(k.data(), 1, Hkv, n, D);
  auto cv = ContiguousView<const float>(v.data(), 1, Hkv, n, D);
  double best_f = 1e30, best_fb = 1e30;
  dist::RingStats sf, sb;
  for (int rep = 0; rep < reps; ++rep) {
    dist::RingStats f, b;
    (void)w.Barrier("bench");
    const double t0 = Now();
    auto st = dist::RingAttentionForward(w, rs, p, cq, ck, cv, ContiguousView(o.data(), 1, Hq, n, D), lse, &f);
    const double t1 = Now();
    if (st.ok()) {
      st = dist::RingAttentionBackward(
          w, rs, p, cq, ck, cv, ContiguousView<const float>(o.data(), 1, Hq, n, D), lse,
          ContiguousView<const float>(dout.data(), 1, Hq, n, D), ContiguousView(dq.data(), 1, Hq, n, D),
          ContiguousView(dk.data(), 1, Hkv, n, D), ContiguousView(dv.data(), 1, Hkv, n, D), {}, &b);
    }
    const double t2 = Now();
    if (!st.ok()) {
      std::fprintf(stderr, "rank %d: %s\n", r, st.ToString().c_str());
      dist::AbortWorld(1);
    }
    const double tf = Slowest(w, t1 - t0), tfb = Slowest(w, t2 - t0);
    if (tf < best_f) best_f = tf, sf = f;
    if (tfb < best_fb) best_fb = tfb, sb = b;
  }
  // The same transfers with nothing beside them: P - 1 steps of the K/V buffer (forward).
  const int64_t n0 = dist::RingLocalLength(N, 0, P);
  std::vector<float> a(2 * Hkv * n0 * D), c(a.size());
  double exch = 1e30;
  for (int rep = 0; rep < reps && P > 1; ++rep) {
    (void)w.Barrier("bench");
    const double t0 = Now();
    for (int t = 0; t + 1 < P; ++t) {
      std::vector<dist::Request> rq;
      const int64_t bytes = static_cast<int64_t>(a.size() * sizeof(float));
      rq.push_back(std::move(w.Irecv(c.data(), bytes, (r + P - 1) % P, 7, "exchange")).value());
      rq.push_back(std::move(w.Isend(a.data(), bytes, (r + 1) % P, 7, "exchange")).value());
      (void)w.Wait(rq);
    }
    exch = std::min(exch, Slowest(w, Now() - t0));
  }
  const double rss = Slowest(w, static_cast<double>(attnlab::PeakResidentBytes()));  // the largest rank's peak
  if (w.root()) {
    std::printf("ring attention bench: N %lld, heads %lld/%lld, head_dim %lld, causal, %d rank(s) x "
                "%d thread(s), best of %d\n",
                static_cast<long long>(N), static_cast<long long>(Hq), static_cast<long long>(Hkv),
                static_cast<long long>(D), P, attnlab::DefaultThreadCount(), reps);
    std::printf("  forward:            %8.4f s (rank 0: compute %.4f s, wait %.4f s, sent %.1f MB)\n",
                best_f, sf.compute_s, sf.wait_s, sf.bytes_sent / 1e6);
    std::printf("  forward + backward: %8.4f s (backward on rank 0: compute %.4f s, wait %.4f s, sent %.1f MB)\n",
                best_fb, sb.compute_s, sb.wait_s, sb.bytes_sent / 1e6);
    if (P > 1) {
      // The wait also holds any imbalance between the ranks, so it bounds what the compute
      // failed to hide from above.
      std::printf("  waits: %.1f%% of the forward, %.1f%% of the backward; the forward's K/V "
                  "exchange alone (%d step(s), no compute): %.4f s\n",
                  100.0 * sf.wait_s / best_f, 100.0 * sb.wait_s / std::max(best_fb - best_f, 1e-12),
                  P - 1, exch);
    }
    std::printf("  peak RSS of the largest rank: %.0f MB\n", rss / 1e6);
  }
  dist::FinalizeWorld();
  return 0;
}
