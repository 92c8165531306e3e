// The recurrent twin of linear attention (attnlab/linear_attention.h), token by token, following
// the header's formulas literally. Templated on the storage type T and the arithmetic type Acc:
// <float, float> is the fp32 recurrent kernel (what a decode step runs), <double, double> the
// truth the tests compare against and differentiate numerically.
#ifndef ATTNLAB_ENGINE_LINEAR_ATTENTION_REFERENCE_H_
#define ATTNLAB_ENGINE_LINEAR_ATTENTION_REFERENCE_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "attnlab/attention.h"

namespace attnlab::internal {

// phi(x) = elu(x) + 1 and its derivative.
template <typename Acc>
inline Acc LinearPhi(Acc x) {
  return x > Acc(0) ? x + Acc(1) : std::exp(x);
}
template <typename Acc>
inline Acc LinearPhiGrad(Acc x) {
  return x > Acc(0) ? Acc(1) : std::exp(x);
}

// One (batch b, kv head hk): the rows of every query head of the group. state_in / state_out:
// this head's [D, D + 1] slice or null (both may be the same slice). den: [B * Hq * L] or null.
template <typename T, typename Acc>
void LinearForwardRecurrentHead(const AttentionShape& s, Acc eps, const TensorView4<const T>& q,
                                const TensorView4<const T>& k, const TensorView4<const T>& v,
                                const TensorView4<T>& out, T* den, const T* state_in,
                                T* state_out, int64_t b, int64_t hk) {
  const int64_t D = s.head_dim, E = D + 1, group = s.heads_q / s.heads_kv, L = s.len_q;
  std::vector<Acc> S(D * E, Acc(0)), fk(D), fq(D), num(E);
  if (state_in) std::copy(state_in, state_in + D * E, S.begin());
  for (int64_t t = 0; t < L; ++t) {
    // S += phi(k_t) [v_t | 1]^T
    const T* kt = k.at(b, hk, t);
    const T* vt = v.at(b, hk, t);
    for (int64_t d = 0; d < D; ++d) fk[d] = LinearPhi<Acc>(static_cast<Acc>(kt[d]));
    for (int64_t d = 0; d < D; ++d) {
      Acc* row = &S[d * E];
      for (int64_t e = 0; e < D; ++e) row[e] += fk[d] * static_cast<Acc>(vt[e]);
      row[D] += fk[d];
    }
    // O_t = S^T phi(q_t) / (phi(q_t) . z + eps) for each query head of the group.
    for (int64_t g = 0; g < group; ++g) {
      const int64_t h = hk * group + g;
      const T* qt = q.at(b, h, t);
      for (int64_t d = 0; d < D; ++d) fq[d] = LinearPhi<Acc>(static_cast<Acc>(qt[d]));
      std::fill(num.begin(), num.end(), Acc(0));
      for (int64_t d = 0; d < D; ++d) {
        const Acc* row = &S[d * E];
        for (int64_t e = 0; e < E; ++e) num[e] += fq[d] * row[e];
      }
      const Acc dn = num[D] + eps;
      T* o = out.at(b, h, t);
      for (int64_t e = 0; e < D; ++e) o[e] = static_cast<T>(num[e] / dn);
      if (den) den[(b * s.heads_q + h) * L + t] = static_cast<T>(dn);
    }
  }
  if (state_out) {
    for (int64_t i = 0; i < D * E; ++i) state_out[i] = static_cast<T>(S[i]);
  }
}

// REQUIRES: inputs validated. state slices of head (b, hk) at offset (b * Hkv + hk) * D * (D + 1).
template <typename T, typename Acc>
void LinearAttentionForwardRecurrentImpl(const AttentionShape& s, Acc eps,
                                         const TensorView4<const T>& q,
                                         const TensorView4<const T>& k,
                                         const TensorView4<const T>& v, const TensorView4<T>& out,
                                         T* den, const T* state_in, T* state_out) {
  const int64_t per = s.head_dim * (s.head_dim + 1);
  for (int64_t b = 0; b < s.batch; ++b) {
    for (int64_t hk = 0; hk < s.heads_kv; ++hk) {
      const int64_t off = (b * s.heads_kv + hk) * per;
      LinearForwardRecurrentHead<T, Acc>(s, eps, q, k, v, out, den,
                                         state_in ? state_in + off : nullptr,
                                         state_out ? state_out + off : nullptr, b, hk);
    }
  }
}

// The backward of one (batch b, kv head hk), from a zero initial state. In the forward pass this
// was: S_i = sum_{j <= i} phi(k_j) [v_j | 1]^T, n'_i = S_i^T phi(q_i), O_i = n'_i[:D] / d_i,
// d_i = n'_i[D] + eps. So, with dn'_i = [dO_i / d_i | -(dO_i . O_i) / d_i]:
//   forward sweep:  d phi(q_i) = S_i dn'_i
//   reverse sweep:  R_j = sum_{i >= j} phi(q_i) dn'_i^T;  d phi(k_j) = R_j [v_j | 1];
//                   dv_j = R_j[:, :D]^T phi(k_j)
// dq, dk, dv of this head are overwritten.
template <typename T, typename Acc>
void LinearBackwardRecurrentHead(const AttentionShape& s, Acc eps, const TensorView4<const T>& q,
                                 const TensorView4<const T>& k, const TensorView4<const T>& v,
                                 const TensorView4<const T>& dout, const TensorView4<T>& dq,
                                 const TensorView4<T>& dk, const TensorView4<T>& dv, int64_t b,
                                 int64_t hk) {
  const int64_t D = s.head_dim, E = D + 1, group = s.heads_q / s.heads_kv, L = s.len_q;
  std::vector<Acc> S(D * E, Acc(0)), fk(D), fq(D), num(E), vp(E);
  std::vector<Acc> dnp(group * L * E);  // dn'_i per (head of the group, row)
  for (int64_t t = 0; t < L; ++t) {
    const T* kt = k.at(b, hk, t);
    const T* vt = v.at(b, hk, t);
    for (int64_t d = 0; d < D; ++d) fk[d] = LinearPhi<Acc>(static_cast<Acc>(kt[d]));
    for (int64_t d = 0; d < D; ++d) {
      Acc* row = &S[d * E];
      for (int64_t e = 0; e < D; ++e) row[e] += fk[d] * static_cast<Acc>(vt[e]);
      row[D] += fk[d];
    }
    for (int64_t g = 0; g < group; ++g) {
      const int64_t h = hk * group + g;
      const T* qt = q.at(b, h, t);
      const T* dot = dout.at(b, h, t);
      for (int64_t d = 0; d < D; ++d) fq[d] = LinearPhi<Acc>(static_cast<Acc>(qt[d]));
      std::fill(num.begin(), num.end(), Acc(0));
      for (int64_t d = 0; d < D; ++d) {
        for (int64_t e = 0; e < E; ++e) num[e] += fq[d] * S[d * E + e];
      }
      const Acc den = num[D] + eps;
      Acc* dn = &dnp[(g * L + t) * E];
      Acc dsum = 0;  // dO . O
      for (int64_t e = 0; e < D; ++e) {
        dn[e] = static_cast<Acc>(dot[e]) / den;
        dsum += static_cast<Acc>(dot[e]) * (num[e] / den);
      }
      dn[D] = -dsum / den;
      T* dqt = dq.at(b, h, t);
      for (int64_t d = 0; d < D; ++d) {
        Acc dfq = 0;
        for (int64_t e = 0; e < E; ++e) dfq += S[d * E + e] * dn[e];
        dqt[d] = static_cast<T>(dfq * LinearPhiGrad<Acc>(static_cast<Acc>(qt[d])));
      }
    }
  }
  std::vector<Acc>& R = S;  // reuse: R_j = sum_{i >= j} phi(q_i) dn'_i^T  [D, E]
  std::fill(R.begin(), R.end(), Acc(0));
  for (int64_t t = L - 1; t >= 0; --t) {
    for (int64_t g = 0; g < group; ++g) {
      const T* qt = q.at(b, hk * group + g, t);
      const Acc* dn = &dnp[(g * L + t) * E];
      for (int64_t d = 0; d < D; ++d) {
        const Acc f = LinearPhi<Acc>(static_cast<Acc>(qt[d]));
        for (int64_t e = 0; e < E; ++e) R[d * E + e] += f * dn[e];
      }
    }
    const T* kt = k.at(b, hk, t);
    const T* vt = v.at(b, hk, t);
    for (int64_t e = 0; e < D; ++e) vp[e] = static_cast<Acc>(vt[e]);
    vp[D] = 1;
    T* dkt = dk.at(b, hk, t);
    T* dvt = dv.at(b, hk, t);
    std::fill(num.begin(), num.end(), Acc(0));  // dv_t accumulator
    for (int64_t d = 0; d < D; ++d) {
      const Acc x = static_cast<Acc>(kt[d]);
      const Acc f = LinearPhi<Acc>(x);
      Acc dfk = 0;
      for (int64_t e = 0; e < E; ++e) dfk += R[d * E + e] * vp[e];
      dkt[d] = static_cast<T>(dfk * LinearPhiGrad<Acc>(x));
      for (int64_t e = 0; e < D; ++e) num[e] += f * R[d * E + e];
    }
    for (int64_t e = 0; e < D; ++e) dvt[e] = static_cast<T>(num[e]);
  }
}

// REQUIRES: inputs validated.
template <typename T, typename Acc>
void LinearAttentionBackwardRecurrentImpl(const AttentionShape& s, Acc eps,
                                          const TensorView4<const T>& q,
                                          const TensorView4<const T>& k,
                                          const TensorView4<const T>& v,
                                          const TensorView4<const T>& dout,
                                          const TensorView4<T>& dq, const TensorView4<T>& dk,
                                          const TensorView4<T>& dv) {
  for (int64_t b = 0; b < s.batch; ++b) {
    for (int64_t hk = 0; hk < s.heads_kv; ++hk) {
      LinearBackwardRecurrentHead<T, Acc>(s, eps, q, k, v, dout, dq, dk, dv, b, hk);
    }
  }
}

}  // namespace attnlab::internal

#endif  // ATTNLAB_ENGINE_LINEAR_ATTENTION_REFERENCE_H_
