// AnalyzeModel's options (analysis.h), in their own header so that the sequence-parallel
// window (analysis_striped.h) can read them without including analysis.h.
#ifndef ATTNLAB_DIAGNOSTICS_ANALYSIS_OPTIONS_H_
#define ATTNLAB_DIAGNOSTICS_ANALYSIS_OPTIONS_H_

#include <cstdint>
#include <functional>
#include <span>
#include <utility>
#include <vector>

#include "attnlab/status.h"
#include "dist/comm.h"

namespace attnlab {

struct AnalysisOptions {
  int64_t window = 0;      // tokens per window (0: the model's context)
  int64_t max_tokens = 0;  // analyse at most this many text tokens (0: all)
  int32_t bos = -1;        // >= 0: every window starts with this token
  int64_t chunk = 256;     // query rows per cached forward
  // Bytes the per-layer streams of one window (residual, attention output, queries: the
  // representation metrics' inputs) may take; more layers than fit are analysed in further
  // passes over the window, each keeping one group: pass g starts from the stream the previous
  // pass's last layer left (one [T, d_model] kept between passes) and runs only its layers, so
  // the passes together cost one forward. 0: one pass, every layer's streams.
  int64_t stream_budget_bytes = 0;
  int64_t first_k = 4;     // alpha_k, first-k mass for k = 1..first_k
  int64_t sink_search = 32;  // each head's sink is looked for among keys 0 .. sink_search - 1
  int64_t jsd_rows = 256;
  double sink_eps = 0.3;   // Gu et al.'s eps for Sink_k^eps and the list of sink heads
  bool effective_rank = true;
  // Head patterns (TransformerLens): `pattern_sequences` random sequences of pattern_len tokens
  // repeated twice (0 = min(64, (window - bos) / 2)).
  int64_t pattern_sequences = 4;
  int64_t pattern_len = 0;
  uint64_t seed = 1;
  // Full attention maps for these (layer, head) pairs, from the first window, if it has at most
  // plot_max tokens.
  std::vector<std::pair<int64_t, int64_t>> plot_heads;
  int64_t plot_max = 512;
  // The attention view (report/attention_view.h): every head's full map over the first n
  // positions of window 0, n = min(view_tokens, its length), [H, n, n] (query rows, key
  // columns), handed to `view_layer` with those positions' ids (BOS first if any) as each layer
  // is computed; nothing is kept. Exact because a causal query row never sees a later key; a
  // non-causal model, a dedicated sink token (an extra key) or an explicit mask gets a view
  // only when the whole window fits. 0 or no callback: none. An error it returns stops the
  // analysis.
  int64_t view_tokens = 0;
  // Distributed (docs/DISTRIBUTED.md): rank r of P runs the windows w with w % P == r, and the
  // ranks' sums are merged (analysis_merge.h) into the one-process result up to the order of
  // additions. Window 0's products (maps, first_window, the view) exist on rank 0 only. Null or
  // one rank: everything here.
  dist::Comm* comm = nullptr;
  // With comm: every window is split across the ranks instead (analysis_striped.h: token t on
  // rank t % P, ring attention, one lean forward per window, no passes), every rank runs every
  // window and the diagnostics are completed over the ranks layer by layer: the one-process
  // result up to the forward's and the sums' rounding. A window of fewer tokens than ranks runs
  // whole on every rank (rank 0's sums count). The model must be one the ring supports (no
  // dedicated sink token, key bias, windows or sparse attention).
  bool sequence_parallel = false;
  std::function<Status(int64_t layer, std::span<const int32_t> ids, std::span<const float> probs)>
      view_layer;
  // Attention by token class (token_class_attention.h): per token id, its text and special class
  // bits (TokenTextClasses, 1 << kClassSpecial for the tokenizer's specials; the caller decodes;
  // ids past the end have none); the BOS and a dedicated sink token are special, the frequency
  // deciles come from the analysed tokens. first_k above is the first-positions class.
  std::vector<uint32_t> token_classes;
  bool classes = true;             // false: not computed
  int64_t class_recent = 4;
  int64_t class_rows = 512;        // sampled query rows per window and layer
};

}  // namespace attnlab

#endif  // ATTNLAB_DIAGNOSTICS_ANALYSIS_OPTIONS_H_
