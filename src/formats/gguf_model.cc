#include "formats/gguf_model.h"

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <map>
#include <numbers>
#include <string_view>
#include <vector>

#include "core/printable.h"

namespace attnlab {
namespace {

using nlohmann::json;

std::string Quote(std::string_view s) {
  std::string r = "'";
  r += PrintableExcerpt(s);
  r += '\'';
  return r;
}

enum class RowMap { kNone, kLlamaPermute, kNeoxQkv };

struct Entry {
  size_t index = 0;  // in GgufFile::tensors()
  SourceTensorInfo info;
  RowMap map = RowMap::kNone;
  int64_t heads = 0;     // kLlamaPermute: heads the rows split into; kNeoxQkv: n_head
  int64_t head_dim = 0;  // rows per head
};

class GgufTensorSource : public TensorSource {
 public:
  GgufTensorSource(GgufFile file, std::map<std::string, Entry> entries)
      : file_(std::move(file)), entries_(std::move(entries)) {}

  std::vector<std::string> Names() const override {
    std::vector<std::string> r;
    r.reserve(entries_.size());
    for (const auto& [name, e] : entries_) r.push_back(name);
    return r;
  }

  const SourceTensorInfo* Find(const std::string& name) const override {
    auto it = entries_.find(name);
    return it == entries_.end() ? nullptr : &it->second.info;
  }

  Status ReadFloat(const std::string& name, std::span<float> out) const override {
    auto it = entries_.find(name);
    if (it == entries_.end()) return Status::NotFound(file_.path() + ": no tensor " + Quote(name));
    const Entry& e = it->second;
    const GgufTensorInfo& t = file_.tensors()[e.index];
    if (static_cast<int64_t>(out.size()) != e.info.numel()) {
      return Status::InvalidArgument(file_.path() + ": tensor " + Quote(name) + " (GGUF " +
                                     Quote(t.name) + ") has " + std::to_string(e.info.numel()) +
                                     " elements, the destination holds " +
                                     std::to_string(out.size()));
    }
    if (e.map == RowMap::kNone) return file_.ReadFloat(t, out);
    const int64_t rows = e.info.shape[0];
    const int64_t row_len = rows == 0 ? 0 : e.info.numel() / rows;
    auto source_row = [&](int64_t r) { return SourceRow(e, r); };
    if (t.dims.size() >= 2) {
      // A weight: HF row r is ggml row source_row(r) (ggml rows are dims[0] long).
      for (int64_t r = 0; r < rows; ++r) {
        ATTNLAB_RETURN_IF_ERROR(file_.ReadRowsFloat(
            t, source_row(r), 1,
            out.subspan(static_cast<size_t>(r * row_len), static_cast<size_t>(row_len))));
      }
      return Status::Ok();
    }
    // A bias: one element per row.
    std::vector<float> tmp(out.size());
    ATTNLAB_RETURN_IF_ERROR(file_.ReadFloat(t, tmp));
    for (int64_t r = 0; r < rows; ++r)
      out[static_cast<size_t>(r)] = tmp[static_cast<size_t>(source_row(r))];
    return Status::Ok();
  }

