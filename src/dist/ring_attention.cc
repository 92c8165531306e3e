#include "dist/ring_attention.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <string>
#include <utility>
#include <vector>

namespace attnlab::dist {
namespace {

constexpr int kTagKv = 40;   // K and V blocks, forward and backward
constexpr int kTagDkv = 41;  // dK and dV accumulators, backward

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// What ring attention refuses, and why (ring_attention.h); empty when supported.
std::string Refusal(const AttentionParams& p) {
  const AttentionMask& m = p.mask;
  if (m.window_left >= 0 || m.window_right >= 0 || m.n_sink > 0 || m.n_global > 0) {
    return "ring attention supports no mask or a causal one (plus mask_first_key); windows, "
           "sinks and global tokens are refused (their striped blocks are not causal squares)";
  }
  if (m.explicit_mask) return "ring attention does not take an explicit mask";
  if (p.softmax == SoftmaxKind::kSoftpick) {
    return "ring attention does not support softpick (its eps does not split over blocks)";
  }
  return {};
}

// The arguments every rank must agree on, as text for the all-gather.
std::string Describe(const RingShape& s, const AttentionParams& p) {
  std::string d = "batch " + std::to_string(s.batch) + ", heads " + std::to_string(s.heads_q) +
                  "/" + std::to_string(s.heads_kv) + ", length " + std::to_string(s.global_len) +
                  ", head_dim " + std::to_string(s.head_dim) + ", causal " +
                  std::to_string(p.mask.causal) + ", mask_first_key " +
                  std::to_string(p.mask.mask_first_key) + ", softmax " +
                  std::to_string(static_cast<int>(p.softmax)) + ", scale " +
                  (p.scale ? std::to_string(*p.scale) : std::string("default"));
  return d;
}

// Local checks, then one all-gather so that every rank returns the same verdict (an error on
// one rank never leaves the others waiting in a transfer).
Status Agree(Comm& comm, const RingShape& s, const AttentionParams& p, const Status& local,
             const std::string& what) {
  std::string mine = local.ok() ? "ok " + Describe(s, p) : "error " + local.message();
  std::vector<std::string> all;
  ATTNLAB_RETURN_IF_ERROR(comm.AllGather(mine, &all, what + ": checking the ranks' arguments"));
  for (size_t r = 0; r < all.size(); ++r) {
    if (all[r].rfind("error ", 0) == 0) {
      return Status::InvalidArgument(what + " on rank " + std::to_string(r) + ": " +
                                     all[r].substr(6));
    }
  }
  for (size_t r = 1; r < all.size(); ++r) {
    if (all[r] != all[0]) {
      return Status::InvalidArgument(what + ": the ranks disagree: rank 0 has " +
                                     all[0].substr(3) + ", rank " + std::to_string(r) + " has " +
                                     all[r].substr(3));
    }
  }
  return Status::Ok();
}

Status CheckLocal(const Comm& comm, const RingShape& s, const AttentionParams& p,
                  const AttentionTensor& q, const AttentionTensor& k, const AttentionTensor& v,
                  const AttentionTensorMut& out) {
  if (s.batch < 1 || s.heads_q < 1 || s.heads_kv < 1 || s.head_dim < 1 || s.global_len < 1) {
    return Status::InvalidArgument("ring attention: batch, heads, head_dim and length must be >= 1");
  }
  if (s.global_len < comm.size()) {
    return Status::InvalidArgument("ring attention over " + std::to_string(comm.size()) +
                                   " ranks needs at least as many tokens; the sequence has " +
                                   std::to_string(s.global_len));
  }
  if (const std::string why = Refusal(p); !why.empty()) return Status::InvalidArgument(why);
  AttentionShape local{s.batch, s.heads_q, s.heads_kv, 0, 0, s.head_dim};
  local.len_q = local.len_k = RingLocalLength(s.global_len, comm.rank(), comm.size());
  return ValidateAttention(local, p, q, k, v, out);
}

// One (query rank r, key rank s) block as a causal square or a full rectangle (ring_attention.h):
// query rows [q0, q0 + lq) against keys [0, lk).
struct Block {
  int64_t q0 = 0, lq = 0, lk = 0;
};

Block BlockOf(bool causal, int r, int s, int64_t nq, int64_t nk) {
  if (!causal) return {0, nq, nk};
  if (s <= r) return {0, nq, nq};
  return {1, nq - 1, nq - 1};
}

// The params of one block: the extra softmax term is added once after the ring, so blocks use
// the standard softmax; mask_first_key applies to the block holding global key 0.
AttentionParams BlockParams(const AttentionParams& p, int s) {
  AttentionParams b = p;
  if (p.softmax == SoftmaxKind::kSoftmax1 || p.softmax == SoftmaxKind::kSinkLogit) {
    b.softmax = SoftmaxKind::kStandard;
    b.sink_logits = {};
  }
  b.mask.mask_first_key = p.mask.mask_first_key && s == 0;
  return b;
}

template <typename T>
TensorView4<T> RowsFrom(TensorView4<T> x, int64_t row0) {
  x.data += row0 * x.stride_token;
  x.size -= row0 * x.stride_token;
  return x;
}

// Packed K and V blocks: [2][batch][heads_kv][n0][head_dim], n0 = rank 0's length (the most).
struct KvBuffer {
  std::vector<float> data;
  int64_t batch, heads, n0, hd;
  int64_t half() const { return batch * heads * n0 * hd; }
  TensorView4<float> View(int which) {
    TensorView4<float> t;
    t.data = data.data() + which * half();
    t.size = half();
    t.stride_token = hd, t.stride_head = n0 * hd, t.stride_batch = heads * n0 * hd;
    return t;
  }
  AttentionTensor CView(int which) {
    const TensorView4<float> t = View(which);
    return AttentionTensor{t.data, t.size, t.stride_batch, t.stride_head, t.stride_token};
  }
};

KvBuffer MakeKv(const RingShape& s, int64_t n0) {
  KvBuffer b{std::vector<float>(2 * s.batch * s.heads_kv * n0 * s.head_dim, 0.0f), s.batch,
             s.heads_kv, n0, s.head_dim};
  return b;
}

// dst[b, h, t, :] (+)= src[b, h, t, :] for t < len.
template <typename Dst, typename Src>
void CopyRows(const Dst& dst, const Src& src, int64_t batch, int64_t heads, int64_t len,
              int64_t hd, bool add) {
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t h = 0; h < heads; ++h) {
      for (int64_t t = 0; t < len; ++t) {
        float* d = dst.at(b, h, t);
        const float* x = src.at(b, h, t);
        if (add) {
          for (int64_t e = 0; e < hd; ++e) d[e] += x[e];
        } else {
          std::copy(x, x + hd, d);
        }
      }
    }
  }
}

