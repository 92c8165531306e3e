// Hugging Face decoder families -> the one decoder. The mapping is documented in hf_decoder.h.
#include "formats/hf_decoder.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <set>

#include "core/files.h"
#include "formats/safetensors_folder.h"
#include "model/matrix_weights.h"
#include "model/parameters.h"

namespace attnlab {

namespace {

using nlohmann::json;

std::string ShapeStr(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

// Typed reads of config.json keys: a missing (or null) key gives the default, or an error when
// `required`; a wrong type is always an error naming the key.
class ConfigReader {
 public:
  ConfigReader(const json& cfg, const std::string& name) : cfg_(cfg), name_(name) {}

  const json* Get(const char* key) const {
    auto it = cfg_.find(key);
    return it == cfg_.end() || it->is_null() ? nullptr : &*it;
  }
  Status Int(const char* key, int64_t* out, bool required) const {
    const json* v = Get(key);
    if (!v) return required ? Missing(key) : Status::Ok();
    if (!v->is_number_integer()) return Wrong(key, "an integer");
    *out = v->get<int64_t>();
    return Status::Ok();
  }
  Status Double(const char* key, double* out, bool required = false) const {
    const json* v = Get(key);
    if (!v) return required ? Missing(key) : Status::Ok();
    if (!v->is_number() || !std::isfinite(v->get<double>())) return Wrong(key, "a number");
    *out = v->get<double>();
    return Status::Ok();
  }
  Status Bool(const char* key, bool* out) const {
    const json* v = Get(key);
    if (!v) return Status::Ok();
    if (!v->is_boolean()) return Wrong(key, "true or false");
    *out = v->get<bool>();
    return Status::Ok();
  }
  Status String(const char* key, std::string* out) const {
    const json* v = Get(key);
    if (!v) return Status::Ok();
    if (!v->is_string()) return Wrong(key, "a string");
    *out = v->get<std::string>();
    return Status::Ok();
  }
  Status Missing(const char* key) const {
    return Status::InvalidArgument(name_ + ": key '" + key + "' is required");
  }
  Status Wrong(const char* key, const char* what) const {
    return Status::InvalidArgument(name_ + ": key '" + key + "' must be " + what);
  }
  Status Unsupported(const std::string& what) const {
    return Status::InvalidArgument(name_ + ": " + what);
  }
  const std::string& name() const { return name_; }

 private:
  const json& cfg_;
  std::string name_;
};

// rope_scaling -> the config's rope_* fields.
Status ReadRopeScaling(const ConfigReader& r, ModelConfig* c) {
  const json* rs = r.Get("rope_scaling");
  if (!rs) return Status::Ok();
  if (!rs->is_object()) return r.Wrong("rope_scaling", "an object or null");
  const ConfigReader s(*rs, r.name() + " rope_scaling");
  std::string type;
  ATTNLAB_RETURN_IF_ERROR(s.String("rope_type", &type));
  if (type.empty()) ATTNLAB_RETURN_IF_ERROR(s.String("type", &type));
  if (type.empty() || type == "default") return Status::Ok();
  double factor = 1.0;
  ATTNLAB_RETURN_IF_ERROR(s.Double("factor", &factor, /*required=*/true));
  if (!(factor >= 1.0)) return s.Unsupported("factor must be >= 1, got " + std::to_string(factor));
  c->rope_factor = factor;
  if (type == "linear") {
    c->rope_scaling = RopeScaling::kLinear;
  } else if (type == "llama3") {
    c->rope_scaling = RopeScaling::kLlama3;
    ATTNLAB_RETURN_IF_ERROR(s.Double("low_freq_factor", &c->rope_low_freq_factor));
    ATTNLAB_RETURN_IF_ERROR(s.Double("high_freq_factor", &c->rope_high_freq_factor));
    ATTNLAB_RETURN_IF_ERROR(
        s.Int("original_max_position_embeddings", &c->rope_original_context, true));
  } else if (type == "dynamic") {
    // L = max_position_embeddings, as transformers; the scaling exists to run past it, so the
    // context attnlab allows grows to factor x L (transformers sets no limit at all).
    c->rope_scaling = RopeScaling::kDynamicHf;
    c->rope_original_context = c->context;
    c->context = static_cast<int64_t>(std::ceil(factor * static_cast<double>(c->context)));
  } else if (type == "yarn") {
    c->rope_scaling = RopeScaling::kYarnHf;
    c->rope_original_context = c->context;
    ATTNLAB_RETURN_IF_ERROR(
        s.Int("original_max_position_embeddings", &c->rope_original_context, false));
    ATTNLAB_RETURN_IF_ERROR(s.Double("attention_factor", &c->rope_attention_factor));
    for (const char* key : {"mscale", "mscale_all_dim"}) {
      if (s.Get(key)) return s.Unsupported(std::string("'") + key + "' is not supported");
    }
    double beta_fast = 32, beta_slow = 1;
    ATTNLAB_RETURN_IF_ERROR(s.Double("beta_fast", &beta_fast));
    ATTNLAB_RETURN_IF_ERROR(s.Double("beta_slow", &beta_slow));
    if (beta_fast != 32 || beta_slow != 1) {
      return s.Unsupported("beta_fast/beta_slow other than 32/1 are not supported");
    }
  } else {
    return s.Unsupported("unsupported rope_scaling type '" + type +
                         "' (attnlab supports linear, dynamic, llama3 and yarn)");
  }
  return Status::Ok();
}

// Which layers are windowed, and the window (attention_window = sliding_window - 1).
Status ReadSlidingWindow(const ConfigReader& r, const std::string& type, ModelConfig* c) {
  int64_t window = -1;
  const json* types = r.Get("layer_types");
  bool use = type == "mistral";
  if (type == "qwen2" || type == "qwen3") {
    use = false;
    ATTNLAB_RETURN_IF_ERROR(r.Bool("use_sliding_window", &use));
  }
  if (use || types) ATTNLAB_RETURN_IF_ERROR(r.Int("sliding_window", &window, false));
  if (window == 0 || window < -1) return r.Unsupported("sliding_window must be >= 1");
  if (window < 0) return Status::Ok();
  c->attention_window = window - 1;
  std::string layers(static_cast<size_t>(c->n_layer), 'w');
  if (types) {
    if (!types->is_array() || static_cast<int64_t>(types->size()) != c->n_layer) {
      return r.Wrong("layer_types", "an array with one entry per layer");
    }
    for (size_t l = 0; l < types->size(); ++l) {
      const json& t = (*types)[l];
      if (t == "sliding_attention") layers[l] = 'w';
      else if (t == "full_attention") layers[l] = 'f';
      else return r.Unsupported("layer_types[" + std::to_string(l) + "] is not "
                                "sliding_attention or full_attention");
    }
  } else if (type == "qwen2" || type == "qwen3") {
    int64_t from = c->n_layer;
    ATTNLAB_RETURN_IF_ERROR(r.Int("max_window_layers", &from, false));
    for (int64_t l = 0; l < c->n_layer; ++l) layers[l] = l >= from ? 'w' : 'f';
  }
  if (layers.find('f') != std::string::npos) c->window_layers = layers;
  if (layers.find('w') == std::string::npos) c->attention_window = -1, c->window_layers.clear();
  return Status::Ok();
}

bool IsNeox(const std::string& type) { return type == "gpt_neox"; }

}  // namespace

bool IsHfDecoderModelType(const std::string& t) {
  return t == "llama" || t == "mistral" || t == "qwen2" || t == "qwen3" || t == "gpt_neox";
}

Result<ModelConfig> HfDecoderConfig(const json& cfg, const std::string& name,
                                    std::vector<std::string>* notes) {
  if (!cfg.is_object()) return Status::InvalidArgument(name + ": expected a JSON object");
  const ConfigReader r(cfg, name);
  std::string type;
  ATTNLAB_RETURN_IF_ERROR(r.String("model_type", &type));
  if (!IsHfDecoderModelType(type)) {
    return Status::InvalidArgument(name + ": model_type '" + type +
                                   "' is not supported (attnlab reads llama, mistral, qwen2, "
                                   "qwen3, gpt_neox and gpt2)");
  }
  ModelConfig c;
  c.position = PositionEncoding::kRope;
  c.rope_layout = RopeLayout::kNeox;  // HF's rotate_half
  c.norm = NormPlacement::kPre;
  c.residual_scale = ResidualScale::kOne;
  c.softmax = SoftmaxKind::kStandard;
  c.scale_residual_init = false;
  ATTNLAB_RETURN_IF_ERROR(r.Int("vocab_size", &c.vocab_size, true));
  ATTNLAB_RETURN_IF_ERROR(r.Int("hidden_size", &c.d_model, true));
  ATTNLAB_RETURN_IF_ERROR(r.Int("num_hidden_layers", &c.n_layer, true));
  ATTNLAB_RETURN_IF_ERROR(r.Int("num_attention_heads", &c.n_head, true));
  ATTNLAB_RETURN_IF_ERROR(r.Int("intermediate_size", &c.mlp_hidden, true));
  ATTNLAB_RETURN_IF_ERROR(r.Int("max_position_embeddings", &c.context, true));
  // Bounded before any arithmetic or allocation uses them (ValidateModelConfig checks the rest).
  struct Bound { const char* key; int64_t value, lo, hi; };
  for (const Bound& b : {Bound{"hidden_size", c.d_model, 1, 1 << 16},
                         Bound{"num_attention_heads", c.n_head, 1, 1 << 12},
                         Bound{"num_hidden_layers", c.n_layer, 1, 1024},
                         Bound{"vocab_size", c.vocab_size, 2, 1 << 24}}) {
    if (b.value < b.lo || b.value > b.hi) {
      return r.Unsupported(std::string("key '") + b.key + "' = " + std::to_string(b.value) +
                           " is outside [" + std::to_string(b.lo) + ", " +
                           std::to_string(b.hi) + "]");
    }
  }
  c.n_kv_head = c.n_head;
  ATTNLAB_RETURN_IF_ERROR(r.Int("num_key_value_heads", &c.n_kv_head, false));
  int64_t head_dim = c.d_model % c.n_head == 0 ? c.d_model / c.n_head : 0;
  ATTNLAB_RETURN_IF_ERROR(r.Int("head_dim", &head_dim, head_dim == 0));
  if (head_dim < 1 || head_dim > 4096) return r.Unsupported("head_dim must be in [1, 4096]");
  if (head_dim * c.n_head != c.d_model) c.head_size = head_dim;
  c.tie_embeddings = false;
  ATTNLAB_RETURN_IF_ERROR(r.Bool("tie_word_embeddings", &c.tie_embeddings));
  std::string act;
  ATTNLAB_RETURN_IF_ERROR(r.String("hidden_act", &act));
  if (IsNeox(type)) {
    c.norm_type = NormType::kLayerNorm;
    double eps = 1e-5;
    ATTNLAB_RETURN_IF_ERROR(r.Double("layer_norm_eps", &eps));
    c.norm_eps = static_cast<float>(eps);
    if (act == "gelu") c.mlp_activation = MlpActivation::kGeluErf;
    else if (act == "gelu_new" || act == "gelu_pytorch_tanh" || act == "gelu_fast")
      c.mlp_activation = MlpActivation::kGeluTanh;
    else return r.Unsupported("hidden_act '" + act + "' is not supported for gpt_neox (gelu, gelu_new)");
    c.bias = true;
    bool attention_bias = true;
    ATTNLAB_RETURN_IF_ERROR(r.Bool("attention_bias", &attention_bias));
    if (!attention_bias) return r.Unsupported("gpt_neox with attention_bias = false is not supported");
    double pct = 0.25;
    ATTNLAB_RETURN_IF_ERROR(r.Double("rotary_pct", &pct));
    if (!(pct > 0 && pct <= 1)) return r.Unsupported("rotary_pct must be in (0, 1]");
    c.rotary_dim = static_cast<int64_t>(head_dim * pct);
    if (c.rotary_dim == head_dim) c.rotary_dim = 0;
    ATTNLAB_RETURN_IF_ERROR(r.Double("rotary_emb_base", &c.rope_base));
    ATTNLAB_RETURN_IF_ERROR(r.Double("rope_theta", &c.rope_base));
    c.parallel_residual = true;
    ATTNLAB_RETURN_IF_ERROR(r.Bool("use_parallel_residual", &c.parallel_residual));
  } else {
    c.norm_type = NormType::kRmsNorm;
    double eps = 1e-6;
    ATTNLAB_RETURN_IF_ERROR(r.Double("rms_norm_eps", &eps));
    c.norm_eps = static_cast<float>(eps);
    if (!act.empty() && act != "silu") {
      return r.Unsupported("hidden_act '" + act + "' is not supported for " + type + " (silu)");
    }
    c.mlp_activation = MlpActivation::kSwiGlu;
    c.bias = false;
    c.qkv_bias = type == "qwen2";
    // As transformers reads them: Llama's and Qwen3's attention_bias puts biases on q, k, v and
    // o; Llama's mlp_bias on gate, up and down. Qwen2 always has q/k/v biases and never an o
    // bias (a converter may still write attention_bias, meaning the q/k/v ones); Mistral's
    // and Qwen2/3's MLPs, and Mistral's attention, have no biases whatever the keys say.
    if (type == "llama" || type == "qwen3") {
      bool attention_bias = false;
      ATTNLAB_RETURN_IF_ERROR(r.Bool("attention_bias", &attention_bias));
      c.qkv_bias = c.proj_bias = attention_bias;
    }
    if (type == "llama") ATTNLAB_RETURN_IF_ERROR(r.Bool("mlp_bias", &c.mlp_bias));
    c.qk_norm = type == "qwen3";
    c.rope_base = 10000.0;
    ATTNLAB_RETURN_IF_ERROR(r.Double("rope_theta", &c.rope_base));
    double partial = 1.0;
    ATTNLAB_RETURN_IF_ERROR(r.Double("partial_rotary_factor", &partial));
    if (!(partial > 0 && partial <= 1)) return r.Unsupported("partial_rotary_factor must be in (0, 1]");
    if (partial < 1) c.rotary_dim = static_cast<int64_t>(head_dim * partial);
  }
  ATTNLAB_RETURN_IF_ERROR(ReadRopeScaling(r, &c));
  ATTNLAB_RETURN_IF_ERROR(ReadSlidingWindow(r, type, &c));
  if (notes && c.attention_window >= 0) {
    notes->push_back(name + ": sliding window of " + std::to_string(c.attention_window + 1) +
                     " keys" + (c.window_layers.empty() ? "" : " on layers '" + c.window_layers + "'"));
  }
  const Status valid = ValidateModelConfig(c);
  if (!valid.ok()) return Status::InvalidArgument(name + ": " + valid.message());
  return c;
}

namespace {

// CheckFinite (loaded_model.h) for n stored elements of `type`, with the same message.
// Reads HF tensors into the parameter store, remembering which were used.
class TensorMapper {
 public:
  TensorMapper(const TensorSource& src, const std::string& type) : src_(src), type_(type) {}

