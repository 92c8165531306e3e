// 16-lane float vectors through GCC vector extensions: one portable source that compiles to
// AVX-512 with -march=native (and to narrower SIMD or scalar code elsewhere). The engine is the
// only layer that includes this.
#ifndef ATTNLAB_ENGINE_SIMD_H_
#define ATTNLAB_ENGINE_SIMD_H_

#include <cstdint>
#include <cstring>

namespace attnlab::simd {

constexpr int kLanes = 16;
typedef float VecF __attribute__((vector_size(64)));
typedef int32_t VecI __attribute__((vector_size(64)));

inline VecF Load(const float* p) {
  VecF v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}
inline void Store(float* p, VecF v) { std::memcpy(p, &v, sizeof(v)); }
// A plain lane-wise initialiser: lets the compiler broadcast straight from memory
// (`VecF{} + x` would add 0.0 first and broadcast from a register, on the FMA port).
inline VecF Set1(float x) { return VecF{x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x}; }
inline VecF Zero() { return VecF{}; }
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

inline float Exp2Scalar(float x) {
  VecF v = Set1(x);
  return Exp2(v)[0];
}

}  // namespace attnlab::simd

#endif  // ATTNLAB_ENGINE_SIMD_H_