TensorView4<float> Contiguous(std::vector<float>& buf, int64_t batch, int64_t heads, int64_t len,
                              int64_t hd) {
  buf.assign(batch * heads * len * hd, 0.0f);
  return ContiguousView(buf.data(), batch, heads, len, hd);
}

AttentionTensor Const(const TensorView4<float>& t) {
  return AttentionTensor{t.data, t.size, t.stride_batch, t.stride_head, t.stride_token};
}

// Posts this step's ring transfer of `bytes` from `send` to the right and into `recv` from the
// left.
Status PostRing(Comm& comm, const void* send, void* recv, int64_t bytes, int tag,
                const std::string& what, std::vector<Request>* pending, RingStats* st) {
  const int P = comm.size(), r = comm.rank();
  auto rq = comm.Irecv(recv, bytes, (r + P - 1) % P, tag, what);
  ATTNLAB_RETURN_IF_ERROR(rq.status());
  pending->push_back(std::move(rq).value());
  auto sq = comm.Isend(send, bytes, (r + 1) % P, tag, what);
  ATTNLAB_RETURN_IF_ERROR(sq.status());
  pending->push_back(std::move(sq).value());
  st->bytes_sent += bytes;
  return Status::Ok();
}

Status WaitAll(Comm& comm, std::vector<Request>* pending, RingStats* st) {
  const double t0 = Now();
  Status s = comm.Wait(*pending);
  pending->clear();
  st->wait_s += Now() - t0;
  return s;
}

}  // namespace

int64_t RingLocalLength(int64_t global_len, int rank, int ranks) {
  if (ranks < 1 || rank < 0 || global_len <= rank) return 0;
  return (global_len - rank + ranks - 1) / ranks;
}

