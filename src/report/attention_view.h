// An interactive, self-contained HTML view of one sequence's attention (docs/PYTHON.md, "Attention
// views"; docs/ANALYZE.md): pick a layer and a head, hover a token to see what it attends to (its
// strongest keys, shaded by weight) and what attends to it (the queries whose strongest keys
// include it, outlined by weight); the first-token column P[i, 0] of the chosen head is drawn
// under the tokens, and a block overview shows the whole map at any length.
//
// One template (src/report/attention_view.html, compiled in) and one builder serve both
// `attnlab analyze` (DIR/attention.html, linked from report.html) and Python's
// attnlab.show_attention (through the extension module).
//
// No N x N table ever goes into the page: per head it carries, for every query, its top_k
// strongest keys (ids uint16, or uint32 past 65536 tokens; weights rounded to uint8 / 255;
// ties: the lower key first), the first-token column rounded to 4 decimals, and the map averaged
// over blocks of b = ceil(N / 64) tokens square (at most 64 x 64; the padding past N counts as
// zeros in a block's mean), scaled by the largest block and rounded to uint8; all base64. Per head
// that is N * top_k * 3 bytes + N numbers + 4 KiB.
//
// Opened with the fragment #selftest the page hovers a token itself, checks that the highlight
// changed, and writes the outcome (and any error the page raised or logged) into
// <body data-selftest=...>: what the headless-Chromium tests read.
#ifndef ATTNLAB_REPORT_ATTENTION_VIEW_H_
#define ATTNLAB_REPORT_ATTENTION_VIEW_H_

#include <cstdint>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "attnlab/status.h"

namespace attnlab::report {

inline constexpr int64_t kAttentionViewMaxBlocks = 64;

class AttentionViewBuilder {
 public:
  // tokens: the N texts of the sequence's positions (any bytes: shown as valid UTF-8, ill-formed
  // sequences as U+FFFD); heads: heads per layer; top_k: strongest keys kept per query (clamped
  // to [1, N]). InvalidArgument when N == 0 or heads < 1.
  static Result<AttentionViewBuilder> Create(std::vector<std::string> tokens, int64_t heads,
                                             int64_t top_k);

  // One layer's patterns, [heads, N, N] row-major (query rows, key columns): every value finite.
  // Layers may come in any order (the page lists them sorted); a layer given twice, a wrong size
  // or a non-finite value is InvalidArgument and adds nothing.
  Status AddLayer(int64_t layer, std::span<const float> patterns);

  int64_t tokens() const { return static_cast<int64_t>(tokens_.size()); }
  int64_t layers() const { return static_cast<int64_t>(maps_.size()); }

  // The page's data: n, heads_per_layer, layers, top_k, key_bytes, block, nblocks, tokens, maps
  // (one per layer and head, layers ascending: layer, head, keys, w, first, blocks).
  nlohmann::json Data() const;

  // The page: `page` tokens shown at a time (>= 16), `title` as text. InvalidArgument with no
  // layer added or page < 16.
  Result<std::string> Render(const std::string& title, int64_t page) const;

 private:
  AttentionViewBuilder() = default;
  std::vector<std::string> tokens_;
  int64_t heads_ = 0, top_k_ = 0, block_ = 0, nblocks_ = 0;
  std::vector<std::pair<int64_t, std::vector<nlohmann::json>>> maps_;  // layer, its heads' maps
};

// The template filled with a title (plain text, escaped) and data (AttentionViewBuilder::Data()
// plus "page"): what Render returns.
std::string RenderAttentionViewPage(const std::string& title, const nlohmann::json& data);

}  // namespace attnlab::report

#endif  // ATTNLAB_REPORT_ATTENTION_VIEW_H_
