// Representation-level metrics of attention collapse and sinks, computed exactly from token
// representations (a layer's residual stream, one head's attention output, one head's q and k),
// without any attention map. Definitions, references and interpretation: docs/METRICS.md.
//
// Every function takes a strided float matrix X [T, C] (T tokens = rows, C channels), validates it
// once (shape, stride, finite values) and accumulates in double. Cost: O(T C) time and O(T + C)
// memory, except the effective rank (O(T C m + m^3) time, O(m^2) memory, m = min(T, C); the m^3
// eigensolve dominates: ~0.15 s for m = 768 on one core) and CKA (O(T C^2) time, O(C^2) memory).
//
// Exact on collapse: identical rows give relative residual 0, mean cosine 1, MAD 0, Dirichlet
// energy 0 and effective rank 1 (centred: 0), bit for bit (means are computed in double from
// floats, so identical rows centre to exact zeros). Degenerate inputs never give NaN:
//   T = 1           residual 0, cosine 1, MAD 0, energy 0, effective rank 1 (0 if the row is 0;
//                   centred 0), CKA 0
//   all-zero X      residual 0, cosine 1, MAD 0, energy 0, effective rank 0, CKA 0
//   all-zero rows   have no direction: excluded from the cosine / MAD pairs
//   a ratio x / 0   0 when x = 0, +infinity otherwise (massive-activation ratio, key-norm ratio)
//
// Batches: the token graph is one sequence. Call these on the rows of ONE sequence (rows
// b * Tm .. b * Tm + Tm - 1 of LayerTensors' [N, C] tensors) and average over sequences; calling
// them on all N rows mixes tokens of different sequences into one graph.
#ifndef ATTNLAB_DIAGNOSTICS_REPRESENTATION_METRICS_H_
#define ATTNLAB_DIAGNOSTICS_REPRESENTATION_METRICS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "attnlab/status.h"