  // Matrices in F32, F16, BF16 or a type GgmlRowCodec widens: in place, or (Q/K rows permuted
  // by llama.cpp, GPT-NeoX's fused rows) an owned copy of the stored rows in HF's order.
  Mapped StoredRows(const std::string& name) const override {
    auto it = entries_.find(name);
    if (it == entries_.end() || it->second.info.shape.size() != 2) return {};
    const Entry& e = it->second;
    const GgufTensorInfo& t = file_.tensors()[e.index];
    Mapped m;
    switch (t.type) {
      case GgmlType::kF32: m.dtype = KvDtype::kF32; break;
      case GgmlType::kF16: m.dtype = KvDtype::kF16; break;
      case GgmlType::kBF16: m.dtype = KvDtype::kBF16; break;
      default:
        m.quant = GgmlRowCodec(t.type);
        if (m.quant == nullptr) return {};
    }
    const std::span<const uint8_t> bytes = file_.Bytes(t);
    const int64_t rows = e.info.shape[0];
    if (rows <= 0 || bytes.size() % static_cast<size_t>(rows) != 0) return {};
    if (e.map == RowMap::kNone) {
      m.bytes = bytes;
      m.keepalive = file_.keepalive();
      return m;
    }
    const size_t row_bytes = bytes.size() / static_cast<size_t>(rows);
    // Owned, 8-byte aligned (16-bit rows need 2).
    auto buf = std::make_shared<std::vector<uint64_t>>((bytes.size() + 7) / 8);
    auto* dst = reinterpret_cast<uint8_t*>(buf->data());
    for (int64_t r = 0; r < rows; ++r) {
      std::memcpy(dst + static_cast<size_t>(r) * row_bytes,
                  bytes.data() + static_cast<size_t>(SourceRow(e, r)) * row_bytes, row_bytes);
    }
    m.bytes = {dst, bytes.size()};
    m.keepalive = std::move(buf);
    m.in_place = false;
    return m;
  }

 private:
  // The ggml row that holds HF row r of a row-mapped tensor.
  static int64_t SourceRow(const Entry& e, int64_t r) {
    return e.map == RowMap::kLlamaPermute ? LlamaCppUnpermutedRow(r, e.head_dim)
                                          : GptNeoXFusedQkvRow(r, e.heads, e.head_dim);
  }

  GgufFile file_;
  std::map<std::string, Entry> entries_;
};

// A float32 value printed the way Python prints it (1e-06, not 9.99999997e-07), as a double.
double ShortestFloat(double v, bool was_float32) {
  if (!was_float32 || !std::isfinite(v)) return v;
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), static_cast<float>(v));
  if (ec != std::errc()) return v;
  *end = '\0';
  return std::strtod(buf, nullptr);
}

class Mapper {
 public:
  explicit Mapper(const GgufFile& f) : f_(f) {}

  Status Fail(const std::string& msg) const {
    return Status::InvalidArgument(f_.path() + ": " + msg);
  }
  std::string Key(std::string_view k) const { return arch_ + "." + std::string(k); }

  Result<int64_t> RequiredCount(std::string_view k) const {
    ATTNLAB_ASSIGN_OR_RETURN(uint64_t v, f_.GetUint(Key(k)));
    if (v == 0 || v > (1ull << 31)) {
      return Fail("metadata key " + Quote(Key(k)) + " is " + std::to_string(v) +
                  "; expected 1 .. 2^31");
    }
    return static_cast<int64_t>(v);
  }
  Result<std::optional<int64_t>> OptionalCount(std::string_view k) const {
    if (!f_.Has(Key(k))) return std::optional<int64_t>();
    ATTNLAB_ASSIGN_OR_RETURN(int64_t v, RequiredCount(k));
    return std::optional<int64_t>(v);
  }
  Result<double> Float(const std::string& key) const {
    ATTNLAB_ASSIGN_OR_RETURN(double v, f_.GetFloat(key));
    if (!std::isfinite(v)) return Fail("metadata key " + Quote(key) + " is not finite");
    return ShortestFloat(v, f_.Find(key)->type == GgufValueType::kFloat32);
  }

