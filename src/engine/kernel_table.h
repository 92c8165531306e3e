// The per-target kernels behind the engine's public entry points, and the run-time choice
// between them (attnlab/simd_target.h). The entry points (attention_flash_forward.cc,
// attention_flash_backward.cc, attention_decode.cc) validate, plan and allocate in baseline
// code, then hand each parallel task to ActiveKernels(): the task bodies live in the
// *_kernel.cc files, compiled once per target (engine/target.h), and take the arguments and
// per-thread scratch below (shared by every target, so they are plain baseline types).
#ifndef ATTNLAB_ENGINE_KERNEL_TABLE_H_
#define ATTNLAB_ENGINE_KERNEL_TABLE_H_

#include <cstdint>
#include <vector>

#include "attnlab/attention.h"
#include "attnlab/attention_decode.h"
#include "attnlab/simd_target.h"
#include "core/aligned_buffer.h"
#include "engine/attention_flash_common.h"

namespace attnlab::internal {

// ---- Flash forward (attention_flash_forward.cc states the algorithm).
struct FlashForwardBuffers {
  AlignedBuffer<float> qt;     // [n_sub][D][kSubRows] Q^T per sub-block (scaled)
  AlignedBuffer<float> oacc;   // [n_sub * kSubRows][d_pad]
  AlignedBuffer<float> m, l;   // [n_sub * kSubRows]
  AlignedBuffer<float> alpha;  // [kSubRows]
  AlignedBuffer<float> vp;     // [kBlockK][d_pad] (only when head_dim % 16 != 0)
  AlignedBuffer<float> st;     // [kBlockK][kSubRows] S^T, then P^T
  std::vector<int64_t> row_h, row_i;  // [n_sub * kSubRows] query head and index of flat rows
};

struct FlashForwardArgs {
  const AttentionShape* shape;
  const AttentionParams* params;
  const AttentionTensor* q;
  const AttentionTensor* k;
  const AttentionTensor* v;
  const AttentionTensorMut* out;
  float* lse;  // may be null
  FlashPlan plan;
  float qscale;  // scale * log2(e) for softmax, scale for sigmoid
  bool sigmoid;
  bool softpick;  // kSoftpick (attention.h)
};

// ---- Flash backward (attention_flash_backward.cc states the algorithm).
struct FlashBackwardBuffers {
  AlignedBuffer<float> kp, vp;    // [kchunk_pad][d_pad] packed keys / values of the task
  AlignedBuffer<float> dk, dv;    // [kchunk_pad][d_pad] accumulators
  AlignedBuffer<float> qt, dot;   // [D][kBackwardRows] Q^T (scaled), dO^T
  AlignedBuffer<float> qp, dop;   // [kBackwardRows][d_pad] Q, dO
  AlignedBuffer<float> dq;        // [kBackwardRows][d_pad] accumulator
  AlignedBuffer<float> st, dpt;   // [kBlockK][kBackwardRows] S^T -> P^T, dP^T -> dS^T
  std::vector<int64_t> row_h, row_i;  // [kBackwardRows] query head / [len_q] query index
  AlignedBuffer<float> lse2, dd;  // [kBackwardRows] lse * log2(e) and D per row
  double dd_exact[kBackwardRows];  // D per row in double (for d sink)
};

struct FlashBackwardArgs {
  const AttentionShape* shape;
  const AttentionParams* params;
  const AttentionTensor *q, *k, *v, *out, *dout;
  const float* lse;
  const AttentionTensorMut *dq, *dk, *dv;
  FlashBackwardPlan plan;
  float scale;   // natural scale
  float qscale;  // scale * log2(e) for softmax, scale for sigmoid
  bool sigmoid;
  bool softpick;  // kSoftpick (attention.h)
  float* dq_partial;      // [n_kchunks][B * Hkv][heads_per_pass][Lq][D] when n_kchunks > 1
  double* dsink_partial;  // [B * Hkv][group] (kSinkLogit)
};

// ---- Decode (attention_decode.cc states the algorithm).
struct DecodeArgs {
  const DecodeShape* s;
  const float* q;  // [heads_q, D], already multiplied by scale * log2(e)
  const KvView* k;
  const KvView* v;
  int64_t chunk;     // keys per task
  int64_t n_chunks;
  float* partial;    // per (hk, chunk, g): m, l, acc[D] (DecodePartialSize floats)
};
inline int64_t DecodePartialSize(int64_t head_dim) { return head_dim + 2; }

// ---- Weight rows times a few vectors (weight_gemm.cc's MatmulWeightT for small N).
// y[i * ldy + r] = sum_k x[i * K + k] * W[r][k] for rows r of the task and i < N.
constexpr int64_t kWeightRowsMaxN = 4;
struct WeightRowsArgs {
  const uint8_t* w;   // row r at w + r * row_bytes
  int64_t row_bytes;
  KvDtype dtype;      // fp32 / bf16 / fp16 elements, unless q8_0
  bool q8_0;          // rows of ggml's block_q8_0 (34 bytes: fp16 d, int8 q[32]; x = d q)
  int64_t K;          // elements per row (a multiple of 32 for q8_0)
  const float* x;     // [N, K]
  int64_t N;          // 1 .. kWeightRowsMaxN
  float* y;
  int64_t ldy;
};

// The row-wise ops of engine/ops.h that have a per-target copy (ops_kernel.cc): X(name) for each.
#define ATTNLAB_DISPATCHED_OPS(X)                                                         \
  X(LayerNormForward) X(LayerNormBackward) X(RmsNormForward) X(RmsNormBackward)           \
  X(GeluForward) X(GeluBackward) X(AddBias) X(BiasBackward) X(SoftmaxCrossEntropyForward) \
  X(SoftmaxCrossEntropyBackward)

// Their function types, as engine/ops.h declares them (ops.cc static_asserts that they match;
// this header does not include ops.h, which would make ops.cc -> here -> ops.h a cycle).
namespace ops_fn {
using LayerNormForward = void(int64_t, int64_t, const float*, const float*, const float*, float,
                              float*, float*, float*, ThreadPool*);
using LayerNormBackward = void(int64_t, int64_t, const float*, const float*, const float*,
                               const float*, const float*, float*, float*, float*, ThreadPool*);
using RmsNormForward = void(int64_t, int64_t, const float*, const float*, float, float*, float*,
                            ThreadPool*);
using RmsNormBackward = void(int64_t, int64_t, const float*, const float*, const float*,
                             const float*, float*, float*, ThreadPool*);
using GeluForward = void(int64_t, const float*, float*, ThreadPool*);
using GeluBackward = void(int64_t, const float*, const float*, float*, ThreadPool*);
using AddBias = void(int64_t, int64_t, const float*, float*, ThreadPool*);
using BiasBackward = void(int64_t, int64_t, const float*, float*, ThreadPool*);
using SoftmaxCrossEntropyForward = double(int64_t, int64_t, float*, const int32_t*, float*,
                                          ThreadPool*);
using SoftmaxCrossEntropyBackward = void(int64_t, int64_t, const float*, const int32_t*, float,
                                         float*, ThreadPool*);
}  // namespace ops_fn

// One target's copies of those ops, under their own names (ops.cc calls them).
struct OpsTable {
#define ATTNLAB_OPS_MEMBER(name) ops_fn::name* name;
  ATTNLAB_DISPATCHED_OPS(ATTNLAB_OPS_MEMBER)
#undef ATTNLAB_OPS_MEMBER
};

// ---- The attention statistics' row loops (diagnostics/attention_stats.cc, which defines the
// statistics; row_stats_kernel.cc). A score row t[0, ld) is padded (ld a multiple of 16) and
// holds x_j = scale log2(e) q . k_j, -inf where invisible.
//   row_max       max_j t_j
//   row_arg_max   the max and the first column holding it (not all -inf)
//   softmax_row_sums  with e_j = 2^(t_j - max2), dist_j = dist0 - j: s0 = sum e_j,
//                 s1 = sum e_j (t_j - max2), s2 = sum e_j dist_j
//   sigmoid_row_sums  with p_j = 1 / (1 + 2^-(t_j + b2)) (0 where invisible): s0 = sum p_j,
//                 s2 = sum p_j dist_j
//   js_distance   the normalised Jensen-Shannon distance sqrt(JSD / ln 2) of two rows q1, q2
//                 over n keys (n a multiple of kJsPad; zero-padded), l1, l2 their natural logs
//                 (any finite value where q = 0)
//   exp2_accumulate  acc[j] += 2^(t[j] - shift2) for j in [0, n), any n >= 0 (t = -inf adds 0,
//                 NaN propagates): attention probabilities from base-2 scores and a known lse,
//                 summed over rows (the scored KV caches, cache/scored_cache.cc)
//   score_panels  the score block t[r * ld + p * kScorePanel + c] = sum_{k < d} q[r * d + k] *
//                 kp[(p * d + k) * kScorePanel + c] for rows r < rows, panels p < panels, c <
//                 kScorePanel (ld >= panels * kScorePanel): keys packed transposed in panels of
//                 kScorePanel (ScorePanelIndex), so each panel is one contiguous [d][64] block the
//                 engine's micro-kernel reads row by row (oneDNN's sgemm repacked every block of
//                 keys on every call); the products summed in k order
// fp32 lanes flushed into double every 256 keys; JSD in double lanes.
struct RowSumsD {
  double s0 = 0, s1 = 0, s2 = 0;
};
inline constexpr int64_t kScorePanel = 64;
// Where key j's component k sits in score_panels' packed keys (d components per key).
inline int64_t ScorePanelIndex(int64_t j, int64_t k, int64_t d) {
  return ((j / kScorePanel) * d + k) * kScorePanel + j % kScorePanel;
}
constexpr int64_t kJsPad = 8;  // every target's double lanes divide it
struct RowStatsTable {
  float (*row_max)(const float* t, int64_t ld);
  float (*row_arg_max)(const float* t, int64_t ld, int64_t* arg);
  RowSumsD (*softmax_row_sums)(const float* t, int64_t ld, float max2, int64_t dist0);
  RowSumsD (*sigmoid_row_sums)(const float* t, int64_t ld, float b2, int64_t dist0);
  double (*js_distance)(const double* q1, const double* l1, const double* q2, const double* l2,
                        int64_t n);
  void (*exp2_accumulate)(const float* t, int64_t n, float shift2, float* acc);
  void (*score_panels)(int64_t rows, int64_t panels, int64_t d, const float* q, const float* kp,
                       float* t, int64_t ld);
};

// ---- The lower triangle of a Gram matrix in double (gram_kernel.cc; the representation
// metrics' feature Gram): gram_lower_columns adds, for the column tile [b0, b0 + gram_columns)
// and every row a of G with a >= b0 rounded down to a multiple of 8 and a < n,
//   g[a * ldg + b] += sum_{t < rows} x(t, a) * x(t, b),
// in t order. x is packed in panels of kGramPanel columns, each panel's rows contiguous
// (GramPackedIndex: one stream of 64 bytes per row and panel, where a row-major [rows][n] block
// would touch a new page per row), with columns [n, round_up(b0 + gram_columns, kGramPanel))
// zero; g has ldg >= b0 + gram_columns columns. gram_columns is a multiple of 4 and divides 16.
// Entries with b > a (inside the diagonal tiles) are computed too: callers read the lower
// triangle.
inline constexpr int64_t kGramPanel = 8;
inline int64_t GramPackedIndex(int64_t t, int64_t c, int64_t rows) {
  return (c / kGramPanel) * rows * kGramPanel + t * kGramPanel + c % kGramPanel;
}
struct GramTable {
  int64_t (*gram_columns)();
  void (*gram_lower_columns)(const double* x, int64_t rows, int64_t n, int64_t b0, double* g,
                             int64_t ldg);
};

// One target's task bodies. Each writes only its task's outputs (no shared writes).
struct KernelTable {
  SimdTarget target;
  int lanes;                    // floats per vector
  int tile_rows, tile_cols;     // the micro-kernel's register tile (micro_gemm.h)
  void (*flash_forward_task)(const FlashForwardArgs& a, int64_t task, FlashForwardBuffers& w);
  void (*flash_backward_task)(const FlashBackwardArgs& a, int64_t pass, int64_t task,
                              FlashBackwardBuffers& w);
  void (*decode_task)(const DecodeArgs& a, int64_t hk, int64_t chunk);
  void (*weight_rows_task)(const WeightRowsArgs& a, int64_t r0, int64_t r1);  // rows [r0, r1)
  // Rows [0, rows) of a.w widened to fp32 into out[rows][a.K] (x, N, y unused): the panels of
  // products with more input rows.
  void (*widen_rows)(const WeightRowsArgs& a, int64_t rows, float* out);
  OpsTable ops;
  RowStatsTable row_stats;
  GramTable gram;
};

// The table of ActiveSimdTarget() (one atomic load).
const KernelTable& ActiveKernels();

}  // namespace attnlab::internal