Status RingAttentionForward(Comm& comm, const RingShape& shape, const AttentionParams& params,
                            const AttentionTensor& q, const AttentionTensor& k,
                            const AttentionTensor& v, const AttentionTensorMut& out,
                            std::span<float> lse, RingStats* stats) {
  RingStats local_stats;
  RingStats* st = stats ? stats : &local_stats;
  const int P = comm.size(), r = comm.rank();
  const int64_t B = shape.batch, Hq = shape.heads_q, hd = shape.head_dim;
  const int64_t nq = RingLocalLength(shape.global_len, r, P);
  Status local = CheckLocal(comm, shape, params, q, k, v, out);
  if (local.ok() && !lse.empty() && static_cast<int64_t>(lse.size()) != B * Hq * nq) {
    local = Status::InvalidArgument("ring attention: lse needs batch * heads_q * local length = " +
                                    std::to_string(B * Hq * nq) + " floats");
  }
  ATTNLAB_RETURN_IF_ERROR(Agree(comm, shape, params, local, "ring attention forward"));

  const int64_t n0 = RingLocalLength(shape.global_len, 0, P);
  KvBuffer cur = MakeKv(shape, n0), next = MakeKv(shape, n0);
  CopyRows(cur.View(0), k, B, shape.heads_kv, nq, hd, false);
  CopyRows(cur.View(1), v, B, shape.heads_kv, nq, hd, false);
  // `out` accumulates the blocks' merged outputs (it may not overlap q, k or v); each block is
  // computed shape.query_chunk query rows at a time, so the only per-row scratch is K/V in flight.
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < Hq; ++h) {
      for (int64_t i = 0; i < nq; ++i) std::fill_n(out.at(b, h, i), hd, 0.0f);
    }
  }
  const int64_t chunk = std::max<int64_t>(1, shape.query_chunk);
  std::vector<float> o_buf, lse_b;
  std::vector<double> lse_acc(B * Hq * nq, -std::numeric_limits<double>::infinity());
  const bool sigmoid = params.softmax == SoftmaxKind::kSigmoid;
  std::vector<Request> pending;
  for (int t = 0; t < P; ++t) {
    const int s = (r - t + P) % P;
    if (t + 1 < P) {
      ATTNLAB_RETURN_IF_ERROR(PostRing(comm, cur.data.data(), next.data.data(),
                                       static_cast<int64_t>(cur.data.size() * sizeof(float)),
                                       kTagKv, "ring attention forward, K/V step " +
                                       std::to_string(t), &pending, st));
    }
    const double c0 = Now();
    const Block blk = BlockOf(params.mask.causal, r, s, nq, RingLocalLength(shape.global_len, s, P));
    const AttentionParams bp = BlockParams(params, s);
    // Query rows [c, c + m) of the block: a causal square's rows see keys [0, c + m) (the
    // engine's bottom-right alignment keeps their diagonal), a rectangle's every key.
    for (int64_t c = 0; blk.lk > 0 && c < blk.lq; c += chunk) {
      const int64_t m = std::min(chunk, blk.lq - c);
      const int64_t keys = params.mask.causal ? c + m : blk.lk;
      const AttentionShape bs{B, Hq, shape.heads_kv, m, keys, hd};
      TensorView4<float> ob = Contiguous(o_buf, B, Hq, m, hd);
      lse_b.assign(B * Hq * m, 0.0f);
      ATTNLAB_RETURN_IF_ERROR(AttentionForwardFlash(bs, bp, RowsFrom(q, blk.q0 + c), cur.CView(0),
                                                    cur.CView(1), ob, lse_b));
      for (int64_t b = 0; b < B; ++b) {
        for (int64_t h = 0; h < Hq; ++h) {
          for (int64_t i = 0; i < m; ++i) {
            float* o = out.at(b, h, blk.q0 + c + i);
            const float* x = ob.at(b, h, i);
            if (sigmoid) {  // unnormalised weights: the blocks' outputs add
              for (int64_t e = 0; e < hd; ++e) o[e] += x[e];
              continue;
            }
            // Log-sum-exp merge of (o, la) with the block's (x, lb); NaN propagates.
            const double lb = lse_b[(b * Hq + h) * m + i];
            double& la = lse_acc[(b * Hq + h) * nq + blk.q0 + c + i];
            if (lb == -std::numeric_limits<double>::infinity()) continue;
            const double mx = std::isnan(la) ? la : std::max(la, lb);
            const double l = mx + std::log(std::exp(la - mx) + std::exp(lb - mx));
            const float wa = static_cast<float>(std::exp(la - l));
            const float wb = static_cast<float>(std::exp(lb - l));
            for (int64_t e = 0; e < hd; ++e) o[e] = wa * o[e] + wb * x[e];
            la = l;
          }
        }
      }
    }
    st->compute_s += Now() - c0;
    if (t + 1 < P) {
      ATTNLAB_RETURN_IF_ERROR(WaitAll(comm, &pending, st));
      std::swap(cur, next);
    }
  }
  // The extra softmax term (softmax1: e^0, sink logit: e^b_h), once per row; then the lse.
  const bool extra = params.softmax == SoftmaxKind::kSoftmax1 ||
                     params.softmax == SoftmaxKind::kSinkLogit;
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < Hq; ++h) {
      const double bias = params.softmax == SoftmaxKind::kSinkLogit ? params.sink_logits[h] : 0.0;
      for (int64_t i = 0; i < nq; ++i) {
        double& la = lse_acc[(b * Hq + h) * nq + i];
        if (extra) {
          float* o = out.at(b, h, i);
          const double mx = std::isnan(la) ? la : std::max(la, bias);
          const double l = mx + std::log(std::exp(la - mx) + std::exp(bias - mx));
          const float w = static_cast<float>(std::exp(la - l));
          for (int64_t e = 0; e < hd; ++e) o[e] *= w;
          la = l;
        }
        if (!lse.empty()) lse[(b * Hq + h) * nq + i] = sigmoid ? 0.0f : static_cast<float>(la);
      }
    }
  }
  return Status::Ok();
}

