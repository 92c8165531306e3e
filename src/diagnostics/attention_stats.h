// Attention statistics per query head of one layer, streamed over query rows without ever
// holding a len_q x len_k attention map: for a block of B_r rows of one head the scores against
// every key are computed (B_r x len_k floats, one Sgemm), masked and normalised exactly as
// attnlab/attention.h defines them, and folded into accumulators. Extra memory per worker thread
// is O(B_r * len_k) for the scores plus O(heads_q * len_k) for the Jensen-Shannon rows; what is
// kept between calls is O(heads_q * (first_k + diagonals) + jsd_rows * heads_q^2).
//
// ----------------------------------------------------------------------------------------------
// Definitions (the one place they are stated; the streaming accumulator and its Reference twin
// both follow them, and the twin's code is the executable form of this comment).
//
// Rows. Every AddRows call adds len_q query rows of ONE sequence whose queries are the last
// len_q of its len_k keys (bottom-right aligned, as in the engine): local row i sits at key
// position pos(i) = i + len_k - len_q, and "key j" means key position j. Rows are numbered
// r = 0, 1, ... across calls in the order they are added; R is the number added so far.
// An explicit mask in the params addresses the call's local rows and batch 0. With a causal
// mask a row sees the same keys however the rows are split into calls (a KV cache's chunks), so
// chunked calls give the statistics of one call; without causality they do not.
//
// Probabilities. P[i, j] is the weight of key j in row i of query head h exactly as attention.h
// defines it for the call's AttentionParams (mask, scale, softmax variant, sink logits, sigmoid
// bias), 0 for invisible keys. V(i) is the set of visible keys and n_i = |V(i)|. The real-key
// mass is M_i = sum_j P[i, j]: 1 for kStandard (n_i >= 1), below 1 for kSoftmax1 / kSinkLogit,
// unconstrained for kSigmoid. A row is LIVE if n_i >= 1. Natural logarithms throughout.
//
// For each query head h (means over rows are over the rows of every call so far):
//
//   entropy      mean over rows with n_i >= 2 of  E_i = -sum_{j in V(i)} P[i,j] ln P[i,j] / ln n_i
//                (0 ln 0 = 0). Uniform attention gives 1, one-hot 0. For kSoftmax1 / kSinkLogit
//                P is NOT renormalised: E_i is the entropy of the sub-probability vector over the
//                real keys (the implicit sink is not a key), which lies in [0, 1] except that for
//                n_i = 2 it can reach 2/(e ln 2) ~ 1.06. For kSigmoid the weights are not a
//                distribution: entropy is NaN (undefined), not computed.
//   sink_mass    kSoftmax1 / kSinkLogit only (NaN otherwise): mean over live rows of the implicit
//                sink's mass 1 - M_i = exp(b_h - lse_i) (b_h = 0 for softmax1).
//   distance     mean over live rows of  D_i = sum_j P[i,j] (pos(i) - j), with P as the layer uses
//                it (not renormalised: the implicit sink contributes nothing; for kSigmoid D_i is
//                the sigmoid-weighted sum). Negative contributions are possible without causality.
//   alpha[k-1]   for k = 1..first_k, Gu et al. 2024's attention importance of token k (tokens
//                numbered from 1, so our key j = k - 1):
//                   alpha_k = 1/(T-k+1) sum_{t >= k} A[t, k]
//                  -> sum over every row with pos(i) >= j of P[i, j], divided by the number of
//                     such rows (dead rows count, with P = 0). NaN if no row has pos(i) >= j.
//                ref: Gu et al., "When Attention Sink Emerges in Language Models: An Empirical
//                View", arXiv:2410.10781, eq. 1; their Sink_k^eps is the share of heads with
//                alpha_k > eps (AttentionSinkRate below; they use eps = 0.3).
//   alpha_uniform[k-1]  what alpha_k would be under uniform attention over each row's visible
//                keys, over the same rows: sum over rows with pos(i) >= j of (key j visible ?
//                1/n_i : 0), divided by the same count. The baseline a sink verdict must beat: for
//                causal rows 0..T-1 alpha_1^uniform = H_T / T (H_T the harmonic number), 0.26 at
//                T = 12, so alpha_1 > 0.3 alone says little about short texts.
//   first_mass[k-1]  for k = 1..first_k: mean over live rows of sum_{j < k} P[i, j].
//   last_key0, last_visible   P[i, 0] and n_i of the final row of the LATEST call whose final row
//                sees at least as many keys (n_i) as the kept row of every earlier call: the last
//                query of a text's last longest window (chunks of one window see more and more
//                keys, so its final chunk's last row is kept; a shorter last window is not).
//                GPT-2's last-token attention to token 0 (the experiment of Xiao et al. 2023 and
//                Gu et al. 2024 on the first token) compares last_key0 with the uniform
//                1/last_visible.
//   diagonal[d]  for each AttentionDiagonal {offset, pos_begin, pos_end}: mean over the rows with
//                pos(i) in [pos_begin, pos_end) (pos_end = -1: no upper bound) of P[i, pos(i) -
//                offset], which is 0 when pos(i) - offset is not a key (so such rows count as 0,
//                like the zero rows of TransformerLens' detection patterns). On tokens without a
//                BOS: offset 1 over all rows is TransformerLens' previous_token_head score; on a
//                random sequence of n tokens repeated twice, offset n and offset n - 1 over
//                pos in [n, 2n) are its duplicate_token_head and induction_head scores restricted
//                to the second repeat. ref: TransformerLens head_detector.py,
//                compute_head_attention_similarity_score with error_measure="mul": its score is
//                sum(A * pattern) / sum(A) over the whole map, i.e. (rows in range / all rows)
//                times ours when every row sums to 1 (kStandard, no dead rows).
//
// Between query heads of the layer:
//
//   jsd[h1 * heads_q + h2]  Jensen-Shannon distance, NORMALISED TO [0, 1]: the mean over the
//                sampled rows of  sqrt(JSD(Q1, Q2) / ln 2),  where Q = P[i, :] / M_i is the row
//                renormalised over the real keys (for every variant, sigmoid included),
//                JSD(Q1, Q2) = 1/2 KL(Q1 || A) + 1/2 KL(Q2 || A), A = (Q1 + Q2) / 2, natural log
//                (so sqrt(JSD / ln 2) = scipy.spatial.distance.jensenshannon(Q1, Q2, base=2);
//                0 = same row, 1 = disjoint supports). Rows where either head has no
//                distribution (n_i = 0 or M_i = 0) are left out of that pair's mean. Symmetric,
//                0 on the diagonal; NaN for a pair with no usable sampled row.
//                ref: J. Lin, "Divergence measures based on the Shannon entropy", IEEE Trans.
//                Inf. Theory 37(1), 1991; Endres & Schindelin 2003 for the metric sqrt(JSD).
//   The sample: jsd_rows = 0 uses every row. Otherwise m = jsd_rows and s = the smallest power
//                of two with floor(R / s) <= m; the sample is the rows r with r % s == s - 1
//                (evenly spaced, floor(R / s) rows: all rows while R <= m, else between m/2 and
//                m). It depends only on R, not on how the rows were split into calls, and the
//                sample for a larger R is a subset of the one for a smaller R, which is what lets
//                the accumulator thin its stored rows as R grows.
// ----------------------------------------------------------------------------------------------
//
// Precision. The streaming accumulator computes the score blocks in fp32 (Sgemm) and their
// exponentials with the engine's fp32 exp2, accumulating row sums in fp32 lanes flushed into
// double every 256 keys; the row max's term is redone with a double-precision logit, and every
// single-entry probability (alpha, first_mass, last_key0, diagonals) uses a double logit, so
// rows dominated by one key (sinks) are as accurate as spread rows. It matches the twin fed with
// double-precision probabilities to ~1e-7 relative on unit-normal q, k; the error bound grows
// like u * max |logit| (u = 2^-24) as for every fp32 attention kernel. The JSD rows are
// renormalised in double, with a vectorised double log (~1e-16).
// Cost: one GEMM of B_r x len_k x head_dim per (head, block) plus ~25 vector ops per score;
// the sampled JSD adds heads_q^2 / 2 logs per key of each sampled row.
// Threading: tasks are fixed (row block, head) pairs whose partial sums are reduced in block
// order, and the JSD rows are reduced in row order, so results are bit-reproducible for a fixed
// thread count (params.pool, else DefaultThreadPool()).
#ifndef ATTNLAB_DIAGNOSTICS_ATTENTION_STATS_H_
#define ATTNLAB_DIAGNOSTICS_ATTENTION_STATS_H_

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "attnlab/attention.h"
#include "attnlab/status.h"
#include "dist/comm.h"

