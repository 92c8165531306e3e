// Who draws attention, by token class (issue 41; docs/METRICS.md "Attention by token class"):
// the mission's over-attention claim, that delimiters and punctuation, frequent tokens and the
// first and last positions draw more attention than their content warrants (Clark et al. 2019,
// "What Does BERT Look At?", arXiv:1906.04341: [SEP] and punctuation; Xiao et al. 2024,
// arXiv:2309.17453: the first token; Kobayashi et al. 2020, arXiv:2004.10102: frequent tokens).
//
// For head h and class c, over the sampled query rows i:
//   mass    = mean_i  sum_{j visible to i, j in c} P[i, j]            (what c receives)
//   uniform = mean_i  |{j visible to i : j in c}| / |{j visible to i}|  (what uniform attention
//             over the same visible keys would give it: the baseline, as alpha_1's is)
//   ratio   = mass / uniform  (1: as uniform; > 1: over-attended), reported, not stored.
// A key may be in several classes (a frequent comma is a delimiter and in decile 1).
//
// Classes. Positional: first (key position < first_k), recent (the `recent` positions up to and
// including the query's own: distance < recent). By token text (the caller decodes each id):
// delimiter (punctuation or symbols only, e.g. "," " ." ")\n"), whitespace (spaces, tabs,
// newlines only), special (BOS / the tokenizer's specials, a model's dedicated sink token). By
// frequency on the analysed text: the token ids sorted by their count (most frequent first, the
// lower id on ties); a token is in decile d when the occurrences of the tokens before it make up
// [d/10, (d+1)/10) of the text: decile 1 holds the few most frequent ids that cover the first
// 10% of the text, decile 10 the rare ones.
//
// Rows are sampled: every s-th query row of a window (row index % s == 0, s = ceil(rows /
// rows_per_window)), each computed exactly over all its keys (one fp32 score GEMM row per head,
// then the softmax with the kernels' exp2), never an N x N map; the sampled rows are spread over
// every position, so the means are unbiased for the window's rows. Softmax, softmax1 and sink
// logits (the extra term in the denominator; key_bias's per-row logit too); sigmoid and
// softpick weights are not a distribution: refused (Create's caller reports "not computed").
#ifndef ATTNLAB_DIAGNOSTICS_TOKEN_CLASS_ATTENTION_H_
#define ATTNLAB_DIAGNOSTICS_TOKEN_CLASS_ATTENTION_H_

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "attnlab/attention.h"
#include "attnlab/status.h"
#include "dist/comm.h"

namespace attnlab {

enum TokenClass : int {
  kClassFirst = 0,
  kClassRecent,
  kClassDelimiter,
  kClassWhitespace,
  kClassSpecial,
  kClassDecile1,  // .. kClassDecile1 + 9
  kNumTokenClasses = kClassDecile1 + 10,
};
// "first", "recent", "delimiter", "whitespace", "special", "freq_d1" .. "freq_d10".
std::string TokenClassName(int c);

// Bits of a token's text classes: 1 << kClassDelimiter and / or 1 << kClassWhitespace (none for
// empty text or text with a letter or digit). Only ASCII punctuation and symbols count as
// delimiters (a byte >= 0x80 is not one).
uint32_t TokenTextClasses(std::string_view text);

// Per token id in [0, vocab): its frequency decile class bit (1 << (kClassDecile1 + d)) from the
// counts over `tokens`, 0 for ids that do not occur. Ids outside [0, vocab) are ignored.
std::vector<uint32_t> FrequencyDecileClasses(std::span<const int32_t> tokens, int64_t vocab);

struct TokenClassOptions {
  int64_t first_k = 4;
  int64_t recent = 4;
  int64_t rows_per_window = 512;
};

struct TokenClassStats {
  int64_t rows = 0;  // sampled rows with at least one visible key (per head: the same count)
  // [heads_q][kNumTokenClasses] means over the sampled rows.
  std::vector<std::vector<double>> mass, uniform;
};

class TokenClassAccumulator {
 public:
  // REQUIRES (else an error): heads >= 1, heads_q % heads_kv == 0, head_dim >= 1, first_k,
  // recent >= 0, rows_per_window >= 1.
  static Result<TokenClassAccumulator> Create(const TokenClassOptions& options, int64_t heads_q,
                                              int64_t heads_kv, int64_t head_dim);
  // Whether the variant's weights are a distribution this can average (kStandard, kSoftmax1,
  // kSinkLogit).
  static bool Supports(const AttentionParams& params);

