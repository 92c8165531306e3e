// Causal linear attention (attnlab/linear_attention.h): validation, the recurrent form (the
// templated twin in linear_attention_reference.h run in fp32), and the chunked form.
//
// Chunked forward, per task (batch b, kv head hk), chunks of n <= C tokens in order, with
// D = head_dim, E = D + 1 (values augmented with a 1: [v | 1], so the denominator is the last
// column of the numerator) and every operand padded to 16 lanes for the micro-kernel:
//   pack  Kf = phi(K_c) [n x Dp], KfT [Dp x Cp], V' = [V_c | 1] [n x Ep]
//   per query head:  Qf = phi(Q_c) [n x Dp]
//     A  = Qf KfT, then A[i, j] = 0 for j > i          (intra-chunk, causal)
//     N' = A V' + Qf S'                                 (S' [D x Ep]: the state before the chunk)
//     O  = N'[:, :D] / (N'[:, D] + eps)
//   S' += Kf^T V'                                       (once per kv head: shared by the group)
// Chunked backward (see the header for the formulas), per task:
//   forward sweep:  ST = sum over earlier chunks V'^T Kf  [Ep x Dp] (S' transposed)
//     G = dN' V'^T masked j <= i;  d Qf = G Kf + dN' ST;  dq = d Qf * phi'(q)
//   reverse sweep:  R = sum over later chunks Qf^T dN' [D x Ep] and RT = dN'^T Qf [Ep x Dp]
//     d Kf = V' RT + sum_heads G^T Qf;  dV = Kf R + sum_heads A^T dN'  (first D columns)
// where dN' = [dO / den | -(dO . O) / den] [n x Ep] per query head, recomputed from the
// forward's out and den. Only the running sums are kept, never a state per chunk.
#include "attnlab/linear_attention.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "attnlab/thread_pool.h"
#include "core/aligned_buffer.h"
#include "engine/attention_validate.h"
#include "engine/linear_attention_reference.h"
#include "engine/micro_gemm.h"
#include "engine/simd.h"

