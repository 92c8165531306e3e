// Google Benchmark driver for the flash kernels (attention.h): forward and backward over
// N in {1024, 2048, 4096} x head_dim {64, 128} x causal {0, 1}, batch 1, 8 heads, next to the
// oneDNN sgemm of the matching S = Q K^T (every head) and a 2048^3 sgemm (the practical peak).
// Every shape is validated once, forward and backward, before it is timed (tools/bench_util.h
// states the checks and the fp32 tolerance); a shape that fails is reported as an error, untimed.
//
//   ATTNLAB_NUM_THREADS=8 ./build/attention_benchmark [--benchmark_filter=flash_fwd]
//
// Threads: ATTNLAB_NUM_THREADS (default: all cores), for the engine and oneDNN's OpenMP alike.
// Counters: FLOPS, a rate (printed as e.g. 95.1G/s): AttentionForwardFlops per iteration
// (backward 2.5x; sgemm 2*M*N*K); err/tol: the shape's worst validation error over tolerance.
#include <benchmark/benchmark.h>

#include <memory>
#include <string>
#include <vector>

#include "../tools/bench_util.h"

namespace {

using namespace attnlab;

constexpr int64_t kHeads = 8;

// The problem of the shape being benchmarked, kept until the next shape (benchmarks are
// registered shape by shape) and validated on first use by a flash benchmark.
struct Current {
  int64_t n = 0, d = 0;
  bool causal = false;
  std::unique_ptr<bench::Problem> p;
  bool validated = false;
  std::string error;  // why the shape failed validation; empty if it passed
  double worst = 0;   // max over the checks of error / tolerance
};

Current& Get(int64_t n, int64_t d, bool causal, bool validate) {
  static Current c;
  if (!c.p || c.n != n || c.d != d || c.causal != causal) {
    c = Current();
    c.n = n, c.d = d, c.causal = causal;
    AttentionMask mask;
    mask.causal = causal;
    const AttentionShape s{
        .batch = 1, .heads_q = kHeads, .heads_kv = kHeads, .len_q = n, .len_k = n, .head_dim = d};
    c.p = bench::MakeProblem(s, mask, SoftmaxKind::kStandard);
  }
  if (validate && !c.validated) {
    c.validated = true;
    std::vector<bench::Check> checks;
    const Status st = bench::Validate(*c.p, /*backward=*/true, &checks);
    if (!st.ok()) c.error = st.ToString();
    for (const bench::Check& ch : checks) {
      c.worst = std::max(c.worst, ch.max_err / ch.tol);
      if (!ch.ok() && c.error.empty()) {
        c.error = "validation failed: " + ch.name + ": max abs error " +
                  std::to_string(ch.max_err) + " > tolerance " + std::to_string(ch.tol);
      }
    }
  }
  return c;
}

void SetFlops(benchmark::State& state, double flops_per_iteration) {
  state.counters["FLOPS"] = benchmark::Counter(
      flops_per_iteration * static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
}

void BM_Flash(benchmark::State& state, int64_t n, int64_t d, bool causal, bool backward) {
  Current& c = Get(n, d, causal, /*validate=*/true);
  if (!c.error.empty()) {
    state.SkipWithError(c.error.c_str());
    return;
  }
  for (auto _ : state) {  // the backward reads the out and lse that validation left in c.p
    const Status st = backward ? bench::FlashBackward(*c.p) : bench::FlashForward(*c.p);
    if (!st.ok()) {
      state.SkipWithError(st.ToString().c_str());
      break;
    }
  }
  SetFlops(state, AttentionForwardFlops(c.p->shape, causal) * (backward ? 2.5 : 1.0));
  state.counters["err/tol"] = c.worst;
}

void BM_SgemmQK(benchmark::State& state, int64_t n, int64_t d) {
  Current& c = Get(n, d, /*causal=*/false, /*validate=*/false);
  std::vector<float> s;
  for (auto _ : state) {
    if (bench::SgemmQK(*c.p, s) != dnnl_success) {
      state.SkipWithError("dnnl_sgemm failed");
      break;
    }
  }
  SetFlops(state, bench::SgemmQKFlops(c.p->shape));
}

void BM_SgemmPeak(benchmark::State& state) {
  bench::SquareSgemm g(state.range(0));
  for (auto _ : state) {
    if (g.Run() != dnnl_success) {
      state.SkipWithError("dnnl_sgemm failed");
      break;
    }
  }
  SetFlops(state, g.Flops());
}

}  // namespace

int main(int argc, char** argv) {
  bench::MatchOneDnnThreads();
  benchmark::AddCustomContext("attnlab_threads", std::to_string(DefaultThreadCount()));
  benchmark::AddCustomContext("onednn_omp_threads", std::to_string(omp_get_max_threads()));
  benchmark::AddCustomContext("cpu_model", bench::CpuModel());
  std::vector<benchmark::internal::Benchmark*> all;
  all.push_back(benchmark::RegisterBenchmark("sgemm_peak", BM_SgemmPeak)->Arg(2048));
  for (const int64_t n : {1024, 2048, 4096}) {
    for (const int64_t d : {64, 128}) {
      const std::string shape = "/n:" + std::to_string(n) + "/d:" + std::to_string(d);
      all.push_back(benchmark::RegisterBenchmark(("sgemm_qk" + shape).c_str(), BM_SgemmQK, n, d));
      for (const bool causal : {false, true}) {
        const std::string name = shape + "/causal:" + std::to_string(causal);
        all.push_back(benchmark::RegisterBenchmark(("flash_fwd" + name).c_str(), BM_Flash, n, d,
                                                   causal, false));
        all.push_back(benchmark::RegisterBenchmark(("flash_bwd" + name).c_str(), BM_Flash, n, d,
                                                   causal, true));
      }
    }
  }
  for (benchmark::internal::Benchmark* b : all) b->UseRealTime()->Unit(benchmark::kMillisecond);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