namespace attnlab {

namespace stats_internal {
struct Call;  // one AddRows / AddStripedRows call (attention_stats.cc)
}  // namespace stats_internal

struct AttentionDiagonal {
  int64_t offset = 1;     // key = pos(i) - offset (1: previous token)
  int64_t pos_begin = 0;  // rows with pos(i) in [pos_begin, pos_end) ...
  int64_t pos_end = -1;   // ... (-1: no upper bound)
};

struct AttentionStatsOptions {
  int64_t first_k = 4;                       // alpha_k and first_mass for k = 1..first_k (>= 0)
  int64_t jsd_rows = 256;                    // sampled rows for the JSD (0: every row)
  std::vector<AttentionDiagonal> diagonals;  // pattern scores to report
  int64_t block_rows = 64;                   // B_r: query rows per score block (>= 1)
};

struct AttentionHeadStats {
  double entropy = 0;              // NaN for kSigmoid or when no row has n_i >= 2
  int64_t entropy_rows = 0;        // rows with n_i >= 2
  double sink_mass = 0;            // NaN unless kSoftmax1 / kSinkLogit or row extra logits (or
                                   // no live row)
  double distance = 0;             // NaN when no live row
  int64_t live_rows = 0;           // rows with n_i >= 1
  std::vector<double> alpha;          // [first_k]
  std::vector<double> alpha_uniform;  // [first_k] alpha under uniform attention (same rows)
  std::vector<double> first_mass;     // [first_k]
  double last_key0 = 0;
  int64_t last_visible = 0;
  std::vector<double> diagonal;  // [diagonals.size()], NaN when no row is in range
};

struct AttentionLayerStats {
  int64_t rows = 0;                       // R: rows added
  std::vector<AttentionHeadStats> heads;  // [heads_q]
  std::vector<double> jsd;                // [heads_q * heads_q], see the header comment
  int64_t jsd_sample_rows = 0;            // rows in the JSD sample
  std::vector<int64_t> alpha_rows;        // [first_k] rows with pos(i) >= k - 1
  std::vector<int64_t> diagonal_rows;     // [diagonals.size()] rows in each range
};

// Gu et al.'s Sink_k^eps over a set of heads: the share of heads whose alpha_k > eps (k >= 1;
// heads whose alpha_k is NaN are not counted). 0 if there are none.
double AttentionSinkRate(std::span<const AttentionLayerStats> layers, int64_t k, double eps = 0.3);

// The rows of a len_k-token sequence striped over `ranks` processes that rank `rank` holds: the
// positions rank, rank + ranks, ... below len_k (0 when rank >= len_k). The layout of ring
// attention's sequence parallelism (dist/ring_attention.h, Gpt::set_sequence_parallel).
int64_t StripedRowCount(int64_t len_k, int64_t rank, int64_t ranks);

class AttentionStatsAccumulator {
 public:
  // REQUIRES (else an error): heads_q, heads_kv, head_dim >= 1, heads_q % heads_kv == 0, valid
  // options (first_k >= 0, jsd_rows >= 0, block_rows >= 1, diagonals with pos_begin >= 0 and
  // pos_end == -1 or pos_end >= pos_begin).
  static Result<AttentionStatsAccumulator> Create(const AttentionStatsOptions& options,
                                                  int64_t heads_q, int64_t heads_kv,
                                                  int64_t head_dim);

