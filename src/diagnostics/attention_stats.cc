#include "diagnostics/attention_stats.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "attnlab/thread_pool.h"
#include "engine/attention_flash_common.h"
#include "engine/attention_mask.h"
#include "engine/attention_validate.h"
#include "engine/gemm.h"
#include "engine/kernel_table.h"
#include "engine/attention_weight.h"

namespace attnlab {

namespace stats_internal {

// Everything a task needs about one AddRows call.
struct Call {
  const AttentionParams* params;
  const float* q;
  int64_t q_stride;
  AttentionTensor k;
  int64_t len_q, len_k, heads_q, heads_kv, head_dim;
  // Local row i sits at key position pos(i) = off + step * i: step 1 for AddRows (off = len_k -
  // len_q), the rank count for AddStripedRows (off = the rank; the call stands for all len_k
  // rows of the sequence, numbered rows_ + pos by every rank).
  int64_t off;
  int64_t step = 1;
  int64_t span;  // rows the call numbers: len_q, or len_k for a striped call
  float scale2;  // scale * log2(e): scores are kept in the exp2 domain
  double scale2_d;
  double bias2;  // sigmoid_bias * log2(e)
  SoftmaxKind kind;
  ThreadPool* pool;
  const float* row_extra = nullptr;  // [heads_q, len_q] natural-log extra logits, or null
  float* key0_out = nullptr;         // [heads_q, len_q] P[i, 0] per row, or null
  // One KV head's keys packed for the engine's score_panels (internal::ScorePanelIndex; zero
  // past len_k), while phase A runs that head's query heads (HeadPartials); null when the call
  // scores through Sgemm (phase B's single rows, calls with too few rows to pay for packing).
  const float* kp = nullptr;
};

}  // namespace stats_internal

namespace {

using internal::RowRange;
using internal::RowVisibleRange;

constexpr double kLn2 = 0.693147180559945309417;
constexpr double kLog2e = 1.44269504088896340736;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

std::string Str(int64_t x) { return std::to_string(x); }
bool HasSink(SoftmaxKind k) { return k == SoftmaxKind::kSoftmax1 || k == SoftmaxKind::kSinkLogit; }

Status ValidateOptions(const AttentionStatsOptions& o) {
  if (o.first_k < 0) return Status::InvalidArgument("first_k must be >= 0, got " + Str(o.first_k));
  if (o.jsd_rows < 0) {
    return Status::InvalidArgument("jsd_rows must be >= 0 (0 = every row), got " + Str(o.jsd_rows));
  }
  if (o.block_rows < 1) {
    return Status::InvalidArgument("block_rows must be >= 1, got " + Str(o.block_rows));
  }
  for (size_t d = 0; d < o.diagonals.size(); ++d) {
    const AttentionDiagonal& g = o.diagonals[d];
    if (g.pos_begin < 0 || g.pos_end < -1 || (g.pos_end >= 0 && g.pos_end < g.pos_begin)) {
      return Status::InvalidArgument(
          "diagonal " + Str(static_cast<int64_t>(d)) + ": position range [" + Str(g.pos_begin) +
          ", " + Str(g.pos_end) +
          ") is invalid; expected 0 <= pos_begin <= pos_end, or pos_end = -1");
    }
  }
  return Status::Ok();
}

// Rows of local index i in [0, len_q) with pos(i) = off + step * i in [lo, hi) (hi = -1:
// unbounded; step >= 1).
int64_t RowsWithPosIn(int64_t len_q, int64_t off, int64_t step, int64_t lo, int64_t hi) {
  auto first_at_or_above = [&](int64_t p) {  // the first i with off + step * i >= p
    return std::clamp<int64_t>(p <= off ? 0 : (p - off + step - 1) / step, 0, len_q);
  };
  const int64_t a = first_at_or_above(lo);
  const int64_t b = hi < 0 ? len_q : first_at_or_above(hi);
  return std::max<int64_t>(0, b - a);
}

using stats_internal::Call;


constexpr int64_t kPanel = internal::kScorePanel;
int64_t RoundUpPanel(int64_t n) { return (n + kPanel - 1) / kPanel * kPanel; }

// Calls with at least this many query rows pack their keys (a copy of len_k x head_dim floats,
// against heads_q x len_q x len_k x head_dim multiply-adds of scores).
constexpr int64_t kPackMinRows = 16;

// The keys of KV head hk packed in score panels (Call::kp's layout), into kp.
void PackKeys(const AttentionTensor& k, int64_t hk, int64_t len_k, int64_t d, ThreadPool& pool,
              std::vector<float>& kp) {
  const int64_t panels = RoundUpPanel(len_k) / kPanel;
  kp.resize(panels * d * kPanel);
  pool.ParallelFor(panels, [&](int64_t p, int) {
    float* out = kp.data() + p * d * kPanel;
    for (int64_t c = 0; c < kPanel; ++c) {
      const int64_t j = p * kPanel + c;
      if (j >= len_k) {
        for (int64_t e = 0; e < d; ++e) out[e * kPanel + c] = 0.0f;
        continue;
      }
      const float* kj = k.at(0, hk, j);
      for (int64_t e = 0; e < d; ++e) out[e * kPanel + c] = kj[e];
    }
  });
}

// The first column a block scores from: c0 itself, or rounded down to a whole score panel when
// the keys are packed (the extra keys are masked like any invisible key).
int64_t ScoreStart(const Call& c, int64_t c0) { return c.kp ? c0 / kPanel * kPanel : c0; }

// The padded row length for scoring keys [c0, c1) (a multiple of 16; of the panel when packed).
int64_t ScoreLd(const Call& c, int64_t ncols) {
  const int64_t n = std::max<int64_t>(1, ncols);
  return c.kp ? RoundUpPanel(n) : (n + 15) / 16 * 16;  // the row kernels' padding
}

int64_t Pos(const Call& c, int64_t i) { return c.off + c.step * i; }

// The visible key ranges of local row i (attention_mask.h, by its position: a striped call's
// rows are the positions of a full len_k x len_k call).
RowRange RangeOf(const Call& c, int64_t i) {
  return c.step == 1 ? RowVisibleRange(c.params->mask, c.len_q, c.len_k, i)
                     : RowVisibleRange(c.params->mask, c.len_k, c.len_k, Pos(c, i));
}

// Whether local row i is the call's final row (position len_k - 1): it alone gives last_key0
// and last_visible (on one rank of a striped call).
bool IsFinalRow(const Call& c, int64_t i) { return i == c.len_q - 1 && Pos(c, i) == c.len_k - 1; }

// Keys [c0, c1) that any of the rows [i0, i1) can see through the sink prefix or the window.
// Empty when c1 <= c0. The bounds are not monotone across the global/local boundary (a global
// row of a bidirectional window sees every key, the next row only up to p + window_right:
// attention_mask.h), so the span is taken over each monotone run (ChunkKeySpan).
// A striped call's rows [i0, i1) lie among the positions [pos(i0), pos(i1 - 1)]: their span.
void BlockColumns(const Call& c, int64_t i0, int64_t i1, int64_t* c0, int64_t* c1) {
  const AttentionMask& mask = c.params->mask;
  const internal::KeySpan span =
      c.step == 1 ? internal::ChunkKeySpan(mask, c.len_q, c.len_k, i0, i1 - i0)
                  : internal::ChunkKeySpan(mask, c.len_k, c.len_k, Pos(c, i0),
                                           Pos(c, i1 - 1) - Pos(c, i0) + 1);
  *c1 = std::max(span.hi + 1, span.sink_end);
  *c0 = span.sink_end > 0 ? 0 : span.lo;
}

// Scores of rows [i0, i1) of query head h against keys [c0, c1), times scale * log2(e), into t
// (row stride ld, a multiple of 16, >= c1 - c0); invisible keys and the padding up to ld are
// -inf. n[r] = number of visible keys of row i0 + r (attention.h's visibility, via
// RowVisibleRange / KeyVisible). With packed keys, c0 = ScoreStart(c0) and ld = ScoreLd(c1 - c0);
// qs is scratch for the rows' scaled queries.
void MaskedScores(const Call& c, int64_t h, int64_t i0, int64_t i1, int64_t c0, int64_t c1,
                  float* t, int64_t ld, int64_t* n, std::vector<float>& qs) {
  const int64_t rows = i1 - i0, ncols = std::max<int64_t>(0, c1 - c0);
  if (ncols > 0 && c.kp) {
    const int64_t d = c.head_dim;
    qs.resize(rows * d);
    for (int64_t r = 0; r < rows; ++r) {
      const float* qi = c.q + (i0 + r) * c.q_stride + h * d;
      for (int64_t e = 0; e < d; ++e) qs[r * d + e] = qi[e] * c.scale2;
    }
    internal::ActiveKernels().row_stats.score_panels(
        rows, RoundUpPanel(ncols) / kPanel, d, qs.data(),
        c.kp + c0 / kPanel * d * kPanel, t, ld);
  } else if (ncols > 0) {
    const int64_t hk = h / (c.heads_q / c.heads_kv);
    const int64_t ldk = ncols > 1 ? c.k.stride_token : std::max(c.k.stride_token, c.head_dim);
    internal::Sgemm(internal::Trans::kNo, internal::Trans::kYes, rows, ncols, c.head_dim, c.scale2,
                    c.q + i0 * c.q_stride + h * c.head_dim, c.q_stride, c.k.at(0, hk, c0), ldk,
                    0.0f, t, ld, c.pool);
  }
  const AttentionMask& mask = c.params->mask;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t i = i0 + r;
    float* tr = t + r * ld;
    if (ncols == 0) {
      std::fill(tr, tr + ld, kNegInf);
      n[r] = 0;
      continue;
    }
    const RowRange rr = RangeOf(c, i);
    // Visible through the ranges, clipped to [c0, c1): [c0, a1) and [b0, b1), a1 <= b0.
    const int64_t a1 = std::clamp(rr.sink_end, c0, c1);
    const int64_t b0 = std::clamp(std::max(rr.lo, rr.sink_end), c0, c1);
    const int64_t b1 = std::clamp(rr.hi + 1, b0, c1);
    std::fill(tr + (a1 - c0), tr + (b0 - c0), kNegInf);
    std::fill(tr + (b1 - c0), tr + ld, kNegInf);
    int64_t cnt = (a1 - c0) + (b1 - b0);
    if (mask.explicit_mask) {  // the general rule, key by key (also covers mask_first_key)
      auto apply = [&](int64_t lo, int64_t hi) {
        for (int64_t j = lo; j < hi; ++j) {
          if (!internal::KeyVisible(mask, rr, 0, h, i, j)) {
            tr[j - c0] = kNegInf;
            --cnt;
          }
        }
      };
      apply(c0, a1);
      apply(b0, b1);
    } else if (mask.mask_first_key && c0 == 0 && (a1 > 0 || (b0 == 0 && b1 > 0))) {
      tr[0] = kNegInf;
      --cnt;
    }
    n[r] = cnt;
  }
}

// scale * log2(e) * q_i . k_j in double, for query head h.
double Logit2(const Call& c, int64_t h, int64_t i, int64_t j) {
  const float* qi = c.q + i * c.q_stride + h * c.head_dim;
  const float* kj = c.k.at(0, h / (c.heads_q / c.heads_kv), j);
  // Four partial sums: independent chains the CPU overlaps (one chain waited a multiply-add's
  // latency per component; this is called ~first_k times per row and head).
  double acc[4] = {0, 0, 0, 0};
  int64_t d = 0;
  for (; d + 4 <= c.head_dim; d += 4) {
    for (int r = 0; r < 4; ++r) acc[r] += static_cast<double>(qi[d + r]) * kj[d + r];
  }
  for (; d < c.head_dim; ++d) acc[0] += static_cast<double>(qi[d]) * kj[d];
  return c.scale2_d * ((acc[0] + acc[1]) + (acc[2] + acc[3]));
}

// The row loops over a padded score row, in the active SIMD target's code (engine/
// row_stats_kernel.cc states them; ld a multiple of 16, -inf = invisible).
using RowSums = internal::RowSumsD;
float RowMax(const float* t, int64_t ld) { return internal::ActiveKernels().row_stats.row_max(t, ld); }
float RowArgMax(const float* t, int64_t ld, int64_t* arg) {
  return internal::ActiveKernels().row_stats.row_arg_max(t, ld, arg);
}
RowSums SoftmaxRowSums(const float* t, int64_t ld, float max2, int64_t dist0) {
  return internal::ActiveKernels().row_stats.softmax_row_sums(t, ld, max2, dist0);
}
RowSums SigmoidRowSums(const float* t, int64_t ld, float b2, int64_t dist0) {
  return internal::ActiveKernels().row_stats.sigmoid_row_sums(t, ld, b2, dist0);
}
double JsDistance(const double* q1, const double* l1, const double* q2, const double* l2,
                  int64_t n) {
  return internal::ActiveKernels().row_stats.js_distance(q1, l1, q2, l2, n);
}

// Per-row normalisation in the exp2 domain (softmax variants): Z = S0 + 2^d2 = 2^lz2 relative to
// the row max, d2 = extra logit * log2(e) - row max (-inf for kStandard).
double Log2Normaliser(double s0, double d2) {
  if (std::isinf(d2) && d2 < 0) return std::log2(s0);
  if (d2 <= 0) return std::log2(s0 + std::exp2(d2));
  return d2 + std::log1p(s0 * std::exp2(-d2)) / kLn2;
}

// Flat per-(block, head) partial sums.
enum Slot : int64_t {
  kEntropy = 0,
  kEntropyRows,
  kSink,
  kDistance,
  kLiveRows,
  kLastKey0,
  kLastVisible,
  kFixedSlots
};

// ---- AddRows, step by step. Phase A (per-head statistics) runs (row block, query head) tasks,
// each filling one flat partial record; phase B (Jensen-Shannon distances) runs the sampled
// rows, one task per row for every head.

// Where each statistic sits in one (row block, head) partial record: the fixed Slots, then
// per-key and per-diagonal sums.
struct PartialLayout {
  int64_t first_k, diagonals;
  int64_t Size() const { return kFixedSlots + 3 * first_k + diagonals; }
  int64_t Col() const { return kFixedSlots; }                 // [first_k] sum P[i, j] (alpha)
  int64_t Mass() const { return kFixedSlots + first_k; }      // [first_k] sum_{j<k} P[i, j]
  int64_t Diag() const { return kFixedSlots + 2 * first_k; }  // [diagonals] P[i, pos - offset]
  int64_t ColUniform() const { return kFixedSlots + 2 * first_k + diagonals; }  // [first_k] 1/n_i
};

PartialLayout LayoutOf(const AttentionStatsOptions& o) {
  return PartialLayout{o.first_k, static_cast<int64_t>(o.diagonals.size())};
}

Call MakeCall(const AttentionParams& params, const float* q, int64_t q_row_stride, int64_t len_q,
              const AttentionTensor& k_all, int64_t len_k, int64_t heads_q, int64_t heads_kv,
              int64_t head_dim, ThreadPool* pool) {
  Call c;
  c.params = &params;
  c.q = q;
  c.q_stride = q_row_stride;
  c.k = k_all;
  c.len_q = len_q, c.len_k = len_k, c.heads_q = heads_q, c.heads_kv = heads_kv;
  c.head_dim = head_dim;
  c.off = len_k - len_q;
  c.span = len_q;
  c.scale2_d = static_cast<double>(internal::DefaultScaleOf(params, head_dim)) * kLog2e;
  c.scale2 = static_cast<float>(c.scale2_d);
  c.bias2 = static_cast<double>(params.sigmoid_bias) * kLog2e;
  c.kind = params.softmax;
  c.pool = pool;
  return c;
}

// Per-thread buffers of both phases.
struct ThreadScratch {
  std::vector<float> scores;      // phase A: B_r rows of ld scores; phase B: one row
  std::vector<int64_t> visible;   // phase A: [B_r] visible keys per row (n_i)
  std::vector<float> qs;          // both: the scored rows' queries times the scale (packed keys)
  std::vector<double> probs, logs;  // phase B: [heads_q][padded keys] renormalised rows, logs
};

// One row's masked scores (exp2 domain) over keys [c0, c1), padded with -inf up to ld.
struct ScoreRow {
  const float* scores;
  int64_t c0, c1, ld;
};

// How a live row is normalised: P[i, j] = 2^(x_j - row_max2 - log2_norm) for the softmax
// variants (x_j = scale log2(e) q_i . k_j), sigmoid(x_j ln 2 + bias) for kSigmoid; real_mass is
// the header's M_i = sum_j P[i, j].
struct RowNorm {
  double row_max2 = 0, log2_norm = 0, real_mass = 0;
};

// A softmax-variant row: its normaliser, plus its distance, entropy and sink-mass terms added to
// the fixed slots of `partial`. extra2 = the extra logit times log2(e) (-inf for kStandard).
RowNorm AddSoftmaxRowTerms(const Call& c, int64_t h, int64_t i, const ScoreRow& row,
                           int64_t n_visible, double extra2, double* partial) {
  const int64_t pos = Pos(c, i);
  RowNorm norm;
  int64_t arg_max;
  norm.row_max2 = RowArgMax(row.scores, row.ld, &arg_max);
  RowSums s = SoftmaxRowSums(row.scores, row.ld, static_cast<float>(norm.row_max2), pos - row.c0);
  // The largest term of the sums (e = 1 at the row max) with its logit in double: rows dominated
  // by a few keys (sinks, one-hot heads) then get their normaliser to double accuracy, not to
  // u * |logit|; spread rows average the fp32 errors anyway.
  const double max_err2 = Logit2(c, h, i, row.c0 + arg_max) - norm.row_max2;
  const double max_term = std::exp2(max_err2);
  s.s0 += max_term - 1.0;
  s.s1 += max_term * max_err2;
  s.s2 += (max_term - 1.0) * static_cast<double>(pos - row.c0 - arg_max);
  const double extra_rel2 = extra2 - norm.row_max2;
  norm.log2_norm = Log2Normaliser(s.s0, extra_rel2);
  norm.real_mass = std::exp2(std::log2(s.s0) - norm.log2_norm);
  partial[kDistance] += norm.real_mass * s.s2 / s.s0;
  if (n_visible >= 2) {
    partial[kEntropy] += norm.real_mass * kLn2 * (norm.log2_norm - s.s1 / s.s0) /
                         std::log(static_cast<double>(n_visible));
    partial[kEntropyRows] += 1;
  }
  if (HasSink(c.kind) || c.row_extra) partial[kSink] += std::exp2(extra_rel2 - norm.log2_norm);
  return norm;
}

// A sigmoid row: its real mass (the weights are not normalised), its distance term added.
RowNorm AddSigmoidRowTerms(const Call& c, int64_t i, const ScoreRow& row, double* partial) {
  const RowSums s =
      SigmoidRowSums(row.scores, row.ld, static_cast<float>(c.bias2), Pos(c, i) - row.c0);
  partial[kDistance] += s.s2;
  RowNorm norm;
  norm.real_mass = s.s0;
  return norm;
}

// A softpick row (attention.h), in double: base M = max(0, row max), r_j = e^(x_j - M) - e^-M,
// Z = sum |r_j| + eps e^-M; row_max2 = M log2(e), log2_norm = log2 Z, real mass
// sum max(r_j, 0) / Z; the distance term added. Every visible logit is recomputed in double
// (Logit2): unlike softmax's, softpick's weights amplify a score's error by E_j = e^x_j / Z,
// which is large where scores sit near 0 and Z is small (a fp32 logit left 6e-6 relative
// errors in the tests).
RowNorm AddSoftpickRowTerms(const Call& c, int64_t h, int64_t i, const ScoreRow& row,
                            double* partial) {
  const int64_t dist0 = Pos(c, i) - row.c0;
  thread_local std::vector<double> x;
  x.assign(row.ld, kNegInf);
  double m = kNegInf;
  for (int64_t j = 0; j < row.ld; ++j) {
    if (row.scores[j] == kNegInf) continue;
    x[j] = Logit2(c, h, i, row.c0 + j) * kLn2;
    m = std::isnan(x[j]) ? x[j] : std::max(m, x[j]);
  }
  const double base = internal::SoftpickBase(m);
  double z = c.params->softpick_eps * std::exp(-base), pos = 0, dist = 0;
  for (int64_t j = 0; j < row.ld; ++j) {
    if (x[j] == kNegInf) continue;
    const double r = internal::SoftpickShifted(x[j], base);
    z += std::abs(r);
    if (r > 0) pos += r, dist += r * static_cast<double>(dist0 - j);
  }
  partial[kDistance] += dist / z;
  RowNorm norm;
  norm.row_max2 = base * kLog2e;
  norm.log2_norm = std::log2(z);
  norm.real_mass = pos / z;
  return norm;
}

// P[i, j] of one key, its logit recomputed in double (a single fp32 logit would carry the full
// u * |logit| error that the row sums average away or, at the max, correct); 0 if invisible.
double KeyProb(const Call& c, int64_t h, int64_t i, int64_t j, const ScoreRow& row,
               const RowNorm& norm) {
  if (j < row.c0 || j >= row.c1 || row.scores[j - row.c0] == kNegInf) return 0.0;
  const double x = Logit2(c, h, i, j);
  if (c.kind == SoftmaxKind::kSigmoid) return 1.0 / (1.0 + std::exp2(-(x + c.bias2)));
  if (c.kind == SoftmaxKind::kSoftpick) {
    const double r = internal::SoftpickShifted(x * kLn2, norm.row_max2 * kLn2);
    return std::max(r, 0.0) * std::exp2(-norm.log2_norm);
  }
  return std::exp2(x - norm.row_max2 - norm.log2_norm);
}

// A live row's single-key statistics: alpha's column sums, first_mass, the diagonals and, on the
// call's final row, last_key0.
void AddKeyProbTerms(const Call& c, const AttentionStatsOptions& opt, int64_t h, int64_t i,
                     const ScoreRow& row, const RowNorm& norm, double* partial) {
  const PartialLayout lay = LayoutOf(opt);
  const int64_t pos = Pos(c, i);
  double* col = partial + lay.Col();
  double* mass = partial + lay.Mass();
  double* diag = partial + lay.Diag();
  double cum = 0;
  for (int64_t j = 0; j < lay.first_k; ++j) {
    const double p = KeyProb(c, h, i, j, row, norm);
    cum += p;
    mass[j] += cum;
    if (pos >= j) col[j] += p;
  }
  for (int64_t d = 0; d < lay.diagonals; ++d) {
    const AttentionDiagonal& g = opt.diagonals[d];
    if (pos < g.pos_begin || (g.pos_end >= 0 && pos >= g.pos_end)) continue;
    diag[d] += KeyProb(c, h, i, pos - g.offset, row, norm);
  }
  if (IsFinalRow(c, i)) partial[kLastKey0] = KeyProb(c, h, i, 0, row, norm);
}

// Adds row i of query head h (n_visible keys) to its block's partial record.
void AddRowToPartial(const Call& c, const AttentionStatsOptions& opt, int64_t h, int64_t i,
                     const ScoreRow& row, int64_t n_visible, double extra2, double* partial) {
  const PartialLayout lay = LayoutOf(opt);
  const int64_t pos = Pos(c, i);
  if (IsFinalRow(c, i)) partial[kLastVisible] = static_cast<double>(n_visible);
  if (c.key0_out) c.key0_out[h * c.len_q + i] = 0.0f;  // dead row or key 0 invisible
  if (n_visible == 0) return;  // dead row: adds 0 to the column and diagonal sums
  // The uniform baseline of alpha: 1/n_i on each visible key among the first K.
  double* col_uniform = partial + lay.ColUniform();
  for (int64_t j = 0; j < lay.first_k; ++j) {
    if (pos >= j && j >= row.c0 && j < row.c1 && row.scores[j - row.c0] != kNegInf) {
      col_uniform[j] += 1.0 / n_visible;
    }
  }
  const RowNorm norm = c.kind == SoftmaxKind::kSigmoid    ? AddSigmoidRowTerms(c, i, row, partial)
                       : c.kind == SoftmaxKind::kSoftpick ? AddSoftpickRowTerms(c, h, i, row, partial)
                       : AddSoftmaxRowTerms(c, h, i, row, n_visible, extra2, partial);
  partial[kLiveRows] += 1;
  AddKeyProbTerms(c, opt, h, i, row, norm, partial);
  if (c.key0_out) c.key0_out[h * c.len_q + i] = static_cast<float>(KeyProb(c, h, i, 0, row, norm));
}

// Phase A's task: rows [blk B_r, (blk + 1) B_r) of query head h, scored in one GEMM, each row
// added to `partial` (one zeroed record).
void BlockHeadPartial(const Call& c, const AttentionStatsOptions& opt, int64_t blk, int64_t h,
                      ThreadScratch& w, double* partial) {
  const int64_t block_rows = opt.block_rows;
  const int64_t i0 = blk * block_rows, i1 = std::min(c.len_q, i0 + block_rows);
  int64_t c0, c1;
  BlockColumns(c, i0, i1, &c0, &c1);
  c0 = ScoreStart(c, c0);
  const int64_t ld = ScoreLd(c, c1 - c0);
  const int64_t ld_max = ScoreLd(c, c.len_k);
  if (static_cast<int64_t>(w.scores.size()) < block_rows * ld_max) {
    w.scores.resize(block_rows * ld_max);
  }
  if (static_cast<int64_t>(w.visible.size()) < block_rows) w.visible.resize(block_rows);
  MaskedScores(c, h, i0, i1, c0, c1, w.scores.data(), ld, w.visible.data(), w.qs);
  const double extra2 = c.kind == SoftmaxKind::kSoftmax1    ? 0.0
                        : c.kind == SoftmaxKind::kSinkLogit ? c.params->sink_logits[h] * kLog2e
                                                            : -INFINITY;
  for (int64_t r = 0; r < i1 - i0; ++r) {
    const ScoreRow row{w.scores.data() + r * ld, c0, c1, ld};
    double row_extra2 = extra2;
    if (c.row_extra) {  // log2(2^extra2 + 2^e2): the row's own zero-value entry joins
      const double e2 = static_cast<double>(c.row_extra[h * c.len_q + i0 + r]) * kLog2e;
      row_extra2 = std::isinf(extra2) && extra2 < 0
                       ? e2
                       : std::max(extra2, e2) + std::log2(1.0 + std::exp2(-std::abs(extra2 - e2)));
    }
    AddRowToPartial(c, opt, h, i0 + r, row, w.visible[r], row_extra2, partial);
  }
}

// Phase A: the partial records of every (row block, head) task, [blocks][heads_q][layout size].
// Calls with kPackMinRows rows or more run one KV head's query heads at a time, over that head's
// packed keys (one head's copy at a time: 8 MiB at 32k keys and head_dim 64).
std::vector<double> HeadPartials(const Call& c, const AttentionStatsOptions& opt,
                                 std::vector<ThreadScratch>& scratch) {
  const int64_t record = LayoutOf(opt).Size();
  const int64_t nblocks = (c.len_q + opt.block_rows - 1) / opt.block_rows;
  std::vector<double> partial(nblocks * c.heads_q * record, 0.0);
  if (c.len_q < kPackMinRows) {
    c.pool->ParallelFor(nblocks * c.heads_q, [&](int64_t task, int thread) {
      BlockHeadPartial(c, opt, task / c.heads_q, task % c.heads_q, scratch[thread],
                       &partial[task * record]);
    });
    return partial;
  }
  const int64_t G = c.heads_q / c.heads_kv;
  std::vector<float> packed;
  for (int64_t hk = 0; hk < c.heads_kv; ++hk) {
    PackKeys(c.k, hk, c.len_k, c.head_dim, *c.pool, packed);
    Call ch = c;
    ch.kp = packed.data();
    c.pool->ParallelFor(nblocks * G, [&](int64_t task, int thread) {
      const int64_t blk = task / G, h = hk * G + task % G;
      BlockHeadPartial(ch, opt, blk, h, scratch[thread], &partial[(blk * c.heads_q + h) * record]);
    });
  }
  return partial;
}

// Row i of query head h renormalised over the real keys (the header's Q = P[i, :] / M_i) into
// probs[0, c1 - c0), natural logs into logs (both arrays zero-filled by the caller: masked keys
// and the padding keep 0, no weight and a finite log). False if the head has no distribution on
// this row (n_i = 0 or M_i = 0). scores: ld floats of scratch.
bool RenormalisedRow(const Call& c, int64_t h, int64_t i, int64_t c0, int64_t c1, float* scores,
                     int64_t ld, double* probs, double* logs, std::vector<float>& qs) {
  const int64_t nc = std::max<int64_t>(0, c1 - c0);
  int64_t n_visible;
  MaskedScores(c, h, i, i + 1, c0, c1, scores, ld, &n_visible, qs);
  if (n_visible == 0) return false;
  double sum = 0;
  if (IsUnnormalisedWeights(c.kind)) {
    double base = 0;  // softpick's base (the weights are renormalised, so only r's shape counts)
    if (c.kind == SoftmaxKind::kSoftpick) base = internal::SoftpickBase(RowMax(scores, ld) * kLn2);
    for (int64_t j = 0; j < nc; ++j) {
      const double x = scores[j];
      if (x == kNegInf) {
        probs[j] = 0.0;
      } else if (c.kind == SoftmaxKind::kSoftpick) {
        probs[j] = std::max(internal::SoftpickShifted(x * kLn2, base), 0.0);
      } else {
        probs[j] = 1.0 / (1.0 + std::exp2(-(x + c.bias2)));
      }
      sum += probs[j];
    }
    if (!(sum > 0)) return false;
    for (int64_t j = 0; j < nc; ++j) {
      probs[j] /= sum;
      logs[j] = probs[j] > 0 ? std::log(probs[j]) : 0.0;
    }
    return true;
  }
  const double row_max2 = RowMax(scores, ld);
  for (int64_t j = 0; j < nc; ++j) {
    if (scores[j] == kNegInf) continue;  // masked key: keeps its zero fill (no weight)
    const double rel2 = static_cast<double>(scores[j]) - row_max2;
    probs[j] = std::exp2(rel2);
    logs[j] = rel2 * kLn2;
    sum += probs[j];
  }
  const double log_sum = std::log(sum);
  for (int64_t j = 0; j < nc; ++j) {
    if (scores[j] == kNegInf) continue;
    probs[j] /= sum;
    logs[j] -= log_sum;
  }
  return true;
}

// Phase B's task: the [heads_q^2] Jensen-Shannon distances between the heads on local row i
// (NaN for pairs where either head has no distribution).
std::vector<double> JsdRowValues(const Call& c, int64_t i, ThreadScratch& w) {
  const int64_t heads = c.heads_q;
  int64_t c0, c1;
  BlockColumns(c, i, i + 1, &c0, &c1);
  c0 = ScoreStart(c, c0);
  const int64_t nc = std::max<int64_t>(0, c1 - c0), ld = ScoreLd(c, nc);
  if (static_cast<int64_t>(w.scores.size()) < ld) w.scores.resize(ld);
  const int64_t padded =
      (std::max<int64_t>(1, nc) + internal::kJsPad - 1) / internal::kJsPad * internal::kJsPad;
  w.probs.assign(heads * padded, 0.0);
  w.logs.assign(heads * padded, 0.0);
  std::vector<char> usable(heads, 0);
  for (int64_t h = 0; h < heads; ++h) {
    usable[h] = RenormalisedRow(c, h, i, c0, c1, w.scores.data(), ld, &w.probs[h * padded],
                                &w.logs[h * padded], w.qs);
  }
  std::vector<double> values(heads * heads, kNaN);
  for (int64_t h1 = 0; h1 < heads; ++h1) {
    if (usable[h1]) values[h1 * heads + h1] = 0.0;
    for (int64_t h2 = h1 + 1; h2 < heads; ++h2) {
      if (!usable[h1] || !usable[h2]) continue;
      const double d = JsDistance(&w.probs[h1 * padded], &w.logs[h1 * padded],
                                  &w.probs[h2 * padded], &w.logs[h2 * padded], padded);
      values[h1 * heads + h2] = values[h2 * heads + h1] = d;
    }
  }
  return values;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Streaming accumulator.

AttentionStatsAccumulator::AttentionStatsAccumulator(const AttentionStatsOptions& options,
                                                     int64_t heads_q, int64_t heads_kv,
                                                     int64_t head_dim)
    : options_(options), heads_q_(heads_q), heads_kv_(heads_kv), head_dim_(head_dim) {
  const int64_t K = options_.first_k, D = static_cast<int64_t>(options_.diagonals.size());
  heads_.resize(heads_q_);
  for (HeadSums& s : heads_) {
    s.col.assign(K, 0.0);
    s.mass.assign(K, 0.0);
    s.diag.assign(D, 0.0);
    s.col_uniform.assign(K, 0.0);
  }
  alpha_rows_.assign(K, 0);
  diagonal_rows_.assign(D, 0);
  jsd_sum_.assign(heads_q_ * heads_q_, 0.0);
  jsd_count_.assign(heads_q_ * heads_q_, 0);
}

Result<AttentionStatsAccumulator> AttentionStatsAccumulator::Create(
    const AttentionStatsOptions& options, int64_t heads_q, int64_t heads_kv, int64_t head_dim) {
  ATTNLAB_RETURN_IF_ERROR(ValidateOptions(options));
  if (heads_q < 1 || heads_kv < 1 || head_dim < 1) {
    return Status::InvalidArgument(
        "attention stats: heads_q, heads_kv and head_dim must be >= 1, got " + Str(heads_q) + ", " +
        Str(heads_kv) + ", " + Str(head_dim));
  }
  if (heads_q % heads_kv != 0) {
    return Status::InvalidArgument("attention stats: heads_q (" + Str(heads_q) +
                                   ") must be a multiple of heads_kv (" + Str(heads_kv) + ")");
  }
  return AttentionStatsAccumulator(options, heads_q, heads_kv, head_dim);
}

Status AttentionStatsAccumulator::ValidateAddRows(const AttentionParams& params, const float* q,
                                                  int64_t q_row_stride, int64_t len_q,
                                                  const AttentionTensor& k_all,
                                                  int64_t len_k,
                                                  int64_t rows_held, size_t extra_size,
                                                  size_t key0_size) const {
  const int64_t Hq = heads_q_, hd = head_dim_;
  if (q == nullptr) return Status::InvalidArgument("attention stats: q is a null pointer");
  if (len_q < 1 || len_k < len_q) {
    return Status::InvalidArgument(
        "attention stats: expected 1 <= len_q <= len_k (queries are the "
        "last len_q keys), got len_q = " +
        Str(len_q) + ", len_k = " + Str(len_k));
  }
  if (q_row_stride < Hq * hd) {
    return Status::InvalidArgument("attention stats: q_row_stride (" + Str(q_row_stride) +
                                   ") is smaller than heads_q * head_dim (" + Str(Hq * hd) +
                                   "); pass the distance in floats between consecutive tokens");
  }
  const AttentionShape shape{1, Hq, heads_kv_, len_q, len_k, hd};
  ATTNLAB_RETURN_IF_ERROR(internal::ValidateShapeAndParams(shape, params));
  internal::AddressRange range;
  ATTNLAB_RETURN_IF_ERROR(
      internal::ValidateView4("k_all", k_all, 1, heads_kv_, len_k, hd, false, &range));
  if (len_k > 1 && k_all.stride_token < hd) {
    return Status::InvalidArgument("k_all: stride_token (" + Str(k_all.stride_token) +
                                   ") must be >= head_dim (" + Str(hd) + ")");
  }
  if (kind_ && *kind_ != params.softmax) {
    return Status::InvalidArgument(
        "attention stats: every AddRows call must use the same softmax variant as the first; "
        "use one accumulator per layer");
  }
  if (extra_size != 0) {
    if (static_cast<int64_t>(extra_size) != Hq * rows_held) {
      return Status::InvalidArgument("attention stats: row_extra_logits holds " +
                                     Str(static_cast<int64_t>(extra_size)) +
                                     " floats; expected heads_q * rows = " + Str(Hq * rows_held));
    }
    if (IsUnnormalisedWeights(params.softmax)) {
      return Status::InvalidArgument(
          "attention stats: row_extra_logits join a softmax's denominator; sigmoid and softpick "
          "weights have none");
    }
  }
  if (key0_size != 0 && static_cast<int64_t>(key0_size) != Hq * rows_held) {
    return Status::InvalidArgument("attention stats: key0_prob holds " +
                                   Str(static_cast<int64_t>(key0_size)) +
                                   " floats; expected heads_q * rows = " + Str(Hq * rows_held) +
                                   " (or none)");
  }
  if (kind_ && row_extra_ != (extra_size != 0)) {
    return Status::InvalidArgument(
        "attention stats: every AddRows call must give row_extra_logits, or none, as the first");
  }
  return Status::Ok();
}

Status AttentionStatsAccumulator::AddRows(const AttentionParams& params, const float* q,
                                          int64_t q_row_stride, int64_t len_q,
                                          const AttentionTensor& k_all, int64_t len_k,
                                          std::span<const float> row_extra_logits,
                                          std::span<float> key0_prob) {
  ATTNLAB_RETURN_IF_ERROR(ValidateAddRows(params, q, q_row_stride, len_q, k_all, len_k, len_q,
                                          row_extra_logits.size(), key0_prob.size()));
  ThreadPool& pool = params.pool ? *params.pool : DefaultThreadPool();
  Call c = MakeCall(params, q, q_row_stride, len_q, k_all, len_k, heads_q_, heads_kv_, head_dim_,
                    &pool);
  AddCall(c, row_extra_logits, key0_prob);
  return Status::Ok();
}

Status AttentionStatsAccumulator::AddStripedRows(const AttentionParams& params, const float* q,
                                                 int64_t q_row_stride, int64_t rank,
                                                 int64_t ranks, const AttentionTensor& k_all,
                                                 int64_t len_k,
                                                 std::span<const float> row_extra_logits,
                                                 std::span<float> key0_prob) {
  if (ranks < 1 || rank < 0 || rank >= ranks) {
    return Status::InvalidArgument("attention stats: striped rows need 0 <= rank < ranks, got rank " +
                                   Str(rank) + " of " + Str(ranks));
  }
  if (params.mask.explicit_mask) {
    return Status::InvalidArgument(
        "attention stats: striped rows take the mask's rules only (causal, window, sinks, global "
        "rows), not an explicit mask, whose rows are the local rows of one call");
  }
  const int64_t len_q = StripedRowCount(len_k, rank, ranks);
  const float no_rows = 0.0f;  // a rank without rows (len_k < ranks) may pass no q
  if (len_q == 0 && q == nullptr) q = &no_rows;
  // The checks of a full len_k x len_k call (shapes, mask, keys, variant), with the row buffers
  // of this rank's rows.
  if (len_k < 1) {
    return Status::InvalidArgument("attention stats: striped rows need len_k >= 1, got " +
                                   Str(len_k));
  }
  ATTNLAB_RETURN_IF_ERROR(ValidateAddRows(params, q, q_row_stride, len_k, k_all, len_k, len_q,
                                          row_extra_logits.size(), key0_prob.size()));
  ThreadPool& pool = params.pool ? *params.pool : DefaultThreadPool();
  Call c = MakeCall(params, q, q_row_stride, len_q, k_all, len_k, heads_q_, heads_kv_, head_dim_,
                    &pool);
  c.off = rank, c.step = ranks, c.span = len_k;
  AddCall(c, row_extra_logits, key0_prob);
  return Status::Ok();
}

int64_t StripedRowCount(int64_t len_k, int64_t rank, int64_t ranks) {
  return rank < len_k ? (len_k - rank + ranks - 1) / ranks : 0;
}

void AttentionStatsAccumulator::AddCall(const Call& call, std::span<const float> row_extra_logits,
                                        std::span<float> key0_prob) {
  kind_ = call.params->softmax;
  row_extra_ = !row_extra_logits.empty();
  Call c = call;
  c.row_extra = row_extra_ ? row_extra_logits.data() : nullptr;
  c.key0_out = key0_prob.empty() ? nullptr : key0_prob.data();
  ThreadPool& pool = *c.pool;
  std::vector<ThreadScratch> scratch(pool.num_threads());
  const int64_t len_q = c.len_q;
  // Row numbers: local row i is row rows_ + pos(i) - first, first = len_k - span (the position
  // of the call's first row; 0 for a striped call).
  const int64_t first = c.len_k - c.span;

  // Phase A: per-head statistics.
  if (len_q > 0) {
    FoldHeadPartials(HeadPartials(c, options_, scratch), len_q, c.off, c.step, c.span,
                     IsFinalRow(c, len_q - 1));
  }

  // Phase B: Jensen-Shannon distances on the sampled rows, in batches, so that jsd_rows = 0
  // keeps O(batch * heads_q^2) values, folded in row order.
  const int64_t stride = ThinJsdSample(rows_ + c.span);
  std::vector<int64_t> picked, numbers;  // local rows in the sample, their row numbers
  for (int64_t i = 0; i < len_q; ++i) {
    const int64_t r = rows_ + Pos(c, i) - first;
    if (r % stride == stride - 1) picked.push_back(i), numbers.push_back(r);
  }
  constexpr int64_t kJsdBatch = 256;
  for (int64_t b0 = 0; b0 < static_cast<int64_t>(picked.size()); b0 += kJsdBatch) {
    const int64_t nb = std::min<int64_t>(kJsdBatch, static_cast<int64_t>(picked.size()) - b0);
    std::vector<std::vector<double>> values(nb);
    pool.ParallelFor(nb, [&](int64_t task, int thread) {
      values[task] = JsdRowValues(c, picked[b0 + task], scratch[thread]);
    });
    FoldJsdValues(std::span<const int64_t>(numbers).subspan(b0, nb), values);
  }
  rows_ += c.span;
}

void AttentionStatsAccumulator::FoldHeadPartials(const std::vector<double>& partial,
                                                 int64_t len_q, int64_t key_offset, int64_t step,
                                                 int64_t span, bool has_final_row) {
  const PartialLayout lay = LayoutOf(options_);
  const int64_t K = lay.first_k, D = lay.diagonals, record = lay.Size();
  const int64_t nblocks = static_cast<int64_t>(partial.size()) / (heads_q_ * record);
  // Fixed reduction order: blocks ascending.
  for (int64_t blk = 0; blk < nblocks; ++blk) {
    for (int64_t h = 0; h < heads_q_; ++h) {
      const double* p = &partial[(blk * heads_q_ + h) * record];
      HeadSums& hs = heads_[h];
      hs.entropy += p[kEntropy];
      hs.entropy_rows += static_cast<int64_t>(p[kEntropyRows]);
      hs.sink += p[kSink];
      hs.distance += p[kDistance];
      hs.live_rows += static_cast<int64_t>(p[kLiveRows]);
      for (int64_t j = 0; j < K; ++j) {
        hs.col[j] += p[lay.Col() + j];
        hs.mass[j] += p[lay.Mass() + j];
      }
      for (int64_t d = 0; d < D; ++d) hs.diag[d] += p[lay.Diag() + d];
      for (int64_t j = 0; j < K; ++j) hs.col_uniform[j] += p[lay.ColUniform() + j];
      // The call's final row replaces the kept one unless it sees fewer keys (the header's rule:
      // a short last window of a text does not stand for the text).
      if (has_final_row && blk == nblocks - 1 &&
          static_cast<int64_t>(p[kLastVisible]) >= hs.last_visible) {
        hs.last_key0 = p[kLastKey0];
        hs.last_visible = static_cast<int64_t>(p[kLastVisible]);
        hs.last_row = rows_ + span - 1;
      }
    }
  }
  for (int64_t j = 0; j < K; ++j) {
    alpha_rows_[j] += RowsWithPosIn(len_q, key_offset, step, j, -1);
  }
  for (int64_t d = 0; d < D; ++d) {
    const AttentionDiagonal& g = options_.diagonals[d];
    diagonal_rows_[d] += RowsWithPosIn(len_q, key_offset, step, g.pos_begin, g.pos_end);
  }
}

int64_t AttentionStatsAccumulator::ThinJsdSample(int64_t rows_after) {
  const int64_t budget = options_.jsd_rows;  // 0: every row
  int64_t stride = 1;
  if (budget == 0) return stride;
  while (rows_after / stride > budget) stride *= 2;
  size_t keep = 0;
  for (size_t s = 0; s < sample_rows_.size(); ++s) {
    if (sample_rows_[s] % stride != stride - 1) continue;
    if (keep != s) {  // (a self-move would empty the vector)
      sample_rows_[keep] = sample_rows_[s];
      sample_values_[keep] = std::move(sample_values_[s]);
    }
    ++keep;
  }
  sample_rows_.resize(keep);
  sample_values_.resize(keep);
  return stride;
}

void AttentionStatsAccumulator::FoldJsdValues(std::span<const int64_t> row_numbers,
                                              std::vector<std::vector<double>>& values) {
  const int64_t pairs = heads_q_ * heads_q_;
  if (options_.jsd_rows == 0) {
    for (const auto& v : values) {
      for (int64_t e = 0; e < pairs; ++e) {
        if (std::isnan(v[e])) continue;
        jsd_sum_[e] += v[e];
        ++jsd_count_[e];
      }
    }
    return;
  }
  for (size_t t = 0; t < values.size(); ++t) {
    sample_rows_.push_back(row_numbers[t]);
    sample_values_.push_back(std::move(values[t]));
  }
}

void AttentionStatsAccumulator::SkipRows(int64_t n) {
  if (n <= 0) return;
  ThinJsdSample(rows_ + n);
  rows_ += n;
}

Status AttentionStatsAccumulator::AllReduce(dist::Comm& comm, const std::string& what) {
  if (comm.size() == 1) return Status::Ok();
  const int64_t Hq = heads_q_, K = options_.first_k;
  const int64_t D = static_cast<int64_t>(options_.diagonals.size());
  // Every rank must have numbered the same rows (SkipRows), or the sample would differ.
  std::vector<double> rows = {static_cast<double>(rows_), -static_cast<double>(rows_)};
  ATTNLAB_RETURN_IF_ERROR(comm.AllReduceMax(rows, what + " (row count)"));
  if (rows[0] != -rows[1]) {
    return Status::Internal(what + ": the ranks numbered different rows (" +
                            std::to_string(static_cast<int64_t>(-rows[1])) + " to " +
                            std::to_string(static_cast<int64_t>(rows[0])) + ")");
  }
  // Sums (doubles) and counts, in one fixed layout per rank.
  std::vector<double> sums;
  std::vector<int64_t> counts;
  for (const HeadSums& hs : heads_) {
    sums.insert(sums.end(), {hs.entropy, hs.sink, hs.distance});
    sums.insert(sums.end(), hs.col.begin(), hs.col.end());
    sums.insert(sums.end(), hs.mass.begin(), hs.mass.end());
    sums.insert(sums.end(), hs.diag.begin(), hs.diag.end());
    sums.insert(sums.end(), hs.col_uniform.begin(), hs.col_uniform.end());
    counts.insert(counts.end(), {hs.entropy_rows, hs.live_rows});
  }
  sums.insert(sums.end(), jsd_sum_.begin(), jsd_sum_.end());
  counts.insert(counts.end(), jsd_count_.begin(), jsd_count_.end());
  counts.insert(counts.end(), alpha_rows_.begin(), alpha_rows_.end());
  counts.insert(counts.end(), diagonal_rows_.begin(), diagonal_rows_.end());
  ATTNLAB_RETURN_IF_ERROR(comm.AllReduceSum(sums, what + " (sums)"));
  ATTNLAB_RETURN_IF_ERROR(comm.AllReduceSum(counts, what + " (counts)"));
  size_t si = 0, ci = 0;
  for (HeadSums& hs : heads_) {
    hs.entropy = sums[si++], hs.sink = sums[si++], hs.distance = sums[si++];
    for (int64_t j = 0; j < K; ++j) hs.col[j] = sums[si++];
    for (int64_t j = 0; j < K; ++j) hs.mass[j] = sums[si++];
    for (int64_t d = 0; d < D; ++d) hs.diag[d] = sums[si++];
    for (int64_t j = 0; j < K; ++j) hs.col_uniform[j] = sums[si++];
    hs.entropy_rows = counts[ci++], hs.live_rows = counts[ci++];
  }
  for (double& x : jsd_sum_) x = sums[si++];
  for (int64_t& x : jsd_count_) x = counts[ci++];
  for (int64_t& x : alpha_rows_) x = counts[ci++];
  for (int64_t& x : diagonal_rows_) x = counts[ci++];
  // The kept last row: the largest (last_visible, last_row) over the ranks (the header's rule
  // in one process keeps the latest call with the most visible keys); its rank gives the value,
  // the others add 0 (x + 0 is exact).
  const double span = static_cast<double>(rows_) + 1;
  std::vector<double> key(Hq), value(Hq);
  for (int64_t h = 0; h < Hq; ++h) {
    key[h] = static_cast<double>(heads_[h].last_visible) * span + static_cast<double>(heads_[h].last_row);
  }
  std::vector<double> best = key;
  ATTNLAB_RETURN_IF_ERROR(comm.AllReduceMax(best, what + " (last row)"));
  for (int64_t h = 0; h < Hq; ++h) value[h] = key[h] == best[h] ? heads_[h].last_key0 : 0.0;
  ATTNLAB_RETURN_IF_ERROR(comm.AllReduceSum(value, what + " (last row's weight)"));
  for (int64_t h = 0; h < Hq; ++h) {
    // key = visible * span + row with 0 <= row < span, or -1 (no row kept anywhere).
    const int64_t visible = best[h] < 0 ? 0 : static_cast<int64_t>(std::floor(best[h] / span));
    heads_[h].last_visible = visible;
    heads_[h].last_row =
        best[h] < 0 ? -1 : static_cast<int64_t>(best[h] - static_cast<double>(visible) * span);
    heads_[h].last_key0 = value[h];
  }
  // The JSD sample: rows r = S - 1, 2S - 1, ... below R (S the stride every rank reached), each
  // rank filling the rows it added, zeros elsewhere.
  if (options_.jsd_rows > 0) {
    const int64_t stride = ThinJsdSample(rows_);
    const int64_t n = rows_ / stride, pairs = Hq * Hq;
    std::vector<double> dense(n * pairs, 0.0);
    for (size_t s = 0; s < sample_rows_.size(); ++s) {
      const int64_t slot = (sample_rows_[s] + 1) / stride - 1;
      if (slot < 0 || slot >= n) return Status::Internal(what + ": a sampled row outside the sample");
      std::copy(sample_values_[s].begin(), sample_values_[s].end(), dense.begin() + slot * pairs);
    }
    ATTNLAB_RETURN_IF_ERROR(comm.AllReduceSum(dense, what + " (JSD sample)"));
    sample_rows_.resize(n);
    sample_values_.resize(n);
    for (int64_t k = 0; k < n; ++k) {
      sample_rows_[k] = (k + 1) * stride - 1;
      sample_values_[k].assign(dense.begin() + k * pairs, dense.begin() + (k + 1) * pairs);
    }
  }
  return Status::Ok();
}

AttentionLayerStats AttentionStatsAccumulator::Finish() const {
  const int64_t Hq = heads_q_, K = options_.first_k;
  const int64_t D = static_cast<int64_t>(options_.diagonals.size());
  const SoftmaxKind kind = kind_.value_or(SoftmaxKind::kStandard);
  AttentionLayerStats out;
  out.rows = rows_;
  out.alpha_rows = alpha_rows_;
  out.diagonal_rows = diagonal_rows_;
  out.heads.resize(Hq);
  for (int64_t h = 0; h < Hq; ++h) {
    const HeadSums& s = heads_[h];
    AttentionHeadStats& o = out.heads[h];
    const double live = static_cast<double>(s.live_rows);
    o.entropy_rows = s.entropy_rows;
    o.entropy = IsUnnormalisedWeights(kind) || s.entropy_rows == 0
                    ? kNaN
                    : s.entropy / static_cast<double>(s.entropy_rows);
    o.sink_mass = (HasSink(kind) || row_extra_) && s.live_rows > 0 ? s.sink / live : kNaN;
    o.distance = s.live_rows > 0 ? s.distance / live : kNaN;
    o.live_rows = s.live_rows;
    o.alpha.resize(K);
    o.alpha_uniform.resize(K);
    o.first_mass.resize(K);
    for (int64_t j = 0; j < K; ++j) {
      o.alpha[j] = alpha_rows_[j] > 0 ? s.col[j] / static_cast<double>(alpha_rows_[j]) : kNaN;
      o.alpha_uniform[j] =
          alpha_rows_[j] > 0 ? s.col_uniform[j] / static_cast<double>(alpha_rows_[j]) : kNaN;
      o.first_mass[j] = s.live_rows > 0 ? s.mass[j] / live : kNaN;
    }
    o.last_key0 = s.last_key0;
    o.last_visible = s.last_visible;
    o.diagonal.resize(D);
    for (int64_t d = 0; d < D; ++d) {
      o.diagonal[d] =
          diagonal_rows_[d] > 0 ? s.diag[d] / static_cast<double>(diagonal_rows_[d]) : kNaN;
    }
  }
  out.jsd.assign(Hq * Hq, kNaN);
  if (options_.jsd_rows == 0) {
    for (int64_t e = 0; e < Hq * Hq; ++e) {
      if (jsd_count_[e] > 0) out.jsd[e] = jsd_sum_[e] / static_cast<double>(jsd_count_[e]);
    }
    out.jsd_sample_rows = rows_;
  } else {
    std::vector<double> sum(Hq * Hq, 0.0);
    std::vector<int64_t> cnt(Hq * Hq, 0);
    for (const auto& v : sample_values_) {
      for (int64_t e = 0; e < Hq * Hq; ++e) {
        if (std::isnan(v[e])) continue;
        sum[e] += v[e];
        ++cnt[e];
      }
    }
    for (int64_t e = 0; e < Hq * Hq; ++e) {
      if (cnt[e] > 0) out.jsd[e] = sum[e] / static_cast<double>(cnt[e]);
    }
    out.jsd_sample_rows = static_cast<int64_t>(sample_rows_.size());
  }
  return out;
}

double AttentionSinkRate(std::span<const AttentionLayerStats> layers, int64_t k, double eps) {
  int64_t above = 0, total = 0;
  for (const AttentionLayerStats& l : layers) {
    for (const AttentionHeadStats& h : l.heads) {
      if (k < 1 || k > static_cast<int64_t>(h.alpha.size()) || std::isnan(h.alpha[k - 1])) continue;
      above += h.alpha[k - 1] > eps;
      ++total;
    }
  }
  return total ? static_cast<double>(above) / static_cast<double>(total) : 0.0;
}

// ---------------------------------------------------------------------------------------------
// Reference twin: the header's definitions, literally, on materialised probabilities.

AttentionStatsReference::AttentionStatsReference(const AttentionStatsOptions& options,
                                                 int64_t heads_q)
    : options_(options), heads_q_(heads_q) {}

Status AttentionStatsReference::AddProbs(const AttentionParams& params,
                                         std::span<const double> probs, int64_t len_q,
                                         int64_t len_k) {
  return AddProbsImpl<double>(params, probs, len_q, len_k);
}

Status AttentionStatsReference::AddProbs(const AttentionParams& params,
                                         std::span<const float> probs, int64_t len_q,
                                         int64_t len_k) {
  return AddProbsImpl<float>(params, probs, len_q, len_k);
}

template <typename T>
Status AttentionStatsReference::AddProbsImpl(const AttentionParams& params,
                                             std::span<const T> probs, int64_t len_q,
                                             int64_t len_k) {
  ATTNLAB_RETURN_IF_ERROR(ValidateOptions(options_));
  const int64_t Hq = heads_q_;
  if (Hq < 1) return Status::InvalidArgument("attention stats reference: heads_q must be >= 1");
  if (len_q < 1 || len_k < len_q) {
    return Status::InvalidArgument("attention stats reference: expected 1 <= len_q <= len_k");
  }
  ATTNLAB_RETURN_IF_ERROR(
      internal::ValidateShapeAndParams(AttentionShape{1, Hq, 1, len_q, len_k, 1}, params));
  if (static_cast<int64_t>(probs.size()) != Hq * len_q * len_k) {
    return Status::InvalidArgument(
        "attention stats reference: probs must hold heads_q * len_q * "
        "len_k = " +
        Str(Hq * len_q * len_k) + " values, got " + Str(static_cast<int64_t>(probs.size())));
  }
  if (kind_ && *kind_ != params.softmax) {
    return Status::InvalidArgument("attention stats reference: softmax variant changed");
  }
  kind_ = params.softmax;
  const int64_t K = options_.first_k, D = static_cast<int64_t>(options_.diagonals.size());
  const int64_t off = len_k - len_q;
  std::vector<double> qa(len_k), qb(len_k);
  for (int64_t i = 0; i < len_q; ++i) {
    const int64_t pos = i + off;
    std::vector<RowHead> row(Hq);
    for (int64_t h = 0; h < Hq; ++h) {
      const T* P = probs.data() + (h * len_q + i) * len_k;
      RowHead& rh = row[h];
      rh.pos = pos;
      const RowRange rr = RowVisibleRange(params.mask, len_q, len_k, i);
      double ent = 0;
      for (int64_t j = 0; j < len_k; ++j) {
        rh.n += internal::KeyVisible(params.mask, rr, 0, h, i, j);
        const double p = P[j];
        rh.mass += p;
        rh.distance += p * static_cast<double>(pos - j);
        if (p > 0) ent -= p * std::log(p);
      }
      rh.entropy = IsUnnormalisedWeights(params.softmax) || rh.n < 2
                       ? kNaN
                       : ent / std::log(static_cast<double>(rh.n));
      rh.key0 = static_cast<double>(P[0]);
      rh.first.assign(K, 0.0);
      rh.first_uniform.assign(K, 0.0);
      for (int64_t j = 0; j < std::min(K, len_k); ++j) {
        rh.first[j] = P[j];
        if (rh.n > 0 && internal::KeyVisible(params.mask, rr, 0, h, i, j)) {
          rh.first_uniform[j] = 1.0 / static_cast<double>(rh.n);
        }
      }
      rh.diag.assign(D, kNaN);
      for (int64_t d = 0; d < D; ++d) {
        const AttentionDiagonal& g = options_.diagonals[d];
        if (pos < g.pos_begin || (g.pos_end >= 0 && pos >= g.pos_end)) continue;
        const int64_t j = pos - g.offset;
        rh.diag[d] = j >= 0 && j < len_k ? static_cast<double>(P[j]) : 0.0;
      }
    }
    // JSD between the rows renormalised over the real keys.
    std::vector<double> js(Hq * Hq, kNaN);
    for (int64_t h1 = 0; h1 < Hq; ++h1) {
      if (row[h1].n > 0 && row[h1].mass > 0) js[h1 * Hq + h1] = 0;
      for (int64_t h2 = h1 + 1; h2 < Hq; ++h2) {
        if (row[h1].n == 0 || row[h2].n == 0 || !(row[h1].mass > 0) || !(row[h2].mass > 0)) {
          continue;
        }
        const T* P1 = probs.data() + (h1 * len_q + i) * len_k;
        const T* P2 = probs.data() + (h2 * len_q + i) * len_k;
        double jsd = 0;
        for (int64_t j = 0; j < len_k; ++j) {
          const double a = P1[j] / row[h1].mass, b = P2[j] / row[h2].mass, avg = 0.5 * (a + b);
          if (a > 0) jsd += 0.5 * a * std::log(a / avg);
          if (b > 0) jsd += 0.5 * b * std::log(b / avg);
        }
        js[h1 * Hq + h2] = js[h2 * Hq + h1] = std::sqrt(std::max(0.0, jsd) / std::log(2.0));
      }
    }
    rows_.push_back(std::move(row));
    jsd_.push_back(std::move(js));
  }
  // The header's last-row rule: this call's final row is kept unless it sees fewer keys.
  const int64_t final_row = static_cast<int64_t>(rows_.size()) - 1;
  if (last_row_ < 0 || rows_[final_row][0].n >= rows_[last_row_][0].n) last_row_ = final_row;
  return Status::Ok();
}

AttentionLayerStats AttentionStatsReference::Finish() const {
  const int64_t Hq = heads_q_, K = options_.first_k;
  const int64_t D = static_cast<int64_t>(options_.diagonals.size());
  const int64_t R = static_cast<int64_t>(rows_.size());
  const SoftmaxKind kind = kind_.value_or(SoftmaxKind::kStandard);
  AttentionLayerStats out;
  out.rows = R;
  out.alpha_rows.assign(K, 0);
  out.diagonal_rows.assign(D, 0);
  for (int64_t r = 0; r < R; ++r) {
    const int64_t pos = rows_[r][0].pos;
    for (int64_t j = 0; j < K; ++j) out.alpha_rows[j] += pos >= j;
    for (int64_t d = 0; d < D; ++d) out.diagonal_rows[d] += !std::isnan(rows_[r][0].diag[d]);
  }
  out.heads.resize(Hq);
  for (int64_t h = 0; h < Hq; ++h) {
    AttentionHeadStats& o = out.heads[h];
    double ent = 0, sink = 0, dist = 0;
    std::vector<double> col(K, 0.0), col_uniform(K, 0.0), mass(K, 0.0), diag(D, 0.0);
    for (int64_t r = 0; r < R; ++r) {
      const RowHead& rh = rows_[r][h];
      for (int64_t j = 0; j < K; ++j) {
        if (rh.pos >= j) col[j] += rh.first[j];
        if (rh.pos >= j) col_uniform[j] += rh.first_uniform[j];
      }
      for (int64_t d = 0; d < D; ++d) {
        if (!std::isnan(rh.diag[d])) diag[d] += rh.diag[d];
      }
      if (rh.n < 1) continue;
      ++o.live_rows;
      if (!std::isnan(rh.entropy)) {
        ent += rh.entropy;
        ++o.entropy_rows;
      }
      sink += 1 - rh.mass;
      dist += rh.distance;
      double cum = 0;
      for (int64_t j = 0; j < K; ++j) {
        cum += rh.first[j];
        mass[j] += cum;
      }
    }
    const double live = static_cast<double>(o.live_rows);
    o.entropy = o.entropy_rows > 0 ? ent / static_cast<double>(o.entropy_rows) : kNaN;
    o.sink_mass = HasSink(kind) && o.live_rows > 0 ? sink / live : kNaN;
    o.distance = o.live_rows > 0 ? dist / live : kNaN;
    o.alpha.resize(K);
    o.alpha_uniform.resize(K);
    o.first_mass.resize(K);
    for (int64_t j = 0; j < K; ++j) {
      o.alpha[j] = out.alpha_rows[j] > 0 ? col[j] / static_cast<double>(out.alpha_rows[j]) : kNaN;
      o.alpha_uniform[j] =
          out.alpha_rows[j] > 0 ? col_uniform[j] / static_cast<double>(out.alpha_rows[j]) : kNaN;
      o.first_mass[j] = o.live_rows > 0 ? mass[j] / live : kNaN;
    }
    o.diagonal.resize(D);
    for (int64_t d = 0; d < D; ++d) {
      o.diagonal[d] =
          out.diagonal_rows[d] > 0 ? diag[d] / static_cast<double>(out.diagonal_rows[d]) : kNaN;
    }
    if (last_row_ >= 0) {
      o.last_key0 = rows_[last_row_][h].key0;
      o.last_visible = rows_[last_row_][h].n;
    }
  }
  // The JSD sample (see the header): every row, or r % s == s - 1.
  int64_t s = 1;
  if (options_.jsd_rows > 0) {
    while (R / s > options_.jsd_rows) s *= 2;
  }
  out.jsd.assign(Hq * Hq, kNaN);
  std::vector<double> sum(Hq * Hq, 0.0);
  std::vector<int64_t> cnt(Hq * Hq, 0);
  for (int64_t r = s - 1; r < R; r += s) {
    ++out.jsd_sample_rows;
    for (int64_t e = 0; e < Hq * Hq; ++e) {
      if (std::isnan(jsd_[r][e])) continue;
      sum[e] += jsd_[r][e];
      ++cnt[e];
    }
  }
  for (int64_t e = 0; e < Hq * Hq; ++e) {
    if (cnt[e] > 0) out.jsd[e] = sum[e] / static_cast<double>(cnt[e]);
  }
  return out;
}

}  // namespace attnlab
