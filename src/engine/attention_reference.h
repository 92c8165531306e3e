// The reference twin of every attention kernel: materialises one row of scores at a time in
// double precision, following attnlab/attention.h's semantics literally. Templated so the
// finite-difference tests can run it on double inputs.
#ifndef ATTNLAB_ENGINE_ATTENTION_REFERENCE_H_
#define ATTNLAB_ENGINE_ATTENTION_REFERENCE_H_

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <span>
#include <vector>

#include "attnlab/attention.h"
#include "engine/attention_mask.h"
#include "engine/attention_weight.h"

namespace attnlab::internal {

// Probabilities of one query row (b, h, i) into p[0..len_k) (0 where masked), and the row's
// log-sum-exp (see attention.h). Returns false if no key is visible (p all 0). scores, if given,
// receives the scaled scores of the visible keys (-inf where masked): softpick's backward needs
// their signs.
// Acc is the arithmetic type (double for the truth; float gives a same-precision reference
// whose error calibrates the tolerance of optimised fp32 kernels).
template <typename T, typename Acc = double>
bool ReferenceRowProbs(const AttentionShape& s, const AttentionParams& params, Acc scale,
                       const T* sink_logits, const TensorView4<const T>& q,
                       const TensorView4<const T>& k, int64_t b, int64_t h, int64_t i,
                       std::vector<Acc>& p, Acc* lse, std::vector<Acc>* scores = nullptr) {
  const int64_t group = s.heads_q / s.heads_kv;
  const int64_t hk = h / group;
  const RowRange r = RowVisibleRange(params.mask, s.len_q, s.len_k, i);
  const T* qi = q.at(b, h, i);
  Acc m = -std::numeric_limits<Acc>::infinity();
  bool any = false;
  std::vector<char> vis(s.len_k);
  for (int64_t j = 0; j < s.len_k; ++j) {
    vis[j] = KeyVisible(params.mask, r, b, h, i, j);
    if (!vis[j]) {
      p[j] = 0;
      if (scores) (*scores)[j] = -std::numeric_limits<Acc>::infinity();
      continue;
    }
    const T* kj = k.at(b, hk, j);
    Acc dot = 0;
    for (int64_t d = 0; d < s.head_dim; ++d) dot += static_cast<Acc>(qi[d]) * kj[d];
    p[j] = scale * dot;
    if (scores) (*scores)[j] = p[j];
    // NaN sticks (std::max would drop it, and a row of NaN scores would look fully masked).
    m = std::isnan(p[j]) ? p[j] : std::max(m, p[j]);
    any = true;
  }
  if (params.softmax == SoftmaxKind::kSigmoid) {
    for (int64_t j = 0; j < s.len_k; ++j) {
      if (vis[j]) p[j] = Acc(1) / (Acc(1) + std::exp(-(p[j] + Acc(params.sigmoid_bias))));
    }
    *lse = 0;
    return any;
  }
  if (params.softmax == SoftmaxKind::kSoftpick) {
    if (!any) {
      *lse = -std::numeric_limits<Acc>::infinity();
      return false;
    }
    const Acc base = SoftpickBase(m);
    Acc sum = Acc(params.softpick_eps) * std::exp(-base);
    for (int64_t j = 0; j < s.len_k; ++j) {
      if (!vis[j]) continue;
      p[j] = SoftpickShifted(p[j], base);
      sum += std::abs(p[j]);
    }
    for (int64_t j = 0; j < s.len_k; ++j) p[j] = std::max(p[j], Acc(0)) / sum;
    *lse = base + std::log(sum);
    return true;
  }
  Acc extra = -std::numeric_limits<Acc>::infinity();  // the extra logit, if any
  if (params.softmax == SoftmaxKind::kSoftmax1) extra = 0;
  if (params.softmax == SoftmaxKind::kSinkLogit) extra = static_cast<Acc>(sink_logits[h]);
  m = std::max(m, extra);
  if (m == -std::numeric_limits<Acc>::infinity()) {  // standard softmax, nothing visible
    *lse = m;
    return false;
  }
  Acc sum = std::isinf(extra) ? Acc(0) : std::exp(extra - m);
  for (int64_t j = 0; j < s.len_k; ++j) {
    if (!vis[j]) continue;
    p[j] = std::exp(p[j] - m);
    sum += p[j];
  }
  for (int64_t j = 0; j < s.len_k; ++j) p[j] /= sum;
  *lse = m + std::log(sum);
  return any;
}

// REQUIRES: inputs validated (ValidateAttention). lse: [B*Hq*Lq] or null; probs:
// [B*Hq*Lq*Lk] or null.
template <typename T, typename Acc = double>
void AttentionForwardReferenceImpl(const AttentionShape& s, const AttentionParams& params,
                                   Acc scale, const T* sink_logits,
                                   const TensorView4<const T>& q, const TensorView4<const T>& k,
                                   const TensorView4<const T>& v, const TensorView4<T>& out,
                                   T* lse, T* probs) {
  const int64_t group = s.heads_q / s.heads_kv;
  std::vector<Acc> p(s.len_k), o(s.head_dim), sc(s.len_k);
  for (int64_t b = 0; b < s.batch; ++b) {
    for (int64_t h = 0; h < s.heads_q; ++h) {
      for (int64_t i = 0; i < s.len_q; ++i) {
        Acc row_lse;
        ReferenceRowProbs<T, Acc>(s, params, scale, sink_logits, q, k, b, h, i, p, &row_lse,
                                  &sc);
        std::fill(o.begin(), o.end(), 0.0);
        for (int64_t j = 0; j < s.len_k; ++j) {
          // Every visible key, P = 0 included: a NaN in v[j] reaches the rows that see j (0 x
          // NaN, as in the flash kernels); masked keys (score -inf) are skipped.
          if (std::isinf(sc[j]) && sc[j] < 0) continue;
          const T* vj = v.at(b, h / group, j);
          for (int64_t d = 0; d < s.head_dim; ++d) o[d] += p[j] * vj[d];
        }
        T* oi = out.at(b, h, i);
        for (int64_t d = 0; d < s.head_dim; ++d) oi[d] = static_cast<T>(o[d]);
        const int64_t row = (b * s.heads_q + h) * s.len_q + i;
        if (lse) lse[row] = static_cast<T>(row_lse);
        if (probs) {
          for (int64_t j = 0; j < s.len_k; ++j) probs[row * s.len_k + j] = static_cast<T>(p[j]);
        }
      }
    }
  }
}

// Gradients by the textbook chain rule on the materialised row:
//   dP[j] = dO . V[j];  softmax: dS[j] = P[j] (dP[j] - D), D = sum_j P[j] dP[j] = dO . O;
//   sigmoid: dS[j] = dP[j] P[j] (1 - P[j]);  d b_h -= P_sink * D  (the sink's value is 0);
//   softpick: dS[j] = E (dP[j] - D) for s > 0, E D for s < 0, E = e^(s[j] - lse) (attention.h);
//   dQ += scale * dS[j] K[j];  dK[j] += scale * dS[j] Q;  dV[j] += P[j] dO.
// REQUIRES: inputs validated. dq, dk, dv are overwritten; d_sink (if non-null) too.
template <typename T, typename Acc = double>
void AttentionBackwardReferenceImpl(const AttentionShape& s, const AttentionParams& params,
                                    Acc scale, const T* sink_logits,
                                    const TensorView4<const T>& q, const TensorView4<const T>& k,
                                    const TensorView4<const T>& v,
                                    const TensorView4<const T>& dout, const TensorView4<T>& dq,
                                    const TensorView4<T>& dk, const TensorView4<T>& dv,
                                    T* d_sink) {
  const int64_t group = s.heads_q / s.heads_kv;
  const int64_t D = s.head_dim;
  // Accumulate in Acc (double for the truth), per kv head, then store.
  std::vector<Acc> dk_acc(s.batch * s.heads_kv * s.len_k * D, Acc(0));
  std::vector<Acc> dv_acc(dk_acc.size(), Acc(0));
  std::vector<Acc> dsink_acc(s.heads_q, Acc(0));
  const bool softpick = params.softmax == SoftmaxKind::kSoftpick;
  std::vector<Acc> p(s.len_k), dp(s.len_k), dqi(D), sc(s.len_k);
  for (int64_t b = 0; b < s.batch; ++b) {
    for (int64_t h = 0; h < s.heads_q; ++h) {
      const int64_t hk = h / group;
      for (int64_t i = 0; i < s.len_q; ++i) {
        Acc row_lse;
        ReferenceRowProbs<T, Acc>(s, params, scale, sink_logits, q, k, b, h, i, p, &row_lse,
                                  &sc);
        const T* doi = dout.at(b, h, i);
        const T* qi = q.at(b, h, i);
        Acc dsum = 0;  // D = sum_j P[j] dP[j]
        for (int64_t j = 0; j < s.len_k; ++j) {
          dp[j] = 0;
          if (p[j] == 0) continue;
          const T* vj = v.at(b, hk, j);
          for (int64_t d = 0; d < D; ++d) dp[j] += static_cast<Acc>(doi[d]) * vj[d];
          dsum += p[j] * dp[j];
        }
        if (params.softmax == SoftmaxKind::kSinkLogit && !std::isinf(row_lse)) {
          const Acc p_sink = std::exp(static_cast<Acc>(sink_logits[h]) - row_lse);
          dsink_acc[h] -= p_sink * dsum;
        }
        std::fill(dqi.begin(), dqi.end(), Acc(0));
        for (int64_t j = 0; j < s.len_k; ++j) {
          // Softpick's keys with s < 0 have P = 0 but a gradient (through the denominator).
          if (softpick ? std::isinf(sc[j]) && sc[j] < 0 : p[j] == 0) continue;
          Acc ds;
          if (softpick) {
            const Acc e = std::exp(sc[j] - row_lse);
            ds = sc[j] > 0 ? e * (dp[j] - dsum) : sc[j] < 0 ? e * dsum : Acc(0);
          } else if (params.softmax == SoftmaxKind::kSigmoid) {
            ds = dp[j] * p[j] * (Acc(1) - p[j]);
          } else {
            ds = p[j] * (dp[j] - dsum);
          }
          const T* kj = k.at(b, hk, j);
          Acc* dkj = &dk_acc[((b * s.heads_kv + hk) * s.len_k + j) * D];
          Acc* dvj = &dv_acc[((b * s.heads_kv + hk) * s.len_k + j) * D];
          for (int64_t d = 0; d < D; ++d) {
            dqi[d] += scale * ds * kj[d];
            dkj[d] += scale * ds * qi[d];
            dvj[d] += p[j] * doi[d];
          }
        }
        T* dq_row = dq.at(b, h, i);
        for (int64_t d = 0; d < D; ++d) dq_row[d] = static_cast<T>(dqi[d]);
      }
    }
  }
  for (int64_t b = 0; b < s.batch; ++b) {
    for (int64_t hk = 0; hk < s.heads_kv; ++hk) {
      for (int64_t j = 0; j < s.len_k; ++j) {
        const Acc* a = &dk_acc[((b * s.heads_kv + hk) * s.len_k + j) * D];
        const Acc* c = &dv_acc[((b * s.heads_kv + hk) * s.len_k + j) * D];
        T* dkj = dk.at(b, hk, j);
        T* dvj = dv.at(b, hk, j);
        for (int64_t d = 0; d < D; ++d) {
          dkj[d] = static_cast<T>(a[d]);
          dvj[d] = static_cast<T>(c[d]);
        }
      }
    }
  }
  if (d_sink) {
    for (int64_t h = 0; h < s.heads_q; ++h) d_sink[h] = static_cast<T>(dsink_acc[h]);
  }
}

}  // namespace attnlab::internal

