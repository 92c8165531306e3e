// What this binary is: its version, the git commit it was built from, the SIMD target it was
// compiled for and what the running CPU has. One place for `attnlab --version` and the bench
// JSON documents.
#ifndef ATTNLAB_TOOLS_BUILD_INFO_H_
#define ATTNLAB_TOOLS_BUILD_INFO_H_

#include <string>

namespace attnlab::cli {

std::string BuildVersion();  // "0.1.0"
std::string BuildCommit();   // "abc123def456", "...+local changes" or "unknown"
// The SIMD level of the build's baseline flags (everything outside the dispatched kernels):
// "AVX-512+BF16", "AVX2+FMA", "SSE4.2", "NEON" or "scalar".
std::string CompiledSimd();
// The SIMD target the engine's dispatched kernels run (attnlab/simd_target.h), e.g.
// "avx2 (x86-64-v3, 8 lanes, tile 6x16)".
std::string KernelSimd();
// The best level the running CPU supports ("AVX-512", "AVX2+FMA", ...; "unknown" off x86).
std::string CpuSimd();

}  // namespace attnlab::cli

#endif  // ATTNLAB_TOOLS_BUILD_INFO_H_
