// The run-time half of the SIMD dispatch: which targets this binary holds, which this CPU can
// run, and the active one (attnlab/simd_target.h).
#include "engine/kernel_table.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace attnlab {
namespace internal {
namespace {

#define ATTNLAB_OPS_ENTRY(name) t.ops.name = &ns_::name;
#define ATTNLAB_KERNEL_TABLE(ns, target_enum)                                          \
  [] {                                                                                 \
    namespace ns_ = ns;                                                                \
    KernelTable t{target_enum,          0, 0, 0, &ns::FlashForwardTask,                \
                  &ns::FlashBackwardTask, &ns::DecodeTask, &ns::WeightRowsTask,        \
                  &ns::WidenRows,         OpsTable{}, RowStatsTable{}, GramTable{}};   \
    ATTNLAB_DISPATCHED_OPS(ATTNLAB_OPS_ENTRY)                                          \
    t.row_stats = {&ns::RowMax,         &ns::RowArgMax,  &ns::SoftmaxRowSums,           \
                   &ns::SigmoidRowSums, &ns::JsDistance, &ns::Exp2Accumulate,          \
                   &ns::ScorePanels};                                                  \
    t.gram = {&ns::GramColumns, &ns::GramLowerColumns};                                \
    ns::DescribeTarget(&t.lanes, &t.tile_rows, &t.tile_cols);                          \
    return t;                                                                          \
  }()

// The table of a compiled target, or null. Function-local statics: safe to call from any
// static initialiser.
const KernelTable* TableOf(SimdTarget target) {
  switch (target) {
    case SimdTarget::kBaseline: {
      static const KernelTable t = ATTNLAB_KERNEL_TABLE(baseline, SimdTarget::kBaseline);
      return &t;
    }
    case SimdTarget::kAvx2: {
#if defined(ATTNLAB_HAVE_TARGET_AVX2)
      static const KernelTable t = ATTNLAB_KERNEL_TABLE(avx2, SimdTarget::kAvx2);
      return &t;
#else
      return nullptr;
#endif
    }
    case SimdTarget::kAvx512: {
#if defined(ATTNLAB_HAVE_TARGET_AVX512)
      static const KernelTable t = ATTNLAB_KERNEL_TABLE(avx512, SimdTarget::kAvx512);
      return &t;
#else
      return nullptr;
#endif
    }
  }
  return nullptr;
}
#undef ATTNLAB_KERNEL_TABLE
#undef ATTNLAB_OPS_ENTRY

// Whether the CPU (and the OS, which must save the wider registers: libgcc checks XCR0) runs
// the target's instruction set.
bool CpuRuns(SimdTarget target) {
#if defined(__x86_64__) && defined(__GNUC__)
  __builtin_cpu_init();
  switch (target) {
    case SimdTarget::kBaseline: return true;
    case SimdTarget::kAvx2: return __builtin_cpu_supports("x86-64-v3");
    case SimdTarget::kAvx512: return __builtin_cpu_supports("x86-64-v4");
  }
  return false;
#else
  return target == SimdTarget::kBaseline;
#endif
}

SimdTarget BestTarget() {
  for (SimdTarget t : {SimdTarget::kAvx512, SimdTarget::kAvx2}) {
    if (TableOf(t) && CpuRuns(t)) return t;
  }
  return SimdTarget::kBaseline;
}

// The best target, or the one ATTNLAB_SIMD names when this CPU can run it (else a warning).
SimdTarget InitialTarget() {
  const SimdTarget best = BestTarget();
  const char* env = std::getenv("ATTNLAB_SIMD");
  if (!env || !*env) return best;
  Result<SimdTarget> forced = ParseSimdTarget(env);
  if (!forced.ok()) {
    std::fprintf(stderr, "attnlab: ignoring ATTNLAB_SIMD: %s; using %s\n",
                 forced.status().message().c_str(), std::string(SimdTargetName(best)).c_str());
    return best;
  }
  if (!SimdTargetAvailable(*forced)) {
    // tests/CMakeLists.txt skips the per-target test runs on this exact phrase.
    std::fprintf(stderr, "attnlab: ATTNLAB_SIMD=%s is not supported by this CPU or build; using %s\n",
                 env, std::string(SimdTargetName(best)).c_str());
    return best;
  }
  return *forced;
}

std::atomic<int>& ActiveId() {
  static std::atomic<int> id{static_cast<int>(InitialTarget())};
  return id;
}

}  // namespace

const KernelTable& ActiveKernels() {
  return *TableOf(static_cast<SimdTarget>(ActiveId().load(std::memory_order_relaxed)));
}

}  // namespace internal

std::string_view SimdTargetName(SimdTarget target) {
  switch (target) {
    case SimdTarget::kBaseline: return "baseline";
    case SimdTarget::kAvx2: return "avx2";
    case SimdTarget::kAvx512: return "avx512";
  }
  return "?";
}

Result<SimdTarget> ParseSimdTarget(std::string_view name) {
  for (SimdTarget t : {SimdTarget::kBaseline, SimdTarget::kAvx2, SimdTarget::kAvx512}) {
    if (name == SimdTargetName(t)) return t;
  }
  return Status::InvalidArgument("unknown SIMD target '" + std::string(name) +
                                 "'; expected baseline, avx2 or avx512");
}

bool SimdTargetAvailable(SimdTarget target) {
  return internal::TableOf(target) != nullptr && internal::CpuRuns(target);
}

std::vector<SimdTarget> AvailableSimdTargets() {
  std::vector<SimdTarget> out;
  for (SimdTarget t : {SimdTarget::kAvx512, SimdTarget::kAvx2, SimdTarget::kBaseline}) {
    if (SimdTargetAvailable(t)) out.push_back(t);
  }
  return out;
}

SimdTarget ActiveSimdTarget() {
  return static_cast<SimdTarget>(internal::ActiveId().load(std::memory_order_relaxed));
}

Status SetSimdTarget(SimdTarget target) {
  if (!internal::TableOf(target)) {
    return Status::InvalidArgument("SIMD target " + std::string(SimdTargetName(target)) +
                                   " is not compiled into this build");
  }
  if (!internal::CpuRuns(target)) {
    return Status::InvalidArgument("SIMD target " + std::string(SimdTargetName(target)) +
                                   " is not supported by this CPU");
  }
  internal::ActiveId().store(static_cast<int>(target), std::memory_order_relaxed);
  return Status::Ok();
}

std::string SimdTargetDescription(SimdTarget target) {
  const internal::KernelTable* t = internal::TableOf(target);
  if (!t) return std::string(SimdTargetName(target)) + " (not compiled)";
  const char* isa = target == SimdTarget::kAvx2     ? "x86-64-v3"
                    : target == SimdTarget::kAvx512 ? "x86-64-v4"
                                                    : "build flags";
  return std::string(SimdTargetName(target)) + " (" + isa + ", " + std::to_string(t->lanes) +
         " lanes, tile " + std::to_string(t->tile_rows) + "x" + std::to_string(t->tile_cols) +
         ")";
}

}  // namespace attnlab