  Status Run(GgufAsHf* out) {
    ATTNLAB_ASSIGN_OR_RETURN(arch_, f_.GetString("general.architecture"));
    out->architecture = arch_;
    const bool neox = arch_ == "gptneox";
    if (arch_ != "llama" && arch_ != "qwen2" && arch_ != "qwen3" && !neox) {
      return Fail("architecture " + Quote(arch_) +
                  " is not supported (llama, qwen2, qwen3 and gptneox are)");
    }
    ATTNLAB_ASSIGN_OR_RETURN(const int64_t n_embd, RequiredCount("embedding_length"));
    ATTNLAB_ASSIGN_OR_RETURN(const int64_t n_layer, RequiredCount("block_count"));
    ATTNLAB_ASSIGN_OR_RETURN(const int64_t n_ff, RequiredCount("feed_forward_length"));
    ATTNLAB_ASSIGN_OR_RETURN(n_head_, RequiredCount("attention.head_count"));
    ATTNLAB_ASSIGN_OR_RETURN(std::optional<int64_t> kv, OptionalCount("attention.head_count_kv"));
    n_kv_ = kv.value_or(n_head_);
    ATTNLAB_ASSIGN_OR_RETURN(const int64_t n_ctx, RequiredCount("context_length"));
    ATTNLAB_ASSIGN_OR_RETURN(std::optional<int64_t> key_len, OptionalCount("attention.key_length"));
    if (n_head_ % n_kv_ != 0) {
      return Fail(std::to_string(n_head_) + " attention heads are not a multiple of " +
                  std::to_string(n_kv_) + " key/value heads (" + Key("attention.head_count_kv") +
                  ")");
    }
    if (key_len) {
      head_dim_ = *key_len;
    } else {
      if (n_embd % n_head_ != 0) {
        return Fail("embedding_length " + std::to_string(n_embd) + " is not a multiple of " +
                    std::to_string(n_head_) + " heads, and " + Key("attention.key_length") +
                    " is absent");
      }
      head_dim_ = n_embd / n_head_;
    }
    const GgufTensorInfo* embd = f_.FindTensor("token_embd.weight");
    if (embd == nullptr) return Fail("no tensor 'token_embd.weight' (the token embedding)");
    if (embd->dims.size() != 2) return Fail("tensor 'token_embd.weight' is not 2-dimensional");
    const int64_t vocab = embd->dims[1];

    json c = json::object();
    c["model_type"] = neox ? "gpt_neox" : arch_;
    c["architectures"] = json::array({arch_ == "llama"   ? "LlamaForCausalLM"
                                      : arch_ == "qwen2" ? "Qwen2ForCausalLM"
                                      : arch_ == "qwen3" ? "Qwen3ForCausalLM"
                                                         : "GPTNeoXForCausalLM"});
    c["hidden_size"] = n_embd;
    c["intermediate_size"] = n_ff;
    c["num_hidden_layers"] = n_layer;
    c["num_attention_heads"] = n_head_;
    c["max_position_embeddings"] = n_ctx;
    c["vocab_size"] = vocab;
    c["tie_word_embeddings"] = f_.FindTensor("output.weight") == nullptr;
    double theta = 10000.0;
    if (f_.Has(Key("rope.freq_base"))) {
      ATTNLAB_ASSIGN_OR_RETURN(theta, Float(Key("rope.freq_base")));
    }
    c["rope_theta"] = theta;
    ATTNLAB_ASSIGN_OR_RETURN(c["rope_scaling"], RopeScaling());
    if (const GgufTensorInfo* rf = f_.FindTensor("rope_freqs.weight"); rf != nullptr && !neox) {
      if (!c["rope_scaling"].is_null()) {
        return Fail("tensor 'rope_freqs.weight' and " + Key("rope.scaling.type") +
                    " both scale RoPE; a file has one or the other");
      }
      ATTNLAB_ASSIGN_OR_RETURN(c["rope_scaling"], Llama3FromRopeFreqs(*rf, theta, n_ctx));
    }
    if (neox) {
      ATTNLAB_ASSIGN_OR_RETURN(const double eps, Float(Key("attention.layer_norm_epsilon")));
      c["layer_norm_eps"] = eps;
      int64_t rot = head_dim_;
      if (f_.Has(Key("rope.dimension_count"))) {
        ATTNLAB_ASSIGN_OR_RETURN(const uint64_t r, f_.GetUint(Key("rope.dimension_count")));
        if (r > static_cast<uint64_t>(head_dim_)) {
          return Fail(Key("rope.dimension_count") + " is " + std::to_string(r) +
                      ", more than the head size " + std::to_string(head_dim_));
        }
        rot = static_cast<int64_t>(r);
      }
      c["rotary_pct"] = static_cast<double>(rot) / static_cast<double>(head_dim_);
      c["rotary_emb_base"] = theta;
      bool parallel = true;
      if (f_.Has(Key("use_parallel_residual"))) {
        ATTNLAB_ASSIGN_OR_RETURN(parallel, f_.GetBool(Key("use_parallel_residual")));
      }
      c["use_parallel_residual"] = parallel;
      c["hidden_act"] = "gelu";
      if (n_kv_ != n_head_) return Fail("gptneox with grouped key/value heads is not supported");
      if (head_dim_ * n_head_ != n_embd) {
        return Fail("gptneox heads of " + std::to_string(head_dim_) + " x " +
                    std::to_string(n_head_) + " do not make embedding_length " +
                    std::to_string(n_embd));
      }
    } else {
      c["num_key_value_heads"] = n_kv_;
      c["head_dim"] = head_dim_;
      ATTNLAB_ASSIGN_OR_RETURN(const double eps, Float(Key("attention.layer_norm_rms_epsilon")));
      c["rms_norm_eps"] = eps;
      c["hidden_act"] = "silu";
      c["attention_bias"] = f_.FindTensor("blk.0.attn_q.bias") != nullptr ||
                            f_.FindTensor("blk.0.attn_k.bias") != nullptr ||
                            f_.FindTensor("blk.0.attn_output.bias") != nullptr;
      if (arch_ == "llama") c["mlp_bias"] = f_.FindTensor("blk.0.ffn_down.bias") != nullptr;
      if (f_.Has(Key("attention.sliding_window"))) {
        ATTNLAB_ASSIGN_OR_RETURN(const uint64_t w, f_.GetUint(Key("attention.sliding_window")));
        c["sliding_window"] = w;
        // HF applies a llama-family window only under model_type mistral; qwen2/qwen3 keep
        // theirs off unless config.json says use_sliding_window, which GGUF does not record.
        if (arch_ == "llama") {
          c["model_type"] = "mistral";
          c["architectures"] = json::array({"MistralForCausalLM"});
        }
      }
    }

    // Vocabulary.
    GgufVocabulary& v = out->vocabulary;
    if (f_.Has("tokenizer.ggml.model")) {
      ATTNLAB_ASSIGN_OR_RETURN(v.model, f_.GetString("tokenizer.ggml.model"));
    }
    if (f_.Has("tokenizer.ggml.pre")) {
      ATTNLAB_ASSIGN_OR_RETURN(v.pre, f_.GetString("tokenizer.ggml.pre"));
    }
    if (f_.Has("tokenizer.ggml.tokens")) {
      ATTNLAB_ASSIGN_OR_RETURN(v.tokens, f_.GetStringArray("tokenizer.ggml.tokens"));
    }
    if (f_.Has("tokenizer.ggml.merges")) {
      ATTNLAB_ASSIGN_OR_RETURN(v.merges, f_.GetStringArray("tokenizer.ggml.merges"));
    }
    if (f_.Has("tokenizer.ggml.scores")) {
      ATTNLAB_ASSIGN_OR_RETURN(std::vector<double> s, f_.GetFloatArray("tokenizer.ggml.scores"));
      v.scores.assign(s.begin(), s.end());
      if (v.scores.size() != v.tokens.size()) {
        return Fail("tokenizer.ggml.scores has " + std::to_string(v.scores.size()) +
                    " entries for " + std::to_string(v.tokens.size()) + " tokens");
      }
    }
    if (f_.Has("tokenizer.ggml.token_type")) {
      ATTNLAB_ASSIGN_OR_RETURN(std::vector<int64_t> t, f_.GetIntArray("tokenizer.ggml.token_type"));
      if (t.size() != v.tokens.size()) {
        return Fail("tokenizer.ggml.token_type has " + std::to_string(t.size()) + " entries for " +
                    std::to_string(v.tokens.size()) + " tokens");
      }
      for (int64_t x : t) {
        if (x < INT32_MIN || x > INT32_MAX) return Fail("tokenizer.ggml.token_type out of range");
        v.token_type.push_back(static_cast<int32_t>(x));
      }
    }
    for (const char* k : {"tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id"}) {
      if (!f_.Has(k)) continue;
      ATTNLAB_ASSIGN_OR_RETURN(const int64_t id, f_.GetInt(k));
      if (id < 0 || (!v.tokens.empty() && id >= static_cast<int64_t>(v.tokens.size()))) {
        return Fail(std::string(k) + " is " + std::to_string(id) + ", outside the " +
                    std::to_string(v.tokens.size()) + " tokens");
      }
      (std::string_view(k).find("bos") != std::string_view::npos ? v.bos_token_id
                                                                 : v.eos_token_id) = id;
    }
    if (f_.Has("tokenizer.ggml.add_bos_token")) {
      ATTNLAB_ASSIGN_OR_RETURN(const bool b, f_.GetBool("tokenizer.ggml.add_bos_token"));
      v.add_bos_token = b;
    }
    if (v.bos_token_id) c["bos_token_id"] = *v.bos_token_id;
    if (v.eos_token_id) c["eos_token_id"] = *v.eos_token_id;
    out->hf_config = std::move(c);

    // Tensors.
    std::map<std::string, Entry> entries;
    for (size_t i = 0; i < f_.tensors().size(); ++i) {
      const GgufTensorInfo& t = f_.tensors()[i];
      if (t.name == "rope_freqs.weight" && !neox) continue;  // read into rope_scaling above
      Entry e;
      e.index = i;
      ATTNLAB_ASSIGN_OR_RETURN(const std::string hf, HfName(t.name, n_layer, &e));
      e.info.shape.assign(t.dims.rbegin(), t.dims.rend());
      e.info.dtype = GgmlTypeName(t.type);
      e.info.file = f_.path();
      if (e.map != RowMap::kNone) ATTNLAB_RETURN_IF_ERROR(CheckRowMap(t, &e));
      entries.emplace(hf, std::move(e));
    }
    out->tensors = std::make_unique<GgufTensorSource>(f_, std::move(entries));
    return Status::Ok();
  }

