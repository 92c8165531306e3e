// Float vectors of the target's native width through GCC vector extensions (kLanes = 4, 8 or
// 16 floats; engine/target.h picks the target). One source for every target: the kernels
// loop in steps of kLanes, and their buffers are padded to 16 floats, a multiple of every
// width. The engine is the only layer that includes this.
#ifndef ATTNLAB_ENGINE_SIMD_H_
#define ATTNLAB_ENGINE_SIMD_H_

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <utility>

#include "engine/target.h"

ATTNLAB_TARGET_BEGIN
namespace attnlab::ATTNLAB_TARGET_NS::simd {

constexpr int kLanes = ATTNLAB_TARGET_BYTES / 4;
typedef float VecF __attribute__((vector_size(ATTNLAB_TARGET_BYTES)));
typedef int32_t VecI __attribute__((vector_size(ATTNLAB_TARGET_BYTES)));

inline VecF Load(const float* p) {
  VecF v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}
inline void Store(float* p, VecF v) { std::memcpy(p, &v, sizeof(v)); }

template <size_t... I>
inline VecF Set1Lanes(float x, std::index_sequence<I...>) {
  return VecF{((void)I, x)...};
}
// A plain lane-wise initialiser: lets the compiler broadcast straight from memory
// (`VecF{} + x` would add 0.0 first and broadcast from a register, on the FMA port).
inline VecF Set1(float x) { return Set1Lanes(x, std::make_index_sequence<kLanes>()); }
inline VecF Zero() { return VecF{}; }

template <size_t... I>
inline VecI IotaLanes(std::index_sequence<I...>) {
  return VecI{static_cast<int32_t>(I)...};
}
// {0, 1, ..., kLanes - 1}.
inline VecI IotaI() { return IotaLanes(std::make_index_sequence<kLanes>()); }
inline VecF IotaF() { return __builtin_convertvector(IotaI(), VecF); }
inline VecF Max(VecF a, VecF b) { return a > b ? a : b; }
inline VecF Min(VecF a, VecF b) { return a < b ? a : b; }

inline float ReduceSum(VecF v) {
  float s = 0;
  for (int i = 0; i < kLanes; ++i) s += v[i];
  return s;
}
inline float ReduceMax(VecF v) {
  float m = v[0];
  for (int i = 1; i < kLanes; ++i) m = m > v[i] ? m : v[i];
  return m;
}

// 2^x, relative error below 2e-7 for x in [-126, 128); exactly 0 for x < -126 (including -inf);
// NaN for NaN, as IEEE arithmetic (and PyTorch) has it: a NaN score must poison its softmax
// row, not become a weight of 2^-126 (the clamp below maps NaN to -126).
// Range reduction x = n + f with n = round(x), f in [-0.5, 0.5], then a degree-6 polynomial
// for 2^f (the Cephes exp2f coefficients) and 2^n built in the exponent bits.
inline VecF Exp2(VecF x) {
  const VecF xc = Min(Max(x, Set1(-126.0f)), Set1(127.0f));
  const VecF t = xc + Set1(0.5f);
  VecI ti = __builtin_convertvector(t, VecI);  // truncates toward 0
  const VecF tf = __builtin_convertvector(ti, VecF);
  ti += (t < tf);  // floor: subtract 1 where truncation rounded up (mask is -1)
  const VecF n = __builtin_convertvector(ti, VecF);
  const VecF f = xc - n;
  VecF p = Set1(1.535336188319500e-4f);
  p = p * f + Set1(1.339887440266574e-3f);
  p = p * f + Set1(9.618437357674640e-3f);
  p = p * f + Set1(5.550332471162809e-2f);
  p = p * f + Set1(2.402264791363012e-1f);
  p = p * f + Set1(6.931472028550421e-1f);
  p = p * f + Set1(1.0f);
  const VecI bits = (ti + 127) << 23;
  VecF scale;
  std::memcpy(&scale, &bits, sizeof(scale));
  const VecF r = p * scale;
  const VecF r0 = x < Set1(-126.0f) ? Zero() : r;
  return x == x ? r0 : x;
}

// 2^x - 1 for |x| <= 0.5 to a few ulp of the result (2^x - 1 by subtraction loses the relative
// accuracy of small results: at x = 0.01 about 7 bits). Taylor series of e^(x ln 2) - 1 to
// degree 8: the first dropped term is below 1.6e-8 of the result on the interval. Outside it
// the caller uses Exp2(x) - 1, which loses at most 2 bits there.
inline VecF Exp2m1Small(VecF x) {
  VecF p = Set1(1.3215486790144305e-06f);
  p = p * x + Set1(1.5252733804059838e-05f);
  p = p * x + Set1(1.5403530393381606e-04f);
  p = p * x + Set1(1.3333558146428441e-03f);
  p = p * x + Set1(9.618129107628477e-03f);
  p = p * x + Set1(5.5504108664821576e-02f);
  p = p * x + Set1(2.402265069591007e-01f);
  p = p * x + Set1(6.931471805599453e-01f);
  return p * x;
}

inline float Exp2Scalar(float x) {
  VecF v = Set1(x);
  return Exp2(v)[0];
}

}  // namespace attnlab::ATTNLAB_TARGET_NS::simd
ATTNLAB_TARGET_END

#if !defined(ATTNLAB_TARGET)
// Code outside the per-target kernel files (ops, linear attention, the diagnostics' statistics)
// runs the baseline, compiled with the build's flags.
namespace attnlab {
namespace simd = baseline::simd;
}  // namespace attnlab
#endif

#endif  // ATTNLAB_ENGINE_SIMD_H_
