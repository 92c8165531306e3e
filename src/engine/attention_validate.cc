#include "engine/attention_validate.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <string>

namespace attnlab::internal {

namespace {

std::string Str(int64_t x) { return std::to_string(x); }

// Largest logical dimension we accept; keeps every offset product far from int64 overflow.
constexpr int64_t kMaxDim = int64_t{1} << 31;

}  // namespace

Status ValidateView(const char* name, const void* data, int64_t size, int64_t stride_batch,
                    int64_t stride_head, int64_t stride_token, int64_t batch, int64_t heads,
                    int64_t len, int64_t head_dim, size_t elem_size, bool is_output,
                    AddressRange* range) {
  if (data == nullptr) return Status::InvalidArgument(std::string(name) + " is a null pointer");
  if (size < 0) return Status::InvalidArgument(std::string(name) + " has a negative size");
  if (stride_batch < 0 || stride_head < 0 || stride_token < 0) {
    return Status::InvalidArgument(std::string(name) + " has a negative stride");
  }
  // Offset of the last element, with overflow checks (strides come from callers).
  const std::array<std::pair<int64_t, int64_t>, 4> dims = {
      std::pair{stride_batch, batch}, {stride_head, heads}, {stride_token, len}, {1, head_dim}};
  __int128 last = 0;
  for (auto [stride, count] : dims) last += static_cast<__int128>(stride) * (count - 1);
  if (last >= static_cast<__int128>(size)) {
    return Status::InvalidArgument(
        std::string(name) + ": strides (batch " + Str(stride_batch) + ", head " +
        Str(stride_head) + ", token " + Str(stride_token) + ") for shape [" + Str(batch) + ", " +
        Str(heads) + ", " + Str(len) + ", " + Str(head_dim) + "] reach element " +
        std::to_string(static_cast<long long>(last)) + " but the buffer holds only " + Str(size));
  }
  if (is_output) {
    // Sufficient condition for distinct addresses: sorted by stride, each stride is larger than
    // the furthest offset reachable with the smaller dimensions.
    std::array<std::pair<int64_t, int64_t>, 4> sorted = dims;
    std::sort(sorted.begin(), sorted.end());
    __int128 reach = 0;  // max offset reachable with the dims processed so far
    for (auto [stride, count] : sorted) {
      if (count == 1) continue;
      if (static_cast<__int128>(stride) <= reach) {
        return Status::InvalidArgument(std::string(name) +
                                       ": strides make different elements share an address "
                                       "(an output must not overlap itself)");
      }
      reach += static_cast<__int128>(stride) * (count - 1);
    }
  }
  range->begin = static_cast<const char*>(data);
  range->end = range->begin + static_cast<size_t>(last + 1) * elem_size;
  // Period = the token stride, when batch and head offsets keep every element inside a fixed
  // footprint of each token period (token-major layouts such as [B, T, H, D]).
  // A single token per sequence repeats with the batch stride instead (a batch of one-token
  // sequences in the same layout: [B, 1, H, D] rows of an interleaved q | k | v buffer).
  range->period = 0;
  range->footprint = 0;
  const int64_t period = len > 1 ? stride_token : stride_batch;
  if (period > 0 && (len > 1 || batch > 1) && (batch == 1 || stride_batch % period == 0)) {
    int64_t fp = -1;
    if (heads == 1 || stride_head % period == 0) {
      fp = head_dim;
    } else {
      fp = (heads - 1) * stride_head + head_dim;
    }
    if (fp <= period) {
      range->period = period * static_cast<int64_t>(elem_size);
      range->footprint = fp * static_cast<int64_t>(elem_size);
    }
  }
  return Status::Ok();
}

Status CheckDisjoint(const char* a_name, const AddressRange& a, const char* b_name,
                     const AddressRange& b) {
  const bool ranges_meet = a.begin < b.end && b.begin < a.end;
  if (ranges_meet && a.period > 0 && a.period == b.period) {
    // Same period: disjoint iff b's footprint, shifted by (b.begin - a.begin) mod period, misses
    // a's footprint [0, a.footprint) within every period.
    int64_t delta = (b.begin - a.begin) % a.period;
    if (delta < 0) delta += a.period;
    if (delta >= a.footprint && delta + b.footprint <= a.period) return Status::Ok();
  }
  if (ranges_meet) {
    return Status::InvalidArgument(std::string(a_name) + " and " + b_name +
                                   " overlap in memory; outputs need their own buffers");
  }
  return Status::Ok();
}

Status ValidateShapeAndParams(const AttentionShape& s, const AttentionParams& p) {
  const std::array<std::pair<const char*, int64_t>, 6> dims = {
      std::pair{"batch", s.batch}, {"heads_q", s.heads_q}, {"heads_kv", s.heads_kv},
      {"len_q", s.len_q},          {"len_k", s.len_k},     {"head_dim", s.head_dim}};
  for (auto [n, d] : dims) {
    if (d < 1) return Status::InvalidArgument(std::string(n) + " must be >= 1, got " + Str(d));
    if (d > kMaxDim) {
      return Status::OutOfRange(std::string(n) + " = " + Str(d) + " exceeds the limit 2^31");
    }
  }
  if (s.heads_q % s.heads_kv != 0) {
    return Status::InvalidArgument("heads_q (" + Str(s.heads_q) + ") must be a multiple of heads_kv (" +
                                   Str(s.heads_kv) + ") for grouped-query attention");
  }
  if (p.scale && !std::isfinite(*p.scale)) {
    return Status::InvalidArgument("scale must be finite");
  }
  const AttentionMask& m = p.mask;
  if (m.window_left < -1 || m.window_right < -1) {
    return Status::InvalidArgument("window bounds must be >= 0, or -1 for unbounded; got (" +
                                   Str(m.window_left) + ", " + Str(m.window_right) + ")");
  }
  if (m.n_sink < 0) return Status::InvalidArgument("n_sink must be >= 0, got " + Str(m.n_sink));
  if (m.n_global < 0) {
    return Status::InvalidArgument("n_global must be >= 0 (0: no global tokens), got " +
                                   Str(m.n_global));
  }
  if (m.explicit_mask) {
    const ExplicitMask& e = *m.explicit_mask;
    if (e.data == nullptr) return Status::InvalidArgument("explicit mask is a null pointer");
    if (e.stride_batch < 0 || e.stride_head < 0 || e.stride_row < 0) {
      return Status::InvalidArgument("explicit mask has a negative stride");
    }
    const __int128 last = static_cast<__int128>(e.stride_batch) * (s.batch - 1) +
                          static_cast<__int128>(e.stride_head) * (s.heads_q - 1) +
                          static_cast<__int128>(e.stride_row) * (s.len_q - 1) + (s.len_k - 1);
    if (last >= e.size) {
      return Status::InvalidArgument("explicit mask: strides reach byte " +
                                     std::to_string(static_cast<long long>(last)) +
                                     " but the mask holds " + Str(e.size) + " bytes");
    }
  }
  if (p.softmax == SoftmaxKind::kSinkLogit) {
    if (static_cast<int64_t>(p.sink_logits.size()) != s.heads_q) {
      return Status::InvalidArgument("sink logits: expected one per query head (" + Str(s.heads_q) +
                                     "), got " + Str(static_cast<int64_t>(p.sink_logits.size())));
    }
    for (float x : p.sink_logits) {
      if (!std::isfinite(x)) return Status::InvalidArgument("sink logits must be finite");
    }
  }
  if (p.softmax == SoftmaxKind::kSigmoid && !std::isfinite(p.sigmoid_bias)) {
    return Status::InvalidArgument("sigmoid bias must be finite");
  }
  if (p.softmax == SoftmaxKind::kSoftpick && !(std::isfinite(p.softpick_eps) && p.softpick_eps > 0)) {
    return Status::InvalidArgument("softpick eps must be finite and > 0, got " +
                                   std::to_string(p.softpick_eps));
  }
  return Status::Ok();
}

}  // namespace attnlab::internal

