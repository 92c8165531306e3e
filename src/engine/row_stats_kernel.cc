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
#include "engine/micro_gemm.h"
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
// Four independent chains (vectors j, j + 1, j + 2, j + 3 of each step), each lane keeping its
// max and the first column holding it (strictly greater replaces: NaN never does); the answer is
// the smallest column among the lanes that hold the overall max. One chain waited a compare and
// a blend's latency per vector.
float RowArgMax(const float* t, int64_t ld, int64_t* arg) {
  constexpr int kChains = 4;
  constexpr int L = simd::kLanes;
  VecF m[kChains];
  simd::VecI at[kChains], col[kChains];
  const simd::VecI step = simd::IotaI() * 0 + kChains * L;
  for (int c = 0; c < kChains; ++c) {
    m[c] = simd::Set1(kNegInf);
    at[c] = simd::IotaI() * 0;
    col[c] = simd::IotaI() + c * L;
  }
  int64_t j = 0;
  for (; j + kChains * L <= ld; j += kChains * L) {
#pragma GCC unroll 4
    for (int c = 0; c < kChains; ++c) {
      const VecF x = simd::Load(t + j + c * L);
      const simd::VecI gt = x > m[c];
      m[c] = gt ? x : m[c];
      at[c] = gt ? col[c] : at[c];
      col[c] += step;
    }
  }
  for (simd::VecI tail = simd::IotaI() + static_cast<int32_t>(j); j < ld; j += L, tail += L) {
    const VecF x = simd::Load(t + j);
    const simd::VecI gt = x > m[0];
    m[0] = gt ? x : m[0];
    at[0] = gt ? tail : at[0];
  }
  float best = kNegInf;
  for (int c = 0; c < kChains; ++c) best = std::max(best, simd::ReduceMax(m[c]));
  int64_t first = ld;
  for (int c = 0; c < kChains; ++c) {
    for (int l = 0; l < L; ++l) {
      if (m[c][l] == best) first = std::min<int64_t>(first, at[c][l]);
    }
  }
  *arg = first;
  return best;
}

using RowSums = internal::RowSumsD;

namespace {

constexpr int64_t kFlush = 256;

// Vectors of doubles as wide as the float vectors (half the lanes): the row sums' double
// accumulators and the Jensen-Shannon loop.
typedef double VecD __attribute__((vector_size(sizeof(simd::VecF))));
typedef float HalfF __attribute__((vector_size(sizeof(simd::VecF) / 2)));
constexpr int64_t kLanesD = sizeof(simd::VecF) / sizeof(double);

// acc += the lanes of a, widened to double (lane l of each half into lane l of acc).
inline void AddWidened(VecD& acc, const VecF& a) {
  HalfF lo, hi;
  std::memcpy(&lo, &a, sizeof(lo));
  std::memcpy(&hi, reinterpret_cast<const char*>(&a) + sizeof(lo), sizeof(hi));
  acc += __builtin_convertvector(lo, VecD) + __builtin_convertvector(hi, VecD);
}

inline double ReduceD(const VecD& v) {
  double s = 0;
  for (int l = 0; l < kLanesD; ++l) s += v[l];
  return s;
}

void Flush(const VecF& a0, const VecF& a1, const VecF& a2, RowSums* s) {
  for (int l = 0; l < simd::kLanes; ++l) {
    s->s0 += a0[l];
    s->s1 += a1[l];
    s->s2 += a2[l];
  }
}

}  // namespace

// e_j = 2^u_j for u_j = t_j - max2 <= 0 with simd::Exp2's range reduction and polynomial, but
// only the work this range needs: u is clamped below at -127 (one compare; simd::Exp2 clamps
// both ends and checks NaN per key), n = round(u) by the 1.5 * 2^23 trick (exact for |u| < 2^22),
// 2^n from the same sum's low bits, and e = 0 where u < -126 (-inf: masked keys). A NaN score
// makes every sum NaN (checked once per flush instead of per key), as simd::Exp2 would.
RowSums SoftmaxRowSums(const float* t, int64_t ld, float max2, int64_t dist0) {
  const VecF mv = simd::Set1(max2), lo = simd::Set1(-127.0f), zero_below = simd::Set1(-126.0f);
  const VecF magic = simd::Set1(12582912.0f), step = simd::Set1(simd::kLanes);
  const simd::VecI bias = simd::IotaI() * 0 + (127 - 0x4B400000);  // 2^n: (bits(u + magic) + bias) << 23
  VecD d0 = {}, d1 = {}, d2 = {};
  bool nan = false;
  for (int64_t j0 = 0; j0 < ld; j0 += kFlush) {
    VecF a0 = simd::Zero(), a1 = simd::Zero(), a2 = simd::Zero();
    simd::VecI bad = {};
    VecF dist = simd::Set1(static_cast<float>(dist0 - j0)) - simd::IotaF();  // exact integers
    const int64_t j1 = std::min(ld, j0 + kFlush);
    for (int64_t j = j0; j < j1; j += simd::kLanes, dist -= step) {
      const VecF u = simd::Load(t + j) - mv;
      bad |= (u != u);
      const VecF uc = u > lo ? u : lo;  // also NaN -> -127 (flagged above)
      const VecF v = uc + magic;
      const VecF f = uc - (v - magic);  // in [-0.5, 0.5]
      simd::VecI bits;
      std::memcpy(&bits, &v, sizeof(bits));
      bits = (bits + bias) << 23;
      VecF scale;
      std::memcpy(&scale, &bits, sizeof(scale));
      VecF p = simd::Set1(1.535336188319500e-4f);
      p = p * f + simd::Set1(1.339887440266574e-3f);
      p = p * f + simd::Set1(9.618437357674640e-3f);
      p = p * f + simd::Set1(5.550332471162809e-2f);
      p = p * f + simd::Set1(2.402264791363012e-1f);
      p = p * f + simd::Set1(6.931472028550421e-1f);
      p = p * f + simd::Set1(1.0f);
      const VecF e = uc < zero_below ? simd::Zero() : p * scale;
      a0 += e;
      a1 += e * uc;
      a2 += e * dist;
    }
    for (int l = 0; l < simd::kLanes; ++l) nan |= bad[l] != 0;
    AddWidened(d0, a0);
    AddWidened(d1, a1);
    AddWidened(d2, a2);
  }
  RowSums s;
  s.s0 = ReduceD(d0), s.s1 = ReduceD(d1), s.s2 = ReduceD(d2);
  if (nan) s.s0 = s.s1 = s.s2 = std::numeric_limits<double>::quiet_NaN();
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

// The Jensen-Shannon loop in double vectors (one log per key and head pair: the hot part of the
// sampled rows).
namespace {

typedef int64_t VecL __attribute__((vector_size(sizeof(simd::VecF))));

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

void ScorePanels(int64_t rows, int64_t panels, int64_t d, const float* q, const float* kp,
                 float* t, int64_t ld) {
  for (int64_t p = 0; p < panels; ++p) {
    SmallGemm(rows, internal::kScorePanel, d, q, d, kp + p * d * internal::kScorePanel,
              internal::kScorePanel, t + p * internal::kScorePanel, ld, /*accumulate=*/false);
  }
}

}  // namespace attnlab::ATTNLAB_TARGET_NS
ATTNLAB_TARGET_END