  // Adds len_q rows of one sequence.
  //   q:      row t, query head h at q + t * q_row_stride + h * head_dim (after RoPE), t < len_q;
  //           q_row_stride >= heads_q * head_dim (e.g. the model's qkv rows: stride Q).
  //   k_all:  [1, heads_kv, len_k, head_dim] keys after RoPE; the queries are the last len_q.
  //   params: the mask and softmax the layer used (params.pool: threads; null = default pool).
  //   row_extra_logits: empty, or [heads_q, len_q] natural-log logits of one more entry with a
  //           zero value in each row's softmax (a key_bias model's s*_i, Gu et al. 2024): it
  //           joins the denominator like softmax1's +1 or a sink logit (combined with them), and
  //           its mass counts in sink_mass. Softmax-family variants only; every call the same.
  //   key0_prob: empty, or [heads_q, len_q] floats that receive each row's P[i, 0] (index
  //           h * len_q + i; 0 where key 0 is invisible or the row is dead), the same value
  //           alpha_1 sums: callers that need a per-row first-key weight (the head activity of
  //           analysis) get it here without another O(len_q len_k) pass over the scores.
  // REQUIRES (else an error, nothing added): 1 <= len_q <= len_k, non-null q and k_all whose
  // strides stay inside k_all.size, k_all.stride_token >= head_dim when len_k > 1, params valid
  // for attention.h with these shapes, the same params.softmax as the first call, and key0_prob
  // empty or of heads_q * len_q floats.
  Status AddRows(const AttentionParams& params, const float* q, int64_t q_row_stride, int64_t len_q,
                 const AttentionTensor& k_all, int64_t len_k,
                 std::span<const float> row_extra_logits = {}, std::span<float> key0_prob = {});

