// Decode (attnlab/attention_decode.h) against the reference twin: one query per head over an
// fp32, bf16 or fp16 cache, awkward lengths (split-K chunk edges) and head dims (vector tails),
// GQA ratios, padded strides, large logits; the conversions; validation; NaN propagation.
//
// Tolerance: the same fp32 bound as the flash tests (attention_flash_test.cc), with the truth
// computed in double on the cache's values converted back to fp32 (the rounding of K and V on
// insertion is the dtype's accuracy cost, measured separately by the bench, not a kernel error):
//   |decode - truth| <= kC * u * kappa * M,  kC = 16.
// The split-K merge adds one rescaling per chunk, inside that constant.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <cstdio>
#include <limits>
#include <random>
#include <vector>

#include "attnlab/attention_decode.h"
#include "attnlab/thread_pool.h"
#include "engine/attention_test_util.h"

namespace attnlab {
namespace {

using testing::AttentionCase;
using testing::AttentionTruth;
using testing::Layout;
using testing::Tensor4;

constexpr double kU = 1.0 / (1 << 24);
constexpr double kC = 16;

// The cache in `dtype` with the layout of c.k / c.v (padded or not), and c.k / c.v replaced by
// the values the cache holds (so the truth sees exactly what the kernel reads).
struct Cache {
  std::vector<uint16_t> k16, v16;
  KvView k, v;
};

void StoreCache(AttentionCase& c, KvDtype dtype, Cache& out) {
  for (auto [t, buf, view] : {std::tuple{&c.k, &out.k16, &out.k}, {&c.v, &out.v16, &out.v}}) {
    view->dtype = dtype;
    view->size = t->view.size;
    view->stride_head = t->view.stride_head;
    view->stride_token = t->view.stride_token;
    if (dtype == KvDtype::kF32) {
      view->data = t->data.data();
      continue;
    }
    buf->resize(t->data.size());
    ConvertToKvDtype(t->data.data(), static_cast<int64_t>(t->data.size()), dtype, buf->data());
    ConvertFromKvDtype(buf->data(), static_cast<int64_t>(t->data.size()), dtype, t->data.data());
    view->data = buf->data();
  }
}

// Runs one case; returns the worst error / tolerance (out and lse).
double RunCase(AttentionCase& c, KvDtype dtype, ThreadPool* pool) {
  Cache cache;
  StoreCache(c, dtype, cache);
  AttentionTruth t;
  testing::ComputeTruth(c, false, t);
  const AttentionShape& s = c.shape;
  DecodeShape ds{s.heads_q, s.heads_kv, s.len_k, s.head_dim};
  std::vector<float> q(s.heads_q * s.head_dim), out(q.size(), NAN), lse(s.heads_q, NAN);
  for (int64_t h = 0; h < s.heads_q; ++h)
    for (int64_t d = 0; d < s.head_dim; ++d) q[h * s.head_dim + d] = c.q.at(0, h, 0, d);
  DecodeParams p;
  p.scale = c.params.scale;
  p.pool = pool;
  const Status st = AttentionDecode(ds, p, q, cache.k, cache.v, out, lse);
  EXPECT_TRUE(st.ok()) << st.ToString();
  Tensor4<float> got;
  got.Init(1, s.heads_q, 1, s.head_dim, Layout::kContiguous);
  got.data = out;
  got.view.data = got.data.data();
  const double tol = kC * kU * t.kappa;
  double worst = testing::BoundRatio(got, t.out, t.m_out, tol);
  for (int64_t h = 0; h < s.heads_q; ++h) {
    worst = std::max(worst, std::abs(lse[h] - t.lse[h]) / (tol * (1 + std::abs(t.lse[h]))));
  }
  return worst;
}

void MakeCase(std::mt19937_64& rng, AttentionCase& c, int64_t hq, int64_t hkv, int64_t len,
              int64_t dim, Layout lay, double logit_scale) {
  c.shape = AttentionShape{1, hq, hkv, 1, len, dim};
  c.params = AttentionParams{};
  c.logit_scale = logit_scale;
  testing::FillCase(rng, c, lay);
}

TEST(AttentionDecode, MatchesTheReferenceOnRandomConfigs) {
  std::mt19937_64 rng(2024);
  ThreadPool pool(3);  // an odd thread count: uneven chunks
  double worst = 0;
  int n = 0;
  for (KvDtype dtype : {KvDtype::kF32, KvDtype::kBF16, KvDtype::kF16}) {
    for (int trial = 0; trial < 40; ++trial) {
      AttentionCase c;
      const int64_t hkv = testing::Pick(rng, {1, 2, 3});
      const int64_t hq = hkv * testing::Pick(rng, {1, 2, 4, 7});
      const int64_t len = testing::Pick(rng, {1, 7, 59, 97, 113, 255, 256, 257, 1025, 3001});
      const int64_t dim = testing::Pick(rng, {1, 5, 16, 17, 59, 64, 80, 128});
      const Layout lay = static_cast<Layout>(testing::Pick(rng, {0, 1, 2}));
      const double ls = testing::Pick(rng, {1, 1, 4, 30});
      MakeCase(rng, c, hq, hkv, len, dim, lay, ls);
      SCOPED_TRACE(std::string(KvDtypeName(dtype)) + " " + c.Describe());
      const double r = RunCase(c, dtype, &pool);
      EXPECT_LE(r, 1.0);
      worst = std::max(worst, r);
      ++n;
    }
  }
  std::printf("%d configurations; worst error / derived tolerance = %.3f\n", n, worst);
}

TEST(AttentionDecode, ThreadCountDoesNotChangeTheResultBeyondTheBound) {
  std::mt19937_64 rng(5);
  for (int threads : {1, 2, 8}) {
    ThreadPool pool(threads);
    AttentionCase c;
    MakeCase(rng, c, 12, 12, 4099, 64, Layout::kContiguous, 1);
    EXPECT_LE(RunCase(c, KvDtype::kBF16, &pool), 1.0) << threads << " threads";
  }
}

#if defined(__GNUC__) && !defined(__clang__) && (defined(__x86_64__) || defined(__aarch64__))
#if defined(__aarch64__)
using CompilerHalf = __fp16;  // GCC 12's C++ has no _Float16 on AArch64; __fp16 is IEEE there
#else
using CompilerHalf = _Float16;
#endif
// The bit-manipulating fp16 conversions against the compiler's IEEE half (GCC 12 has _Float16 on
// every x86-64; on AArch64 __fp16 converts with the CPU's own fcvt instructions): every
// half value widens identically, and floats of every binade (normal,
// subnormal and overflowing halves, ties, NaN, Inf) narrow identically.
TEST(AttentionDecode, Fp16ConversionsMatchTheCompilersIeeeHalf) {
  for (uint32_t h = 0; h < 65536; ++h) {
    CompilerHalf ref;
    const uint16_t h16 = static_cast<uint16_t>(h);
    std::memcpy(&ref, &h16, 2);
    const float want = static_cast<float>(ref), got = F16ToFloat(h16);
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(got)) << h;
    } else {
      ASSERT_EQ(std::memcmp(&want, &got, 4), 0) << h << ": " << want << " vs " << got;
    }
  }
  std::mt19937 rng(5);
  std::vector<float> xs = {0.0f, -0.0f, 65504.0f, 65519.99f, 65520.0f, 65536.0f, 1e-8f,
                           2.98023224e-8f, 5.96046448e-8f, 6.09755516e-5f, 6.10351562e-5f,
                           INFINITY, -INFINITY, std::numeric_limits<float>::max()};
  for (int i = 0; i < (1 << 20); ++i) {
    uint32_t bits = rng();
    // Exponents around the half range (2^-30 .. 2^17) most of the time, anything otherwise.
    if (i % 4 != 0) bits = (bits & 0x807fffffu) | ((97u + rng() % 48u) << 23);
    float x;
    std::memcpy(&x, &bits, 4);
    xs.push_back(x);
  }
  for (float x : xs) {
    if (std::isnan(x)) continue;
    const CompilerHalf ref = static_cast<CompilerHalf>(x);
    uint16_t want;
    std::memcpy(&want, &ref, 2);
    ASSERT_EQ(FloatToF16(x), want) << x;
  }
  EXPECT_TRUE(std::isnan(F16ToFloat(FloatToF16(std::numeric_limits<float>::quiet_NaN()))));
}
#endif