  // The tensor `name` of exactly `shape`, as float.
  Result<std::vector<float>> Read(const std::string& name, const std::vector<int64_t>& shape) {
    const SourceTensorInfo* info = src_.Find(name);
    if (!info) {
      return Status::InvalidArgument("tensor '" + name + "' is missing (a " + type_ +
                                     " model with this config.json has it)");
    }
    if (info->shape != shape) {
      return Status::InvalidArgument(info->file + ": tensor '" + name + "' has shape " +
                                     ShapeStr(info->shape) + ", config.json implies " +
                                     ShapeStr(shape));
    }
    std::vector<float> out(static_cast<size_t>(info->numel()));
    ATTNLAB_RETURN_IF_ERROR(src_.ReadFloat(name, out));
    ATTNLAB_RETURN_IF_ERROR(CheckFinite(out.data(), static_cast<int64_t>(out.size()), info->file, name));
    used_.insert(name);
    return out;
  }
  // dst = src (same layout).
  Status Copy(const std::string& name, const std::vector<int64_t>& shape, float* dst) {
    ATTNLAB_ASSIGN_OR_RETURN(std::vector<float> v, Read(name, shape));
    std::copy(v.begin(), v.end(), dst);
    return Status::Ok();
  }
  // An nn.Linear weight [out, in] into columns [col0, col0 + out) of dst [in, ld].
  Status Transpose(const std::string& name, int64_t out, int64_t in, float* dst, int64_t ld,
                   int64_t col0) {
    ATTNLAB_ASSIGN_OR_RETURN(std::vector<float> v, Read(name, {out, in}));
    for (int64_t o = 0; o < out; ++o) {
      for (int64_t i = 0; i < in; ++i) dst[i * ld + col0 + o] = v[o * in + i];
    }
    return Status::Ok();
  }
  // The 16-bit type of an owned copy of a matrix (F16/BF16 as stored), or kF32 for others.
  KvDtype StoredType(const std::string& name) const {
    const SourceTensorInfo* info = src_.Find(name);
    if (info && info->dtype == "BF16") return KvDtype::kBF16;
    if (info && info->dtype == "F16") return KvDtype::kF16;
    return KvDtype::kF32;
  }
  // An nn.Linear weight [out, in] as the next row block of *w (matrix_weights.h), as stored
  // (F32/F16/BF16 or quantized rows): in place in the mapped file where the format keeps it in
  // this layout, else an owned copy of the stored bytes. source_row, when given, regroups rows:
  // row r of the block is stored row source_row(r) (an owned copy). Where the stored bytes are
  // not available (misaligned 16-bit data, other dtypes) an owned copy widened from ReadFloat,
  // kept 16-bit when stored so (exact: the values came from it). Non-finite values are an error,
  // as on the fp32 path.
  Status AddBlock(const std::string& name, int64_t out, int64_t in, MatrixWeights* mw,
                  internal::WeightMatrix* w,
                  const std::function<int64_t(int64_t)>& source_row = nullptr) {
    const SourceTensorInfo* info = src_.Find(name);
    const TensorSource::Mapped m =
        info && info->shape == std::vector<int64_t>{out, in} ? src_.StoredRows(name)
                                                             : TensorSource::Mapped{};
    internal::WeightBlock b{m.bytes.data(), m.dtype, out, m.quant};
    const bool usable =
        !m.bytes.empty() &&
        (m.quant ? m.quant->block_elems > 0 && in % m.quant->block_elems == 0
                 : reinterpret_cast<uintptr_t>(b.data) % KvDtypeBytes(m.dtype) == 0) &&
        m.bytes.size() == static_cast<size_t>(out * internal::WeightRowBytes(b, in));
    if (!usable) {
      ATTNLAB_ASSIGN_OR_RETURN(std::vector<float> v, Read(name, {out, in}));
      if (source_row) {
        std::vector<float> g(v.size());
        for (int64_t r = 0; r < out; ++r) {
          std::copy_n(v.begin() + source_row(r) * in, in, g.begin() + r * in);
        }
        v.swap(g);
      }
      AddOwned(v.data(), out, in, StoredType(name), mw, w);
      return Status::Ok();
    }
    ATTNLAB_RETURN_IF_ERROR(CheckFiniteStored(b, in, info->file, name));
    used_.insert(name);
    if (source_row) {
      const int64_t row_bytes = internal::WeightRowBytes(b, in);
      auto buf = std::make_shared<AlignedBuffer<float>>(
          static_cast<size_t>((out * row_bytes + 3) / 4));
      auto* dst = reinterpret_cast<uint8_t*>(buf->data());
      for (int64_t r = 0; r < out; ++r) {
        std::memcpy(dst + r * row_bytes, m.bytes.data() + source_row(r) * row_bytes,
                    static_cast<size_t>(row_bytes));
      }
      b.data = buf->data();
      mw->keep.push_back(std::move(buf));
    } else {
      mw->keep.push_back(m.keepalive);
      if (m.in_place) mw->mapped_bytes += out * internal::WeightRowBytes(b, in);
    }
    w->blocks.push_back(b);
    w->rows += out;
    w->cols = in;
    return Status::Ok();
  }
  // rows x cols floats (exactly representable in `type`) as an owned block of *w.
  static void AddOwned(const float* v, int64_t rows, int64_t cols, KvDtype type,
                       MatrixWeights* mw, internal::WeightMatrix* w) {
    const int64_t n = rows * cols;
    auto buf = std::make_shared<AlignedBuffer<float>>(
        static_cast<size_t>((n * KvDtypeBytes(type) + 3) / 4));
    ConvertToKvDtype(v, n, type, buf->data());
    w->blocks.push_back({buf->data(), type, rows});
    w->rows += rows;
    w->cols = cols;
    mw->keep.push_back(std::move(buf));
  }
  // True if any of `names` is stored in a type other than F32 (16-bit or quantized).
  bool AnyNotF32(const std::vector<std::string>& names) const {
    for (const std::string& n : names) {
      const SourceTensorInfo* info = src_.Find(n);
      if (info && info->dtype != "F32") return true;
    }
    return false;
  }
  bool Has(const std::string& name) const { return src_.Find(name) != nullptr; }
  // Every tensor of the source that was not used and is not a known non-parameter buffer.
  Status CheckAllUsed() const {
    for (const std::string& name : src_.Names()) {
      if (used_.count(name)) continue;
      auto ends = [&](const char* s) {
        const std::string t(s);
        return name.size() >= t.size() && name.compare(name.size() - t.size(), t.size(), t) == 0;
      };
      if (ends("rotary_emb.inv_freq") || ends("attention.bias") || ends("attention.masked_bias")) {
        continue;
      }
      if (name == "lm_head.weight" || name == "embed_out.weight") continue;  // tied: see notes
      return Status::InvalidArgument(src_.Find(name)->file + ": tensor '" + name +
                                     "' is not part of a " + type_ +
                                     " model as attnlab maps it (wrong model_type?)");
    }
    return Status::Ok();
  }

