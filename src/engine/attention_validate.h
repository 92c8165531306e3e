// Validation at the engine's boundary (FlashAttention's habit: check every input once, keep the
// kernels free of checks in hot loops).
#ifndef ATTNLAB_ENGINE_ATTENTION_VALIDATE_H_
#define ATTNLAB_ENGINE_ATTENTION_VALIDATE_H_

#include <span>

#include "attnlab/attention.h"

namespace attnlab::internal {

// The bytes a view touches: the range [begin, end) and, when the view repeats with a period
// (every token at stride_token), the footprint [0, footprint) of each period relative to begin.
// That lets q, k and v (or dq, dk, dv) interleaved in one [tokens, (Hq + 2 Hkv) * D] buffer count
// as disjoint: their ranges overlap but their footprints within a token do not.
struct AddressRange {
  const char* begin = nullptr;
  const char* end = nullptr;
  int64_t period = 0;     // bytes; 0 when the view has no usable period
  int64_t footprint = 0;  // bytes touched within each period, starting at begin
};

// Checks that `view` is a valid [batch, heads, len, head_dim] view of elements of `elem_size`
// bytes: non-null, non-negative strides, every element inside `size`, and (if `is_output`)
// no two logical elements at the same address. Sets *range to the touched bytes.
Status ValidateView(const char* name, const void* data, int64_t size, int64_t stride_batch,
                    int64_t stride_head, int64_t stride_token, int64_t batch, int64_t heads,
                    int64_t len, int64_t head_dim, size_t elem_size, bool is_output,
                    AddressRange* range);

template <typename T>
Status ValidateView4(const char* name, const TensorView4<T>& v, int64_t batch, int64_t heads,
                     int64_t len, int64_t head_dim, bool is_output, AddressRange* range) {
  return ValidateView(name, v.data, v.size, v.stride_batch, v.stride_head, v.stride_token, batch,
                      heads, len, head_dim, sizeof(T), is_output, range);
}

// "out and q overlap" if the byte ranges intersect.
Status CheckDisjoint(const char* a_name, const AddressRange& a, const char* b_name,
                     const AddressRange& b);

// The forward views of every kernel: q [batch, heads_q, len_q, head_dim], k and v
// [batch, heads_kv, len_k, head_dim], out [batch, heads_q, len_q, head_dim] (an output: no
// self-overlap), and out disjoint from q, k and v. Sets *ranges (if given) to the bytes each
// view touches, for further disjointness checks.
struct ForwardRanges {
  AddressRange q, k, v, out;
};
Status ValidateForwardViews(const AttentionShape& s, const AttentionTensor& q,
                            const AttentionTensor& k, const AttentionTensor& v,
                            const AttentionTensorMut& out, ForwardRanges* ranges = nullptr);

// lse holds batch * heads_q * len_q values, or is empty when not `required`.
Status CheckLseSize(const AttentionShape& s, std::span<const float> lse, bool required);

// Shape and parameter checks shared by every kernel (no buffers).
Status ValidateShapeAndParams(const AttentionShape& shape, const AttentionParams& params);

// Everything the backward kernels need checked: inputs, dout, the three gradients (outputs,
// pairwise disjoint and disjoint from every input), lse size (if non-empty required), and
// d_sink_logits for kSinkLogit.
Status ValidateAttentionBackward(const AttentionShape& shape, const AttentionParams& params,
                                 const AttentionTensor& q, const AttentionTensor& k,
                                 const AttentionTensor& v, const AttentionTensor* out,
                                 std::span<const float> lse, bool lse_required,
                                 const AttentionTensor& dout, const AttentionTensorMut& dq,
                                 const AttentionTensorMut& dk, const AttentionTensorMut& dv,
                                 std::span<float> d_sink_logits);

}  // namespace attnlab::internal

#endif  // ATTNLAB_ENGINE_ATTENTION_VALIDATE_H_
