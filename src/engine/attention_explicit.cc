#include "engine/attention_explicit.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "attnlab/thread_pool.h"
#include "engine/attention_mask.h"
#include "engine/attention_validate.h"
#include "engine/gemm.h"
#include "engine/simd.h"
#include "engine/attention_weight.h"

namespace attnlab {
namespace {

using internal::AddressRange;

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr int64_t kStatsBlockRows = 32;

ThreadPool* PoolOf(const AttentionParams& p) { return p.pool ? p.pool : &DefaultThreadPool(); }

int64_t MapSize(const AttentionShape& s) { return s.batch * s.heads_q * s.len_q * s.len_k; }
int64_t RowCount(const AttentionShape& s) { return s.batch * s.heads_q * s.len_q; }

Status CheckSpan(const char* name, size_t got, int64_t want, bool may_be_empty) {
  if (may_be_empty && got == 0) return Status::Ok();
  if (static_cast<int64_t>(got) != want) {
    return Status::InvalidArgument(std::string(name) + ": expected " + std::to_string(want) +
                                   " values, got " + std::to_string(got));
  }
  return Status::Ok();
}

Status CheckQk(const AttentionShape& s, const AttentionParams& params, const AttentionTensor& q,
               const AttentionTensor& k) {
  ATTNLAB_RETURN_IF_ERROR(internal::ValidateShapeAndParams(s, params));
  AddressRange r;
  ATTNLAB_RETURN_IF_ERROR(
      internal::ValidateView4("q", q, s.batch, s.heads_q, s.len_q, s.head_dim, false, &r));
  return internal::ValidateView4("k", k, s.batch, s.heads_kv, s.len_k, s.head_dim, false, &r);
}

// S = scale * Q_bh K_bh^T for rows [i0, i0 + rows) of (b, h) into s ([rows, len_k]), fp32.
void ScoreBlock(const AttentionShape& s, float scale, const AttentionTensor& q,
                const AttentionTensor& k, int64_t b, int64_t h, int64_t i0, int64_t rows,
                float* out, ThreadPool* pool) {
  const int64_t hk = h / (s.heads_q / s.heads_kv);
  internal::Sgemm(internal::Trans::kNo, internal::Trans::kYes, rows, s.len_k, s.head_dim, scale,
                  q.at(b, h, i0), q.stride_token, k.at(b, hk, 0), k.stride_token, 0.0f, out,
                  s.len_k, pool);
}

// The extra logit of softmax1 / sink (-inf: none).
double ExtraLogit(const AttentionParams& p, int64_t h) {
  if (p.softmax == SoftmaxKind::kSoftmax1) return 0.0;
  if (p.softmax == SoftmaxKind::kSinkLogit) return p.sink_logits[h];
  return -kInf;
}

constexpr float kLog2e = 1.4426950408889634f;

// Softpick weights of one row of natural-log scores x[0, n) (-inf = invisible) into out (if not
// null; 0 where invisible or not positive), in double; returns lse (attention.h), -inf if no key
// is visible.
double SoftpickRow(const float* x, int64_t n, float eps, float* out) {
  double m = -kInf;
  bool any = false;
  for (int64_t j = 0; j < n; ++j) {
    if (x[j] == -kInf) continue;
    any = true;
    m = std::isnan(x[j]) ? double(x[j]) : std::max(m, double(x[j]));
  }
  if (!any) {
    if (out) std::fill(out, out + n, 0.0f);
    return -kInf;
  }
  const double base = internal::SoftpickBase(m);
  double z = eps * std::exp(-base);
  for (int64_t j = 0; j < n; ++j) {
    if (x[j] != -kInf) z += std::abs(internal::SoftpickShifted<double>(x[j], base));
  }
  if (out) {
    for (int64_t j = 0; j < n; ++j) {
      out[j] = x[j] == -kInf ? 0.0f
                             : static_cast<float>(
                                   std::max(internal::SoftpickShifted<double>(x[j], base), 0.0) / z);
    }
  }
  return base + std::log(z);
}

// s0 += sum 2^(t_j - max2), s1 += sum 2^(t_j - max2) (t_j - max2) over t[0, ld) (-inf -> 0),
// in fp32 SIMD lanes (the engine's exp2, relative error < 2e-7) flushed into double every 256.
void RowExp2Sums(const float* t, int64_t ld, float max2, double* s0, double* s1) {
  using simd::VecF;
  const VecF mv = simd::Set1(max2), floor = simd::Set1(-1000.0f);
  for (int64_t j0 = 0; j0 < ld; j0 += 256) {
    VecF a0 = simd::Zero(), a1 = simd::Zero();
    for (int64_t j = j0; j < std::min(ld, j0 + 256); j += simd::kLanes) {
      const VecF u = simd::Max(simd::Load(t + j) - mv, floor);  // -inf -> 2^-1000 = 0
      const VecF e = simd::Exp2(u);
      a0 += e;
      a1 += e * u;
    }
    *s0 += simd::ReduceSum(a0);
    *s1 += simd::ReduceSum(a1);
  }
}

}  // namespace

Status AttentionScores(const AttentionShape& s, const AttentionParams& params,
                       const AttentionTensor& q, const AttentionTensor& k,
                       std::span<float> scores) {
  ATTNLAB_RETURN_IF_ERROR(CheckQk(s, params, q, k));
  ATTNLAB_RETURN_IF_ERROR(CheckSpan("scores", scores.size(), MapSize(s), false));
  ThreadPool* pool = PoolOf(params);
  const float scale = internal::DefaultScaleOf(params, s.head_dim);
  const float neg_inf = -std::numeric_limits<float>::infinity();
  for (int64_t b = 0; b < s.batch; ++b) {
    for (int64_t h = 0; h < s.heads_q; ++h) {
      float* map = scores.data() + (b * s.heads_q + h) * s.len_q * s.len_k;
      ScoreBlock(s, scale, q, k, b, h, 0, s.len_q, map, pool);
      pool->ParallelFor(s.len_q, [&](int64_t i, int) {
        const internal::RowRange r = internal::RowVisibleRange(params.mask, s.len_q, s.len_k, i);
        float* row = map + i * s.len_k;
        for (int64_t j = 0; j < s.len_k; ++j) {
          if (!internal::KeyVisible(params.mask, r, b, h, i, j)) row[j] = neg_inf;
        }
      });
    }
  }
  return Status::Ok();
}

Status AttentionProbsFromScores(const AttentionShape& s, const AttentionParams& params,
                                std::span<const float> scores, std::span<float> probs,
                                std::span<float> lse) {
  ATTNLAB_RETURN_IF_ERROR(internal::ValidateShapeAndParams(s, params));
  ATTNLAB_RETURN_IF_ERROR(CheckSpan("scores", scores.size(), MapSize(s), false));
  ATTNLAB_RETURN_IF_ERROR(CheckSpan("probs", probs.size(), MapSize(s), false));
  ATTNLAB_RETURN_IF_ERROR(CheckSpan("lse", lse.size(), RowCount(s), true));
  const int64_t Lk = s.len_k;
  PoolOf(params)->ParallelFor(RowCount(s), [&](int64_t row, int) {
    const int64_t h = (row / s.len_q) % s.heads_q;
    const float* in = scores.data() + row * Lk;
    float* out = probs.data() + row * Lk;
    if (params.softmax == SoftmaxKind::kSigmoid) {
      for (int64_t j = 0; j < Lk; ++j) {
        const double x = in[j];
        out[j] = x == -kInf ? 0.0f : static_cast<float>(1.0 / (1.0 + std::exp(-(x + params.sigmoid_bias))));
      }
      if (!lse.empty()) lse[row] = 0.0f;
      return;
    }
    if (params.softmax == SoftmaxKind::kSoftpick) {
      const double l = SoftpickRow(in, Lk, params.softpick_eps, out);
      if (!lse.empty()) lse[row] = static_cast<float>(l);
      return;
    }
    const double extra = ExtraLogit(params, h);
    double m = extra;
    for (int64_t j = 0; j < Lk; ++j) {
      const double x = in[j];
      m = std::isnan(x) ? x : std::max(m, x);  // NaN sticks (attention.h)
    }
    if (m == -kInf) {  // nothing visible, no extra term
      std::fill(out, out + Lk, 0.0f);
      if (!lse.empty()) lse[row] = -std::numeric_limits<float>::infinity();
      return;
    }
    double sum = extra == -kInf ? 0.0 : std::exp(extra - m);
    for (int64_t j = 0; j < Lk; ++j) sum += std::exp(static_cast<double>(in[j]) - m);
    const double log_sum = m + std::log(sum);
    for (int64_t j = 0; j < Lk; ++j) {
      out[j] = static_cast<float>(std::exp(static_cast<double>(in[j]) - log_sum));
    }
    if (!lse.empty()) lse[row] = static_cast<float>(log_sum);
  });
  return Status::Ok();
}

Status AttentionApplyProbs(const AttentionShape& s, std::span<const float> probs,
                           const AttentionTensor& v, const AttentionTensorMut& out,
                           ThreadPool* pool) {
  ATTNLAB_RETURN_IF_ERROR(internal::ValidateShapeAndParams(s, AttentionParams{}));
  ATTNLAB_RETURN_IF_ERROR(CheckSpan("probs", probs.size(), MapSize(s), false));
  AddressRange rv, ro;
  ATTNLAB_RETURN_IF_ERROR(
      internal::ValidateView4("v", v, s.batch, s.heads_kv, s.len_k, s.head_dim, false, &rv));
  ATTNLAB_RETURN_IF_ERROR(
      internal::ValidateView4("out", out, s.batch, s.heads_q, s.len_q, s.head_dim, true, &ro));
  ATTNLAB_RETURN_IF_ERROR(internal::CheckDisjoint("out", ro, "v", rv));
  if (!pool) pool = &DefaultThreadPool();
  const int64_t group = s.heads_q / s.heads_kv;
  for (int64_t b = 0; b < s.batch; ++b) {
    for (int64_t h = 0; h < s.heads_q; ++h) {
      const float* p = probs.data() + (b * s.heads_q + h) * s.len_q * s.len_k;
      internal::Sgemm(internal::Trans::kNo, internal::Trans::kNo, s.len_q, s.head_dim, s.len_k,
                      1.0f, p, s.len_k, v.at(b, h / group, 0), v.stride_token, 0.0f,
                      out.at(b, h, 0), out.stride_token, pool);
    }
  }
  return Status::Ok();
}

namespace {

// One row's scores in the exp2 domain into t[0, ld) (ld a multiple of 16): s * log2(e) where
// key j is visible, -inf elsewhere and in the padding. Returns the visible maximum (-inf: none).
// Only keys below key_end (<= len_k, past the row's last visible key) are read.
float MaskedRow2(const AttentionMask& mask, int64_t len_q, int64_t len_k, int64_t key_end,
                 int64_t b, int64_t h, int64_t i, const float* s, int64_t ld, float* t) {
  const float ninf = -std::numeric_limits<float>::infinity();
  std::fill(t, t + ld, ninf);
  const internal::RowRange r = internal::RowVisibleRange(mask, len_q, len_k, i);
  auto copy = [&](int64_t j0, int64_t j1) {  // [j0, j1)
    for (int64_t j = std::max<int64_t>(j0, 0); j < std::min(j1, key_end); ++j) t[j] = s[j] * kLog2e;
  };
  copy(0, r.sink_end);
  copy(std::max(r.lo, r.sink_end), r.hi + 1);
  if (mask.mask_first_key && key_end > 0) t[0] = ninf;
  if (mask.explicit_mask) {
    for (int64_t j = 0; j < key_end; ++j) {
      if (t[j] != ninf && !internal::KeyVisible(mask, r, b, h, i, j)) t[j] = ninf;
    }
  }
  float m = ninf;
  for (int64_t j = 0; j < key_end; ++j) m = std::isnan(t[j]) ? t[j] : std::max(m, t[j]);
  return m;
}

}  // namespace

Status AttentionRowStats(const AttentionShape& s, const AttentionParams& params,
                         const AttentionTensor& q, const AttentionTensor& k, std::span<float> lse,
                         std::span<float> first_mass, std::span<float> entropy) {
  ATTNLAB_RETURN_IF_ERROR(CheckQk(s, params, q, k));
  ATTNLAB_RETURN_IF_ERROR(CheckSpan("lse", lse.size(), RowCount(s), true));
  ATTNLAB_RETURN_IF_ERROR(CheckSpan("first_mass", first_mass.size(), RowCount(s), true));
  ATTNLAB_RETURN_IF_ERROR(CheckSpan("entropy", entropy.size(), RowCount(s), true));
  ThreadPool* pool = PoolOf(params);
  const float scale = internal::DefaultScaleOf(params, s.head_dim);
  const int64_t blocks = (s.len_q + kStatsBlockRows - 1) / kStatsBlockRows;
  const int64_t Lk = s.len_k, ld = (Lk + 15) / 16 * 16;
  const float nanf = std::numeric_limits<float>::quiet_NaN();
  struct Scratch {
    std::vector<float> scores, row;
  };
  std::vector<Scratch> scratch(pool->num_threads());
  // Tasks: (b, h, block of rows); each row's statistics depend only on that row.
  pool->ParallelFor(s.batch * s.heads_q * blocks, [&](int64_t task, int thread) {
    const int64_t blk = task % blocks, bh = task / blocks;
    const int64_t b = bh / s.heads_q, h = bh % s.heads_q;
    const int64_t i0 = blk * kStatsBlockRows, rows = std::min(kStatsBlockRows, s.len_q - i0);
    Scratch& sc = scratch[thread];
    if (static_cast<int64_t>(sc.scores.size()) < rows * Lk) sc.scores.resize(rows * Lk);
    if (static_cast<int64_t>(sc.row.size()) < ld) sc.row.resize(ld);
    // Keys past every row's last visible one (the causal triangle) are never scored.
    int64_t key_end = 0;
    for (int64_t i = i0; i < i0 + rows; ++i) {
      const internal::RowRange rr = internal::RowVisibleRange(params.mask, s.len_q, Lk, i);
      key_end = std::max({key_end, rr.sink_end, rr.hi + 1});
    }
    key_end = std::min(key_end, Lk);
    const int64_t ld_used = (key_end + 15) / 16 * 16;
    if (key_end > 0) {  // nested in a task: runs inline
      internal::Sgemm(internal::Trans::kNo, internal::Trans::kYes, rows, key_end, s.head_dim,
                      scale, q.at(b, h, i0), q.stride_token, k.at(b, h / (s.heads_q / s.heads_kv), 0),
                      k.stride_token, 0.0f, sc.scores.data(), Lk, pool);
    }
    const double extra2 = ExtraLogit(params, h) * kLog2e;  // -inf: no extra term
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t i = i0 + r, out = bh * s.len_q + i;
      const float* srow = sc.scores.data() + r * Lk;
      float* t = sc.row.data();
      const float max2 = MaskedRow2(params.mask, s.len_q, Lk, key_end, b, h, i, srow, ld_used, t);
      const bool key0 = key_end > 0 && t[0] != -std::numeric_limits<float>::infinity();
      if (params.softmax == SoftmaxKind::kSoftpick) {
        // The row's natural scores where visible (-inf elsewhere), in t (the log2 copy is done).
        for (int64_t j = 0; j < key_end; ++j) {
          if (t[j] != -std::numeric_limits<float>::infinity()) t[j] = srow[j];
        }
        const double l = SoftpickRow(t, key_end, params.softpick_eps, nullptr);
        if (!lse.empty()) lse[out] = static_cast<float>(l);
        if (!first_mass.empty()) {
          first_mass[out] =
              key0 ? static_cast<float>(std::max(internal::SoftpickShifted<double>(srow[0], l), 0.0))
                   : 0.0f;
        }
        if (!entropy.empty()) entropy[out] = nanf;
        continue;
      }
      if (params.softmax == SoftmaxKind::kSigmoid) {
        if (!lse.empty()) lse[out] = 0.0f;
        if (!first_mass.empty()) {
          first_mass[out] = key0 ? static_cast<float>(
                                       1.0 / (1.0 + std::exp(-(srow[0] + params.sigmoid_bias))))
                                 : 0.0f;
        }
        if (!entropy.empty()) entropy[out] = nanf;
        continue;
      }
      // s0 = sum 2^u_j, s1 = sum 2^u_j u_j, u_j = t_j - max2 (fp32 lanes, double totals);
      // Z = s0 2^max2 + 2^extra2 = 2^lse2; H = -ln2 2^(max2 - lse2) (s1 + s0 (max2 - lse2)).
      double s0 = 0, s1 = 0, lse2 = extra2;
      if (std::isnan(max2)) {
        lse2 = max2;
      } else if (max2 != -std::numeric_limits<float>::infinity()) {
        RowExp2Sums(t, ld_used, max2, &s0, &s1);
        const double top = std::max<double>(max2, extra2);
        lse2 = top + std::log2(s0 * std::exp2(max2 - top) +
                               (extra2 == -kInf ? 0.0 : std::exp2(extra2 - top)));
      }
      const double lse_nat = lse2 / kLog2e;
      if (!lse.empty()) lse[out] = static_cast<float>(lse_nat);
      if (!first_mass.empty()) {
        first_mass[out] = key0 ? static_cast<float>(std::exp(double(srow[0]) - lse_nat)) : 0.0f;
      }
      if (!entropy.empty()) {
        const double d = max2 - lse2;
        entropy[out] = s0 > 0 ? static_cast<float>(-std::exp2(d) * (s1 + s0 * d) / kLog2e) : 0.0f;
        if (std::isnan(max2)) entropy[out] = nanf;
      }
    }
  });
  return Status::Ok();
}

}  // namespace attnlab
