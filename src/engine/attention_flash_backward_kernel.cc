// The flash backward's task body (attention_flash_backward.cc states the algorithm and owns
// the entry point), compiled once per SIMD target (engine/target.h, engine/kernel_table.h).
// Tile loops step by simd::kLanes; kBackwardRows and d_pad are multiples of 16.
#include <algorithm>
#include <cmath>
#include <limits>

#include "attnlab/attention.h"
#include "engine/attention_flash_common.h"
#include "engine/attention_mask.h"
#include "engine/kernel_table.h"
#include "engine/micro_gemm.h"
#include "engine/simd.h"
#include "engine/target.h"

ATTNLAB_TARGET_BEGIN
namespace attnlab::ATTNLAB_TARGET_NS {
namespace {

using internal::kBlockK;
using internal::kLog2e;
using internal::RoundUp;
using simd::VecF;

constexpr int kL = simd::kLanes;
constexpr int64_t kRowsB = internal::kBackwardRows;  // query rows per sub-block
constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr float kPosInf = std::numeric_limits<float>::infinity();

// Packs rows [i0, i0 + nr) of query head h: Q^T scaled, dO^T, Q and dO padded; lse2 and D.
// Padding columns get lse2 = +inf and D = 0 so their P and dS are exactly 0.
void PackQueryBlock(const internal::FlashBackwardArgs& a, int64_t b, int64_t h, int64_t i0, int64_t nr,
                    internal::FlashBackwardBuffers& w) {
  const AttentionShape& s = *a.shape;
  const int64_t D = s.head_dim, d_pad = a.plan.d_pad;
  for (int64_t i = 0; i < kRowsB; ++i) {
    float* qrow = w.qp.data() + i * d_pad;
    float* dorow = w.dop.data() + i * d_pad;
    if (i >= nr) {
      std::fill(qrow, qrow + d_pad, 0.0f);
      std::fill(dorow, dorow + d_pad, 0.0f);
      for (int64_t d = 0; d < D; ++d) w.qt[d * kRowsB + i] = w.dot[d * kRowsB + i] = 0.0f;
      w.lse2[i] = kPosInf;
      w.dd[i] = 0.0f;
      w.dd_exact[i] = 0.0;
      continue;
    }
    const float* qs = a.q->at(b, h, i0 + i);
    const float* dos = a.dout->at(b, h, i0 + i);
    const float* os = a.out->at(b, h, i0 + i);
    double dsum = 0;
    for (int64_t d = 0; d < D; ++d) {
      qrow[d] = qs[d];
      dorow[d] = dos[d];
      w.qt[d * kRowsB + i] = qs[d] * a.qscale;
      w.dot[d * kRowsB + i] = dos[d];
      dsum += static_cast<double>(dos[d]) * os[d];
    }
    std::fill(qrow + D, qrow + d_pad, 0.0f);
    std::fill(dorow + D, dorow + d_pad, 0.0f);
    const float lse = a.lse[(b * s.heads_q + h) * s.len_q + i0 + i];
    // No visible key (standard softmax): lse = -inf; use +inf so every P is exactly 0.
    w.lse2[i] = (a.sigmoid || lse == kNegInf) ? kPosInf : lse * kLog2e;
    w.dd[i] = static_cast<float>(dsum);
    w.dd_exact[i] = dsum;
  }
  if (a.sigmoid) std::fill(w.lse2.data(), w.lse2.data() + kRowsB, 0.0f);
}

// P^T = 2^(S^T - lse2) and dS^T = P^T (dP^T - D), in place (st -> P^T, dpt -> dS^T).
void SoftmaxGradTile(internal::FlashBackwardBuffers& w) {
  for (int64_t j = 0; j < kBlockK; ++j) {
    float* srow = w.st.data() + j * kRowsB;
    float* drow = w.dpt.data() + j * kRowsB;
    for (int64_t i = 0; i < kRowsB; i += kL) {
      const VecF p = simd::Exp2(simd::Load(srow + i) - simd::Load(w.lse2.data() + i));
      simd::Store(srow + i, p);
      simd::Store(drow + i, p * (simd::Load(drow + i) - simd::Load(w.dd.data() + i)));
    }
  }
}

// Softpick (attention.h): with E = 2^(S^T - lse2) = e^s / Z, P^T = max(E - 1/Z, 0) and
// dS^T = E (dP^T - D) where s > 0, E D where s < 0, 0 at s = 0; in place. Masked (-inf)
// entries and padding rows (lse2 = +inf) give E = 0, so P = dS = 0.
void SoftpickGradTile(internal::FlashBackwardBuffers& w) {
  const VecF zero = simd::Zero(), half = simd::Set1(0.5f);
  for (int64_t j = 0; j < kBlockK; ++j) {
    float* srow = w.st.data() + j * kRowsB;
    float* drow = w.dpt.data() + j * kRowsB;
    for (int64_t i = 0; i < kRowsB; i += kL) {
      const VecF x = simd::Load(srow + i), lse2 = simd::Load(w.lse2.data() + i);
      const VecF dd = simd::Load(w.dd.data() + i);
      VecF e = simd::Exp2(x - lse2);
      e = (x - lse2) == (x - lse2) ? e : x - lse2;  // NaN sticks (the engine's Exp2 drops it)
      // P = 2^-lse2 (2^x - 1): near x = 0 without the cancellation of E - 2^-lse2.
      const VecF off = simd::Exp2(zero - lse2), ax = simd::Max(x, zero - x);
      const VecF p = ax <= half ? off * simd::Exp2m1Small(x) : e - off;
      simd::Store(srow + i, simd::Max(p, zero));
      const VecF pos = e * (simd::Load(drow + i) - dd), neg = e * dd;
      simd::Store(drow + i, x > zero ? pos : (x < zero ? neg : zero));
    }
  }
}

// P^T = sigmoid(S^T + bias) (masked entries 0) and dS^T = dP^T P (1 - P), in place.
void SigmoidGradTile(internal::FlashBackwardBuffers& w, float bias) {
  const VecF bv = simd::Set1(bias), nl2e = simd::Set1(-kLog2e), one = simd::Set1(1.0f);
  const VecF ninf = simd::Set1(kNegInf);
  for (int64_t j = 0; j < kBlockK; ++j) {
    float* srow = w.st.data() + j * kRowsB;
    float* drow = w.dpt.data() + j * kRowsB;
    for (int64_t i = 0; i < kRowsB; i += kL) {
      const VecF x = simd::Load(srow + i);
      VecF p = one / (one + simd::Exp2((x + bv) * nl2e));
      p = x == ninf ? simd::Zero() : p;
      simd::Store(srow + i, p);
      simd::Store(drow + i, simd::Load(drow + i) * p * (one - p));
    }
  }
}

// A task's place: its (batch, kv head) and its chunk of keys [kc0, kc0 + nkeys).
struct TaskKeys {
  int64_t b, hk, bh, kc, kc0, nkeys, nkeys_pad;
};

TaskKeys TaskKeysOf(const internal::FlashBackwardArgs& a, int64_t task) {
  const AttentionShape& s = *a.shape;
  TaskKeys t;
  t.kc = task % a.plan.n_kchunks;
  t.bh = task / a.plan.n_kchunks;
  t.b = t.bh / s.heads_kv, t.hk = t.bh % s.heads_kv;
  t.kc0 = t.kc * a.plan.kchunk;
  t.nkeys = std::min(a.plan.kchunk, s.len_k - t.kc0);
  t.nkeys_pad = RoundUp(t.nkeys, kBlockK);
  return t;
}

// Packs the chunk's keys and values. The dK, dV accumulators start at zero on the first pass
// and resume, on later passes, from the unscaled values the previous pass left in the outputs
// (an exact round trip, so the sums are those of a single pass).
void BeginChunk(const internal::FlashBackwardArgs& a, const TaskKeys& t, int64_t pass, internal::FlashBackwardBuffers& w) {
  const int64_t D = a.shape->head_dim, d_pad = a.plan.d_pad;
  internal::PackRowsPadded(*a.k, t.b, t.hk, t.kc0, t.nkeys, D, d_pad, t.nkeys_pad, w.kp.data());
  internal::PackRowsPadded(*a.v, t.b, t.hk, t.kc0, t.nkeys, D, d_pad, t.nkeys_pad, w.vp.data());
  if (pass == 0) {
    std::fill(w.dk.data(), w.dk.data() + t.nkeys_pad * d_pad, 0.0f);
    std::fill(w.dv.data(), w.dv.data() + t.nkeys_pad * d_pad, 0.0f);
    return;
  }
  const AttentionTensor dk_prev{a.dk->data, a.dk->size, a.dk->stride_batch, a.dk->stride_head,
                                a.dk->stride_token};
  const AttentionTensor dv_prev{a.dv->data, a.dv->size, a.dv->stride_batch, a.dv->stride_head,
                                a.dv->stride_token};
  internal::PackRowsPadded(dk_prev, t.b, t.hk, t.kc0, t.nkeys, D, d_pad, t.nkeys_pad, w.dk.data());
  internal::PackRowsPadded(dv_prev, t.b, t.hk, t.kc0, t.nkeys, D, d_pad, t.nkeys_pad, w.dv.data());
}

// Writes the chunk's dK (times scale) and dV on the last pass; unscaled dK before that.
void EndChunk(const internal::FlashBackwardArgs& a, const TaskKeys& t, int64_t pass, internal::FlashBackwardBuffers& w) {
  const int64_t D = a.shape->head_dim, d_pad = a.plan.d_pad;
  const bool last = pass == a.plan.passes - 1;
  for (int64_t j = 0; j < t.nkeys; ++j) {
    float* dkd = a.dk->at(t.b, t.hk, t.kc0 + j);
    float* dvd = a.dv->at(t.b, t.hk, t.kc0 + j);
    const float* dks = w.dk.data() + j * d_pad;
    const float* dvs = w.dv.data() + j * d_pad;
    for (int64_t d = 0; d < D; ++d) {
      dkd[d] = last ? dks[d] * a.scale : dks[d];
      dvd[d] = dvs[d];
    }
  }
}

// Rows [i0, i0 + nr) of query head h (packed in w) against the chunk's key blocks: dV, dK of the
// chunk and w.dq (zeroed by the caller) accumulate.
void AccumulateRowBlock(const internal::FlashBackwardArgs& a, const TaskKeys& t, int64_t i0, int64_t nr,
                        internal::FlashBackwardBuffers& w) {
  const AttentionShape& s = *a.shape;
  const AttentionParams& params = *a.params;
  const AttentionMask& mask = params.mask;
  const int64_t D = s.head_dim, d_pad = a.plan.d_pad;
  for (int64_t k0 = t.kc0; k0 < t.kc0 + t.nkeys; k0 += kBlockK) {
    const int64_t nk = std::min(kBlockK, t.kc0 + t.nkeys - k0);
    const internal::BlockClass cls =
        internal::ClassifyBlock(mask, s.len_q, s.len_k, i0, nr, k0, nk);
    if (cls == internal::BlockClass::kEmpty) continue;
    const float* kb = w.kp.data() + (k0 - t.kc0) * d_pad;
    const float* vb = w.vp.data() + (k0 - t.kc0) * d_pad;
    // S^T = K Q^T (log2 domain), dP^T = V dO^T: [kBlockK x kRowsB], reduction over D.
    SmallGemm(kBlockK, kRowsB, D, kb, d_pad, w.qt.data(), kRowsB, w.st.data(), kRowsB,
                        false);
    SmallGemm(kBlockK, kRowsB, D, vb, d_pad, w.dot.data(), kRowsB, w.dpt.data(), kRowsB,
                        false);
    if (cls == internal::BlockClass::kPartial) {
      internal::MaskTileTransposed(mask, s, t.b, w.row_h.data(), w.row_i.data() + i0, nr, k0, nk,
                                   w.st.data(), kRowsB);
      for (int64_t j = nk; j < kBlockK; ++j) {  // keys past len_k (zero-padded rows of Kp)
        std::fill(w.st.data() + j * kRowsB, w.st.data() + (j + 1) * kRowsB, kNegInf);
      }
    }
    if (a.sigmoid) {
      SigmoidGradTile(w, params.sigmoid_bias);
    } else if (a.softpick) {
      SoftpickGradTile(w);
    } else {
      SoftmaxGradTile(w);
    }
    float* dkb = w.dk.data() + (k0 - t.kc0) * d_pad;
    float* dvb = w.dv.data() + (k0 - t.kc0) * d_pad;
    // dV += P^T dO, dK += dS^T Q (scale applied at the end).
    SmallGemm(kBlockK, d_pad, kRowsB, w.st.data(), kRowsB, w.dop.data(), d_pad, dvb,
                        d_pad, true);
    SmallGemm(kBlockK, d_pad, kRowsB, w.dpt.data(), kRowsB, w.qp.data(), d_pad, dkb,
                        d_pad, true);
    // dQ += dS K; dS^T is dS in column-major order.
    SmallGemm</*kAColMajor=*/true>(nr, d_pad, kBlockK, w.dpt.data(), kRowsB, kb, d_pad,
                                             w.dq.data(), d_pad, true);
  }
}

// Where row i of query head h = hk * group + g gets this chunk's dQ: dq itself when keys are not
// split, else the chunk's partial slot for the pass's head.
float* DqDestination(const internal::FlashBackwardArgs& a, const TaskKeys& t, int64_t g, int64_t i) {
  const AttentionShape& s = *a.shape;
  const internal::FlashBackwardPlan& plan = a.plan;
  if (plan.n_kchunks == 1) return a.dq->at(t.b, t.hk * plan.group + g, i);
  const int64_t slot = g % plan.heads_per_pass;
  const int64_t bh_count = s.batch * s.heads_kv;
  return a.dq_partial +
         (((t.kc * bh_count + t.bh) * plan.heads_per_pass + slot) * s.len_q + i) * s.head_dim;
}

// Query head hk * group + g against the task's keys, row block by row block; d sink_h (chunk 0
// only, once per row) into the task's dsink_partial slot.
void RunHead(const internal::FlashBackwardArgs& a, const TaskKeys& t, int64_t g, internal::FlashBackwardBuffers& w) {
  const AttentionShape& s = *a.shape;
  const AttentionParams& params = *a.params;
  const internal::FlashBackwardPlan& plan = a.plan;
  const int64_t D = s.head_dim, d_pad = plan.d_pad;
  const int64_t h = t.hk * plan.group + g;
  std::fill(w.row_h.begin(), w.row_h.end(), h);
  const bool sink_rows = params.softmax == SoftmaxKind::kSinkLogit && t.kc == 0;
  double dsink = 0;
  for (int64_t i0 = 0; i0 < s.len_q; i0 += kRowsB) {
    const int64_t nr = std::min(kRowsB, s.len_q - i0);
    const internal::KeySpan span =
        internal::ChunkKeySpan(params.mask, s.len_q, s.len_k, i0, nr);
    const bool touches = span.Intersects(t.kc0, t.nkeys);
    if (!touches && !sink_rows && plan.n_kchunks > 1) {  // this chunk adds nothing to their dQ
      for (int64_t i = 0; i < nr; ++i) {
        float* dst = DqDestination(a, t, g, i0 + i);
        std::fill(dst, dst + D, 0.0f);
      }
      continue;
    }
    PackQueryBlock(a, t.b, h, i0, nr, w);
    if (sink_rows) {  // d sink_h = -sum_i exp(b_h - lse_i) D_i, in double (see the top)
      for (int64_t i = 0; i < nr; ++i) {
        const double lse = a.lse[(t.b * s.heads_q + h) * s.len_q + i0 + i];
        dsink -= std::exp(static_cast<double>(params.sink_logits[h]) - lse) * w.dd_exact[i];
      }
    }
    std::fill(w.dq.data(), w.dq.data() + kRowsB * d_pad, 0.0f);
    if (touches) AccumulateRowBlock(a, t, i0, nr, w);
    for (int64_t i = 0; i < nr; ++i) {  // this sub-block's dQ, complete for this key chunk
      const float* src = w.dq.data() + i * d_pad;
      float* dst = DqDestination(a, t, g, i0 + i);
      for (int64_t d = 0; d < D; ++d) dst[d] = src[d] * a.scale;
    }
  }
  if (a.dsink_partial && t.kc == 0) a.dsink_partial[t.bh * plan.group + g] = dsink;
}

// One task of one pass: the pass's query heads of the group against the task's chunk of keys.
}  // namespace

void FlashBackwardTask(const internal::FlashBackwardArgs& a, int64_t pass, int64_t task,
                       internal::FlashBackwardBuffers& w) {
  const TaskKeys t = TaskKeysOf(a, task);
  BeginChunk(a, t, pass, w);
  const int64_t g0 = pass * a.plan.heads_per_pass;
  for (int64_t g = g0; g < g0 + a.plan.heads_per_pass; ++g) RunHead(a, t, g, w);
  EndChunk(a, t, pass, w);
}


}  // namespace attnlab::ATTNLAB_TARGET_NS
ATTNLAB_TARGET_END