 private:
  const TensorSource& src_;
  std::string type_;
  std::set<std::string> used_;
};

// Layer l's vectors (norm gains, q/k/v biases, q/k norms): the same on both paths.
Status MapLlamaVectors(TensorMapper& t, const ModelConfig& c, int64_t l, const LayerParams& p) {
  const int64_t C = c.d_model, H = c.n_head, Hkv = c.kv_heads(), hd = c.head_dim();
  const int64_t A = c.attn_dim();
  const std::string h = "model.layers." + std::to_string(l) + ".";
  ATTNLAB_RETURN_IF_ERROR(t.Copy(h + "input_layernorm.weight", {C}, p.ln1_w));
  ATTNLAB_RETURN_IF_ERROR(t.Copy(h + "post_attention_layernorm.weight", {C}, p.ln2_w));
  if (p.qkv_b) {
    ATTNLAB_RETURN_IF_ERROR(t.Copy(h + "self_attn.q_proj.bias", {H * hd}, p.qkv_b));
    ATTNLAB_RETURN_IF_ERROR(t.Copy(h + "self_attn.k_proj.bias", {Hkv * hd}, p.qkv_b + A));
    ATTNLAB_RETURN_IF_ERROR(
        t.Copy(h + "self_attn.v_proj.bias", {Hkv * hd}, p.qkv_b + A + Hkv * hd));
  }
  if (p.q_norm) {
    ATTNLAB_RETURN_IF_ERROR(t.Copy(h + "self_attn.q_norm.weight", {hd}, p.q_norm));
    ATTNLAB_RETURN_IF_ERROR(t.Copy(h + "self_attn.k_norm.weight", {hd}, p.k_norm));
  }
  if (p.proj_b) ATTNLAB_RETURN_IF_ERROR(t.Copy(h + "self_attn.o_proj.bias", {C}, p.proj_b));
  if (p.fc_b) {  // gate | up, as the matrix
    const int64_t F = c.hidden();
    ATTNLAB_RETURN_IF_ERROR(t.Copy(h + "mlp.gate_proj.bias", {F}, p.fc_b));
    ATTNLAB_RETURN_IF_ERROR(t.Copy(h + "mlp.up_proj.bias", {F}, p.fc_b + F));
    ATTNLAB_RETURN_IF_ERROR(t.Copy(h + "mlp.down_proj.bias", {C}, p.fcproj_b));
  }
  return Status::Ok();
}

Status MapLlamaLayer(TensorMapper& t, const ModelConfig& c, int64_t l, const LayerParams& p) {
  const int64_t C = c.d_model, H = c.n_head, Hkv = c.kv_heads(), hd = c.head_dim();
  const int64_t A = c.attn_dim(), Q = c.qkv_dim(), F = c.hidden();
  const std::string h = "model.layers." + std::to_string(l) + ".";
  ATTNLAB_RETURN_IF_ERROR(MapLlamaVectors(t, c, l, p));
  ATTNLAB_RETURN_IF_ERROR(t.Transpose(h + "self_attn.q_proj.weight", H * hd, C, p.qkv_w, Q, 0));
  ATTNLAB_RETURN_IF_ERROR(t.Transpose(h + "self_attn.k_proj.weight", Hkv * hd, C, p.qkv_w, Q, A));
  ATTNLAB_RETURN_IF_ERROR(
      t.Transpose(h + "self_attn.v_proj.weight", Hkv * hd, C, p.qkv_w, Q, A + Hkv * hd));
  ATTNLAB_RETURN_IF_ERROR(t.Transpose(h + "self_attn.o_proj.weight", C, A, p.proj_w, C, 0));
  ATTNLAB_RETURN_IF_ERROR(t.Transpose(h + "mlp.gate_proj.weight", F, C, p.fc_w, 2 * F, 0));
  ATTNLAB_RETURN_IF_ERROR(t.Transpose(h + "mlp.up_proj.weight", F, C, p.fc_w, 2 * F, F));
  return t.Transpose(h + "mlp.down_proj.weight", C, F, p.fcproj_w, C, 0);
}

Status MapNeoxLayer(TensorMapper& t, const ModelConfig& c, int64_t l, const LayerParams& p) {
  const int64_t C = c.d_model, H = c.n_head, hd = c.head_dim(), A = c.attn_dim(), F = c.hidden();
  const int64_t Q = c.qkv_dim();
  const std::string h = "gpt_neox.layers." + std::to_string(l) + ".";
  ATTNLAB_RETURN_IF_ERROR(t.Copy(h + "input_layernorm.weight", {C}, p.ln1_w));
  ATTNLAB_RETURN_IF_ERROR(t.Copy(h + "input_layernorm.bias", {C}, p.ln1_b));
  // query_key_value: [3A, C], rows r = h 3hd + part hd + e (part 0 q, 1 k, 2 v) -> column
  // part A + h hd + e of attnlab's q | k | v.
  {
    ATTNLAB_ASSIGN_OR_RETURN(std::vector<float> w,
                             t.Read(h + "attention.query_key_value.weight", {3 * A, C}));
    ATTNLAB_ASSIGN_OR_RETURN(std::vector<float> b,
                             t.Read(h + "attention.query_key_value.bias", {3 * A}));
    for (int64_t head = 0; head < H; ++head) {
      for (int64_t part = 0; part < 3; ++part) {
        for (int64_t e = 0; e < hd; ++e) {
          const int64_t r = head * 3 * hd + part * hd + e, col = part * A + head * hd + e;
          for (int64_t i = 0; i < C; ++i) p.qkv_w[i * Q + col] = w[r * C + i];
          p.qkv_b[col] = b[r];
        }
      }
    }
  }
  ATTNLAB_RETURN_IF_ERROR(t.Transpose(h + "attention.dense.weight", C, A, p.proj_w, C, 0));
  ATTNLAB_RETURN_IF_ERROR(t.Copy(h + "attention.dense.bias", {C}, p.proj_b));
  ATTNLAB_RETURN_IF_ERROR(t.Copy(h + "post_attention_layernorm.weight", {C}, p.ln2_w));
  ATTNLAB_RETURN_IF_ERROR(t.Copy(h + "post_attention_layernorm.bias", {C}, p.ln2_b));
  ATTNLAB_RETURN_IF_ERROR(t.Transpose(h + "mlp.dense_h_to_4h.weight", F, C, p.fc_w, F, 0));
  ATTNLAB_RETURN_IF_ERROR(t.Copy(h + "mlp.dense_h_to_4h.bias", {F}, p.fc_b));
  ATTNLAB_RETURN_IF_ERROR(t.Transpose(h + "mlp.dense_4h_to_h.weight", C, F, p.fcproj_w, C, 0));
  return t.Copy(h + "mlp.dense_4h_to_h.bias", {C}, p.fcproj_b);
}

// The stored-weights path (LoadOptions::keep_stored): layer l's vectors into the store (as
// MapLlamaLayer, whose matrix pointers are null here) and its matrices into *lm, rows in
// nn.Linear's order: q | k | v, o, gate | up, down.
Status MapLlamaLayerMatrices(TensorMapper& t, const ModelConfig& c, int64_t l,
                             const LayerParams& p, MatrixWeights* mw, LayerMatrices* lm) {
  const int64_t C = c.d_model, H = c.n_head, Hkv = c.kv_heads(), hd = c.head_dim();
  const int64_t A = c.attn_dim(), F = c.hidden();
  const std::string h = "model.layers." + std::to_string(l) + ".";
  ATTNLAB_RETURN_IF_ERROR(MapLlamaVectors(t, c, l, p));
  ATTNLAB_RETURN_IF_ERROR(t.AddBlock(h + "self_attn.q_proj.weight", H * hd, C, mw, &lm->qkv));
  ATTNLAB_RETURN_IF_ERROR(t.AddBlock(h + "self_attn.k_proj.weight", Hkv * hd, C, mw, &lm->qkv));
  ATTNLAB_RETURN_IF_ERROR(t.AddBlock(h + "self_attn.v_proj.weight", Hkv * hd, C, mw, &lm->qkv));
  ATTNLAB_RETURN_IF_ERROR(t.AddBlock(h + "self_attn.o_proj.weight", C, A, mw, &lm->proj));
  ATTNLAB_RETURN_IF_ERROR(t.AddBlock(h + "mlp.gate_proj.weight", F, C, mw, &lm->fc));
  ATTNLAB_RETURN_IF_ERROR(t.AddBlock(h + "mlp.up_proj.weight", F, C, mw, &lm->fc));
  return t.AddBlock(h + "mlp.down_proj.weight", C, F, mw, &lm->fcproj);
}

Status MapNeoxLayerMatrices(TensorMapper& t, const ModelConfig& c, int64_t l,
                            const LayerParams& p, MatrixWeights* mw, LayerMatrices* lm) {
  const int64_t C = c.d_model, hd = c.head_dim(), A = c.attn_dim(), F = c.hidden();
  const std::string h = "gpt_neox.layers." + std::to_string(l) + ".";
  ATTNLAB_RETURN_IF_ERROR(t.Copy(h + "input_layernorm.weight", {C}, p.ln1_w));
  ATTNLAB_RETURN_IF_ERROR(t.Copy(h + "input_layernorm.bias", {C}, p.ln1_b));
  {
    // query_key_value rows [H, 3, hd] regrouped to q | k | v (as MapNeoxLayer): an owned copy.
    const std::string qkv = h + "attention.query_key_value.";
    auto source_row = [&](int64_t to) {  // to = part * A + head * hd + e
      const int64_t part = to / A, head = (to % A) / hd, e = to % hd;
      return head * 3 * hd + part * hd + e;
    };
    ATTNLAB_RETURN_IF_ERROR(t.AddBlock(qkv + "weight", 3 * A, C, mw, &lm->qkv, source_row));
    ATTNLAB_ASSIGN_OR_RETURN(std::vector<float> b, t.Read(qkv + "bias", {3 * A}));
    for (int64_t to = 0; to < 3 * A; ++to) p.qkv_b[to] = b[static_cast<size_t>(source_row(to))];
  }
  ATTNLAB_RETURN_IF_ERROR(t.AddBlock(h + "attention.dense.weight", C, A, mw, &lm->proj));
  ATTNLAB_RETURN_IF_ERROR(t.Copy(h + "attention.dense.bias", {C}, p.proj_b));
  ATTNLAB_RETURN_IF_ERROR(t.Copy(h + "post_attention_layernorm.weight", {C}, p.ln2_w));
  ATTNLAB_RETURN_IF_ERROR(t.Copy(h + "post_attention_layernorm.bias", {C}, p.ln2_b));
  ATTNLAB_RETURN_IF_ERROR(t.AddBlock(h + "mlp.dense_h_to_4h.weight", F, C, mw, &lm->fc));
  ATTNLAB_RETURN_IF_ERROR(t.Copy(h + "mlp.dense_h_to_4h.bias", {F}, p.fc_b));
  ATTNLAB_RETURN_IF_ERROR(t.AddBlock(h + "mlp.dense_4h_to_h.weight", C, F, mw, &lm->fcproj));
  return t.Copy(h + "mlp.dense_4h_to_h.bias", {C}, p.fcproj_b);
}

// Every tensor the mapping reads, with its HF shape: checked against the file before anything
// is allocated, so a config.json declaring sizes its files do not have fails cheaply.
std::vector<std::pair<std::string, std::vector<int64_t>>> ExpectedTensors(const ModelConfig& c,
                                                                          bool neox) {
  const int64_t C = c.d_model, V = c.vocab_size, F = c.hidden(), A = c.attn_dim();
  const int64_t KV = c.kv_heads() * c.head_dim(), hd = c.head_dim();
  std::vector<std::pair<std::string, std::vector<int64_t>>> e;
  if (neox) {
    e.push_back({"gpt_neox.embed_in.weight", {V, C}});
    for (int64_t l = 0; l < c.n_layer; ++l) {
      const std::string h = "gpt_neox.layers." + std::to_string(l) + ".";
      for (const char* n : {"input_layernorm.", "post_attention_layernorm."}) {
        e.push_back({h + n + "weight", {C}});
        e.push_back({h + n + "bias", {C}});
      }
      e.push_back({h + "attention.query_key_value.weight", {3 * A, C}});
      e.push_back({h + "attention.query_key_value.bias", {3 * A}});
      e.push_back({h + "attention.dense.weight", {C, A}});
      e.push_back({h + "attention.dense.bias", {C}});
      e.push_back({h + "mlp.dense_h_to_4h.weight", {F, C}});
      e.push_back({h + "mlp.dense_h_to_4h.bias", {F}});
      e.push_back({h + "mlp.dense_4h_to_h.weight", {C, F}});
      e.push_back({h + "mlp.dense_4h_to_h.bias", {C}});
    }
    e.push_back({"gpt_neox.final_layer_norm.weight", {C}});
    e.push_back({"gpt_neox.final_layer_norm.bias", {C}});
    if (!c.tie_embeddings) e.push_back({"embed_out.weight", {V, C}});
    return e;
  }
  e.push_back({"model.embed_tokens.weight", {V, C}});
  for (int64_t l = 0; l < c.n_layer; ++l) {
    const std::string h = "model.layers." + std::to_string(l) + ".";
    e.push_back({h + "input_layernorm.weight", {C}});
    e.push_back({h + "self_attn.q_proj.weight", {A, C}});
    e.push_back({h + "self_attn.k_proj.weight", {KV, C}});
    e.push_back({h + "self_attn.v_proj.weight", {KV, C}});
    if (c.has_qkv_bias()) {
      e.push_back({h + "self_attn.q_proj.bias", {A}});
      e.push_back({h + "self_attn.k_proj.bias", {KV}});
      e.push_back({h + "self_attn.v_proj.bias", {KV}});
    }
    if (c.qk_norm) {
      e.push_back({h + "self_attn.q_norm.weight", {hd}});
      e.push_back({h + "self_attn.k_norm.weight", {hd}});
    }
    e.push_back({h + "self_attn.o_proj.weight", {C, A}});
    if (c.has_proj_bias()) e.push_back({h + "self_attn.o_proj.bias", {C}});
    e.push_back({h + "post_attention_layernorm.weight", {C}});
    e.push_back({h + "mlp.gate_proj.weight", {F, C}});
    e.push_back({h + "mlp.up_proj.weight", {F, C}});
    e.push_back({h + "mlp.down_proj.weight", {C, F}});
    if (c.has_mlp_bias()) {
      e.push_back({h + "mlp.gate_proj.bias", {F}});
      e.push_back({h + "mlp.up_proj.bias", {F}});
      e.push_back({h + "mlp.down_proj.bias", {C}});
    }
  }
  e.push_back({"model.norm.weight", {C}});
  if (!c.tie_embeddings) e.push_back({"lm_head.weight", {V, C}});
  return e;
}

}  // namespace

Result<LoadedModel> LoadHfDecoder(const json& cfg, const std::string& config_name,
                                  const TensorSource& tensors, const std::string& path,
                                  const LoadOptions& options) {
  LoadedModel m;
  ATTNLAB_ASSIGN_OR_RETURN(m.config, HfDecoderConfig(cfg, config_name, &m.notes));
  const ModelConfig& c = m.config;
  const std::string type = cfg["model_type"].get<std::string>();
  const bool neox = IsNeox(type);
  const std::string embed = neox ? "gpt_neox.embed_in.weight" : "model.embed_tokens.weight";
  const std::string head = neox ? "embed_out.weight" : "lm_head.weight";
  const std::string final_norm = neox ? "gpt_neox.final_layer_norm." : "model.norm.";
  for (const auto& [name, shape] : ExpectedTensors(c, neox)) {
    const SourceTensorInfo* info = tensors.Find(name);
    if (!info) {
      return Status::InvalidArgument(path + ": tensor '" + name + "' is missing (a " + type +
                                     " model with this config.json has it)");
    }
    if (info->shape != shape) {
      return Status::InvalidArgument(info->file + ": tensor '" + name + "' has shape " +
                                     ShapeStr(info->shape) + ", config.json implies " +
                                     ShapeStr(shape));
    }
  }
  TensorMapper t(tensors, type);
  const int64_t V = c.vocab_size, C = c.d_model;
  // Matrices as stored when asked for and the file stores any of them in a type other than F32
  // (BF16/F16, GGUF's quantized types; F32 ones among them are mapped as they are).
  std::vector<std::string> matrix_names;
  for (const auto& [name, shape] : ExpectedTensors(c, neox)) {
    if (shape.size() == 2) matrix_names.push_back(name);
  }
  const bool keep16 = options.keep_stored && t.AnyNotF32(matrix_names);
  m.params = ParameterStore(c, keep16 ? ParameterStore::Matrices::kOutside
                                      : ParameterStore::Matrices::kInside);
  const ModelParams& P = m.params.ptrs();
  if (keep16) {
    auto mw = std::make_shared<MatrixWeights>();
    mw->layers.resize(static_cast<size_t>(c.n_layer));
    ATTNLAB_RETURN_IF_ERROR(t.AddBlock(embed, V, C, mw.get(), &mw->embed));
    for (int64_t l = 0; l < c.n_layer; ++l) {
      const LayerParams& p = P.layers[l];
      LayerMatrices* lm = &mw->layers[static_cast<size_t>(l)];
      ATTNLAB_RETURN_IF_ERROR(neox ? MapNeoxLayerMatrices(t, c, l, p, mw.get(), lm)
                                   : MapLlamaLayerMatrices(t, c, l, p, mw.get(), lm));
    }
    if (c.tie_embeddings) {
      mw->head = mw->embed;
    } else {
      ATTNLAB_RETURN_IF_ERROR(t.AddBlock(head, V, C, mw.get(), &mw->head));
    }
    std::map<std::string, int64_t> types;  // matrix rows per stored type
    auto count = [&](const internal::WeightMatrix& w) {
      for (const internal::WeightBlock& b : w.blocks) {
        types[std::string(internal::WeightTypeName(b))] += b.rows;
      }
    };
    count(mw->embed);
    if (!c.tie_embeddings) count(mw->head);
    for (const LayerMatrices& lm : mw->layers) {
      for (const auto* w : {&lm.qkv, &lm.proj, &lm.fc, &lm.fcproj}) count(*w);
    }
    m.meta["weights"] = json{{"linear_rows_by_type", types},
                             {"linear_bytes", mw->bytes()},
                             {"mapped_bytes", mw->mapped_bytes}};
    m.matrices = std::move(mw);
  } else {
    ATTNLAB_RETURN_IF_ERROR(t.Copy(embed, {V, C}, P.wte));
    for (int64_t l = 0; l < c.n_layer; ++l) {
      const LayerParams& p = P.layers[l];
      ATTNLAB_RETURN_IF_ERROR(neox ? MapNeoxLayer(t, c, l, p) : MapLlamaLayer(t, c, l, p));
    }
    if (!c.tie_embeddings) ATTNLAB_RETURN_IF_ERROR(t.Copy(head, {V, C}, P.lm_head));
  }
  ATTNLAB_RETURN_IF_ERROR(t.Copy(final_norm + "weight", {C}, P.lnf_w));
  if (P.lnf_b) ATTNLAB_RETURN_IF_ERROR(t.Copy(final_norm + "bias", {C}, P.lnf_b));
  if (c.tie_embeddings && t.Has(head)) {
    m.notes.push_back(head + " is ignored: config.json says tie_word_embeddings (the head is " +
                      embed + ", as in transformers)");
  }
  ATTNLAB_RETURN_IF_ERROR(t.CheckAllUsed());
  m.format = "hf-" + type;
  m.path = path;
  m.meta["model_type"] = type;
  std::map<std::string, int64_t> dtypes;
  for (const std::string& n : tensors.Names()) dtypes[tensors.Find(n)->dtype]++;
  m.meta["tensor_dtypes"] = dtypes;
  return m;
}

Result<LoadedModel> LoadHfDecoderFolder(const std::string& dir, const LoadOptions& options) {
  const std::string cfg_path = dir + "/config.json";
  ATTNLAB_ASSIGN_OR_RETURN(std::string text, ReadFileToString(cfg_path, int64_t{16} << 20));
  const json cfg = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (cfg.is_discarded() || !cfg.is_object()) {
    return Status::InvalidArgument(cfg_path + ": not a JSON object");
  }
  ATTNLAB_ASSIGN_OR_RETURN(std::unique_ptr<TensorSource> src, OpenSafetensorsSource(dir));
  ATTNLAB_ASSIGN_OR_RETURN(LoadedModel m, LoadHfDecoder(cfg, cfg_path, *src, dir, options));
  // The folder's tokenizer.json (with tokenizer_config.json) travels as a tokenizer spec
  // (tokenizer_spec.h's {"type": "hf"}), so every command finds it without --tokenizer.
  if (KindOf(dir + "/tokenizer.json") == PathKind::kFile) {
    std::error_code ec;
    const std::filesystem::path abs = std::filesystem::absolute(dir, ec);
    m.meta["tokenizer"] = json{{"type", "hf"}, {"path", ec ? dir : abs.lexically_normal().string()}};
  } else {
    m.notes.push_back(dir + " has no tokenizer.json: pass --tokenizer for commands that read text");
  }
  return m;
}

}  // namespace attnlab