namespace attnlab {

// Double-precision twins of AttentionForwardReference / AttentionBackwardReference (same
// semantics, contracts and checks), for finite-difference gradient checks such as
// torch.autograd.gradcheck through the Python module. They validate, then run
// internal::Attention{Forward,Backward}ReferenceImpl<double, double>.
// params.scale and params.sink_logits are ignored: the scale (nullopt: 1/sqrt(head_dim),
// computed in double) and the sink logits ([heads_q], kSinkLogit only) are given in double.
// (params.sigmoid_bias stays a float: the double arithmetic adds that float's value.)
// lse: [batch * heads_q * len_q] or empty; d_sink_logits: [heads_q], required iff kSinkLogit.
Status AttentionForwardReferenceF64(const AttentionShape& shape, const AttentionParams& params,
                                    std::optional<double> scale,
                                    std::span<const double> sink_logits,
                                    const TensorView4<const double>& q,
                                    const TensorView4<const double>& k,
                                    const TensorView4<const double>& v,
                                    const TensorView4<double>& out, std::span<double> lse = {});

Status AttentionBackwardReferenceF64(
    const AttentionShape& shape, const AttentionParams& params, std::optional<double> scale,
    std::span<const double> sink_logits, const TensorView4<const double>& q,
    const TensorView4<const double>& k, const TensorView4<const double>& v,
    const TensorView4<const double>& dout, const TensorView4<double>& dq,
    const TensorView4<double>& dk, const TensorView4<double>& dv,
    std::span<double> d_sink_logits = {});

}  // namespace attnlab

#endif  // ATTNLAB_ENGINE_ATTENTION_REFERENCE_H_
