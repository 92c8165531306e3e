// What `attnlab analyze` computes (analysis.h runs it; analysis_merge.h merges it over the ranks
// of a distributed run; docs/METRICS.md defines every number): per layer, the streamed attention
// statistics, the residual-stream metrics averaged over windows, head geometry, extreme tokens,
// the output gate's statistics; over the model, the sink verdict and where each head's sink sits.
#ifndef ATTNLAB_DIAGNOSTICS_ANALYSIS_RESULT_H_
#define ATTNLAB_DIAGNOSTICS_ANALYSIS_RESULT_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "attnlab/model_config.h"
#include "diagnostics/attention_stats.h"
#include "diagnostics/extreme_tokens.h"
#include "diagnostics/gate_stats.h"
#include "diagnostics/representation_metrics.h"
#include "diagnostics/token_class_attention.h"

namespace attnlab {

// Averages over windows of the representation metrics of one residual stream.
struct StreamMetrics {
  double relative_residual = 0, mean_cosine = 0, mad = 0, dirichlet = 0, dirichlet_relative = 0;
  double erank = 0, erank_centred = 0;
  MassiveActivations massive;  // the window with the largest ratio
  int64_t massive_window = 0;
};

struct HeadGeometry {  // averaged over windows
  double key_norm_ratio = 0, cos_key0 = 0, cos_key_other = 0;
};

// Extreme-token phenomena (extreme_tokens.h; Guo et al. 2024), over the windows of >= 2 tokens.
struct HeadActivityStats {
  double dormant_share = 0;      // share of windows on which the head is dormant
  double output_norm_ratio = 0;  // mean over windows of HeadActivity::output_norm_ratio
  // Output gate only (NaN without one): mean over rows of g_{i,h} P[i, 0], the first-token mass
  // that survives the gate (Qiu et al. 2025), g_{i,h} the head's gate on row i (element-wise:
  // the mean over its channels); compare with alpha_1.
  double gated_first_mass = 0;
};
struct ExtremeTokens {
  int64_t windows = 0;                    // windows of >= 2 tokens (the means' denominator)
  TokenZeroNorm residual_peak;            // the layer's output stream: means of each field
  std::vector<double> value_drain;        // [Hkv] mean |v_0| / mean |v_t|, t >= 1
  std::vector<HeadActivityStats> heads;   // [H]
};

struct LayerAnalysis {
  AttentionLayerStats attention;     // streamed over every query row
  AttentionLayerStats patterns;      // on the repeated random sequences (diagonal scores)
  StreamMetrics output;              // the layer's output residual stream
  std::vector<double> head_cka;      // [H * H] linear CKA between head outputs (window mean)
  std::vector<HeadGeometry> geometry;  // [H]
  std::vector<GateHeadStats> gate;     // [H] the output gate's values; empty without a gate
  ExtremeTokens extreme;
  TokenClassStats token_classes;       // attention by token class (empty mass: not computed)
};

struct AttentionMap {
  int64_t layer = 0, head = 0, len = 0;
  int64_t keys = 0;          // len, or len + 1 with a dedicated sink token (key 0)
  std::vector<float> probs;  // [len, keys]
};

struct AnalysisResult {
  ModelConfig config;
  int64_t text_tokens = 0, windows = 0, window = 0;
  int64_t passes = 1;  // forward passes per window (AnalysisOptions::stream_budget_bytes)
  int64_t ranks = 1;   // processes that shared the windows (AnalysisOptions::comm)
  int32_t bos = -1;
  StreamMetrics embedding;            // the residual stream entering layer 0
  std::vector<LayerAnalysis> layers;  // [n_layer]
  std::vector<AttentionMap> maps;
  int64_t pattern_len = 0;
  // Sink verdict. alpha_1 alone depends on the length: uniform causal attention over T tokens
  // gives alpha_1 = H_T / T (0.26 at T = 12), so a short text makes every head look like a sink
  // under Gu et al.'s alpha_1 > eps. A head is called a sink when its excess over the uniform
  // baseline of the same rows, (alpha_1 - u) / (1 - u) with u = alpha_1_uniform, exceeds eps:
  // 0 for uniform attention at any length, alpha_1 itself when u -> 0 (long windows, where it is
  // Gu et al.'s rule). When u > kMaxUniformForVerdict (causal windows of 4 tokens or fewer)
  // nothing is called: sink_verdict is false and sink_heads empty.
  double sink_rate_1 = 0;             // Gu et al.'s Sink_1^eps: share of heads with alpha_1 > eps
  double alpha_1_uniform = 0;         // u: the largest over heads (they share the mask)
  bool sink_verdict = false;          // false: too short to call sinks
  double sink_rate_excess = 0;        // share of heads called sinks by the excess rule
  std::vector<std::pair<int64_t, int64_t>> sink_heads;  // (layer, head) with excess > eps
  // Where each head's sink sits (trained LMs also sink onto the first newline or period, not
  // only token 0): the key j < sink_search with the largest excess over uniform attention of
  // the same rows, e_j = (alpha_{j+1} - u_{j+1}) / (1 - u_{j+1}) (SinkExcess at key j), and e_j.
  std::vector<std::vector<int64_t>> sink_key;    // [L][H]; -1 where undefined
  std::vector<std::vector<double>> sink_key_excess;  // [L][H]
  std::vector<int32_t> first_window;  // the ids of window 0 (BOS first if any): key j's token
  // Attention by token class: computed (the model's softmax is one it can average), or why not.
  bool token_classes = false;
  std::string token_classes_note;
  double seconds = 0;
  int64_t peak_rss_bytes = 0;
  // Where the seconds went (report.json run.phases): the attention kernel, the attention
  // statistics the forward feeds (attention_stats.h), the rest of the forward (weight products,
  // norms, RoPE, cache), and the representation / head / extreme-token metrics after each pass.
  struct Phases {
    double attention = 0, attention_statistics = 0, weights_and_rest = 0, layer_metrics = 0;
  } phases;
};

inline constexpr double kMaxUniformForVerdict = 0.5;

}  // namespace attnlab

#endif  // ATTNLAB_DIAGNOSTICS_ANALYSIS_RESULT_H_
