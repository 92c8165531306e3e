// `attnlab analyze`'s computation: runs a model over a text through a KV cache in chunks, and
// turns what each layer exposes (ForwardObserver) into the sink, collapse and head metrics of
// docs/METRICS.md. No len x len map is ever held: attention statistics stream over query rows
// (attention_stats.h), representation metrics need one window's residual stream per layer
// (O(window * d_model)), and full maps are materialised only for the heads asked for, up to
// plot_max tokens.
//
// Windows. The text is cut into consecutive windows of `window` tokens (default: the model's
// context), each run as its own sequence (with the BOS token first when the model was trained with
// one), as the model was trained. Attention statistics accumulate over every query row of every
// window; representation metrics are computed per window and averaged (massive activations: the
// largest over windows).
#ifndef ATTNLAB_DIAGNOSTICS_ANALYSIS_H_
#define ATTNLAB_DIAGNOSTICS_ANALYSIS_H_

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "diagnostics/attention_stats.h"
#include "diagnostics/extreme_tokens.h"
#include "diagnostics/gate_stats.h"
#include "diagnostics/representation_metrics.h"
#include "model/gpt.h"

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
  std::function<Status(int64_t layer, std::span<const int32_t> ids, std::span<const float> probs)>
      view_layer;
};

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

// (alpha_1 - u) / (1 - u) for one head (NaN when undefined): see AnalysisResult. With key j:
// the same for alpha_{j+1} (NaN when j is past the head's alpha vector).
double SinkExcess(const AttentionHeadStats& s, int64_t key = 0);

// The head with the largest alpha_1 (null if none); its layer and head go to the non-null outputs.
const AttentionHeadStats* StrongestHead(const AnalysisResult& r, int64_t* layer, int64_t* head);
// Means over every head of last_key0 and of the uniform share 1/last_visible.
double MeanLastKey0(const AnalysisResult& r);
double MeanLastUniform(const AnalysisResult& r);
// The sink verdict as one paragraph, computed from r (the report's headline).
std::string SinkVerdictText(const AnalysisResult& r, double eps);

// Runs the analysis. tokens: the text's ids (without BOS). Progress lines go to stderr when
// `progress` is set.
Result<AnalysisResult> AnalyzeModel(Gpt& model, const std::vector<int32_t>& tokens,
                                    const AnalysisOptions& options, bool progress = false);

// The report.json document (schema: docs/ANALYZE.md).
nlohmann::json AnalysisToJson(const AnalysisResult& r, const AnalysisOptions& options);

}  // namespace attnlab

#endif  // ATTNLAB_DIAGNOSTICS_ANALYSIS_H_
