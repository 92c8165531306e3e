// The row loops of the attention statistics (diagnostics/attention_stats.cc), compiled once per
// SIMD target (engine/target.h) and dispatched through engine/kernel_table.h (RowStatsTable,
// which states their contracts). Each target sums in its own lane order: the results agree to
// rounding across targets and are reproducible on one.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "engine/kernel_table.h"
#include "engine/simd.h"
#include "engine/target.h"

ATTNLAB_TARGET_BEGIN
namespace attnlab::ATTNLAB_TARGET_NS {

namespace {

using simd::VecF;

constexpr double kLn2 = 0.693147180559945309417;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

}  // namespace

float RowMax(const float* t, int64_t ld) {
  VecF lane_max = simd::Set1(kNegInf);
  for (int64_t j = 0; j < ld; j += simd::kLanes) lane_max = simd::Max(lane_max, simd::Load(t + j));
  return simd::ReduceMax(lane_max);
}

// The row max and the first column holding it (t[0, ld), ld a multiple of 16, not all -inf).
float RowArgMax(const float* t, int64_t ld, int64_t* arg) {
  VecF lane_max = simd::Set1(kNegInf);
  simd::VecI at = {}, col = simd::IotaI();
  const simd::VecI step = col * 0 + simd::kLanes;
  for (int64_t j = 0; j < ld; j += simd::kLanes, col += step) {
    const VecF x = simd::Load(t + j);
    const simd::VecI gt = x > lane_max;  // strictly: each lane keeps its first max
    lane_max = gt ? x : lane_max;
    at = gt ? col : at;
  }
  const float best = simd::ReduceMax(lane_max);
  int64_t first = ld;
  for (int l = 0; l < simd::kLanes; ++l) {
    if (lane_max[l] == best) first = std::min<int64_t>(first, at[l]);
  }
  *arg = first;
  return best;
}

using RowSums = internal::RowSumsD;

namespace {

constexpr int64_t kFlush = 256;

void Flush(const VecF& a0, const VecF& a1, const VecF& a2, RowSums* s) {
  for (int l = 0; l < simd::kLanes; ++l) {
    s->s0 += a0[l];
    s->s1 += a1[l];
    s->s2 += a2[l];
  }
}

}  // namespace

RowSums SoftmaxRowSums(const float* t, int64_t ld, float max2, int64_t dist0) {
  RowSums s;
  const VecF mv = simd::Set1(max2), floor = simd::Set1(-1000.0f), step = simd::Set1(simd::kLanes);
  for (int64_t j0 = 0; j0 < ld; j0 += kFlush) {
    VecF a0 = simd::Zero(), a1 = simd::Zero(), a2 = simd::Zero();
    VecF dist = simd::Set1(static_cast<float>(dist0 - j0)) - simd::IotaF();  // exact integers
    const int64_t j1 = std::min(ld, j0 + kFlush);
    for (int64_t j = j0; j < j1; j += simd::kLanes, dist -= step) {
      const VecF u = simd::Max(simd::Load(t + j) - mv, floor);  // -inf -> -1000 -> e = 0
      const VecF e = simd::Exp2(u);
      a0 += e;
      a1 += e * u;
      a2 += e * dist;
    }
    Flush(a0, a1, a2, &s);
  }
  return s;
}

RowSums SigmoidRowSums(const float* t, int64_t ld, float b2, int64_t dist0) {
  RowSums s;
  const VecF bv = simd::Set1(b2), one = simd::Set1(1.0f), ninf = simd::Set1(kNegInf);
  const VecF step = simd::Set1(simd::kLanes);
  for (int64_t j0 = 0; j0 < ld; j0 += kFlush) {
    VecF a0 = simd::Zero(), a2 = simd::Zero();
    VecF dist = simd::Set1(static_cast<float>(dist0 - j0)) - simd::IotaF();
    const int64_t j1 = std::min(ld, j0 + kFlush);
    for (int64_t j = j0; j < j1; j += simd::kLanes, dist -= step) {
      const VecF x = simd::Load(t + j);
      const VecF p0 = one / (one + simd::Exp2(-(x + bv)));
      const VecF p = x > ninf ? p0 : simd::Zero();
      a0 += p;
      a2 += p * dist;
    }
    Flush(a0, simd::Zero(), a2, &s);
  }
  return s;
}

// Vectors of doubles, as wide as the float vectors, for the Jensen-Shannon loop (one log per
// key and head pair: the hot part of the sampled rows).
namespace {

typedef double VecD __attribute__((vector_size(sizeof(simd::VecF))));
typedef int64_t VecL __attribute__((vector_size(sizeof(simd::VecF))));
constexpr int64_t kLanesD = sizeof(simd::VecF) / sizeof(double);

inline VecD LoadD(const double* p) {
  VecD v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

// ln x for normal x > 0, relative error ~1e-16: x = 2^e mant with mant in [sqrt(1/2), sqrt(2)),
// ln mant = 2 atanh(z) = 2 (z + ... + z^21/21), z = (mant - 1) / (mant + 1), |z| < 0.172 (the
// series' next term is below 2^-53). A subnormal x gives a wrong but finite value; callers only
// weight it by x itself.
inline VecD LogD(VecD x) {
  VecL bits;
  std::memcpy(&bits, &x, sizeof(bits));
  VecL e = ((bits >> 52) & 0x7ff) - 1023;
  const VecL mbits = (bits & 0x000fffffffffffffLL) | 0x3ff0000000000000LL;
  VecD mant;
  std::memcpy(&mant, &mbits, sizeof(mant));
  const VecL big = mant > 1.41421356237309504880;  // -1 where true
  mant = big ? mant * 0.5 : mant;
  e -= big;
  const VecD z = (mant - 1.0) / (mant + 1.0), z2 = z * z;
  VecD p = z2 * (1.0 / 21) + 1.0 / 19;
  for (double c :
       {1.0 / 17, 1.0 / 15, 1.0 / 13, 1.0 / 11, 1.0 / 9, 1.0 / 7, 1.0 / 5, 1.0 / 3, 1.0}) {
    p = p * z2 + c;
  }
  return __builtin_convertvector(e, VecD) * kLn2 + 2.0 * z * p;
}

// Jensen-Shannon distance (normalised, see the header) of two renormalised rows over keys
// [0, n), n a multiple of kLanesD: q1, q2 probabilities (0 where masked and in the padding), l1, l2
// their natural logs (any finite value where q = 0). Per key
//   2 JSD_j = a ln(2a / (a + b)) + b ln(2b / (a + b)),
// which is b ln 2 when a = 0 and vice versa, and 0 when both are.
}  // namespace

double JsDistance(const double* q1, const double* l1, const double* q2, const double* l2,
                  int64_t n) {
  VecD acc = {};
  const VecD zero = {}, one = zero + 1.0;
  for (int64_t j = 0; j < n; j += kLanesD) {
    const VecD a = LoadD(q1 + j), b = LoadD(q2 + j), s = a + b;
    const VecD lm = LogD(s > zero ? s : one);
    acc += a * (kLn2 + LoadD(l1 + j) - lm) + b * (kLn2 + LoadD(l2 + j) - lm);
  }
  double sum = 0;  // 2 * JSD
  for (int l = 0; l < kLanesD; ++l) sum += acc[l];
  return std::sqrt(std::max(0.0, 0.5 * sum) / kLn2);
}

void Exp2Accumulate(const float* t, int64_t n, float shift2, float* acc) {
  const VecF sv = simd::Set1(shift2);
  int64_t j = 0;
  for (; j + simd::kLanes <= n; j += simd::kLanes) {
    simd::Store(acc + j, simd::Load(acc + j) + simd::Exp2(simd::Load(t + j) - sv));
  }
  // The last n - j < kLanes keys one at a time, with the same polynomial (no stack arrays of
  // vector width: AddressSanitizer's fake stack does not align them as AVX-512 code expects).
  for (; j < n; ++j) acc[j] += simd::Exp2Scalar(t[j] - shift2);
}

}  // namespace attnlab::ATTNLAB_TARGET_NS
ATTNLAB_TARGET_END