  // Sequence parallelism: this rank's rows of ONE sequence of len_k tokens striped over `ranks`
  // processes (StripedRowCount(len_k, rank, ranks) rows in q, at positions rank + ranks * i),
  // against all len_k keys in k_all. Every rank calls it for the same sequence (a rank with no
  // rows too) and numbers all len_k rows, so that after AllReduce every rank holds what one
  // AddRows of the whole sequence gives: the counts and the JSD sample's rows exactly, every
  // value to the fp32 rounding of its scores (a row is scored in another row block than in one
  // process: the precision paragraph above) and the order of the sums' additions. row_extra_logits and key0_prob, if given, address the
  // local rows ([heads_q, local rows]). REQUIRES (else an error, nothing added): 0 <= rank <
  // ranks, len_k >= 1, no explicit mask (its rows are one call's local rows), and what AddRows
  // requires of a len_k x len_k call.
  Status AddStripedRows(const AttentionParams& params, const float* q, int64_t q_row_stride,
                        int64_t rank, int64_t ranks, const AttentionTensor& k_all, int64_t len_k,
                        std::span<const float> row_extra_logits = {},
                        std::span<float> key0_prob = {});

  // The statistics of every row added so far (may be called at any time).
  AttentionLayerStats Finish() const;

  // Distributed runs (dist/comm.h): each rank adds the rows of its own sequences and SKIPS the
  // others' (SkipRows with their row counts, in the same order), so that every row keeps the
  // number it has in one process and the JSD sample is the same rows. AllReduce then merges the
  // ranks (every rank calls it; afterwards every rank holds the merged state): sums and counts
  // added in rank order, last_key0 taken from the rank whose kept row wins the header's rule,
  // the sampled rows' JSD values from the rank that added each. The result equals one process
  // adding every row up to the order of the sums' additions (the JSD sample: bit for bit).
  // REQUIRES: the same options, shapes and total rows on every rank; every row added by
  // exactly one rank.
  void SkipRows(int64_t n);
  Status AllReduce(dist::Comm& comm, const std::string& what);

  int64_t rows() const { return rows_; }
  int64_t heads_q() const { return heads_q_; }