// The task bodies and ops of each target, defined in the *_kernel.cc files compiled for that
// target (namespace attnlab::<target>, engine/target.h); kernel_table.cc puts them in the tables.
#define ATTNLAB_DECLARE_TARGET_KERNELS(ns)                                                    \
  namespace attnlab::ns {                                                                     \
  void FlashForwardTask(const internal::FlashForwardArgs& a, int64_t task,                    \
                        internal::FlashForwardBuffers& w);                                    \
  void FlashBackwardTask(const internal::FlashBackwardArgs& a, int64_t pass, int64_t task,    \
                         internal::FlashBackwardBuffers& w);                                  \
  void DecodeTask(const internal::DecodeArgs& a, int64_t hk, int64_t chunk);                  \
  void WeightRowsTask(const internal::WeightRowsArgs& a, int64_t r0, int64_t r1);             \
  void WidenRows(const internal::WeightRowsArgs& a, int64_t rows, float* out);                 \
  void DescribeTarget(int* lanes, int* tile_rows, int* tile_cols);                            \
  float RowMax(const float* t, int64_t ld);                                                   \
  float RowArgMax(const float* t, int64_t ld, int64_t* arg);                                  \
  internal::RowSumsD SoftmaxRowSums(const float* t, int64_t ld, float max2, int64_t dist0);   \
  internal::RowSumsD SigmoidRowSums(const float* t, int64_t ld, float b2, int64_t dist0);     \
  double JsDistance(const double* q1, const double* l1, const double* q2, const double* l2,   \
                    int64_t n);                                                               \
  void Exp2Accumulate(const float* t, int64_t n, float shift2, float* acc);                   \
  void ScorePanels(int64_t rows, int64_t panels, int64_t d, const float* q, const float* kp,  \
                   float* t, int64_t ld);                                                     \
  int64_t GramColumns();                                                                      \
  void GramLowerColumns(const double* x, int64_t rows, int64_t n, int64_t b0, double* g,      \
                        int64_t ldg);                                                         \
  ATTNLAB_DISPATCHED_OPS(ATTNLAB_DECLARE_OP)                                                  \
  }
#define ATTNLAB_DECLARE_OP(name) internal::ops_fn::name name;
ATTNLAB_DECLARE_TARGET_KERNELS(baseline)
ATTNLAB_DECLARE_TARGET_KERNELS(avx2)
ATTNLAB_DECLARE_TARGET_KERNELS(avx512)
#undef ATTNLAB_DECLARE_TARGET_KERNELS
#undef ATTNLAB_DECLARE_OP

#endif  // ATTNLAB_ENGINE_KERNEL_TABLE_H_
