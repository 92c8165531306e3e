// The SIMD dispatch (attnlab/simd_target.h): names, availability, forcing a target, and that
// every available target's kernels give the same answers (the kernel tests themselves run once
// per target through ctest's simd.<target>.kernels, CMakeLists.txt).
#include "attnlab/simd_target.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <random>
#include <vector>

#include "attnlab/attention.h"
#include "attnlab/attention_decode.h"
#include "attnlab/tensor_view.h"
#include "engine/kernel_table.h"

namespace attnlab {
namespace {

// Restores the active target at scope exit.
class ScopedTarget {
 public:
  ScopedTarget() : saved_(ActiveSimdTarget()) {}
  ~ScopedTarget() { EXPECT_TRUE(SetSimdTarget(saved_).ok()); }

 private:
  SimdTarget saved_;
};

TEST(SimdTarget, NamesRoundTripAndUnknownNamesAreRejected) {
  for (SimdTarget t : {SimdTarget::kBaseline, SimdTarget::kAvx2, SimdTarget::kAvx512}) {
    Result<SimdTarget> parsed = ParseSimdTarget(SimdTargetName(t));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, t);
  }
  Result<SimdTarget> bad = ParseSimdTarget("avx1024");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("avx1024"), std::string::npos);
  EXPECT_FALSE(ParseSimdTarget("").ok());
}

TEST(SimdTarget, BaselineIsAlwaysAvailableAndTheListIsBestFirst) {
  const std::vector<SimdTarget> available = AvailableSimdTargets();
  ASSERT_FALSE(available.empty());
  EXPECT_EQ(available.back(), SimdTarget::kBaseline);
  for (size_t i = 1; i < available.size(); ++i) {
    EXPECT_GT(static_cast<int>(available[i - 1]), static_cast<int>(available[i]));
  }
  for (SimdTarget t : available) EXPECT_TRUE(SimdTargetAvailable(t));
#if defined(__x86_64__)
  __builtin_cpu_init();
  // Whatever this CPU runs (and the build compiled) is offered; what it cannot run is not.
  EXPECT_EQ(SimdTargetAvailable(SimdTarget::kAvx512) &&
                !__builtin_cpu_supports("x86-64-v4"),
            false);
  EXPECT_EQ(SimdTargetAvailable(SimdTarget::kAvx2) && !__builtin_cpu_supports("x86-64-v3"),
            false);
#endif
}

TEST(SimdTarget, TheEnvironmentOrTheBestTargetIsActive) {
  const char* env = std::getenv("ATTNLAB_SIMD");
  Result<SimdTarget> forced = ParseSimdTarget(env ? env : "");
  if (forced.ok() && SimdTargetAvailable(*forced)) {
    EXPECT_EQ(ActiveSimdTarget(), *forced) << "ATTNLAB_SIMD=" << env;
  } else {
    EXPECT_EQ(ActiveSimdTarget(), AvailableSimdTargets().front());
  }
  const std::string d = SimdTargetDescription(ActiveSimdTarget());
  EXPECT_NE(d.find(std::string(SimdTargetName(ActiveSimdTarget()))), std::string::npos) << d;
  EXPECT_NE(d.find("lanes"), std::string::npos) << d;
}

TEST(SimdTarget, ForcingATargetSwitchesTheKernelsAndUnavailableOnesAreRefused) {
  ScopedTarget restore;
  for (SimdTarget t : AvailableSimdTargets()) {
    ASSERT_TRUE(SetSimdTarget(t).ok());
    EXPECT_EQ(ActiveSimdTarget(), t);
    EXPECT_EQ(internal::ActiveKernels().target, t);
    const int lanes = internal::ActiveKernels().lanes;
    EXPECT_TRUE(lanes == 4 || lanes == 8 || lanes == 16) << lanes;
    EXPECT_EQ(internal::ActiveKernels().tile_cols % 16, 0);
  }
  for (SimdTarget t : {SimdTarget::kAvx2, SimdTarget::kAvx512}) {
    if (SimdTargetAvailable(t)) continue;
    const Status s = SetSimdTarget(t);
    EXPECT_FALSE(s.ok());
    EXPECT_NE(s.message().find(std::string(SimdTargetName(t))), std::string::npos);
  }
}

// The same flash forward and decode on every available target: they differ only in summation
// order, so they agree to a few ulps of the output scale (the per-target kernel tests compare
// each against the double reference with derived tolerances).
TEST(SimdTarget, EveryTargetComputesTheSameAttention) {
  ScopedTarget restore;
  std::mt19937 rng(7);
  std::normal_distribution<float> nd;
  AttentionShape s;
  s.batch = 1, s.heads_q = 4, s.heads_kv = 2, s.len_q = 97, s.len_k = 97, s.head_dim = 59;
  const int64_t n = s.heads_q * s.len_q * s.head_dim, nk = s.heads_kv * s.len_k * s.head_dim;
  std::vector<float> q(n), k(nk), v(nk);
  for (float* p : {q.data(), k.data(), v.data()}) {
    for (int64_t i = 0; i < (p == q.data() ? n : nk); ++i) p[i] = nd(rng);
  }
  AttentionParams params;
  params.mask.causal = true;
  const auto view = [&](const std::vector<float>& x, int64_t h, int64_t l) {
    return ContiguousView(x.data(), 1, h, l, s.head_dim);
  };
  std::vector<std::vector<float>> outs, decodes;
  for (SimdTarget t : AvailableSimdTargets()) {
    ASSERT_TRUE(SetSimdTarget(t).ok());
    std::vector<float> o(n);
    const AttentionTensorMut ov = ContiguousView(o.data(), 1, s.heads_q, s.len_q, s.head_dim);
    ASSERT_TRUE(AttentionForwardFlash(s, params, view(q, s.heads_q, s.len_q),
                                      view(k, s.heads_kv, s.len_k), view(v, s.heads_kv, s.len_k),
                                      ov, {})
                    .ok());
    outs.push_back(o);
    // Decode of the last query row against bf16 keys and values.
    DecodeShape ds{s.heads_q, s.heads_kv, s.len_k, s.head_dim};
    std::vector<uint16_t> k16(nk), v16(nk);
    ConvertToKvDtype(k.data(), nk, KvDtype::kBF16, k16.data());
    ConvertToKvDtype(v.data(), nk, KvDtype::kBF16, v16.data());
    KvView kv{k16.data(), KvDtype::kBF16, nk, s.len_k * s.head_dim, s.head_dim};
    KvView vv{v16.data(), KvDtype::kBF16, nk, s.len_k * s.head_dim, s.head_dim};
    std::vector<float> qd(s.heads_q * s.head_dim), od(s.heads_q * s.head_dim);
    for (int64_t h = 0; h < s.heads_q; ++h) {
      for (int64_t d = 0; d < s.head_dim; ++d) {
        qd[h * s.head_dim + d] = q[(h * s.len_q + s.len_q - 1) * s.head_dim + d];
      }
    }
    ASSERT_TRUE(AttentionDecode(ds, DecodeParams{}, qd, kv, vv, od, {}).ok());
    decodes.push_back(od);
  }
  for (size_t t = 1; t < outs.size(); ++t) {
    for (int64_t i = 0; i < n; ++i) ASSERT_NEAR(outs[t][i], outs[0][i], 2e-6f) << "target " << t;
    for (size_t i = 0; i < decodes[0].size(); ++i) {
      ASSERT_NEAR(decodes[t][i], decodes[0][i], 2e-6f) << "decode, target " << t;
    }
  }
}

}  // namespace
}  // namespace attnlab