 private:
  AttentionStatsAccumulator(const AttentionStatsOptions& options, int64_t heads_q, int64_t heads_kv,
                            int64_t head_dim);
  // AddRows' steps (the rest are free functions in the .cc): the boundary checks; phase A's
  // fold of the per-(row block, head) partial records into heads_ in block order; phase B's
  // thinning of the kept sample to the stride for rows_after rows (returned; 1 when jsd_rows
  // is 0) and its fold of one batch of sampled rows' [heads_q^2] values, in row order.
  Status ValidateAddRows(const AttentionParams& params, const float* q, int64_t q_row_stride,
                         int64_t len_q, const AttentionTensor& k_all, int64_t len_k,
                         int64_t rows_held, size_t extra_size, size_t key0_size) const;
  // The rest of both Add calls once checked: phases A and B over the call's rows, then rows_.
  void AddCall(const stats_internal::Call& call, std::span<const float> row_extra_logits,
               std::span<float> key0_prob);
  // Rows at positions key_offset + step * i, i < len_q, numbered as span rows; the call's final
  // row (last_key0) among them or not.
  void FoldHeadPartials(const std::vector<double>& partial, int64_t len_q, int64_t key_offset,
                        int64_t step, int64_t span, bool has_final_row);
  int64_t ThinJsdSample(int64_t rows_after);
  void FoldJsdValues(std::span<const int64_t> row_numbers, std::vector<std::vector<double>>& values);

  AttentionStatsOptions options_;
  int64_t heads_q_, heads_kv_, head_dim_;
  int64_t rows_ = 0;
  std::optional<SoftmaxKind> kind_;  // of the first call; every call must use the same
  bool row_extra_ = false;           // the first call gave row_extra_logits; every call must
  // Per head: sums over rows.
  struct HeadSums {
    double entropy = 0, sink = 0, distance = 0;
    int64_t entropy_rows = 0, live_rows = 0;
    std::vector<double> col, mass, diag;  // [first_k], [first_k], [diagonals]
    std::vector<double> col_uniform;      // [first_k] sums of 1/n_i on visible keys
    double last_key0 = 0;
    int64_t last_visible = 0;
    int64_t last_row = -1;  // the kept row's number (AllReduce's tie rule: the later row)
  };
  std::vector<HeadSums> heads_;
  std::vector<int64_t> alpha_rows_, diagonal_rows_;
  // JSD: jsd_rows == 0: sums and counts per pair [heads_q^2]; otherwise the sampled rows kept so
  // far, ascending, each with its [heads_q^2] values (NaN = unusable), thinned as R grows.
  std::vector<double> jsd_sum_;
  std::vector<int64_t> jsd_count_;
  std::vector<int64_t> sample_rows_;
  std::vector<std::vector<double>> sample_values_;
};

// The Reference twin: the same statistics from materialised probability maps, following the
// definitions above literally in double precision. Used by the tests; the definition in code.
class AttentionStatsReference {
 public:
  // REQUIRES: the same options and heads_q as the accumulator it is compared with.
  AttentionStatsReference(const AttentionStatsOptions& options, int64_t heads_q);

  // probs: [heads_q, len_q, len_k] for the same rows an AddRows call would add (batch 1, e.g.
  // AttentionForwardReference's probs output), 0 where masked. params gives the visibility
  // (n_i) and the softmax variant.
  Status AddProbs(const AttentionParams& params, std::span<const double> probs, int64_t len_q,
                  int64_t len_k);
  Status AddProbs(const AttentionParams& params, std::span<const float> probs, int64_t len_q,
                  int64_t len_k);

  AttentionLayerStats Finish() const;

 private:
  template <typename T>
  Status AddProbsImpl(const AttentionParams& params, std::span<const T> probs, int64_t len_q,
                      int64_t len_k);

  AttentionStatsOptions options_;
  int64_t heads_q_;
  std::optional<SoftmaxKind> kind_;
  // One record per row and head, in row order.
  struct RowHead {
    int64_t pos = 0, n = 0;
    double entropy = 0;         // NaN if undefined (n < 2 or sigmoid)
    double mass = 0;            // M_i
    double distance = 0;        // D_i
    double key0 = 0;            // P[i, 0]
    std::vector<double> first;  // P[i, j], j < first_k (0 beyond len_k)
    std::vector<double> first_uniform;  // 1/n_i where key j < first_k is visible, else 0
    std::vector<double> diag;   // P[i, pos - offset] or 0; NaN when pos out of range
  };
  std::vector<std::vector<RowHead>> rows_;  // [R][heads_q]
  int64_t last_row_ = -1;                   // the row last_key0 reports (header's rule)
  std::vector<std::vector<double>> jsd_;    // [R][heads_q^2]
};

}  // namespace attnlab

#endif  // ATTNLAB_DIAGNOSTICS_ATTENTION_STATS_H_
