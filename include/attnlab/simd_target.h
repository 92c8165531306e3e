// attnlab/simd_target.h: which SIMD code path the engine's hot kernels run on this CPU.
//
// The flash forward and backward micro-kernels and the decode kernel are compiled once per
// target in the same binary and picked at run time (docs/PERFORMANCE.md, "Dispatch"), so one
// build runs on any x86-64 machine at the speed of the CPU it lands on:
//   baseline  the build's own flags (x86-64-v2 by default: SSE4.2, 4 lanes); always present
//   avx2      x86-64-v3: AVX2 + FMA + F16C, 8 lanes, 6 x 16 register tile (12 of 16 ymm)
//   avx512    x86-64-v4: AVX-512 F/BW/DQ/VL, 16 lanes, 6 x 64 register tile (24 of 32 zmm)
// (avx2 and avx512 exist on x86-64 builds only; other architectures run the baseline, which
// GCC's vector extensions lower to the machine's SIMD, e.g. NEON on AArch64.)
//
// The default is the best target the CPU supports. The environment variable ATTNLAB_SIMD
// (baseline | avx2 | avx512) or SetSimdTarget() forces one, e.g. to measure the AVX2 path on an
// AVX-512 machine; a target the CPU lacks is refused (the variable: a warning on stderr, and the
// best target is used).
#ifndef ATTNLAB_SIMD_TARGET_H_
#define ATTNLAB_SIMD_TARGET_H_

#include <string>
#include <string_view>
#include <vector>

#include "attnlab/status.h"

namespace attnlab {

enum class SimdTarget { kBaseline = 0, kAvx2 = 1, kAvx512 = 2 };

std::string_view SimdTargetName(SimdTarget target);  // "baseline", "avx2", "avx512"
Result<SimdTarget> ParseSimdTarget(std::string_view name);

// Compiled into this binary and supported by this CPU (and its OS), best first; never empty.
std::vector<SimdTarget> AvailableSimdTargets();
bool SimdTargetAvailable(SimdTarget target);

// The target the kernels run now (the best available, or the forced one).
SimdTarget ActiveSimdTarget();
// Forces `target` for the whole process (thread-safe; takes effect at the next kernel call).
// InvalidArgument when this binary or CPU cannot run it.
Status SetSimdTarget(SimdTarget target);

// One line for tables and reports, e.g. "avx2 (x86-64-v3, 8 lanes, tile 6x16)".
std::string SimdTargetDescription(SimdTarget target);

}  // namespace attnlab

#endif  // ATTNLAB_SIMD_TARGET_H_