namespace attnlab {

class ThreadPool;
namespace dist {
class Comm;
}

// A read-only [rows, cols] row-major float matrix; row t starts at data + t * stride.
//   one sequence of a residual stream [N, C]:   {res + b*Tm*C, Tm, C, C}
//   head h of attention outputs [N, H, hd]:      {att + b*Tm*C + h*hd, Tm, hd, C}
//   head h's queries in qkv [N, Q]:               {qkv + b*Tm*Q + h*hd, Tm, hd, Q}
//   kv head g's keys in LayerTensors::k_all:      {k_all.at(b, g, 0), len_k, hd, k_all.stride_token}
struct TokenMatrix {
  const float* data = nullptr;
  int64_t rows = 0;    // T tokens
  int64_t cols = 0;    // C channels
  int64_t stride = 0;  // elements from one row to the next, >= cols
  const float* row(int64_t t) const { return data + t * stride; }
};
// stride < 0 means contiguous (stride = cols).
TokenMatrix MakeTokenMatrix(const float* data, int64_t rows, int64_t cols, int64_t stride = -1);

// OK iff data != nullptr, rows >= 1, cols >= 1, stride >= cols and every element is finite.
Status ValidateTokenMatrix(const TokenMatrix& x, const char* name = "X");

// ---- Rank collapse: relative residual (Dong, Cordonnier & Loukas 2021) -------------------------
// ref: https://arxiv.org/abs/2103.03404 (section 2)
//   res(X) = X - 1 xbar^T with xbar the COLUMN MEAN (the paper takes argmin_x of the norm; the
//            mean is one candidate, so this is an upper bound of the paper's value, equal to it
//            when the rows are identical: both 0)
//   ||M||_{1,inf} = sqrt(||M||_1 ||M||_inf), ||M||_1 = max column abs sum, ||M||_inf = max row
//            abs sum
//   relative = ||res(X)||_{1,inf} / ||X||_{1,inf}; 0 = rank-1 "token uniformity"; X = 0 gives 0.
struct RankCollapseResidual {
  double relative = 0;       // ||res(X)||_{1,inf} / ||X||_{1,inf}
  double residual_norm = 0;  // ||res(X)||_{1,inf}
  double norm = 0;           // ||X||_{1,inf}
};
Result<RankCollapseResidual> ComputeRankCollapseResidual(const TokenMatrix& x);

// ---- Token similarity: mean pairwise cosine and MAD (Chen et al. 2020) -------------------------
// ref: https://arxiv.org/abs/1909.03211 (MAD, with an all-pairs mask)
// Over the K non-zero rows u_i = x_i / |x_i| and their mean ubar, with V = sum_i |u_i - ubar|^2:
//   mean_cosine = 1/(K(K-1)) sum_{i != j} cos(x_i, x_j) = 1 - V / (K - 1)   (no cancellation)
//   mad         = 1/(K(K-1)) sum_{i != j} (1 - cos(x_i, x_j)) = V / (K - 1)
// K < 2 (T = 1, or at most one non-zero row): mean_cosine = 1, mad = 0 (no pair differs).
struct PairwiseCosine {
  double mean_cosine = 1;  // in [-1/(K-1), 1]; 1 = all rows point the same way
  double mad = 0;          // mean average (cosine) distance, in [0, 1 + 1/(K-1)]
  int64_t nonzero_rows = 0;  // K
};
Result<PairwiseCosine> ComputePairwiseCosine(const TokenMatrix& x);

// ---- Dirichlet energy on the complete token graph ----------------------------------------------
// ref: Cai & Wang 2020, https://arxiv.org/abs/2006.13318 (graph Dirichlet energy), here on the
// complete graph with unit weights and no degree normalisation:
//   energy   = 1/(2 T^2) sum_{i,j} |x_i - x_j|^2 = 1/T sum_i |x_i - xbar|^2
//   relative = energy / (1/T sum_i |x_i|^2) = 1 - |xbar|^2 / mean_i |x_i|^2, in [0, 1]
// 0 = all rows equal; X = 0 gives 0 for both.
struct DirichletEnergy {
  double energy = 0;        // mean squared distance to the centroid
  double relative = 0;      // scale-free: energy / mean squared norm
  double mean_sq_norm = 0;  // 1/T sum_i |x_i|^2
};
Result<DirichletEnergy> ComputeDirichletEnergy(const TokenMatrix& x);

// ---- Effective rank (Roy & Vetterli 2007) -------------------------------------------------------
// ref: O. Roy, M. Vetterli, "The effective rank: a measure of effective dimensionality", EUSIPCO
// 2007. erank = exp(H(p)), p_k = sigma_k / sum sigma, H = -sum p_k log p_k, in [1, min(T, C)].
// sigma from the eigenvalues of the smaller Gram matrix (X^T X, C x C, or X X^T, T x T),
// accumulated in double; eigenvalues <= (T + C) eps lambda_max are rounding noise and count as 0.
// centred: X - 1 xbar^T (the spread of the tokens around their mean; rank <= T - 1); uncentred: X
// itself (a large common direction, e.g. a massive-activation channel, counts). X = 0 gives 0.
struct EffectiveRank {
  double erank = 0;           // exp(entropy)
  double entropy = 0;         // H(p), nats
  double top_share = 0;       // p_1 = sigma_1 / sum sigma: 1 = rank one
  int64_t numerical_rank = 0; // singular values above the noise floor
};
// pool: optional; the Gram accumulation is split over at most 8 row (or column) chunks summed in
// a fixed order, so the result is reproducible for a fixed thread count.
Result<EffectiveRank> ComputeEffectiveRank(const TokenMatrix& x, bool centred,
                                           ThreadPool* pool = nullptr);

// ---- Massive activations (Sun et al. 2024) ------------------------------------------------------
// ref: https://arxiv.org/abs/2402.17762 ("activations with magnitudes larger than 100 and about
// 1,000 times larger than the median magnitude")
//   ratio = max_{t,c} |x_tc| / median_{t,c} |x_tc| over all T C entries (median of an even count:
//   mean of the two middle values; exact, by radix selection on the float bits, O(1) memory).
struct Activation {
  int64_t token = 0, channel = 0;
  float value = 0;  // signed
};
struct MassiveActivations {
  double max_abs = 0, median_abs = 0;
  double ratio = 0;            // max_abs / median_abs (0/0 = 0, x/0 = +infinity)
  Activation max;              // the (first, in row-major order) entry with |x| = max_abs
  std::vector<Activation> top; // the top_k entries by |x|, descending (ties: row-major order)
  int64_t massive_count = 0;   // entries with |x| > abs_threshold and |x| > ratio_threshold * median
};
struct MassiveActivationOptions {
  int64_t top_k = 5;
  double abs_threshold = 100;    // Sun et al.'s "larger than 100"
  double ratio_threshold = 1000; // Sun et al.'s "about 1,000 times the median"
};
Result<MassiveActivations> ComputeMassiveActivations(const TokenMatrix& x,
                                                     const MassiveActivationOptions& opt = {});

// ---- Linear CKA (Kornblith et al. 2019) ---------------------------------------------------------
// ref: https://arxiv.org/abs/1905.00414 (section 3, linear kernel)
//   CKA(X, Y) = |Yc^T Xc|_F^2 / (|Xc^T Xc|_F |Yc^T Yc|_F), Xc, Yc column-centred; X [T, d1],
//   Y [T, d2], same T. In [0, 1]; 1 = same representation up to rotation and isotropic scale.
//   A constant (column-centred zero) X or Y, and T = 1, give 0. Cost O(T (d1 + d2)^2).
Result<double> ComputeLinearCka(const TokenMatrix& x, const TokenMatrix& y,
                                ThreadPool* pool = nullptr);
// All pairs of heads of one layer: heads = [T, H * hd] (head h = columns h*hd .. h*hd + hd - 1,
// e.g. one sequence of LayerTensors::attn_out). Returns the symmetric H x H matrix row-major,
// diagonal 1 (0 for a constant head). One C x C Gram: O(T C^2), C = H hd.
Result<std::vector<double>> ComputeHeadCkaMatrix(const TokenMatrix& heads, int64_t num_heads,
                                                 ThreadPool* pool = nullptr);
// The same, fed the rows chunk by chunk, for windows too long to keep [T, H hd] (analyze's 32k
// windows): a [C, C] Gram of the rows around a fixed shift (the first chunk's column mean) and
// the column sums, re-centred at the end, G_c = G_s - T (mu - s)(mu - s)^T. Equals
// ComputeHeadCkaMatrix on all the rows to rounding. Memory O(C^2), not O(T C).
class HeadCkaAccumulator {
 public:
  // InvalidArgument unless num_heads >= 1 divides cols >= 1.
  static Result<HeadCkaAccumulator> Create(int64_t num_heads, int64_t cols);
  // The next rows [n, cols] of the sequence.
  Status Add(const TokenMatrix& rows, ThreadPool* pool = nullptr);
  int64_t rows() const { return rows_; }
  // The H x H matrix of every row added (as ComputeHeadCkaMatrix; no row: InvalidArgument).
  Result<std::vector<double>> Finish() const;
  // Merges the rows every rank of `comm` added (any split of one sequence's rows: the CKA does
  // not depend on their order): each rank's Gram is re-centred on the global column mean and
  // the Grams are summed, so every rank then holds what one accumulator fed every row would
  // (sums in another order). Every rank calls it once, after its last Add; a rank may have no
  // rows. Different column or head counts on the ranks are an error on every rank.
  Status AllReduce(dist::Comm& comm, const std::string& what);