Status RingAttentionBackward(Comm& comm, const RingShape& shape, const AttentionParams& params,
                             const AttentionTensor& q, const AttentionTensor& k,
                             const AttentionTensor& v, const AttentionTensor& out,
                             std::span<const float> lse, const AttentionTensor& dout,
                             const AttentionTensorMut& dq, const AttentionTensorMut& dk,
                             const AttentionTensorMut& dv, std::span<float> d_sink_logits,
                             RingStats* stats) {
  RingStats local_stats;
  RingStats* st = stats ? stats : &local_stats;
  const int P = comm.size(), r = comm.rank();
  const int64_t B = shape.batch, Hq = shape.heads_q, Hkv = shape.heads_kv, hd = shape.head_dim;
  const int64_t nq = RingLocalLength(shape.global_len, r, P);
  Status local = CheckLocal(comm, shape, params, q, k, v, dq);
  const AttentionShape own{B, Hq, Hkv, nq, nq, hd};
  if (local.ok()) local = ValidateAttention(own, AttentionParams{}, dout, k, v, dq);
  if (local.ok()) {
    local = ValidateAttention(own, AttentionParams{}, out, k, v, dq);  // out shaped like q
  }
  const AttentionShape kv_shape{B, Hkv, Hkv, nq, nq, hd};
  if (local.ok()) local = ValidateAttention(kv_shape, AttentionParams{}, k, k, v, dk);
  if (local.ok()) local = ValidateAttention(kv_shape, AttentionParams{}, k, k, v, dv);
  if (local.ok() && static_cast<int64_t>(lse.size()) != B * Hq * nq) {
    local = Status::InvalidArgument("ring attention backward: lse needs batch * heads_q * local "
                                    "length = " + std::to_string(B * Hq * nq) + " floats");
  }
  const bool sink = params.softmax == SoftmaxKind::kSinkLogit;
  if (local.ok() && sink && static_cast<int64_t>(d_sink_logits.size()) != Hq) {
    local = Status::InvalidArgument("ring attention backward: d_sink_logits needs heads_q floats");
  }
  ATTNLAB_RETURN_IF_ERROR(Agree(comm, shape, params, local, "ring attention backward"));

  const int64_t n0 = RingLocalLength(shape.global_len, 0, P);
  KvBuffer kv = MakeKv(shape, n0), kv_next = MakeKv(shape, n0);
  KvBuffer dkv = MakeKv(shape, n0), dkv_next = MakeKv(shape, n0);  // [0]: dK, [1]: dV
  CopyRows(kv.View(0), k, B, Hkv, nq, hd, false);
  CopyRows(kv.View(1), v, B, Hkv, nq, hd, false);
  std::vector<float> dq_buf, dqb_buf, dkb_buf, dvb_buf, lse_b;
  TensorView4<float> dq_acc = Contiguous(dq_buf, B, Hq, nq, hd);
  std::vector<Request> pending;
  const int64_t kv_bytes = static_cast<int64_t>(kv.data.size() * sizeof(float));
  for (int t = 0; t < P; ++t) {
    const int s = (r - t + P) % P;
    if (t + 1 < P) {
      ATTNLAB_RETURN_IF_ERROR(PostRing(comm, kv.data.data(), kv_next.data.data(), kv_bytes,
                                       kTagKv, "ring attention backward, K/V step " +
                                       std::to_string(t), &pending, st));
    }
    const double c0 = Now();
    const Block blk = BlockOf(params.mask.causal, r, s, nq, RingLocalLength(shape.global_len, s, P));
    if (blk.lq > 0 && blk.lk > 0) {
      const AttentionShape bs{B, Hq, Hkv, blk.lq, blk.lk, hd};
      lse_b.resize(B * Hq * blk.lq);
      for (int64_t bh = 0; bh < B * Hq; ++bh) {
        std::copy_n(lse.data() + bh * nq + blk.q0, blk.lq, lse_b.data() + bh * blk.lq);
      }
      TensorView4<float> dqb = Contiguous(dqb_buf, B, Hq, blk.lq, hd);
      TensorView4<float> dkb = Contiguous(dkb_buf, B, Hkv, blk.lk, hd);
      TensorView4<float> dvb = Contiguous(dvb_buf, B, Hkv, blk.lk, hd);
      ATTNLAB_RETURN_IF_ERROR(AttentionBackwardFlash(
          bs, BlockParams(params, s), RowsFrom(q, blk.q0), kv.CView(0), kv.CView(1),
          RowsFrom(out, blk.q0), lse_b, RowsFrom(dout, blk.q0), dqb, dkb, dvb));
      CopyRows(RowsFrom(dq_acc, blk.q0), dqb, B, Hq, blk.lq, hd, true);
      CopyRows(dkv.View(0), dkb, B, Hkv, blk.lk, hd, true);
      CopyRows(dkv.View(1), dvb, B, Hkv, blk.lk, hd, true);
    }
    st->compute_s += Now() - c0;
    if (P > 1) {  // the block's accumulators go on with it; after step P - 1 they are home
      ATTNLAB_RETURN_IF_ERROR(PostRing(comm, dkv.data.data(), dkv_next.data.data(), kv_bytes,
                                       kTagDkv, "ring attention backward, dK/dV step " +
                                       std::to_string(t), &pending, st));
      ATTNLAB_RETURN_IF_ERROR(WaitAll(comm, &pending, st));
      if (t + 1 < P) std::swap(kv, kv_next);
      std::swap(dkv, dkv_next);  // the next block's accumulators (ours after the last step)
    }
  }
  CopyRows(dq, Const(dq_acc), B, Hq, nq, hd, false);
  CopyRows(dk, dkv.CView(0), B, Hkv, nq, hd, false);
  CopyRows(dv, dkv.CView(1), B, Hkv, nq, hd, false);
  if (sink) {  // d b_h = -sum_i e^(b_h - lse_i) (dO_i . O_i), this rank's rows
    for (int64_t h = 0; h < Hq; ++h) {
      double g = 0;
      for (int64_t b = 0; b < B; ++b) {
        for (int64_t i = 0; i < nq; ++i) {
          const float* o = out.at(b, h, i);
          const float* d = dout.at(b, h, i);
          double dd = 0;
          for (int64_t e = 0; e < hd; ++e) dd += static_cast<double>(o[e]) * d[e];
          g -= std::exp(static_cast<double>(params.sink_logits[h]) - lse[(b * Hq + h) * nq + i]) * dd;
        }
      }
      d_sink_logits[h] = static_cast<float>(g);
    }
  }
  return Status::Ok();
}

}  // namespace attnlab::dist