 private:
  // llama.cpp's converter stores Llama 3.1-style scaling as tensor rope_freqs.weight [d/2], the
  // divisor of each frequency (1, factor, or the blend; convert_hf_to_gguf.py's LlamaModel),
  // and keeps none of factor, low/high_freq_factor and the original context. They are found
  // back: factor = the largest divisor, low/high = 1/4 (every Llama 3.x release), the original
  // context L among the powers of two 2^4..2^20 and n_ctx / factor; the L whose divisors,
  // recomputed as the converter does (float32 frequencies), match the tensor to 1e-4 gives the
  // rope_scaling ({"rope_type": "llama3", ...}). Any other tensor is refused.
  Result<json> Llama3FromRopeFreqs(const GgufTensorInfo& t, double theta, int64_t n_ctx) const {
    const int64_t pairs = head_dim_ / 2;
    if (t.dims.size() != 1 || t.dims[0] != pairs) {
      return Fail("tensor 'rope_freqs.weight' must hold head_dim / 2 = " + std::to_string(pairs) +
                  " values");
    }
    std::vector<float> f(static_cast<size_t>(pairs));
    ATTNLAB_RETURN_IF_ERROR(f_.ReadFloat(t, f));
    float factor = 0;
    for (float x : f) {
      if (!std::isfinite(x) || x < 1.0f - 1e-6f) {
        return Fail("tensor 'rope_freqs.weight' has a divisor " + std::to_string(x) +
                    " (llama3 scaling has divisors >= 1)");
      }
      factor = std::max(factor, x);
    }
    if (factor <= 1.0f + 1e-6f) return json(nullptr);  // all ones: plain RoPE
    const double lo = 1.0, hi = 4.0, s = factor;
    auto divisors = [&](double L) {
      std::vector<double> d(static_cast<size_t>(pairs));
      for (int64_t i = 0; i < pairs; ++i) {
        const float e = static_cast<float>(2 * i) / static_cast<float>(head_dim_);
        const float freq = 1.0f / std::pow(static_cast<float>(theta), e);
        const double wavelen = 2 * std::numbers::pi / static_cast<double>(freq);
        if (wavelen < L / hi) {
          d[i] = 1.0;
        } else if (wavelen > L / lo) {
          d[i] = s;
        } else {
          const double smooth = (L / wavelen - lo) / (hi - lo);
          d[i] = 1.0 / ((1 - smooth) / s + smooth);
        }
      }
      return d;
    };
    std::vector<double> candidates;
    for (int k = 4; k <= 20; ++k) candidates.push_back(std::ldexp(1.0, k));
    candidates.push_back(std::round(static_cast<double>(n_ctx) / s));
    for (double L : candidates) {
      const std::vector<double> d = divisors(L);
      bool same = true;
      for (int64_t i = 0; i < pairs && same; ++i) same = std::fabs(d[i] - f[i]) <= 1e-4 * d[i];
      if (same) {
        return json{{"rope_type", "llama3"},        {"factor", s},
                    {"low_freq_factor", lo},        {"high_freq_factor", hi},
                    {"original_max_position_embeddings", static_cast<int64_t>(L)}};
      }
    }
    return Fail("tensor 'rope_freqs.weight' holds per-frequency RoPE divisors that llama3's rule "
                "(factor " + std::to_string(s) + ", low/high_freq_factor 1/4, any original "
                "context 2^4..2^20) does not reproduce; attnlab cannot apply other divisors");
  }

