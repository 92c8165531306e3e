// The attention statistics' row pass (diagnostics/attention_stats.h) against the flash forward
// on the same causal shape, same run (issue 37: at 32k tokens analyze spent more time in the
// statistics than in the attention itself). Built with the tests, run by hand:
//   ATTNLAB_NUM_THREADS=2 build/tests/attention_stats_bench N HQ HKV D REPS
// e.g. `8192 14 2 64 3` (Qwen2.5-0.5B's heads). Prints the best of REPS for AddRows (first_k 16,
// JSD on 256 sampled rows, the previous-token diagonal: what analyze asks for) and for
// AttentionForwardFlash, each as seconds and as GFLOP/s of the causal Q K^T (N^2/2 x D x 2 per
// query head), and the ratio stats / flash.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "attnlab/attention.h"
#include "diagnostics/attention_stats.h"

namespace {

using namespace attnlab;

double Seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::vector<float> Random(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x(n);
  for (float& e : x) e = nd(rng);
  return x;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 6) {
    std::fprintf(stderr, "usage: %s N HQ HKV D REPS\n", argv[0]);
    return 2;
  }
  const int64_t n = std::atoll(argv[1]), hq = std::atoll(argv[2]), hkv = std::atoll(argv[3]),
                d = std::atoll(argv[4]), reps = std::atoll(argv[5]);
  if (n < 1 || hq < 1 || hkv < 1 || d < 1 || reps < 1 || hq % hkv != 0) {
    std::fprintf(stderr, "need N, HQ, HKV, D, REPS >= 1 and HQ %% HKV == 0\n");
    return 2;
  }
  // q token-major [N, HQ * D] as the model's rows; k, v [1, HKV, N, D].
  const std::vector<float> q = Random(n * hq * d, 1), k = Random(n * hkv * d, 2),
                           v = Random(n * hkv * d, 3);
  AttentionParams p;
  p.mask.causal = true;
  AttentionStatsOptions so;
  so.first_k = 16;
  so.jsd_rows = 256;
  so.diagonals = {AttentionDiagonal{1, 0, -1}};
  const AttentionTensor kt = ContiguousView<const float>(k.data(), 1, hkv, n, d);
  double best_stats = 1e30, best_flash = 1e30, check = 0;
  for (int64_t r = 0; r < reps; ++r) {
    auto acc = AttentionStatsAccumulator::Create(so, hq, hkv, d);
    if (!acc.ok()) {
      std::fprintf(stderr, "%s\n", acc.status().ToString().c_str());
      return 1;
    }
    const double t0 = Seconds();
    const Status st = acc->AddRows(p, q.data(), hq * d, n, kt, n);
    best_stats = std::min(best_stats, Seconds() - t0);
    if (!st.ok()) {
      std::fprintf(stderr, "%s\n", st.ToString().c_str());
      return 1;
    }
    const AttentionLayerStats s = acc->Finish();
    check = s.heads[0].entropy + s.heads[0].alpha[0];
  }
  std::vector<float> qh(n * hq * d), o(n * hq * d);
  for (int64_t t = 0; t < n; ++t) {  // head-major copy for the flash kernel
    for (int64_t h = 0; h < hq; ++h) {
      std::copy_n(&q[(t * hq + h) * d], d, &qh[(h * n + t) * d]);
    }
  }
  const AttentionShape shape{
      .batch = 1, .heads_q = hq, .heads_kv = hkv, .len_q = n, .len_k = n, .head_dim = d};
  for (int64_t r = 0; r < reps; ++r) {
    const double t0 = Seconds();
    const Status st = AttentionForwardFlash(shape, p, ContiguousView<const float>(qh.data(), 1, hq, n, d),
                                            kt, ContiguousView<const float>(v.data(), 1, hkv, n, d),
                                            ContiguousView(o.data(), 1, hq, n, d));
    best_flash = std::min(best_flash, Seconds() - t0);
    if (!st.ok()) {
      std::fprintf(stderr, "%s\n", st.ToString().c_str());
      return 1;
    }
  }
  const double qk_flops = static_cast<double>(n) * (n + 1) / 2 * d * 2 * hq;
  std::printf("N %lld HQ %lld HKV %lld D %lld: stats %.3f s (%.1f GFLOP/s of QK^T), flash forward "
              "%.3f s, stats/flash %.2f  [entropy+alpha_1 of head 0: %.9f]\n",
              static_cast<long long>(n), static_cast<long long>(hq), static_cast<long long>(hkv),
              static_cast<long long>(d), best_stats, qk_flops / best_stats * 1e-9, best_flash,
              best_stats / best_flash, check);
  return 0;
}