namespace attnlab {

using internal::AddressRange;
using internal::CheckDisjoint;
using internal::ValidateView4;

Status internal::CheckLseSize(const AttentionShape& s, std::span<const float> lse,
                              bool required) {
  const int64_t rows = s.batch * s.heads_q * s.len_q;
  if ((required || !lse.empty()) && static_cast<int64_t>(lse.size()) != rows) {
    return Status::InvalidArgument("lse: expected batch * heads_q * len_q = " + Str(rows) +
                                   " values, got " + Str(static_cast<int64_t>(lse.size())));
  }
  return Status::Ok();
}

Status internal::ValidateForwardViews(const AttentionShape& s, const AttentionTensor& q,
                                      const AttentionTensor& k, const AttentionTensor& v,
                                      const AttentionTensorMut& out, ForwardRanges* ranges) {
  ForwardRanges local;
  ForwardRanges& r = ranges != nullptr ? *ranges : local;
  AddressRange &rq = r.q, &rk = r.k, &rv = r.v, &ro = r.out;
  ATTNLAB_RETURN_IF_ERROR(ValidateView4("q", q, s.batch, s.heads_q, s.len_q, s.head_dim, false, &rq));
  ATTNLAB_RETURN_IF_ERROR(ValidateView4("k", k, s.batch, s.heads_kv, s.len_k, s.head_dim, false, &rk));
  ATTNLAB_RETURN_IF_ERROR(ValidateView4("v", v, s.batch, s.heads_kv, s.len_k, s.head_dim, false, &rv));
  ATTNLAB_RETURN_IF_ERROR(ValidateView4("out", out, s.batch, s.heads_q, s.len_q, s.head_dim, true, &ro));
  ATTNLAB_RETURN_IF_ERROR(CheckDisjoint("out", ro, "q", rq));
  ATTNLAB_RETURN_IF_ERROR(CheckDisjoint("out", ro, "k", rk));
  return CheckDisjoint("out", ro, "v", rv);
}

Status ValidateAttention(const AttentionShape& s, const AttentionParams& p,
                         const AttentionTensor& q, const AttentionTensor& k,
                         const AttentionTensor& v, const AttentionTensorMut& out) {
  ATTNLAB_RETURN_IF_ERROR(internal::ValidateShapeAndParams(s, p));
  return internal::ValidateForwardViews(s, q, k, v, out);
}

}  // namespace attnlab