 private:
  int64_t heads_ = 0, cols_ = 0, rows_ = 0;
  std::vector<double> shift_, sum_;  // [cols]
  std::vector<double> gram_;   // [cols, ld] (ld: cols padded to 16), lower triangle valid:
                               // sum (x - s)(x - s)^T
  std::vector<double> block_;  // the Gram kernel's packing scratch, kept between chunks
};

// ---- Key/query geometry of the first token (sinks) ---------------------------------------------
// One head's queries q [Tq, hd] and keys k [Tk, hd] (after RoPE), 1 <= Tq <= Tk. Causal,
// bottom-right aligned: query t sits at key position p(t) = t + Tk - Tq and sees keys 0..p(t).
// cos(a, b) is 0 when a or b is zero (its score is 0 for every partner).
//   key_norm_ratio = |k_0| / (1/(Tk-1) sum_{j>=1} |k_j|)          (Tk = 1: 1)
//   cos_key0       = 1/Tq sum_t cos(q_t, k_0)
//   cos_key_mean   = 1/Tq sum_t cos(q_t, kbar), kbar = 1/Tk sum_j k_j   (contrast)
//   cos_key_other  = mean over queries with p(t) >= 1 of 1/p(t) sum_{j=1}^{p(t)} cos(q_t, k_j)
//                    (contrast, the keys the query can actually see; no such query: 0)
// A sink head shows cos_key0 well above cos_key_other with key_norm_ratio near or below 1 (Gu et
// al. 2024 find |k_0| often smaller than other keys): q_t . k_0 stands out by direction, not norm.
struct SinkKeyGeometry {
  double key0_norm = 0;
  double mean_other_key_norm = 0;
  double key_norm_ratio = 1;
  double cos_key0 = 0;
  double cos_key_mean = 0;
  double cos_key_other = 0;
};
Result<SinkKeyGeometry> ComputeSinkKeyGeometry(const TokenMatrix& q, const TokenMatrix& k);
// The same, fed the queries chunk by chunk (ComputeSinkKeyGeometry is one Add and Finish): per
// query only sums of hd values are kept, so a long window needs no [T, hd] query stream.
class SinkKeyGeometryAccumulator {
 public:
  explicit SinkKeyGeometryAccumulator(int64_t head_dim) : hd_(head_dim) {}
  // q [n, hd]: the next queries, query i at key position first_pos + i step (positions
  // increase from one Add to the next; step > 1: the striped rows of a sequence-parallel rank);
  // k [>= last position + 1, hd]: the keys so far. InvalidArgument on inconsistent sizes or
  // positions.
  Status Add(const TokenMatrix& q, const TokenMatrix& k, int64_t first_pos, int64_t step = 1);
  int64_t queries() const { return queries_; }
  // Merges the queries every rank of `comm` added (e.g. its striped rows of one sequence): the
  // per-query sums add up, so every rank then holds what one accumulator fed every query
  // would (sums in another order). Every rank calls it once, after its last Add (further Adds
  // are refused); a rank may have none. A different head_dim on a rank is an error everywhere.
  Status AllReduce(dist::Comm& comm, const std::string& what);
  // k: every key of the sequence (for the norms and kbar). InvalidArgument without a query.
  Result<SinkKeyGeometry> Finish(const TokenMatrix& k) const;