  // Starts a window of `keys` keys (the rows it will add are the keys' own rows): key j's
  // text / frequency / special class bits (positional classes are added here).
  Status BeginWindow(std::vector<uint32_t> key_classes);
  // The rows [len_k - len_q, len_k) of the current window, after the keys [0, len_k) (as
  // AttentionStatsAccumulator::AddRows: q's row t, head h at q + t * q_row_stride + h *
  // head_dim, after RoPE; k_all [1, heads_kv, >= len_k, head_dim]; row_extra_logits empty or
  // [heads_q, len_q] natural-log logits of one more zero-value entry). Causal masks of any kind,
  // or a non-causal mask without windows. REQUIRES Supports(params).
  Status AddRows(const AttentionParams& params, const float* q, int64_t q_row_stride,
                 int64_t len_q, const AttentionTensor& k_all, int64_t len_k,
                 std::span<const float> row_extra_logits = {});
  // The rows of the current window's sequence striped over `ranks` ranks (sequence parallel):
  // this rank's rows sit at positions rank, rank + ranks, ... < len_k (q's row i at rank + i
  // ranks; row_extra_logits [heads_q, its rows]); the sampled positions are one process's, so
  // the ranks' AllReduce gives one process's sums (up to the order of additions). A rank with
  // no row (len_k <= rank) adds nothing. As AddRows otherwise.
  Status AddStripedRows(const AttentionParams& params, const float* q, int64_t q_row_stride,
                        int64_t rank, int64_t ranks, const AttentionTensor& k_all, int64_t len_k,
                        std::span<const float> row_extra_logits = {});
  // Folds the current window's key masses into the class sums (AddRows' keys are summed per key
  // first). Called by Finish and BeginWindow; idempotent.
  void EndWindow();
  TokenClassStats Finish();
  // Sums over the ranks (every rank calls; every rank then holds the merged sums).
  Status AllReduce(dist::Comm& comm, const std::string& what);

 private:
  TokenClassAccumulator(const TokenClassOptions& o, int64_t hq, int64_t hkv, int64_t hd)
      : o_(o), heads_q_(hq), heads_kv_(hkv), head_dim_(hd) {}
  // AddRows' body: q's row i at key position first + i step.
  Status AddRowsAt(const AttentionParams& params, const float* q, int64_t q_row_stride,
                   int64_t len_q, int64_t first, int64_t step, const AttentionTensor& k_all,
                   int64_t len_k, std::span<const float> row_extra_logits);
  static constexpr size_t kSampleBlock = 64;  // sampled rows scored at once, at most
  static constexpr int64_t kScoreFloats = int64_t{1} << 22;  // and their scores' floats (16 MB)
  Status AddSampledRows(const AttentionParams& params, const float* q, int64_t q_row_stride,
                        int64_t len_q, int64_t first, int64_t step, const AttentionTensor& k_all,
                        int64_t len_k, std::span<const float> row_extra_logits,
                        const std::vector<int64_t>& rows);
  TokenClassOptions o_;
  int64_t heads_q_, heads_kv_, head_dim_;
  std::vector<uint32_t> labels_;  // the current window's key classes
  std::vector<int32_t> prefix_;   // [classes][keys + 1] counts of keys < j in each class
  int64_t stride_ = 1;
  std::vector<float> key_mass_;   // [heads_q][keys] summed over the window's sampled rows
  std::vector<double> mass_, uniform_;  // [heads_q][classes] sums over rows
  int64_t rows_ = 0;
};

}  // namespace attnlab

#endif  // ATTNLAB_DIAGNOSTICS_TOKEN_CLASS_ATTENTION_H_