// The kernel's own vector widening of 16-bit caches (F16C, or integer arithmetic without it;
// bf16 by shifting), on every half and bf16 bit pattern: with one key, decode returns the value
// row exactly (its weight is 1), so out must equal the scalar F16ToFloat / Bf16ToFloat of each
// element, NaN for NaN, Inf for Inf, subnormals included. Runs on the active SIMD target (ctest
// simd.<target>.kernels repeats it for every target).
TEST(AttentionDecode, VectorWideningOfEvery16BitPatternIsExact) {
  constexpr int64_t D = 64;
  DecodeShape s{1, 1, 1, D};
  std::vector<float> q(D, 0.0f), out(D);
  std::vector<uint16_t> k(D, 0), v(D);
  for (KvDtype dtype : {KvDtype::kF16, KvDtype::kBF16}) {
    for (uint32_t base = 0; base < 65536; base += D) {
      for (int64_t d = 0; d < D; ++d) v[d] = static_cast<uint16_t>(base + d);
      const KvView kv{k.data(), dtype, D, D, D}, vv{v.data(), dtype, D, D, D};
      ASSERT_TRUE(AttentionDecode(s, DecodeParams{}, q, kv, vv, out, {}).ok());
      for (int64_t d = 0; d < D; ++d) {
        const float want = dtype == KvDtype::kF16 ? F16ToFloat(v[d]) : Bf16ToFloat(v[d]);
        if (std::isnan(want)) {
          ASSERT_TRUE(std::isnan(out[d])) << KvDtypeName(dtype) << " " << v[d];
        } else {
          // (-0 comes out +0: the accumulator starts at +0, and +0 + -0 = +0.)
          ASSERT_EQ(out[d], want) << KvDtypeName(dtype) << " " << v[d];
        }
      }
    }
  }
}

