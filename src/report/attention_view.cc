#include "report/attention_view.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string_view>
#include <utility>

#include "attention_view_html.h"  // generated: the template (CMakeLists.txt)
#include "report/escape.h"
#include "report/png_encode.h"

namespace attnlab::report {
namespace {

void ReplaceAll(std::string& s, std::string_view from, std::string_view to) {
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size())) {
    s.replace(at, from.size(), to);
  }
}

uint8_t Byte255(double x) {  // round half to even, as NumPy's rint
  return static_cast<uint8_t>(std::clamp(std::nearbyint(x * 255.0), 0.0, 255.0));
}

}  // namespace

Result<AttentionViewBuilder> AttentionViewBuilder::Create(std::vector<std::string> tokens,
                                                          int64_t heads, int64_t top_k) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  if (n == 0) return Status::InvalidArgument("attention view: no tokens");
  if (heads < 1) {
    return Status::InvalidArgument("attention view: heads per layer must be >= 1, got " +
                                   std::to_string(heads));
  }
  AttentionViewBuilder b;
  for (std::string& t : tokens) t = SanitizeUtf8(t);
  b.tokens_ = std::move(tokens);
  b.heads_ = heads;
  b.top_k_ = std::clamp<int64_t>(top_k, 1, n);
  b.block_ = (n + kAttentionViewMaxBlocks - 1) / kAttentionViewMaxBlocks;
  b.nblocks_ = (n + b.block_ - 1) / b.block_;
  return b;
}

Status AttentionViewBuilder::AddLayer(int64_t layer, std::span<const float> p) {
  const int64_t N = tokens(), H = heads_, k = top_k_, b = block_, nb = nblocks_;
  if (static_cast<int64_t>(p.size()) != H * N * N) {
    return Status::InvalidArgument("attention view: layer " + std::to_string(layer) + " has " +
                                   std::to_string(p.size()) + " values, want heads x N x N = " +
                                   std::to_string(H) + " x " + std::to_string(N) + " x " +
                                   std::to_string(N));
  }
  for (const auto& m : maps_) {
    if (m.first == layer) {
      return Status::InvalidArgument("attention view: layer " + std::to_string(layer) +
                                     " given twice");
    }
  }
  for (float x : p) {
    if (!std::isfinite(x)) {
      return Status::InvalidArgument("attention view: layer " + std::to_string(layer) +
                                     "'s pattern is not finite");
    }
  }
  const int key_bytes = N <= 65536 ? 2 : 4;
  std::vector<nlohmann::json> heads;
  std::vector<int64_t> idx(N);
  for (int64_t h = 0; h < H; ++h) {
    const float* ph = p.data() + h * N * N;
    std::string keys(N * k * key_bytes, '\0'), w(N * k, '\0');
    std::vector<double> first(N);
    std::vector<double> sums(nb * nb, 0.0);
    for (int64_t i = 0; i < N; ++i) {
      const float* row = ph + i * N;
      std::iota(idx.begin(), idx.end(), int64_t{0});
      std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [row](int64_t a, int64_t c) {
        return row[a] > row[c] || (row[a] == row[c] && a < c);
      });
      for (int64_t r = 0; r < k; ++r) {
        const uint64_t j = static_cast<uint64_t>(idx[r]);
        for (int byte = 0; byte < key_bytes; ++byte) {  // little-endian
          keys[(i * k + r) * key_bytes + byte] = static_cast<char>((j >> (8 * byte)) & 0xff);
        }
        w[i * k + r] = static_cast<char>(Byte255(static_cast<float>(row[idx[r]])));
      }
      first[i] = std::round(static_cast<double>(row[0]) * 1e4) / 1e4;
      for (int64_t j = 0; j < N; ++j) sums[(i / b) * nb + j / b] += row[j];
    }
    double top = 0;
    for (double& s : sums) top = std::max(top, s /= static_cast<double>(b * b));
    std::string blocks(nb * nb, '\0');
    for (int64_t i = 0; i < nb * nb; ++i) {
      blocks[i] = static_cast<char>(Byte255(sums[i] / std::max(top, 1e-12)));
    }
    heads.push_back({{"layer", layer}, {"head", h}, {"keys", Base64Encode(keys)},
                     {"w", Base64Encode(w)}, {"first", first}, {"blocks", Base64Encode(blocks)}});
  }
  maps_.emplace_back(layer, std::move(heads));
  return Status::Ok();
}

nlohmann::json AttentionViewBuilder::Data() const {
  std::vector<const std::pair<int64_t, std::vector<nlohmann::json>>*> order;
  for (const auto& m : maps_) order.push_back(&m);
  std::sort(order.begin(), order.end(), [](auto* a, auto* c) { return a->first < c->first; });
  nlohmann::json layers = nlohmann::json::array(), maps = nlohmann::json::array();
  for (auto* m : order) {
    layers.push_back(m->first);
    for (const nlohmann::json& h : m->second) maps.push_back(h);
  }
  return {{"n", tokens()}, {"heads_per_layer", heads_}, {"layers", layers}, {"top_k", top_k_},
          {"key_bytes", tokens() <= 65536 ? 2 : 4}, {"block", block_}, {"nblocks", nblocks_},
          {"tokens", tokens_}, {"maps", maps}};
}

Result<std::string> AttentionViewBuilder::Render(const std::string& title, int64_t page) const {
  if (maps_.empty()) return Status::InvalidArgument("attention view: no layer added");
  if (page < 16) {
    return Status::InvalidArgument("attention view: page must be >= 16 tokens, got " +
                                   std::to_string(page));
  }
  nlohmann::json d = Data();
  d["page"] = page;
  return RenderAttentionViewPage(title, d);
}

std::string RenderAttentionViewPage(const std::string& title, const nlohmann::json& data) {
  // Nothing in the data can end the <script> early ("</script>", "<!--"): every '<' (only ever
  // inside a JSON string) is written as the escape \u003c.
  std::string json = data.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  ReplaceAll(json, "<", "\\u003c");
  const std::string safe_title = EscapeHtml(title);
  // Placeholders are looked for in the template only, never in what was put in.
  const std::string_view t = kAttentionViewTemplate;
  std::string page;
  page.reserve(t.size() + json.size() + 2 * safe_title.size());
  size_t from = 0;
  while (true) {
    const size_t a = t.find("__TITLE__", from), d = t.find("__DATA__", from);
    const size_t at = std::min(a, d);
    page.append(t.substr(from, at == std::string_view::npos ? std::string_view::npos : at - from));
    if (at == std::string_view::npos) break;
    page += at == a ? safe_title : json;
    from = at + (at == a ? 9 : 8);
  }
  return page;
}

}  // namespace attnlab::report
