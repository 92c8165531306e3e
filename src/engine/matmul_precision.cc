#include "attnlab/matmul_precision.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "attnlab/simd_target.h"
#include "engine/gemm_bf16.h"

namespace attnlab {

namespace {

// The setting: ATTNLAB_MATMUL at first use (a bad value: a warning on stderr, and auto).
std::atomic<int>& Setting() {
  static std::atomic<int> s{[] {
    const char* env = std::getenv("ATTNLAB_MATMUL");
    if (!env || !*env) return static_cast<int>(WeightMatmul::kAuto);
    Result<WeightMatmul> m = ParseWeightMatmul(env);
    if (!m.ok()) {
      std::fprintf(stderr, "attnlab: ignoring ATTNLAB_MATMUL: %s; using auto\n",
                   m.status().message().c_str());
      return static_cast<int>(WeightMatmul::kAuto);
    }
    if (*m == WeightMatmul::kBf16 && !internal::Bf16GemmImplementation().ok()) {
      std::fprintf(stderr, "attnlab: ATTNLAB_MATMUL=bf16: oneDNN cannot multiply bf16 on this "
                           "CPU; using auto\n");
      return static_cast<int>(WeightMatmul::kAuto);
    }
    return static_cast<int>(*m);
  }()};
  return s;
}

}  // namespace

std::string_view WeightMatmulName(WeightMatmul m) {
  switch (m) {
    case WeightMatmul::kAuto: return "auto";
    case WeightMatmul::kF32: return "fp32";
    case WeightMatmul::kBf16: return "bf16";
  }
  return "?";
}

Result<WeightMatmul> ParseWeightMatmul(std::string_view name) {
  for (WeightMatmul m : {WeightMatmul::kAuto, WeightMatmul::kF32, WeightMatmul::kBf16}) {
    if (name == WeightMatmulName(m)) return m;
  }
  return Status::InvalidArgument("unknown matmul precision '" + std::string(name) +
                                 "'; expected auto, fp32 or bf16");
}

WeightMatmul GetWeightMatmul() {
  return static_cast<WeightMatmul>(Setting().load(std::memory_order_relaxed));
}

Status SetWeightMatmul(WeightMatmul m) {
  if (m == WeightMatmul::kBf16) {
    Result<std::string> impl = internal::Bf16GemmImplementation();
    if (!impl.ok()) return impl.status();
  }
  Setting().store(static_cast<int>(m), std::memory_order_relaxed);
  return Status::Ok();
}

bool Bf16WeightMatmulActive() {
  switch (GetWeightMatmul()) {
    case WeightMatmul::kF32: return false;
    case WeightMatmul::kBf16: return true;
    case WeightMatmul::kAuto:
      return internal::Bf16GemmNative() && ActiveSimdTarget() == SimdTarget::kAvx512;
  }
  return false;
}

std::string WeightMatmulDescription() {
  if (Bf16WeightMatmulActive()) {
    Result<std::string> impl = internal::Bf16GemmImplementation();
    return "bf16 (oneDNN " + (impl.ok() ? *impl : std::string("?")) + ")";
  }
  if (GetWeightMatmul() == WeightMatmul::kF32) return "fp32 (sgemm; forced)";
  if (!internal::Bf16GemmNative()) return "fp32 (sgemm; this CPU has no native bf16 products)";
  return "fp32 (sgemm; the kernels' SIMD target is not avx512)";
}

}  // namespace attnlab