TEST(AttentionDecode, ConversionsRoundToNearestEven) {
  // bf16 keeps the top 16 bits: 1 + 2^-8 is exactly between 1 and 1 + 2^-7 -> even (1).
  EXPECT_EQ(Bf16ToFloat(FloatToBf16(1.0f + std::ldexp(1.0f, -8))), 1.0f);
  EXPECT_EQ(Bf16ToFloat(FloatToBf16(1.0f + 3 * std::ldexp(1.0f, -8))), 1.0f + std::ldexp(1.0f, -6));
  EXPECT_EQ(Bf16ToFloat(FloatToBf16(-2.5f)), -2.5f);
  EXPECT_TRUE(std::isnan(Bf16ToFloat(FloatToBf16(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_TRUE(std::isinf(Bf16ToFloat(FloatToBf16(INFINITY))));
  // The largest float rounds to Inf in bf16 (it is above bf16's max), never to NaN.
  EXPECT_TRUE(std::isinf(Bf16ToFloat(FloatToBf16(std::numeric_limits<float>::max()))));
  EXPECT_EQ(F16ToFloat(FloatToF16(1.0f + std::ldexp(1.0f, -11))), 1.0f);
  EXPECT_EQ(F16ToFloat(FloatToF16(65504.0f)), 65504.0f);
  EXPECT_TRUE(std::isinf(F16ToFloat(FloatToF16(1e6f))));
  // Relative rounding error bounds (half an ulp): 2^-8 (bf16, 8 significant bits), 2^-11 (fp16).
  std::mt19937_64 rng(1);
  std::normal_distribution<float> nd(0, 10);
  for (int i = 0; i < 100000; ++i) {
    const float x = nd(rng);
    EXPECT_LE(std::abs(Bf16ToFloat(FloatToBf16(x)) - x), std::ldexp(std::abs(x), -8));
    EXPECT_LE(std::abs(F16ToFloat(FloatToF16(x)) - x),
              std::max(std::ldexp(std::abs(x), -11), std::ldexp(1.0f, -25)));
  }
  EXPECT_EQ(ParseKvDtype("bf16").value(), KvDtype::kBF16);
  EXPECT_FALSE(ParseKvDtype("int8").ok());
}

TEST(AttentionDecode, NanInTheCachePropagates) {
  std::mt19937_64 rng(9);
  for (bool in_k : {true, false}) {
    AttentionCase c;
    MakeCase(rng, c, 4, 2, 700, 32, Layout::kContiguous, 1);
    (in_k ? c.k : c.v).at(0, 1, 333, 5) = NAN;
    Cache cache;
    StoreCache(c, KvDtype::kBF16, cache);
    std::vector<float> q(4 * 32, 0.1f), out(4 * 32), lse(4);
    ASSERT_TRUE(AttentionDecode({4, 2, 700, 32}, {}, q, cache.k, cache.v, out, lse).ok());
    // Heads 2, 3 read kv head 1: NaN; heads 0, 1 do not.
    for (int64_t h = 0; h < 4; ++h) {
      EXPECT_EQ(std::isnan(out[h * 32 + (in_k ? 0 : 5)]), h >= 2) << "head " << h;
    }
  }
}

TEST(AttentionDecode, RejectsBadArguments) {
  std::vector<float> k(2 * 10 * 8), v(k.size()), q(4 * 8), out(4 * 8);
  KvView kv{k.data(), KvDtype::kF32, static_cast<int64_t>(k.size()), 10 * 8, 8};
  KvView vv{v.data(), KvDtype::kF32, static_cast<int64_t>(v.size()), 10 * 8, 8};
  const DecodeShape ok{4, 2, 10, 8};
  EXPECT_TRUE(AttentionDecode(ok, {}, q, kv, vv, out).ok());
  EXPECT_FALSE(AttentionDecode({3, 2, 10, 8}, {}, q, kv, vv, out).ok());  // GQA
  EXPECT_FALSE(AttentionDecode({4, 2, 0, 8}, {}, q, kv, vv, out).ok());   // empty cache
  EXPECT_FALSE(AttentionDecode({4, 2, 11, 8}, {}, q, kv, vv, out).ok());  // past the buffer
  EXPECT_FALSE(AttentionDecode(ok, {}, std::span<const float>(q).first(8), kv, vv, out).ok());
  KvView half = vv;
  half.dtype = KvDtype::kBF16;
  EXPECT_FALSE(AttentionDecode(ok, {}, q, kv, half, out).ok());  // mixed dtypes
  std::vector<float> lse(3);
  EXPECT_FALSE(AttentionDecode(ok, {}, q, kv, vv, out, lse).ok());
  // out aliasing the cache.
  EXPECT_FALSE(AttentionDecode(ok, {}, q, kv, vv, std::span<float>(k).first(32)).ok());
  DecodeParams p;
  p.scale = INFINITY;
  EXPECT_FALSE(AttentionDecode(ok, p, q, kv, vv, out).ok());
}

}  // namespace
}  // namespace attnlab
