// AnalyzeModel's sequence-parallel window (issue 40; docs/DISTRIBUTED.md): one window's tokens
// striped over the ranks (token t on rank t % P), run once through the lean sequence-parallel
// forward (Gpt::set_sequence_parallel, set_partial_forward's skip_head: ring attention, one
// layer's activations at a time, no LM head), every layer's diagnostics computed in the observer
// from this rank's rows and completed over the ranks as the layer passes: no stream is kept, so
// no passes (--stream-budget) are needed. The attention statistics, token classes and gate
// statistics keep per-rank sums (AnalyzeModel all-reduces them at the end); everything else
// (representation metrics, head CKA, sink-key geometry, extreme tokens, window 0's maps and
// view) is the same on every rank after each layer. Also the pieces analysis.cc shares with it.
// Internal to the diagnostics.
#ifndef ATTNLAB_DIAGNOSTICS_ANALYSIS_STRIPED_H_
#define ATTNLAB_DIAGNOSTICS_ANALYSIS_STRIPED_H_

#include <cstdint>
#include <span>
#include <vector>

#include "attnlab/attention.h"
#include "diagnostics/analysis_options.h"
#include "diagnostics/analysis_result.h"
#include "diagnostics/attention_stats.h"
#include "diagnostics/extreme_tokens.h"
#include "diagnostics/gate_stats.h"
#include "diagnostics/representation_metrics.h"
#include "diagnostics/token_class_attention.h"
#include "model/gpt.h"

namespace attnlab::analysis_internal {

// Adds one window's metrics of a stream into acc (the means are divided at the end; the massive
// activations: the window with the largest ratio, the earlier on ties).
void AddStream(StreamMetrics& acc, const RepresentationMetrics& m, int64_t window);

// The extreme-token numbers of one window of T >= 2 tokens, added to acc (divided by
// acc->windows at the end), from: the residual peak, each kv head's value-drain ratio, and per
// head the sums over the rows of P[i, 0], of |o_{h,i}| and (gated_sum, empty without an output
// gate) of the gate's mean times P[i, 0].
Status AddExtremeSums(const ModelConfig& c, double eps, const TokenZeroNorm& peak,
                      std::span<const double> drain, std::span<const double> first_sum,
                      std::span<const double> norm_sum, std::span<const double> gated_sum,
                      int64_t T, ExtremeTokens* acc);
// Per head h: sum over the n rows of (the mean of head h's gate values) x key0[i * H + h];
// gate [n, gate_dim()], key0 [n, H].
std::vector<double> GatedFirstSums(const ModelConfig& c, const float* gate, const float* key0,
                                   int64_t n);

// Every head's attention map over query rows [0, n) and keys [0, keys), [H, n, keys]: q
// [n, H hd] the rows' queries (after RoPE), k_all the layer's keys; real_share [>= n, H] (key
// bias: the share the real keys keep) or empty.
Result<std::vector<float>> MapsFromRows(const ModelConfig& c, const AttentionParams& params,
                                        const float* q, const AttentionTensor& k_all, int64_t n,
                                        int64_t keys, std::span<const float> real_share);

// Window 0's query rows the maps read: all T for the plotted heads' full maps (when T fits
// plot_max), the first view_tokens for the per-layer views.
int64_t MapQueryRows(const AnalysisOptions& o, int64_t T);

// The accumulators one window adds to (AnalyzeModel's), null where not computed.
struct WindowSums {
  std::vector<AttentionStatsAccumulator>* stats = nullptr;
  std::vector<GateStatsAccumulator>* gates = nullptr;
  // Token classes: each layer's window opened (BeginWindow with key_classes), fed and closed
  // as the layer passes, so one layer's per-key buffers exist at a time (~100 bytes per key:
  // 79 MB at 32k keys for 24 layers at once).
  std::vector<TokenClassAccumulator>* classes = nullptr;
  const std::vector<uint32_t>* key_classes = nullptr;
  bool classes_unsupported = false;  // set when a layer's softmax has none
};

// Runs window w (seq: its tokens, BOS first if any; seq.size() >= ranks) striped over the ranks
// of o.comm and adds its diagnostics to *r and sums; every rank calls it for every window. A
// model the ring refuses (a dedicated sink token, a key bias, windows, ...) is an error on every
// rank.
// progress: rank 0 prints a line per layer on windows of >= 2048 tokens (what is done, and
// what is left of this window at that pace; n_windows for the window count).
Status RunStripedWindow(Gpt& model, const std::vector<int32_t>& seq, const AnalysisOptions& o,
                        int64_t w, WindowSums* sums, AnalysisResult* r, bool progress = false,
                        int64_t n_windows = 1);

}  // namespace attnlab::analysis_internal

#endif  // ATTNLAB_DIAGNOSTICS_ANALYSIS_STRIPED_H_