namespace attnlab {

namespace {

using internal::AddressRange;
using internal::CheckDisjoint;
using internal::ValidateView4;

std::string Str(int64_t x) { return std::to_string(x); }

constexpr int64_t kMaxChunk = 1024;

// [begin, end) of a float span as an AddressRange (no period).
AddressRange SpanRange(std::span<const float> s) {
  AddressRange r;
  r.begin = reinterpret_cast<const char*>(s.data());
  r.end = r.begin + s.size() * sizeof(float);
  return r;
}

Status CheckSpanSize(const char* name, std::span<const float> s, int64_t want) {
  if (!s.empty() && static_cast<int64_t>(s.size()) != want) {
    return Status::InvalidArgument(std::string(name) + ": expected " + Str(want) +
                                   " floats or none, got " + Str(static_cast<int64_t>(s.size())));
  }
  return Status::Ok();
}

// Shape (len_q == len_k), eps and chunk.
Status ValidateLinearShape(const AttentionShape& s, const LinearAttentionParams& p) {
  ATTNLAB_RETURN_IF_ERROR(internal::ValidateShapeAndParams(s, AttentionParams{}));
  if (s.len_q != s.len_k) {
    return Status::InvalidArgument(
        "linear attention is causal self-attention over one stretch of tokens: len_q (" +
        Str(s.len_q) + ") must equal len_k (" + Str(s.len_k) +
        "); earlier tokens enter through state_in");
  }
  if (!(p.eps > 0.0f) || !std::isfinite(p.eps)) {
    return Status::InvalidArgument("linear attention eps must be finite and > 0 (default 1e-6)");
  }
  if (p.chunk < 1 || p.chunk > kMaxChunk) {
    return Status::InvalidArgument("linear attention chunk must be in [1, " + Str(kMaxChunk) +
                                   "], got " + Str(p.chunk));
  }
  return Status::Ok();
}

}  // namespace

int64_t LinearAttentionStateSize(const AttentionShape& s) {
  return s.batch * s.heads_kv * s.head_dim * (s.head_dim + 1);
}

Status ValidateLinearAttention(const AttentionShape& s, const LinearAttentionParams& p,
                               const AttentionTensor& q, const AttentionTensor& k,
                               const AttentionTensor& v, const AttentionTensorMut& out,
                               std::span<const float> den, std::span<const float> state_in,
                               std::span<const float> state_out) {
  ATTNLAB_RETURN_IF_ERROR(ValidateLinearShape(s, p));
  internal::ForwardRanges views;
  ATTNLAB_RETURN_IF_ERROR(internal::ValidateForwardViews(s, q, k, v, out, &views));
  ATTNLAB_RETURN_IF_ERROR(CheckSpanSize("den", den, s.batch * s.heads_q * s.len_q));
  const int64_t state = LinearAttentionStateSize(s);
  ATTNLAB_RETURN_IF_ERROR(CheckSpanSize("state_in", state_in, state));
  ATTNLAB_RETURN_IF_ERROR(CheckSpanSize("state_out", state_out, state));
  const std::pair<const char*, std::span<const float>> outs[] = {{"den", den},
                                                                  {"state_out", state_out}};
  for (const auto& [name, span] : outs) {
    if (span.empty()) continue;
    const AddressRange r = SpanRange(span);
    for (const auto& [in_name, in] :
         {std::pair{"q", &views.q}, {"k", &views.k}, {"v", &views.v}, {"out", &views.out}}) {
      ATTNLAB_RETURN_IF_ERROR(CheckDisjoint(name, r, in_name, *in));
    }
  }
  if (!den.empty() && !state_out.empty()) {
    ATTNLAB_RETURN_IF_ERROR(CheckDisjoint("den", SpanRange(den), "state_out", SpanRange(state_out)));
  }
  if (!state_in.empty() && !state_out.empty() && state_in.data() != state_out.data()) {
    ATTNLAB_RETURN_IF_ERROR(
        CheckDisjoint("state_in", SpanRange(state_in), "state_out", SpanRange(state_out)));
  }
  if (!state_in.empty() && !den.empty()) {
    ATTNLAB_RETURN_IF_ERROR(CheckDisjoint("den", SpanRange(den), "state_in", SpanRange(state_in)));
  }
  return Status::Ok();
}

namespace {

// The backward's checks: the forward's inputs (out and den given as the forward produced them),
// dout, and the three gradients (outputs; disjoint from each other and from every input).
Status ValidateLinearBackward(const AttentionShape& s, const LinearAttentionParams& p,
                              const AttentionTensor& q, const AttentionTensor& k,
                              const AttentionTensor& v, const AttentionTensor* out,
                              std::span<const float> den, bool den_required,
                              const AttentionTensor& dout, const AttentionTensorMut& dq,
                              const AttentionTensorMut& dk, const AttentionTensorMut& dv) {
  ATTNLAB_RETURN_IF_ERROR(ValidateLinearShape(s, p));
  // The engine's backward validation covers the views and their disjointness.
  ATTNLAB_RETURN_IF_ERROR(internal::ValidateAttentionBackward(
      s, AttentionParams{}, q, k, v, out, {}, /*lse_required=*/false, dout, dq, dk, dv, {}));
  const int64_t rows = s.batch * s.heads_q * s.len_q;
  if ((den_required || !den.empty()) && static_cast<int64_t>(den.size()) != rows) {
    return Status::InvalidArgument(
        "den: expected batch * heads_q * len = " + Str(rows) + " denominators, got " +
        Str(static_cast<int64_t>(den.size())) + " (pass the den the forward wrote)");
  }
  return Status::Ok();
}

// ------------------------------------------------------------------------------------------------
// Chunked kernels.
// ------------------------------------------------------------------------------------------------

using simd::VecF;

inline int64_t RoundUp16(int64_t x) { return (x + 15) / 16 * 16; }

struct ChunkDims {
  int64_t D, Dp, E, Ep, C, Cp, group;
  explicit ChunkDims(const AttentionShape& s, int64_t chunk)
      : D(s.head_dim),
        Dp(RoundUp16(s.head_dim)),
        E(s.head_dim + 1),
        Ep(RoundUp16(s.head_dim + 1)),
        C(std::min(chunk, s.len_q)),
        Cp(RoundUp16(std::min(chunk, s.len_q))),
        group(s.heads_q / s.heads_kv) {}
};

// dst[0..Dp) = phi(src[0..D)), zero padding. kLanes at a time: phi(x) = x + 1 (x > 0) or
// 2^(x log2 e) (simd::Exp2, relative error < 2e-7).
inline void PhiRow(const float* src, int64_t D, int64_t Dp, float* dst) {
  constexpr float kLog2e = 1.4426950408889634f;
  const VecF one = simd::Set1(1.0f), zero = simd::Zero(), l2e = simd::Set1(kLog2e);
  float tmp[simd::kLanes];
  for (int64_t d = 0; d < Dp; d += simd::kLanes) {
    VecF x;
    if (d + simd::kLanes <= D) {
      x = simd::Load(src + d);
    } else {
      for (int64_t i = 0; i < simd::kLanes; ++i) tmp[i] = d + i < D ? src[d + i] : 0.0f;
      x = simd::Load(tmp);
    }
    VecF y = x > zero ? x + one : simd::Exp2(x * l2e);
    if (d + simd::kLanes > D) {  // padding lanes stay 0
      simd::Store(tmp, y);
      for (int64_t i = std::max<int64_t>(0, D - d); i < simd::kLanes; ++i) tmp[i] = 0.0f;
      y = simd::Load(tmp);
    }
    simd::Store(dst + d, y);
  }
}

// Per-chunk packs of one kv head: Kf [C x Dp], KfT [Dp x Cp], V' [C x Ep], V'^T [Ep x Cp]
// (the last only when with_vpt: the forward never reads it).
struct KvPack {
  AlignedBuffer<float> kf, kft, vp, vpt;
};

void PackKv(const AttentionTensor& k, const AttentionTensor& v, int64_t b, int64_t hk, int64_t t0,
            int64_t n, const ChunkDims& z, bool with_vpt, KvPack& w) {
  std::fill(w.kf.data(), w.kf.data() + z.C * z.Dp, 0.0f);
  std::fill(w.vp.data(), w.vp.data() + z.C * z.Ep, 0.0f);
  for (int64_t j = 0; j < n; ++j) {
    PhiRow(k.at(b, hk, t0 + j), z.D, z.Dp, w.kf.data() + j * z.Dp);
    const float* vs = v.at(b, hk, t0 + j);
    float* vd = w.vp.data() + j * z.Ep;
    std::copy(vs, vs + z.D, vd);
    vd[z.D] = 1.0f;
  }
  std::fill(w.kft.data(), w.kft.data() + z.Dp * z.Cp, 0.0f);
  for (int64_t j = 0; j < n; ++j) {
    for (int64_t d = 0; d < z.D; ++d) w.kft[d * z.Cp + j] = w.kf[j * z.Dp + d];
  }
  if (!with_vpt) return;
  std::fill(w.vpt.data(), w.vpt.data() + z.Ep * z.Cp, 0.0f);
  for (int64_t j = 0; j < n; ++j) {
    for (int64_t e = 0; e < z.E; ++e) w.vpt[e * z.Cp + j] = w.vp[j * z.Ep + e];
  }
}

// Zeroes a[i * lda + j] for j > i (i < n): the causal mask inside a chunk.
inline void MaskUpper(int64_t n, float* a, int64_t lda) {
  for (int64_t i = 0; i < n; ++i) std::fill(a + i * lda + i + 1, a + i * lda + n, 0.0f);
}

struct ForwardArgs {
  const AttentionShape* s;
  const LinearAttentionParams* p;
  const AttentionTensor *q, *k, *v;
  const AttentionTensorMut* out;
  float* den;              // may be null
  const float* state_in;   // may be null
  float* state_out;        // may be null
};

struct ForwardScratch {
  KvPack kv;
  AlignedBuffer<float> qf;   // [C x Dp]
  AlignedBuffer<float> a;    // [C x Cp]
  AlignedBuffer<float> num;  // [C x Ep]
  AlignedBuffer<float> st;   // [D x Ep] the running state S'
};

void ForwardTask(const ForwardArgs& a, const ChunkDims& z, int64_t task, ForwardScratch& w) {
  const AttentionShape& s = *a.s;
  const int64_t b = task / s.heads_kv, hk = task % s.heads_kv;
  const int64_t D = z.D, Dp = z.Dp, Ep = z.Ep, Cp = z.Cp, L = s.len_q;
  const float eps = a.p->eps;
  const int64_t state_off = task * D * z.E;
  float* st = w.st.data();
  std::fill(st, st + D * Ep, 0.0f);
  if (a.state_in) {
    for (int64_t d = 0; d < D; ++d) {
      std::copy(a.state_in + state_off + d * z.E, a.state_in + state_off + (d + 1) * z.E,
                st + d * Ep);
    }
  }
  for (int64_t t0 = 0; t0 < L; t0 += z.C) {
    const int64_t n = std::min(z.C, L - t0);
    PackKv(*a.k, *a.v, b, hk, t0, n, z, /*with_vpt=*/false, w.kv);
    for (int64_t g = 0; g < z.group; ++g) {
      const int64_t h = hk * z.group + g;
      for (int64_t i = 0; i < n; ++i) PhiRow(a.q->at(b, h, t0 + i), D, Dp, w.qf.data() + i * Dp);
      // A = Qf Kf^T, causal inside the chunk.
      baseline::SmallGemm(n, Cp, D, w.qf.data(), Dp, w.kv.kft.data(), Cp, w.a.data(), Cp, false);
      MaskUpper(n, w.a.data(), Cp);
      // N' = A V' + Qf S'.
      baseline::SmallGemm(n, Ep, n, w.a.data(), Cp, w.kv.vp.data(), Ep, w.num.data(), Ep, false);
      baseline::SmallGemm(n, Ep, D, w.qf.data(), Dp, st, Ep, w.num.data(), Ep, true);
      for (int64_t i = 0; i < n; ++i) {
        const float* nr = w.num.data() + i * Ep;
        const float dn = nr[D] + eps;
        const float inv = 1.0f / dn;
        float* o = a.out->at(b, h, t0 + i);
        for (int64_t e = 0; e < D; ++e) o[e] = nr[e] * inv;
        if (a.den) a.den[(b * s.heads_q + h) * L + t0 + i] = dn;
      }
    }
    // S' += Kf^T V'.
    baseline::SmallGemm</*kAColMajor=*/true>(D, Ep, n, w.kv.kf.data(), Dp, w.kv.vp.data(), Ep, st,
                                             Ep, true);
  }
  if (a.state_out) {
    for (int64_t d = 0; d < D; ++d) {
      std::copy(st + d * Ep, st + d * Ep + z.E, a.state_out + state_off + d * z.E);
    }
  }
}

struct BackwardArgs {
  const AttentionShape* s;
  const LinearAttentionParams* p;
  const AttentionTensor *q, *k, *v, *out, *dout;
  const float* den;
  const AttentionTensorMut *dq, *dk, *dv;
};

struct BackwardScratch {
  KvPack kv;
  AlignedBuffer<float> qf;        // [C x Dp]
  AlignedBuffer<float> dn;        // [C x Ep] dN' of one query head
  AlignedBuffer<float> g, a;      // [C x Cp]
  AlignedBuffer<float> dqf, dkf;  // [C x Dp]
  AlignedBuffer<float> dvp;       // [C x Ep]
  AlignedBuffer<float> st;        // [Ep x Dp] S'^T (forward sweep); RT (reverse sweep)
  AlignedBuffer<float> r;         // [D x Ep] R (reverse sweep)
};

// Packs Qf = phi(Q) and dN' = [dO / den | -(dO . O) / den] of rows [t0, t0 + n) of head h.
void PackQueryGrad(const BackwardArgs& a, const ChunkDims& z, int64_t b, int64_t h, int64_t t0,
                   int64_t n, BackwardScratch& w) {
  const AttentionShape& s = *a.s;
  const int64_t D = z.D, Dp = z.Dp, Ep = z.Ep;
  std::fill(w.dn.data(), w.dn.data() + z.C * Ep, 0.0f);
  for (int64_t i = 0; i < n; ++i) {
    PhiRow(a.q->at(b, h, t0 + i), D, Dp, w.qf.data() + i * Dp);
    const float* dos = a.dout->at(b, h, t0 + i);
    const float* os = a.out->at(b, h, t0 + i);
    const float inv = 1.0f / a.den[(b * s.heads_q + h) * s.len_q + t0 + i];
    float* dnr = w.dn.data() + i * Ep;
    float dsum = 0;
    for (int64_t e = 0; e < D; ++e) {
      dnr[e] = dos[e] * inv;
      dsum += dos[e] * os[e];
    }
    dnr[D] = -dsum * inv;
  }
}

void BackwardTask(const BackwardArgs& a, const ChunkDims& z, int64_t task, BackwardScratch& w) {
  const AttentionShape& s = *a.s;
  const int64_t b = task / s.heads_kv, hk = task % s.heads_kv;
  const int64_t D = z.D, Dp = z.Dp, E = z.E, Ep = z.Ep, Cp = z.Cp, L = s.len_q;
  const int64_t n_chunks = (L + z.C - 1) / z.C;

  // Forward sweep: dQ. ST = sum over earlier chunks of V'^T Kf.
  float* st = w.st.data();
  std::fill(st, st + Ep * Dp, 0.0f);
  for (int64_t c = 0; c < n_chunks; ++c) {
    const int64_t t0 = c * z.C, n = std::min(z.C, L - t0);
    PackKv(*a.k, *a.v, b, hk, t0, n, z, /*with_vpt=*/true, w.kv);
    for (int64_t g = 0; g < z.group; ++g) {
      const int64_t h = hk * z.group + g;
      PackQueryGrad(a, z, b, h, t0, n, w);
      // In the forward pass this was N' = A V' + Qf S', A = mask(Qf Kf^T):
      // d Qf = mask(dN' V'^T) Kf + dN' S'^T.
      baseline::SmallGemm(n, Cp, E, w.dn.data(), Ep, w.kv.vpt.data(), Cp, w.g.data(), Cp, false);
      MaskUpper(n, w.g.data(), Cp);
      baseline::SmallGemm(n, Dp, n, w.g.data(), Cp, w.kv.kf.data(), Dp, w.dqf.data(), Dp, false);
      baseline::SmallGemm(n, Dp, E, w.dn.data(), Ep, st, Dp, w.dqf.data(), Dp, true);
      for (int64_t i = 0; i < n; ++i) {
        const float* x = a.q->at(b, h, t0 + i);
        const float* f = w.qf.data() + i * Dp;
        const float* dfq = w.dqf.data() + i * Dp;
        float* dst = a.dq->at(b, h, t0 + i);
        for (int64_t d = 0; d < D; ++d) dst[d] = x[d] > 0.0f ? dfq[d] : dfq[d] * f[d];
      }
    }
    // ST += V'^T Kf.
    baseline::SmallGemm</*kAColMajor=*/true>(E, Dp, n, w.kv.vp.data(), Ep, w.kv.kf.data(), Dp, st,
                                             Dp, true);
  }

  // Reverse sweep: dK, dV. RT = sum over later chunks of dN'^T Qf, R = Qf^T dN' (all heads).
  float* rt = w.st.data();
  float* r = w.r.data();
  std::fill(rt, rt + Ep * Dp, 0.0f);
  std::fill(r, r + D * Ep, 0.0f);
  for (int64_t c = n_chunks - 1; c >= 0; --c) {
    const int64_t t0 = c * z.C, n = std::min(z.C, L - t0);
    PackKv(*a.k, *a.v, b, hk, t0, n, z, /*with_vpt=*/true, w.kv);
    // Later chunks: d Kf = V' RT, dV = Kf R.
    baseline::SmallGemm(n, Dp, E, w.kv.vp.data(), Ep, rt, Dp, w.dkf.data(), Dp, false);
    baseline::SmallGemm(n, Ep, D, w.kv.kf.data(), Dp, r, Ep, w.dvp.data(), Ep, false);
    for (int64_t g = 0; g < z.group; ++g) {
      const int64_t h = hk * z.group + g;
      PackQueryGrad(a, z, b, h, t0, n, w);
      // This chunk: d Kf += G^T Qf, dV += A^T dN (G and A read column-major).
      baseline::SmallGemm(n, Cp, E, w.dn.data(), Ep, w.kv.vpt.data(), Cp, w.g.data(), Cp, false);
      MaskUpper(n, w.g.data(), Cp);
      baseline::SmallGemm</*kAColMajor=*/true>(n, Dp, n, w.g.data(), Cp, w.qf.data(), Dp,
                                               w.dkf.data(), Dp, true);
      baseline::SmallGemm(n, Cp, D, w.qf.data(), Dp, w.kv.kft.data(), Cp, w.a.data(), Cp, false);
      MaskUpper(n, w.a.data(), Cp);
      baseline::SmallGemm</*kAColMajor=*/true>(n, Ep, n, w.a.data(), Cp, w.dn.data(), Ep,
                                               w.dvp.data(), Ep, true);
      // RT += dN'^T Qf, R += Qf^T dN' (used by the earlier chunks).
      baseline::SmallGemm</*kAColMajor=*/true>(E, Dp, n, w.dn.data(), Ep, w.qf.data(), Dp, rt, Dp,
                                               true);
      baseline::SmallGemm</*kAColMajor=*/true>(D, Ep, n, w.qf.data(), Dp, w.dn.data(), Ep, r, Ep,
                                               true);
    }
    for (int64_t j = 0; j < n; ++j) {
      const float* x = a.k->at(b, hk, t0 + j);
      const float* f = w.kv.kf.data() + j * Dp;
      const float* dfk = w.dkf.data() + j * Dp;
      const float* dvs = w.dvp.data() + j * Ep;
      float* dkd = a.dk->at(b, hk, t0 + j);
      float* dvd = a.dv->at(b, hk, t0 + j);
      for (int64_t d = 0; d < D; ++d) {
        dkd[d] = x[d] > 0.0f ? dfk[d] : dfk[d] * f[d];
        dvd[d] = dvs[d];
      }
    }
  }
}

}  // namespace

// ------------------------------------------------------------------------------------------------
// Public entry points.
// ------------------------------------------------------------------------------------------------

Status LinearAttentionForwardRecurrent(const AttentionShape& s, const LinearAttentionParams& p,
                                       const AttentionTensor& q, const AttentionTensor& k,
                                       const AttentionTensor& v, const AttentionTensorMut& out,
                                       std::span<float> den, std::span<const float> state_in,
                                       std::span<float> state_out) {
  ATTNLAB_RETURN_IF_ERROR(ValidateLinearAttention(s, p, q, k, v, out, den, state_in, state_out));
  ThreadPool& pool = p.pool ? *p.pool : DefaultThreadPool();
  const int64_t per = s.head_dim * (s.head_dim + 1);
  pool.ParallelFor(s.batch * s.heads_kv, [&](int64_t task, int) {
    internal::LinearForwardRecurrentHead<float, float>(
        s, p.eps, q, k, v, out, den.empty() ? nullptr : den.data(),
        state_in.empty() ? nullptr : state_in.data() + task * per,
        state_out.empty() ? nullptr : state_out.data() + task * per, task / s.heads_kv,
        task % s.heads_kv);
  });
  return Status::Ok();
}

Status LinearAttentionBackwardRecurrent(const AttentionShape& s, const LinearAttentionParams& p,
                                        const AttentionTensor& q, const AttentionTensor& k,
                                        const AttentionTensor& v, const AttentionTensor& dout,
                                        const AttentionTensorMut& dq, const AttentionTensorMut& dk,
                                        const AttentionTensorMut& dv) {
  ATTNLAB_RETURN_IF_ERROR(
      ValidateLinearBackward(s, p, q, k, v, nullptr, {}, false, dout, dq, dk, dv));
  ThreadPool& pool = p.pool ? *p.pool : DefaultThreadPool();
  pool.ParallelFor(s.batch * s.heads_kv, [&](int64_t task, int) {
    internal::LinearBackwardRecurrentHead<float, float>(s, p.eps, q, k, v, dout, dq, dk, dv,
                                                        task / s.heads_kv, task % s.heads_kv);
  });
  return Status::Ok();
}

Status LinearAttentionForwardChunked(const AttentionShape& s, const LinearAttentionParams& p,
                                     const AttentionTensor& q, const AttentionTensor& k,
                                     const AttentionTensor& v, const AttentionTensorMut& out,
                                     std::span<float> den, std::span<const float> state_in,
                                     std::span<float> state_out) {
  ATTNLAB_RETURN_IF_ERROR(ValidateLinearAttention(s, p, q, k, v, out, den, state_in, state_out));
  ThreadPool& pool = p.pool ? *p.pool : DefaultThreadPool();
  const ChunkDims z(s, p.chunk);
  std::vector<ForwardScratch> scratch(pool.num_threads());
  for (ForwardScratch& w : scratch) {
    w.kv.kf.Resize(z.C * z.Dp);
    w.kv.kft.Resize(z.Dp * z.Cp);
    w.kv.vp.Resize(z.C * z.Ep);
    w.qf.Resize(z.C * z.Dp);
    w.a.Resize(z.C * z.Cp);
    w.num.Resize(z.C * z.Ep);
    w.st.Resize(z.D * z.Ep);
  }
  ForwardArgs a{&s,          &p,
                &q,          &k,
                &v,          &out,
                den.empty() ? nullptr : den.data(),
                state_in.empty() ? nullptr : state_in.data(),
                state_out.empty() ? nullptr : state_out.data()};
  pool.ParallelFor(s.batch * s.heads_kv,
                   [&](int64_t task, int thread) { ForwardTask(a, z, task, scratch[thread]); });
  return Status::Ok();
}

Status LinearAttentionBackwardChunked(const AttentionShape& s, const LinearAttentionParams& p,
                                      const AttentionTensor& q, const AttentionTensor& k,
                                      const AttentionTensor& v, const AttentionTensor& out,
                                      std::span<const float> den, const AttentionTensor& dout,
                                      const AttentionTensorMut& dq, const AttentionTensorMut& dk,
                                      const AttentionTensorMut& dv) {
  ATTNLAB_RETURN_IF_ERROR(
      ValidateLinearBackward(s, p, q, k, v, &out, den, /*den_required=*/true, dout, dq, dk, dv));
  for (float d : den) {
    if (!(d > 0.0f) || !std::isfinite(d)) {
      return Status::InvalidArgument(
          "den: every denominator is phi(q) . z + eps > 0; found " + std::to_string(d) +
          " (pass the den the chunked or recurrent forward wrote)");
    }
  }
  ThreadPool& pool = p.pool ? *p.pool : DefaultThreadPool();
  const ChunkDims z(s, p.chunk);
  std::vector<BackwardScratch> scratch(pool.num_threads());
  for (BackwardScratch& w : scratch) {
    w.kv.kf.Resize(z.C * z.Dp);
    w.kv.kft.Resize(z.Dp * z.Cp);
    w.kv.vp.Resize(z.C * z.Ep);
    w.kv.vpt.Resize(z.Ep * z.Cp);
    w.qf.Resize(z.C * z.Dp);
    w.dn.Resize(z.C * z.Ep);
    w.g.Resize(z.C * z.Cp);
    w.a.Resize(z.C * z.Cp);
    w.dqf.Resize(z.C * z.Dp);
    w.dkf.Resize(z.C * z.Dp);
    w.dvp.Resize(z.C * z.Ep);
    w.st.Resize(z.Ep * z.Dp);
    w.r.Resize(z.D * z.Ep);
  }
  BackwardArgs a{&s, &p, &q, &k, &v, &out, &dout, den.data(), &dq, &dk, &dv};
  pool.ParallelFor(s.batch * s.heads_kv,
                   [&](int64_t task, int thread) { BackwardTask(a, z, task, scratch[thread]); });
  return Status::Ok();
}

}  // namespace attnlab