  Result<json> RopeScaling() const {
    const std::string tk = Key("rope.scaling.type");
    std::string type = "none";
    double factor = 1.0;
    if (f_.Has(tk)) {
      ATTNLAB_ASSIGN_OR_RETURN(type, f_.GetString(tk));
      if (f_.Has(Key("rope.scaling.factor"))) {
        ATTNLAB_ASSIGN_OR_RETURN(factor, Float(Key("rope.scaling.factor")));
      }
    } else if (f_.Has(Key("rope.scale_linear"))) {  // older files
      type = "linear";
      ATTNLAB_ASSIGN_OR_RETURN(factor, Float(Key("rope.scale_linear")));
    }
    if (type == "none" || (type == "linear" && factor == 1.0)) return json(nullptr);
    json r = {{"rope_type", type}, {"type", type}, {"factor", factor}};
    if (f_.Has(Key("rope.scaling.original_context_length"))) {
      ATTNLAB_ASSIGN_OR_RETURN(const uint64_t n,
                               f_.GetUint(Key("rope.scaling.original_context_length")));
      r["original_max_position_embeddings"] = n;
    }
    return r;
  }

  // The HF name of a GGUF tensor, and its row map.
  Result<std::string> HfName(const std::string& name, int64_t n_layer, Entry* e) const {
    const bool neox = arch_ == "gptneox";
    auto no_name = [&]() {
      return Fail("tensor " + Quote(name) + " has no Hugging Face name under architecture " +
                  arch_);
    };
    std::string_view n = name, suffix;
    if (n.ends_with(".weight")) {
      suffix = ".weight";
    } else if (n.ends_with(".bias")) {
      suffix = ".bias";
    } else {
      return no_name();
    }
    n.remove_suffix(suffix.size());
    const std::string sfx(suffix);
    if (n == "token_embd" && suffix == ".weight")
      return std::string(neox ? "gpt_neox.embed_in" : "model.embed_tokens") + sfx;
    if (n == "output_norm")
      return std::string(neox ? "gpt_neox.final_layer_norm" : "model.norm") + sfx;
    if (n == "output" && suffix == ".weight")
      return std::string(neox ? "embed_out" : "lm_head") + sfx;
    if (!n.starts_with("blk.")) return no_name();
    n.remove_prefix(4);
    const size_t dot = n.find('.');
    if (dot == std::string_view::npos || dot == 0 || dot > 9) return no_name();
    int64_t layer = 0;
    for (size_t k = 0; k < dot; ++k) {
      if (n[k] < '0' || n[k] > '9' || (k == 0 && n[k] == '0' && dot > 1)) return no_name();
      layer = layer * 10 + (n[k] - '0');
    }
    if (layer >= n_layer) {
      return Fail("tensor " + Quote(name) + " is in layer " + std::to_string(layer) + " but " +
                  Key("block_count") + " is " + std::to_string(n_layer));
    }
    const std::string_view part = n.substr(dot + 1);
    const std::string L = std::to_string(layer);
    static const std::map<std::string_view, const char*> kLlama = {
        {"attn_norm", "input_layernorm"},    {"attn_q", "self_attn.q_proj"},
        {"attn_k", "self_attn.k_proj"},      {"attn_v", "self_attn.v_proj"},
        {"attn_output", "self_attn.o_proj"}, {"ffn_norm", "post_attention_layernorm"},
        {"ffn_gate", "mlp.gate_proj"},       {"ffn_up", "mlp.up_proj"},
        {"ffn_down", "mlp.down_proj"},       {"attn_q_norm", "self_attn.q_norm"},
        {"attn_k_norm", "self_attn.k_norm"},
    };
    static const std::map<std::string_view, const char*> kNeox = {
        {"attn_norm", "input_layernorm"},   {"attn_qkv", "attention.query_key_value"},
        {"attn_output", "attention.dense"}, {"ffn_norm", "post_attention_layernorm"},
        {"ffn_up", "mlp.dense_h_to_4h"},    {"ffn_down", "mlp.dense_4h_to_h"},
    };
    const auto& table = neox ? kNeox : kLlama;
    auto it = table.find(part);
    if (it == table.end()) return no_name();
    if ((part == "attn_q_norm" || part == "attn_k_norm") && arch_ != "qwen3") return no_name();
    if (arch_ == "llama" && (part == "attn_q" || part == "attn_k")) {
      e->map = RowMap::kLlamaPermute;
      e->heads = part == "attn_q" ? n_head_ : n_kv_;
    }
    if (neox && part == "attn_qkv") {
      e->map = RowMap::kNeoxQkv;
      e->heads = n_head_;
      e->head_dim = head_dim_;
    }
    return std::string(neox ? "gpt_neox.layers." : "model.layers.") + L + "." + it->second + sfx;
  }