 private:
  int64_t hd_ = 0, queries_ = 0, next_pos_ = 0;
  std::vector<double> seen_;      // sum of the unit keys 1..seen_upto_
  int64_t seen_upto_ = 0;
  std::vector<double> unit_q_;    // sum of the unit queries (cos_key_mean at the end)
  double sum_k0_ = 0, sum_other_ = 0;
  int64_t n_other_ = 0;
  bool merged_ = false;  // AllReduce ran: seen_ is this rank's, not the merged sequence's
};

// ---- Everything cheap for one representation, for `attnlab analyze` ----------------------------
struct RepresentationMetricsOptions {
  bool effective_rank = true;  // the only O(T C min(T, C)) part
  MassiveActivationOptions massive;
};
struct RepresentationMetrics {
  RankCollapseResidual residual;
  PairwiseCosine cosine;
  DirichletEnergy dirichlet;
  EffectiveRank erank, erank_centred;  // zero when options.effective_rank is false
  MassiveActivations massive;
};
Result<RepresentationMetrics> ComputeRepresentationMetrics(
    const TokenMatrix& x, const RepresentationMetricsOptions& opt = {}, ThreadPool* pool = nullptr);

// The same metrics of a matrix of T rows striped over the P ranks of `comm` (the sequence-
// parallel layout, dist/ring_attention.h): rank r holds rows r, r + P, ... in `local` (local.rows
// may be 0 when T <= r; data may then be null), the other ranks the rest. Every rank
// calls it with the same options and gets the whole matrix's metrics: each sum and maximum is
// completed over the ranks (sums added in rank order, so the values are one process's up to the
// order of the additions; the median, the maximum, the top entries and every count exactly; token
// numbers in `massive` are global). The effective rank adds the ranks' [C, C] Grams (T >= C) or,
// with fewer tokens than channels, gathers the T C values to every rank. A bad part on any rank,
// parts of different widths or row counts that are not the striped layout's are an error on
// every rank.
Result<RepresentationMetrics> ComputeRepresentationMetricsAcrossRanks(
    const TokenMatrix& local, dist::Comm& comm, const RepresentationMetricsOptions& opt = {},
    ThreadPool* pool = nullptr);

}  // namespace attnlab

#endif  // ATTNLAB_DIAGNOSTICS_REPRESENTATION_METRICS_H_