namespace attnlab::internal {

Status ValidateAttentionBackward(const AttentionShape& s, const AttentionParams& p,
                                 const AttentionTensor& q, const AttentionTensor& k,
                                 const AttentionTensor& v, const AttentionTensor* out,
                                 std::span<const float> lse, bool lse_required,
                                 const AttentionTensor& dout, const AttentionTensorMut& dq,
                                 const AttentionTensorMut& dk, const AttentionTensorMut& dv,
                                 std::span<float> d_sink_logits) {
  ATTNLAB_RETURN_IF_ERROR(ValidateShapeAndParams(s, p));
  AddressRange rq, rk, rv, ro, rdo, rdq, rdk, rdv;
  ATTNLAB_RETURN_IF_ERROR(ValidateView4("q", q, s.batch, s.heads_q, s.len_q, s.head_dim, false, &rq));
  ATTNLAB_RETURN_IF_ERROR(ValidateView4("k", k, s.batch, s.heads_kv, s.len_k, s.head_dim, false, &rk));
  ATTNLAB_RETURN_IF_ERROR(ValidateView4("v", v, s.batch, s.heads_kv, s.len_k, s.head_dim, false, &rv));
  if (out) {
    ATTNLAB_RETURN_IF_ERROR(
        ValidateView4("out", *out, s.batch, s.heads_q, s.len_q, s.head_dim, false, &ro));
  }
  ATTNLAB_RETURN_IF_ERROR(
      ValidateView4("dout", dout, s.batch, s.heads_q, s.len_q, s.head_dim, false, &rdo));
  ATTNLAB_RETURN_IF_ERROR(ValidateView4("dq", dq, s.batch, s.heads_q, s.len_q, s.head_dim, true, &rdq));
  ATTNLAB_RETURN_IF_ERROR(ValidateView4("dk", dk, s.batch, s.heads_kv, s.len_k, s.head_dim, true, &rdk));
  ATTNLAB_RETURN_IF_ERROR(ValidateView4("dv", dv, s.batch, s.heads_kv, s.len_k, s.head_dim, true, &rdv));
  const std::array<std::pair<const char*, AddressRange*>, 3> grads = {
      std::pair{"dq", &rdq}, {"dk", &rdk}, {"dv", &rdv}};
  std::array<std::pair<const char*, AddressRange*>, 5> inputs = {
      std::pair{"q", &rq}, {"k", &rk}, {"v", &rv}, {"dout", &rdo}, {"out", &ro}};
  for (auto [gn, gr] : grads) {
    for (auto [in, ir] : inputs) {
      if (ir->begin == nullptr) continue;  // out not given
      ATTNLAB_RETURN_IF_ERROR(CheckDisjoint(gn, *gr, in, *ir));
    }
  }
  ATTNLAB_RETURN_IF_ERROR(CheckDisjoint("dq", rdq, "dk", rdk));
  ATTNLAB_RETURN_IF_ERROR(CheckDisjoint("dq", rdq, "dv", rdv));
  ATTNLAB_RETURN_IF_ERROR(CheckDisjoint("dk", rdk, "dv", rdv));
  ATTNLAB_RETURN_IF_ERROR(internal::CheckLseSize(s, lse, lse_required));
  if (p.softmax == SoftmaxKind::kSinkLogit &&
      static_cast<int64_t>(d_sink_logits.size()) != s.heads_q) {
    return Status::InvalidArgument("d_sink_logits: expected heads_q = " + Str(s.heads_q) +
                                   " values, got " +
                                   Str(static_cast<int64_t>(d_sink_logits.size())));
  }
  return Status::Ok();
}

}  // namespace attnlab::internal
