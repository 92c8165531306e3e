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

#include "diagnostics/analysis_options.h"
#include "diagnostics/analysis_result.h"
#include "diagnostics/attention_stats.h"
#include "diagnostics/extreme_tokens.h"
#include "diagnostics/gate_stats.h"
#include "diagnostics/representation_metrics.h"
#include "diagnostics/token_class_attention.h"
#include "dist/comm.h"
#include "model/gpt.h"

namespace attnlab {



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