  Status CheckRowMap(const GgufTensorInfo& t, Entry* e) const {
    if (t.dims.empty() || t.dims.size() > 2) {
      return Fail("tensor " + Quote(t.name) + " has " + std::to_string(t.dims.size()) +
                  " dimensions; its rows are reordered, which needs 1 or 2");
    }
    const int64_t rows = e->info.shape[0];
    if (e->map == RowMap::kLlamaPermute) {
      if (rows % (2 * e->heads) != 0) {
        return Fail("tensor " + Quote(t.name) + " has " + std::to_string(rows) +
                    " rows, not a multiple of 2 x " + std::to_string(e->heads) +
                    " heads (llama.cpp's Q/K permutation needs even heads)");
      }
      e->head_dim = rows / e->heads;
    } else if (rows != 3 * e->heads * e->head_dim) {
      return Fail("tensor " + Quote(t.name) + " has " + std::to_string(rows) + " rows; 3 x " +
                  std::to_string(e->heads) + " heads x " + std::to_string(e->head_dim) +
                  " expected for the fused query_key_value");
    }
    return Status::Ok();
  }

  const GgufFile& f_;
  std::string arch_;
  int64_t n_head_ = 0, n_kv_ = 0, head_dim_ = 0;
};

}  // namespace

Result<GgufAsHf> GgufFileAsHf(const GgufFile& file) {
  GgufAsHf out;
  Mapper m(file);
  ATTNLAB_RETURN_IF_ERROR(m.Run(&out));
  return out;
}

Result<GgufAsHf> OpenGgufAsHf(const std::string& path) {
  ATTNLAB_ASSIGN_OR_RETURN(GgufFile f, ReadGguf(path));
  return GgufFileAsHf(f);
}

}  // namespace attnlab
