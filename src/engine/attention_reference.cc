#include "engine/attention_reference.h"

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "engine/attention_validate.h"

namespace attnlab {

Status AttentionForwardReference(const AttentionShape& s, const AttentionParams& params,
                                 const AttentionTensor& q, const AttentionTensor& k,
                                 const AttentionTensor& v, const AttentionTensorMut& out,
                                 std::span<float> lse, std::span<float> probs) {
  ATTNLAB_RETURN_IF_ERROR(ValidateAttention(s, params, q, k, v, out));
  ATTNLAB_RETURN_IF_ERROR(internal::CheckLseSize(s, lse, /*required=*/false));
  const int64_t rows = s.batch * s.heads_q * s.len_q;
  if (!probs.empty() && static_cast<int64_t>(probs.size()) != rows * s.len_k) {
    return Status::InvalidArgument("probs: expected batch * heads_q * len_q * len_k = " +
                                   std::to_string(rows * s.len_k) + " values, got " +
                                   std::to_string(probs.size()));
  }
  internal::AttentionForwardReferenceImpl<float, double>(
      s, params, internal::DefaultScaleOf(params, s.head_dim), params.sink_logits.data(), q, k,
      v, out, lse.empty() ? nullptr : lse.data(), probs.empty() ? nullptr : probs.data());
  return Status::Ok();
}

Status AttentionBackwardReference(const AttentionShape& s, const AttentionParams& params,
                                  const AttentionTensor& q, const AttentionTensor& k,
                                  const AttentionTensor& v, const AttentionTensor& dout,
                                  const AttentionTensorMut& dq, const AttentionTensorMut& dk,
                                  const AttentionTensorMut& dv, std::span<float> d_sink_logits) {
  ATTNLAB_RETURN_IF_ERROR(internal::ValidateAttentionBackward(
      s, params, q, k, v, nullptr, {}, false, dout, dq, dk, dv, d_sink_logits));
  float* d_sink =
      params.softmax == SoftmaxKind::kSinkLogit ? d_sink_logits.data() : nullptr;
  internal::AttentionBackwardReferenceImpl<float, double>(
      s, params, internal::DefaultScaleOf(params, s.head_dim), params.sink_logits.data(), q, k,
      v, dout, dq, dk, dv, d_sink);
  return Status::Ok();
}

namespace {

using View64 = TensorView4<const double>;
using View64Mut = TensorView4<double>;

// Shape and parameter checks of the double entry points: ValidateShapeAndParams on a copy of
// params carrying the double scale and sink logits (float stand-ins for the count; their
// finiteness is checked here in double, so no value is lost to a float conversion).
Status ValidateParamsF64(const AttentionShape& s, const AttentionParams& params,
                         std::optional<double> scale, std::span<const double> sink_logits) {
  AttentionParams p = params;
  p.scale.reset();
  std::vector<float> sink_count(sink_logits.size(), 0.0f);
  p.sink_logits = sink_count;
  ATTNLAB_RETURN_IF_ERROR(internal::ValidateShapeAndParams(s, p));
  if (scale && !std::isfinite(*scale)) return Status::InvalidArgument("scale must be finite");
  if (params.softmax == SoftmaxKind::kSinkLogit) {
    for (double x : sink_logits) {
      if (!std::isfinite(x)) return Status::InvalidArgument("sink logits must be finite");
    }
  }
  return Status::Ok();
}

// A view shaped like q ([batch, heads_q, len_q, head_dim]) or like k and v.
template <typename T>
Status QShaped(const char* name, const TensorView4<T>& v, const AttentionShape& s, bool output,
               internal::AddressRange* r) {
  return internal::ValidateView4(name, v, s.batch, s.heads_q, s.len_q, s.head_dim, output, r);
}
template <typename T>
Status KvShaped(const char* name, const TensorView4<T>& v, const AttentionShape& s, bool output,
                internal::AddressRange* r) {
  return internal::ValidateView4(name, v, s.batch, s.heads_kv, s.len_k, s.head_dim, output, r);
}

// What both double entry points check first: the parameters, then q, k and v.
Status ValidateInputsF64(const AttentionShape& s, const AttentionParams& params,
                         std::optional<double> scale, std::span<const double> sink_logits,
                         const View64& q, const View64& k, const View64& v,
                         internal::AddressRange* rq, internal::AddressRange* rk,
                         internal::AddressRange* rv) {
  ATTNLAB_RETURN_IF_ERROR(ValidateParamsF64(s, params, scale, sink_logits));
  ATTNLAB_RETURN_IF_ERROR(QShaped("q", q, s, false, rq));
  ATTNLAB_RETURN_IF_ERROR(KvShaped("k", k, s, false, rk));
  return KvShaped("v", v, s, false, rv);
}

double ScaleF64(std::optional<double> scale, int64_t head_dim) {
  return scale ? *scale : 1.0 / std::sqrt(static_cast<double>(head_dim));
}

}  // namespace

Status AttentionForwardReferenceF64(const AttentionShape& s, const AttentionParams& params,
                                    std::optional<double> scale,
                                    std::span<const double> sink_logits, const View64& q,
                                    const View64& k, const View64& v, const View64Mut& out,
                                    std::span<double> lse) {
  internal::AddressRange rq, rk, rv, ro;
  ATTNLAB_RETURN_IF_ERROR(ValidateInputsF64(s, params, scale, sink_logits, q, k, v, &rq, &rk, &rv));
  ATTNLAB_RETURN_IF_ERROR(QShaped("out", out, s, true, &ro));
  for (auto [in, ir] : {std::pair{"q", &rq}, {"k", &rk}, {"v", &rv}}) {
    ATTNLAB_RETURN_IF_ERROR(internal::CheckDisjoint("out", ro, in, *ir));
  }
  const int64_t rows = s.batch * s.heads_q * s.len_q;
  if (!lse.empty() && static_cast<int64_t>(lse.size()) != rows) {
    return Status::InvalidArgument(
        "lse: expected batch * heads_q * len_q = " + std::to_string(rows) + " values, got " +
        std::to_string(lse.size()));
  }
  internal::AttentionForwardReferenceImpl<double, double>(
      s, params, ScaleF64(scale, s.head_dim), sink_logits.data(), q, k, v, out,
      lse.empty() ? nullptr : lse.data(), nullptr);
  return Status::Ok();
}

Status AttentionBackwardReferenceF64(const AttentionShape& s, const AttentionParams& params,
                                     std::optional<double> scale,
                                     std::span<const double> sink_logits, const View64& q,
                                     const View64& k, const View64& v, const View64& dout,
                                     const View64Mut& dq, const View64Mut& dk, const View64Mut& dv,
                                     std::span<double> d_sink_logits) {
  internal::AddressRange rq, rk, rv, rdo, rdq, rdk, rdv;
  ATTNLAB_RETURN_IF_ERROR(ValidateInputsF64(s, params, scale, sink_logits, q, k, v, &rq, &rk, &rv));
  ATTNLAB_RETURN_IF_ERROR(QShaped("dout", dout, s, false, &rdo));
  ATTNLAB_RETURN_IF_ERROR(QShaped("dq", dq, s, true, &rdq));
  ATTNLAB_RETURN_IF_ERROR(KvShaped("dk", dk, s, true, &rdk));
  ATTNLAB_RETURN_IF_ERROR(KvShaped("dv", dv, s, true, &rdv));
  // Gradients are outputs: disjoint from every input and from each other.
  for (auto [gn, gr] : {std::pair{"dq", &rdq}, {"dk", &rdk}, {"dv", &rdv}}) {
    for (auto [in, ir] : {std::pair{"q", &rq}, {"k", &rk}, {"v", &rv}, {"dout", &rdo}}) {
      ATTNLAB_RETURN_IF_ERROR(internal::CheckDisjoint(gn, *gr, in, *ir));
    }
  }
  ATTNLAB_RETURN_IF_ERROR(internal::CheckDisjoint("dq", rdq, "dk", rdk));
  ATTNLAB_RETURN_IF_ERROR(internal::CheckDisjoint("dq", rdq, "dv", rdv));
  ATTNLAB_RETURN_IF_ERROR(internal::CheckDisjoint("dk", rdk, "dv", rdv));
  const bool sink = params.softmax == SoftmaxKind::kSinkLogit;
  if (sink && static_cast<int64_t>(d_sink_logits.size()) != s.heads_q) {
    return Status::InvalidArgument(
        "d_sink_logits: expected heads_q = " + std::to_string(s.heads_q) + " values, got " +
        std::to_string(d_sink_logits.size()));
  }
  internal::AttentionBackwardReferenceImpl<double, double>(
      s, params, ScaleF64(scale, s.head_dim), sink_logits.data(), q, k, v, dout, dq, dk, dv,
      sink ? d_sink_logits.data() : nullptr);
  return Status::Ok();
}

double AttentionForwardFlops(const AttentionShape& s, bool causal) {
  const double flops = 4.0 * s.batch * s.heads_q * s.len_q * s.len_k * s.head_dim;
  return causal && s.len_q == s.len_k ? flops / 2 : flops;
}

}  // namespace attnlab
