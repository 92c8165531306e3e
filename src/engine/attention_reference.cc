#include "engine/attention_reference.h"

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

double AttentionForwardFlops(const AttentionShape& s, bool causal) {
  const double flops = 4.0 * s.batch * s.heads_q * s.len_q * s.len_k * s.head_dim;
  return causal && s.len_q == s.len_k ? flops / 2 : flops;
}

}  // namespace attnlab
