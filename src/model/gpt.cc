// GPT forward and backward. Reads top to bottom like the algorithm box in model_config.h:
// embedding, then per layer the attention sublayer and the MLP sublayer, then the head and the
// loss; Backward() walks the same steps in reverse, each restating its forward.
#include "model/gpt.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <string>

#include "dist/comm.h"
#include "dist/ring_attention.h"
#include "attnlab/attention.h"
#include "attnlab/attention_decode.h"
#include "attnlab/linear_attention.h"
#include "attnlab/thread_pool.h"
#include "engine/gemm.h"
#include "engine/ops.h"
#include "model/key_bias.h"

namespace attnlab {

namespace {

double SecondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// The key bias's view of one attention call: q rows of the [N, Q] qkv buffer, default scale.
internal::KeyBiasShape KeyBiasShapeOf(const ModelConfig& c, int64_t B, int64_t Tm) {
  return {B, Tm, c.n_head, c.kv_heads(), c.head_dim(), c.qkv_dim(),
          1.0f / std::sqrt(static_cast<float>(c.head_dim()))};
}

using internal::LinearBackward;
using internal::LinearForward;

// Deterministic dot product of two [n] arrays (fixed partition, fixed combine order).
double Dot(int64_t n, const float* a, const float* b, ThreadPool& pool) {
  const int64_t blocks = std::min<int64_t>(64, std::max<int64_t>(1, n / 4096));
  std::vector<double> part(blocks, 0.0);
  const int64_t step = (n + blocks - 1) / blocks;
  pool.ParallelFor(blocks, [&](int64_t t, int) {
    double s = 0;
    for (int64_t i = t * step; i < std::min(n, (t + 1) * step); ++i) s += double(a[i]) * b[i];
    part[t] = s;
  });
  double s = 0;
  for (double p : part) s += p;
  return s;
}

// Views of q, k, v inside a token-major [B * Tm, Q] buffer (Q = (H + 2 Hkv) * hd).
struct QkvViews {
  TensorView4<float> q, k, v;
};
QkvViews MakeQkvViews(float* qkv, int64_t B, int64_t Tm, int64_t H, int64_t Hkv, int64_t hd) {
  const int64_t Q = (H + 2 * Hkv) * hd, total = B * Tm * Q;
  auto view = [&](int64_t offset) {
    TensorView4<float> v;
    v.data = qkv + offset;
    v.size = total - offset;
    v.stride_batch = Tm * Q;
    v.stride_token = Q;
    v.stride_head = hd;
    return v;
  };
  return QkvViews{view(0), view(H * hd), view((H + Hkv) * hd)};
}

template <typename T>
TensorView4<const T> Const(const TensorView4<T>& v) {
  TensorView4<const T> c;
  c.data = v.data;
  c.size = v.size;
  c.stride_batch = v.stride_batch;
  c.stride_head = v.stride_head;
  c.stride_token = v.stride_token;
  return c;
}

}  // namespace

Gpt::Gpt(const ModelConfig& config, ParameterStore&& params,
         std::shared_ptr<const MatrixWeights> matrices)
    : config_(config), params_(std::move(params)), mats_(std::move(matrices)) {}

void Gpt::EnsureGradients() {
  if (grads_.infos().empty()) grads_ = ParameterStore(config_);
}

Result<std::unique_ptr<Gpt>> Gpt::Create(const ModelConfig& config) {
  ATTNLAB_RETURN_IF_ERROR(ValidateModelConfig(config));
  return Create(config, ParameterStore(config));
}

namespace {

// The matrices of a model that keeps its weights as stored must have exactly the shapes the
// config implies.
Status CheckMatrices(const ModelConfig& c, const MatrixWeights& m) {
  const int64_t C = c.d_model, V = c.vocab_size;
  auto check = [&](const internal::WeightMatrix& w, int64_t rows, int64_t cols,
                   const std::string& what) -> Status {
    if (w.rows != rows || w.cols != cols) {
      return Status::InvalidArgument("stored weights: " + what + " is [" +
                                     std::to_string(w.rows) + ", " + std::to_string(w.cols) +
                                     "], the configuration implies [" + std::to_string(rows) +
                                     ", " + std::to_string(cols) + "]");
    }
    return internal::ValidateWeightMatrix(w);
  };
  if (c.output_gate || c.sink_token || c.key_bias || c.attention_type != AttentionType::kSoftmax) {
    return Status::InvalidArgument(
        "weights kept as stored are for the released families' decoder (no output gate, sink "
        "token, key bias or linear attention)");
  }
  ATTNLAB_RETURN_IF_ERROR(check(m.embed, V, C, "the embedding"));
  ATTNLAB_RETURN_IF_ERROR(check(m.head, V, C, "the LM head"));
  if (static_cast<int64_t>(m.layers.size()) != c.n_layer) {
    return Status::InvalidArgument("stored weights: " + std::to_string(m.layers.size()) +
                                   " layers, the configuration has " + std::to_string(c.n_layer));
  }
  for (int64_t l = 0; l < c.n_layer; ++l) {
    const LayerMatrices& lm = m.layers[l];
    const std::string h = "layer " + std::to_string(l) + " ";
    ATTNLAB_RETURN_IF_ERROR(check(lm.qkv, c.qkv_dim(), C, h + "qkv"));
    ATTNLAB_RETURN_IF_ERROR(check(lm.proj, C, c.attn_dim(), h + "proj"));
    if (c.mlp) {
      ATTNLAB_RETURN_IF_ERROR(check(lm.fc, c.fc_dim(), C, h + "fc"));
      ATTNLAB_RETURN_IF_ERROR(check(lm.fcproj, C, c.hidden(), h + "fcproj"));
    }
  }
  return Status::Ok();
}

}  // namespace

Result<std::unique_ptr<Gpt>> Gpt::Create(const ModelConfig& config, ParameterStore&& params) {
  return Create(config, std::move(params), nullptr);
}

Result<std::unique_ptr<Gpt>> Gpt::Create(const ModelConfig& config, ParameterStore&& params,
                                         std::shared_ptr<const MatrixWeights> matrices) {
  ATTNLAB_RETURN_IF_ERROR(ValidateModelConfig(config));
  if (matrices) ATTNLAB_RETURN_IF_ERROR(CheckMatrices(config, *matrices));
  const std::vector<ParamInfo> want =
      matrices ? MatrixFreeLayout(config) : ParameterLayout(config);
  const auto& got = params.infos();
  bool same = want.size() == got.size();
  for (size_t i = 0; same && i < want.size(); ++i) {
    same = want[i].name == got[i].name && want[i].shape == got[i].shape &&
           want[i].offset == got[i].offset;
  }
  if (!same) return Status::InvalidArgument("parameters laid out for another configuration");
  std::unique_ptr<Gpt> g(new Gpt(config, std::move(params), std::move(matrices)));
  ATTNLAB_RETURN_IF_ERROR(g->Init());
  return g;
}

Status Gpt::Init() {
  const ModelConfig& config = config_;
  if (config.position == PositionEncoding::kRope) {
    RopeConfig rc = MakeRopeConfig(config);
    if (rc.scaling == RopeScaling::kDynamicHf) rc.dynamic_length = rc.original_context;
    // Sized for the common case; PlaceTokens grows it when a sequence reaches further (a
    // released model's context, 32k-128k positions, would otherwise cost hundreds of MB here).
    const int64_t positions = std::min<int64_t>(
        4096, config.max_positions() * static_cast<int64_t>(std::max(1.0, config.rope_factor)));
    ATTNLAB_ASSIGN_OR_RETURN(RopeTable table, RopeTable::Make(rc, positions));
    rope_ = std::make_unique<RopeTable>(std::move(table));
  }
  return Status::Ok();
}

ThreadPool* Gpt::pool() const { return pool_ ? pool_ : &DefaultThreadPool(); }

namespace {

// The configured normalisation (LayerNorm or RMSNorm) over the N rows of the stream.
struct Norm {
  const ModelConfig& c;
  int64_t N;
  ThreadPool& tp;
  void Forward(const float* x, const float* w, const float* bias, float* y, float* mean,
               float* rstd) const {
    if (c.norm_type == NormType::kRmsNorm) {
      internal::RmsNormForward(N, c.d_model, x, w, c.norm_eps, y, rstd, &tp);
    } else {
      internal::LayerNormForward(N, c.d_model, x, w, bias, c.norm_eps, y, mean, rstd, &tp);
    }
  }
  // dx += J^T dy, dw += ..., db += ... (ops.h).
  void Backward(const float* dy, const float* x, const float* w, const float* mean,
                const float* rstd, float* dx, float* dw, float* db) const {
    if (c.norm_type == NormType::kRmsNorm) {
      internal::RmsNormBackward(N, c.d_model, dy, x, w, rstd, dx, dw, &tp);
    } else {
      internal::LayerNormBackward(N, c.d_model, dy, x, w, mean, rstd, dx, dw, db, &tp);
    }
  }
};

// The residual branch's scale alpha of sublayer 0 (attention) or 1 (MLP): the layer's ReZero
// alpha, else 1 / sqrt(2 L) (inv_sqrt_2l) or 1. The skip path's scale is deepnorm_alpha().
float BranchScale(const ModelConfig& c, const LayerParams& lp, int sublayer) {
  if (lp.rezero) return lp.rezero[sublayer];
  return c.residual_scale == ResidualScale::kInvSqrt2L ? 1.0f / std::sqrt(2.0f * c.n_layer)
                                                       : 1.0f;
}

void ZeroFill(AlignedBuffer<float>& b, int64_t n) { std::fill(b.data(), b.data() + n, 0.0f); }

// One sublayer's residual connection and its post-LN (model_config.h's algorithm box):
//   s = skip x + alpha f (residual) or f;  y = Norm(s) (post-LN) or y = s.
// skip = deepnorm_alpha(), alpha = BranchScale(). All rows [N, C].
struct ResidualLink {
  const float* x = nullptr;  // the sublayer's input (the skip path)
  const float* f = nullptr;  // the branch output (attention projection o, or MLP output m)
  float* s = nullptr;        // the sum, kept for post-LN's backward; null otherwise
  float* y = nullptr;        // the sublayer's output
  float alpha = 1.0f;
  const float *w = nullptr, *b = nullptr;  // post-LN norm parameters
  float *mean = nullptr, *rstd = nullptr;  // [N] post-LN norm statistics
};

void ResidualForward(const Norm& norm, const ResidualLink& r) {
  const ModelConfig& c = norm.c;
  const int64_t C = c.d_model;
  const bool post = c.norm == NormPlacement::kPost;
  const float skip = c.deepnorm_alpha();
  float* s = post ? r.s : r.y;  // without post-LN the output is the sum itself
  norm.tp.ParallelFor(norm.N, [&](int64_t n, int) {
    for (int64_t i = n * C; i < (n + 1) * C; ++i) {
      s[i] = c.residual ? skip * r.x[i] + r.alpha * r.f[i] : r.f[i];
    }
  });
  if (post) norm.Forward(s, r.w, r.b, r.y, r.mean, r.rstd);
}

// The two residual connections of a layer, from its saved activations `a` (Gpt::Layer(l), a
// private type, hence deduced) and parameters: attention (x -> mid, through o, LN1) and MLP
// (mid -> out, through m, LN2).
template <typename LayerActivations>
ResidualLink AttentionResidual(const ModelConfig& c, const LayerParams& lp,
                               const LayerActivations& a) {
  return ResidualLink{a.x,     a.o,      a.sum1,     a.mid,     BranchScale(c, lp, 0),
                      lp.ln1_w, lp.ln1_b, a.ln1_mean, a.ln1_rstd};
}
template <typename LayerActivations>
ResidualLink MlpResidual(const ModelConfig& c, const LayerParams& lp, const LayerActivations& a) {
  return ResidualLink{a.mid,    a.m,      a.sum2,     a.out,     BranchScale(c, lp, 1),
                      lp.ln2_w, lp.ln2_b, a.ln2_mean, a.ln2_rstd};
}

// The reverse, from dy = dL/dy: d_s = Norm^T dy (post-LN, into d_sum, with the norm's weight
// gradients dw, db) or dy; then d_f = alpha d_s (or d_s) and d_x = skip d_s (or 0), both
// WRITTEN; ReZero's d_alpha += <d_s, f> when d_alpha is given.
void ResidualBackward(const Norm& norm, const ResidualLink& r, const float* dy,
                      AlignedBuffer<float>& d_sum, float* dw, float* db, float* d_alpha,
                      float* d_f, float* d_x) {
  const ModelConfig& c = norm.c;
  const int64_t N = norm.N, C = c.d_model;
  const float skip = c.deepnorm_alpha();
  const float* ds = dy;
  if (c.norm == NormPlacement::kPost) {
    ZeroFill(d_sum, N * C);
    norm.Backward(dy, r.s, r.w, r.mean, r.rstd, d_sum.data(), dw, db);
    ds = d_sum.data();
  }
  if (d_alpha && c.residual) *d_alpha += static_cast<float>(Dot(N * C, ds, r.f, norm.tp));
  norm.tp.ParallelFor(N, [&](int64_t n, int) {
    for (int64_t i = n * C; i < (n + 1) * C; ++i) {
      d_f[i] = c.residual ? r.alpha * ds[i] : ds[i];
      d_x[i] = c.residual ? skip * ds[i] : 0.0f;
    }
  });
}

// dst[N, C] += scale * g[N, C]: an auxiliary loss's gradient on an activation, scaled like the
// loss' own (AuxiliaryGradients).
void AddScaled(int64_t N, int64_t C, const float* g, float scale, float* dst, ThreadPool& tp) {
  tp.ParallelFor(N, [&](int64_t n, int) {
    for (int64_t i = n * C; i < (n + 1) * C; ++i) dst[i] += scale * g[i];
  });
}

}  // namespace

Gpt::LayerActivations Gpt::Layer(int64_t l) {
  const ModelConfig& c = config_;
  const int64_t N = N_, C = c.d_model, F = c.hidden(), H = c.n_head, Q = c.qkv_dim();
  const int64_t A = c.attn_dim(), F1 = c.fc_dim(), QK = (H + c.kv_heads()) * c.head_dim();
  Activations& a = acts_;
  // Layer l's slice of a buffer with `per_layer` floats per layer; null where it is not kept.
  // A cached forward keeps one layer's activations (slot 0) and two residual slots (EnsureActivations).
  const int64_t s = one_layer_ ? 0 : l;
  auto slice = [s](AlignedBuffer<float>& b, int64_t per_layer) {
    return b.size() == 0 ? nullptr : b.data() + s * per_layer;
  };
  // R: rows of the row-local buffers (a lean forward's chunk, else N; RowChunk shifts the rest).
  const int64_t R = row_chunk_ > 0 ? std::min(N, row_chunk_) : N;
  LayerActivations v;
  v.x = a.res.data() + ResidualSlot(l) * N * C;
  v.mid = slice(a.mid, R * C);
  v.out = a.res.data() + ResidualSlot(l + 1) * N * C;
  v.ln1 = slice(a.ln1, R * C), v.ln2 = slice(a.ln2, R * C);
  v.sum1 = slice(a.sum1, R * C), v.sum2 = slice(a.sum2, R * C);
  v.ln1_mean = slice(a.ln1_mean, R), v.ln1_rstd = slice(a.ln1_rstd, R);
  v.ln2_mean = slice(a.ln2_mean, R), v.ln2_rstd = slice(a.ln2_rstd, R);
  v.qkv = slice(a.qkv, N * Q);
  v.qk_raw = slice(a.qk_raw, N * QK);
  v.qk_rstd = slice(a.qk_rstd, N * (H + c.kv_heads()));
  v.att = slice(a.att, N * A);
  v.lse = slice(a.lse, N * H);
  v.kb_logit = slice(a.kb_logit, N * H);
  v.gate = slice(a.gate, N * c.gate_dim());
  v.attg = slice(a.attg, R * A);
  v.o = slice(a.o, R * C);
  v.h = slice(a.h, R * F1), v.gelu = slice(a.gelu, R * F);
  v.m = slice(a.m, R * C);
  return v;
}

// Rows [r0, ...) of a lean forward's layer: the tensors that hold every row shifted to r0, the
// row-local ones (one chunk's rows) as they are.
Gpt::LayerActivations Gpt::RowChunk(const LayerActivations& a, int64_t r0) const {
  const ModelConfig& c = config_;
  const int64_t C = c.d_model;
  const auto at = [r0](float* p, int64_t width) { return p ? p + r0 * width : p; };
  LayerActivations s = a;
  s.x = at(a.x, C), s.out = at(a.out, C);
  s.qkv = at(a.qkv, c.qkv_dim());
  s.att = at(a.att, c.attn_dim());
  s.gate = at(a.gate, c.gate_dim());
  return s;
}

// fn(rows, n) over every row at once, or a lean forward's chunks of row_chunk_ rows.
Status Gpt::ForEachRowChunk(const LayerActivations& a,
                            const std::function<Status(const LayerActivations&, int64_t)>& fn) {
  if (row_chunk_ <= 0 || row_chunk_ >= N_) return fn(a, N_);
  for (int64_t r0 = 0; r0 < N_; r0 += row_chunk_) {
    ATTNLAB_RETURN_IF_ERROR(fn(RowChunk(a, r0), std::min(row_chunk_, N_ - r0)));
  }
  return Status::Ok();
}

AttentionParams Gpt::MakeAttentionParams(int64_t l) const {
  const ModelConfig& c = config_;
  AttentionParams ap;
  ap.mask.causal = c.causal;
  ap.mask.mask_first_key = c.mask_first_key;
  if (c.layer_window(l) >= 0) ap.mask.window_left = c.layer_window(l);
  ap.mask.n_sink = c.sink_token ? 1 : 0;  // the dedicated sink token stays visible
  if (c.attention_type == AttentionType::kSparse) ap.mask.n_global = c.attention_global;
  ap.softmax = c.softmax;
  ap.sigmoid_bias = c.effective_sigmoid_bias();
  ap.pool = pool();
  const float* sink = params_.ptrs().layers[l].sink;  // softmax sink_logit only
  if (sink) ap.sink_logits = std::span<const float>(sink, c.n_head);
  return ap;
}

void Gpt::EnsureActivations(int64_t B, int64_t Tm) {
  const ModelConfig& c = config_;
  const int64_t N = B * Tm, C = c.d_model, F = c.hidden(), H = c.n_head;
  const int64_t Q = c.qkv_dim(), A = c.attn_dim(), F1 = c.fc_dim();
  const int64_t Hqk = H + c.kv_heads(), QK = Hqk * c.head_dim();
  B_ = B, Tm_ = Tm, N_ = N;
  // Backward needs every layer's activations; a cached or lean forward (inference: Backward is
  // refused after it) reuses one layer's buffers layer after layer, and two residual slots.
  const int64_t layers = one_layer_ ? 1 : c.n_layer;
  // R: rows of the row-local buffers (one chunk of a lean forward, else every row).
  const int64_t R = row_chunk_ > 0 ? std::min(N, row_chunk_) : N;
  if (!one_layer_) EnsureGradientScratch(N);  // cached and lean Forwards refuse Backward
  const bool raw = c.qk_norm && !one_layer_;  // qk_norm's inputs, for the backward only
  if (N <= capacity_ && layers <= capacity_layers_ && R <= capacity_chunk_ &&
      (!raw || acts_.qk_raw.size() > 0)) {
    return;
  }
  capacity_ = N;
  capacity_layers_ = layers;
  capacity_chunk_ = R;
  const bool pre = c.norm == NormPlacement::kPre, post = c.norm == NormPlacement::kPost;
  Activations& a = acts_;
  a.res.Resize((layers == 1 ? 2 : layers + 1) * N * C);
  a.mid.Resize(layers * R * C);
  a.ln1.Resize(pre ? layers * R * C : 0);
  a.ln2.Resize(pre && c.mlp ? layers * R * C : 0);
  a.sum1.Resize(post ? layers * R * C : 0);
  a.sum2.Resize(post && c.mlp ? layers * R * C : 0);
  for (auto* s : {&a.ln1_mean, &a.ln1_rstd, &a.ln2_mean, &a.ln2_rstd}) s->Resize(layers * R);
  a.qkv.Resize(layers * N * Q);
  a.qk_raw.Resize(raw ? layers * N * QK : 0);
  a.qk_rstd.Resize(raw ? layers * N * Hqk : 0);
  a.att.Resize(layers * N * A);
  a.lse.Resize(layers * N * H);
  a.kb_logit.Resize(c.key_bias ? layers * N * H : 0);
  a.gate.Resize(layers * N * c.gate_dim());
  a.attg.Resize(c.output_gate ? layers * R * A : 0);
  a.o.Resize(layers * R * C);
  a.h.Resize(c.mlp ? layers * R * F1 : 0);
  a.gelu.Resize(c.mlp ? layers * R * F : 0);
  a.m.Resize(c.mlp ? layers * R * C : 0);
  a.lnf.Resize(pre ? N * C : 0);
  a.lnf_mean.Resize(N);
  a.lnf_rstd.Resize(N);
  a.losses.Resize(N);
  // head_.values ([N, V], the largest buffer) is sized by HeadForward: a Forward that skips the
  // head (set_partial_forward) never allocates it.
}

// The backward's per-row scratch (about 24k floats per row for Qwen2.5-0.5B's shapes: 1.6 GB
// at 16k rows), for N rows; only Forwards that Backward may follow allocate it.
void Gpt::EnsureGradientScratch(int64_t N) {
  if (N <= grad_rows_) return;
  grad_rows_ = N;
  const ModelConfig& c = config_;
  const int64_t C = c.d_model, F = c.hidden(), H = c.n_head;
  const int64_t Q = c.qkv_dim(), A = c.attn_dim(), F1 = c.fc_dim();
  const bool pre = c.norm == NormPlacement::kPre, post = c.norm == NormPlacement::kPost;
  Gradients& d = d_;
  for (auto* s : {&d.residual, &d.mid, &d.o, &d.attn_in}) s->Resize(N * C);
  d.attg.Resize(N * A);
  d.parallel.Resize(c.parallel_residual ? N * C : 0);
  d.lnf_out.Resize(pre ? N * C : 0);
  d.sum2.Resize(post && c.mlp ? N * C : 0);
  d.m.Resize(c.mlp ? N * C : 0);
  d.gelu.Resize(c.mlp ? N * F : 0);
  d.h.Resize(c.mlp ? N * F1 : 0);
  d.ln2.Resize(pre && c.mlp ? N * C : 0);
  d.sum1.Resize(post ? N * C : 0);
  d.att.Resize(c.output_gate ? N * A : 0);
  d.gate.Resize(N * c.gate_dim());
  d.qkv.Resize(N * Q);
  d.sink.Resize(H);
}

// ------------------------------------------------------------------------------------------------
// Forward
// ------------------------------------------------------------------------------------------------
Status Gpt::CheckSequenceParallel(Status local, int64_t B, int64_t T,
                                  const KvCache* cache) const {
  const ModelConfig& c = config_;
  const int P = ring_->size(), r = ring_->rank();
  auto refuse = [](const std::string& what) {
    return Status::InvalidArgument("a sequence-parallel forward (ring attention) " + what);
  };
  {  // The ring's own conditions first: they explain a local length error.
    Status ring = Status::Ok();
    if (cache) ring = refuse("takes no KV cache");
    else if (hooks_) ring = refuse("runs without hooks");
    else if (observer_ && !observer_->TakesStripedRows()) {
      ring = refuse("runs only with observers that take striped rows");
    }
    else if (c.sink_token) ring = refuse("does not support a dedicated sink token");
    else if (c.key_bias) ring = refuse("does not support a key bias");
    else if (c.attention_type != AttentionType::kSoftmax) {
      ring = refuse("needs softmax attention (not linear or sparse)");
    } else if (ring_len_ < P) {
      ring = refuse("needs at least one token per rank: " + std::to_string(ring_len_) +
                    " tokens over " + std::to_string(P) + " ranks");
    } else if (ring_len_ > c.context) {
      ring = refuse("of " + std::to_string(ring_len_) + " tokens exceeds the model's context of " +
                    std::to_string(c.context));
    } else if (T != dist::RingLocalLength(ring_len_, r, P)) {
      ring = refuse("on rank " + std::to_string(r) + " of " + std::to_string(P) + " takes " +
                    std::to_string(dist::RingLocalLength(ring_len_, r, P)) + " of the " +
                    std::to_string(ring_len_) + " tokens (every P-th from " + std::to_string(r) +
                    "), not " + std::to_string(T));
    }
    if (!ring.ok()) local = ring;
  }
  // Every rank's verdict and its B, so that none enters the ring alone.
  std::vector<std::string> all;
  ATTNLAB_RETURN_IF_ERROR(ring_->AllGather(
      std::to_string(B) + "|" + (local.ok() ? std::string() : local.ToString()), &all,
      "sequence-parallel forward: agreeing on the inputs"));
  // The distinct problems, each with the ranks that have it.
  std::vector<std::pair<std::string, std::string>> problems;  // (message, "rank 0, 2")
  for (size_t k = 0; k < all.size(); ++k) {
    const size_t bar = all[k].find('|');
    const std::string b = all[k].substr(0, bar), err = all[k].substr(bar + 1);
    std::string msg = err;
    if (msg.empty() && b != all[0].substr(0, all[0].find('|'))) {
      msg = "batch " + b + " where rank 0 has " + all[0].substr(0, all[0].find('|'));
    }
    if (msg.empty()) continue;
    auto it = std::find_if(problems.begin(), problems.end(),
                           [&](const auto& p) { return p.first == msg; });
    if (it == problems.end()) {
      problems.push_back({msg, "rank " + std::to_string(k)});
    } else {
      it->second += ", " + std::to_string(k);
    }
  }
  if (problems.empty()) return Status::Ok();
  std::string errors;
  for (const auto& [msg, ranks] : problems) {
    errors += (errors.empty() ? "" : "; ") + ranks + ": " + msg;
  }
  return Status::InvalidArgument(errors);
}

Status Gpt::CheckForwardInputs(const int32_t* tokens, const int32_t* targets, int64_t B,
                               int64_t T, const KvCache* cache) const {
  const ModelConfig& c = config_;
  if (!tokens) return Status::InvalidArgument("forward needs tokens");
  if (B < 1 || T < 1) return Status::InvalidArgument("forward needs at least one token");
  if (cache && B != 1) return Status::InvalidArgument("a KV-cache forward takes one sequence");
  if (cache && !c.causal) {
    return Status::InvalidArgument("a bidirectional model (causal = false) cannot use a KV cache");
  }
  if (!cache && T > c.context) {
    return Status::InvalidArgument("sequence of " + std::to_string(T) +
                                   " tokens exceeds the model's context of " +
                                   std::to_string(c.context));
  }
  for (int64_t i = 0; i < B * T; ++i) {
    if (tokens[i] < 0 || tokens[i] >= c.vocab_size) {
      return Status::InvalidArgument("token " + std::to_string(tokens[i]) + " at index " +
                                     std::to_string(i) + " is outside the vocabulary [0, " +
                                     std::to_string(c.vocab_size) + ")");
    }
    if (targets && (targets[i] < -1 || targets[i] >= c.vocab_size)) {
      return Status::InvalidArgument("target " + std::to_string(targets[i]) +
                                     " is outside the vocabulary");
    }
  }
  // Linear attention decodes from its running state (LinearAttentionCache), not from keys.
  const bool linear = c.attention_type == AttentionType::kLinear;
  if (cache && linear && !dynamic_cast<const LinearAttentionCache*>(cache)) {
    return Status::InvalidArgument(
        "a linear-attention model decodes with a LinearAttentionCache (its running state), "
        "not a key/value cache; make it with MakeKvCache(config)");
  }
  if (hooks_ && cache) {
    return Status::InvalidArgument("forward hooks run on a full forward, not with a KV cache");
  }
  if (observer_ && linear) {
    return Status::InvalidArgument(
        "forward observers (attnlab analyze) measure softmax attention's probabilities; a "
        "linear-attention model has none to observe");
  }
  return Status::Ok();
}

// Rows of the [N] token and target arrays (the sink row, if any, first in each sequence with
// token and target -1) and the [Tm] positions: 0 .. Tm-1, or the cache's next ones. Grows the
// RoPE table past the positions reached; refuses positions past a learned table.
Status Gpt::PlaceTokens(const int32_t* tokens, const int32_t* targets, int64_t B, int64_t T,
                        int64_t off, KvCache* cache) {
  const ModelConfig& c = config_;
  const int64_t Tm = T + off;
  tokens_.assign(N_, -1);
  targets_.assign(N_, -1);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t t = 0; t < T; ++t) {
      tokens_[b * Tm + t + off] = tokens[b * T + t];
      if (targets) targets_[b * Tm + t + off] = targets[b * T + t];
    }
  }
  if (cache) {
    ATTNLAB_RETURN_IF_ERROR(cache->BeginStep(Tm, &positions_));
  } else {
    positions_.resize(Tm);
    // Sequence parallel: this rank's tokens are every P-th of the global sequence.
    const int64_t first = ring_ ? ring_->rank() : 0, step = ring_ ? ring_->size() : 1;
    for (int64_t t = 0; t < Tm; ++t) positions_[t] = first + t * step;
  }
  if (params_.ptrs().wpe && positions_.back() >= c.max_positions()) {
    return Status::OutOfRange("position " + std::to_string(positions_.back()) +
                              " is past the learned position table (" +
                              std::to_string(c.max_positions()) +
                              " positions); learned positions cannot extrapolate");
  }
  if (rope_) {
    RopeConfig rc = rope_->config();
    int64_t size = rope_->max_position();
    // The sequence's last position (sequence parallel: the global one, the same on every rank,
    // so that dynamic NTK scales every rank's frequencies alike).
    const int64_t last = ring_ && !cache ? ring_len_ - 1 : positions_.back();
    if (last >= size) size = 2 * last + 1;
    // Dynamic NTK (rope.h): this forward's frequencies serve its length, last position + 1
    // (a length up to the original context gives plain RoPE, so only longer ones rebuild).
    if (rc.scaling == RopeScaling::kDynamicHf) {
      rc.dynamic_length = std::max(last + 1, rc.original_context);
    }
    if (size != rope_->max_position() || rc.dynamic_length != rope_->config().dynamic_length) {
      ATTNLAB_ASSIGN_OR_RETURN(RopeTable table, RopeTable::Make(rc, size));
      *rope_ = std::move(table);
    }
  }
  return Status::Ok();
}

// x0 = wte[token] (or the sink token) + wpe[position] (into pos_out instead, when given).
void Gpt::EmbedForward(float* pos_out) {
  const int64_t N = N_, Tm = Tm_, C = config_.d_model;
  const ModelParams& P = params_.ptrs();
  float* x0 = acts_.res.data();
  pool()->ParallelFor(N, [&](int64_t n, int) {
    const int64_t t = n % Tm;
    float* row = x0 + n * C;
    if (tokens_[n] >= 0 && mats_) {
      internal::WeightRowToFloat(mats_->embed, tokens_[n], row);
    } else {
      const float* src = tokens_[n] < 0 ? P.sink_token : P.wte + int64_t(tokens_[n]) * C;
      for (int64_t i = 0; i < C; ++i) row[i] = src[i];
    }
    if (P.wpe) {
      const float* pe = P.wpe + positions_[t] * C;
      if (pos_out) {
        std::memcpy(pos_out + n * C, pe, sizeof(float) * C);
      } else {
        for (int64_t i = 0; i < C; ++i) row[i] += pe[i];
      }
    }
  });
}

// position_every_layer: x += wpe[position] on the stream entering a layer after the first (the
// observer saw the previous layer's output before this, so a forward from layer `first` adds
// them to the rows it is given, as the full forward does).
void Gpt::AddPositions(float* x) {
  const int64_t Tm = Tm_, C = config_.d_model;
  const float* wpe = params_.ptrs().wpe;
  pool()->ParallelFor(N_, [&](int64_t n, int) {
    const float* pe = wpe + positions_[n % Tm] * C;
    float* row = x + n * C;
    for (int64_t i = 0; i < C; ++i) row[i] += pe[i];
  });
}

// The attention sublayer of layer l, from x to mid (Layer(l)):
//   a_in = LN1(x) (pre-LN) or x;  qkv = a_in W_qkv + b (RoPE on q, k);  att = attention;
//   attg = g * att, g = sigmoid(a_in W_g + b_g) (output gate) or att;  o = attg W_proj + b;
//   s1 = skip x + alpha1 o (residual) or o;  mid = LN1(s1) (post-LN) or s1.
// Here up to att (row-local qkv through AttentionInputRows); LayerRowsForward does the rest,
// with the MLP. Fills what the observer sees of the attention (*seen).
Status Gpt::AttentionBlockForward(int64_t l, const AttentionParams& ap, KvCache* cache,
                                  LayerTensors* seen) {
  const ModelConfig& c = config_;
  ThreadPool& tp = *pool();
  const int64_t B = B_, Tm = Tm_, N = N_, C = c.d_model, H = c.n_head;
  const int64_t Hkv = c.kv_heads(), hd = c.head_dim(), Q = c.qkv_dim();
  const LayerParams& lp = params_.ptrs().layers[l];
  const LayerActivations a = Layer(l);
  const bool pre = c.norm == NormPlacement::kPre;

  if (Hooked(HookPoint::kResidPre, l)) {
    ATTNLAB_RETURN_IF_ERROR(RunHook(HookPoint::kResidPre, l, a.x, {B, Tm, C}));
  }
  ATTNLAB_RETURN_IF_ERROR(ForEachRowChunk(a, [&](const LayerActivations& r, int64_t n) {
    return AttentionInputRows(l, r, n);
  }));
  if (c.qk_norm) QkNormForward(l);
  if (hooks_) {
    ATTNLAB_RETURN_IF_ERROR(HookHeads(HookPoint::kQ, l, a.qkv, 0, H));
    ATTNLAB_RETURN_IF_ERROR(HookHeads(HookPoint::kK, l, a.qkv, H * hd, Hkv));
    ATTNLAB_RETURN_IF_ERROR(HookHeads(HookPoint::kV, l, a.qkv, (H + Hkv) * hd, Hkv));
  }
  QkvViews views = MakeQkvViews(a.qkv, B, Tm, H, Hkv, hd);
  if (rope_) ATTNLAB_RETURN_IF_ERROR(RopeForward(*rope_, views.q, B, H, Tm, positions_));
  AttentionTensor k_all = Const(views.k), v_all = Const(views.v);
  AttentionShape shape{B, H, Hkv, Tm, Tm, hd};
  if (cache && c.attention_type != AttentionType::kLinear) {
    // The cache rotates (or not) and stores the new keys; attend to all it holds.
    ATTNLAB_RETURN_IF_ERROR(cache->Update(l, views.k.data, views.v.data, Q, rope_.get(), &k_all,
                                          &v_all, &shape.len_k));
  } else if (rope_) {
    ATTNLAB_RETURN_IF_ERROR(RopeForward(*rope_, views.k, B, Hkv, Tm, positions_));
  }
  if (hooks_ && rope_) {
    ATTNLAB_RETURN_IF_ERROR(HookHeads(HookPoint::kRotQ, l, a.qkv, 0, H));
    ATTNLAB_RETURN_IF_ERROR(HookHeads(HookPoint::kRotK, l, a.qkv, H * hd, Hkv));
  }
  const auto t_att = std::chrono::steady_clock::now();
  ATTNLAB_RETURN_IF_ERROR(AttentionCoreForward(l, ap, cache, shape, Const(views.q), k_all, v_all));
  if (cache && cache->WantsAttention()) {  // a cache that keeps tokens by attention (B = 1)
    ATTNLAB_RETURN_IF_ERROR(cache->ObserveAttention(l, ap, Const(views.q), Tm,
                                                    std::span<const float>(a.lse, H * Tm)));
  }
  if (profile_) profile_->attention += SecondsSince(t_att);
  if (lp.key_bias) {  // the zero-value key's entry joins each row (key_bias.h)
    internal::KeyBiasForward(KeyBiasShapeOf(c, B, Tm), views.q.data, lp.key_bias, a.att, a.lse,
                             a.kb_logit, tp);
  }
  if (hooks_) {
    ATTNLAB_RETURN_IF_ERROR(RowStatHooks(l, ap, shape, Const(views.q), k_all));
    if (Hooked(HookPoint::kZ, l)) ATTNLAB_RETURN_IF_ERROR(RunHook(HookPoint::kZ, l, a.att, {B, Tm, H, hd}));
  }

  seen->layer = l, seen->batch = B, seen->len = Tm, seen->len_k = shape.len_k;
  // A lean forward's normalised inputs exist one chunk at a time: none to hand out.
  const bool chunked = row_chunk_ > 0 && row_chunk_ < N;
  seen->residual_in = a.x, seen->qkv = a.qkv;
  seen->attn_in = chunked ? nullptr : pre ? a.ln1 : a.x;
  seen->k_all = k_all, seen->v_all = v_all;
  if (ring_ && observer_) {  // the observer sees the whole sequence's keys and values
    ATTNLAB_RETURN_IF_ERROR(GatherStripedKv(Const(views.k), Const(views.v), B, Tm, seen));
  }
  seen->attn_out = a.att, seen->lse = a.lse;
  seen->key_bias_logits = lp.key_bias ? a.kb_logit : nullptr;
  seen->gate = c.output_gate ? a.gate : nullptr;
  return Status::Ok();
}

// The attention sublayer's row-local input part on n rows of `a` (all rows, or a lean chunk):
// a_in = LN1(x) (pre-LN) or x, then qkv = a_in W_qkv + b.
Status Gpt::AttentionInputRows(int64_t l, const LayerActivations& a, int64_t n) {
  const ModelConfig& c = config_;
  ThreadPool& tp = *pool();
  const LayerParams& lp = params_.ptrs().layers[l];
  const float* a_in = a.x;
  if (c.norm == NormPlacement::kPre) {
    Norm{c, n, tp}.Forward(a.x, lp.ln1_w, lp.ln1_b, a.ln1, a.ln1_mean, a.ln1_rstd);
    a_in = a.ln1;
  }
  if (mats_) {
    internal::MatmulWeightT(n, a_in, mats_->layers[l].qkv, lp.qkv_b, a.qkv, &tp);
  } else {
    LinearForward(n, c.d_model, c.qkv_dim(), a_in, lp.qkv_w, lp.qkv_b, a.qkv, &tp);
  }
  return Status::Ok();
}

// After the attention, on n rows of `a` (all rows, or a lean chunk): the output gate, the
// projection o = attg W_proj + b and the residual to mid, then the MLP sublayer to out. A lean
// chunk's LN1 (the gate's input) is recomputed: its input part's chunk buffer was reused.
Status Gpt::LayerRowsForward(int64_t l, const LayerActivations& a, int64_t n, bool chunked) {
  const ModelConfig& c = config_;
  ThreadPool& tp = *pool();
  const int64_t C = c.d_model, A = c.attn_dim();
  const LayerParams& lp = params_.ptrs().layers[l];
  const Norm norm{c, n, tp};
  const bool pre = c.norm == NormPlacement::kPre;
  const float* attg = a.att;
  if (c.output_gate) {
    // g = sigmoid(a_in W_g + b_g), [n, G]: headwise (G = H) attg[i, h, :] = g[i, h] att[i, h, :];
    // elementwise (G = A) attg[i, e] = g[i, e] att[i, e].
    if (pre && chunked) norm.Forward(a.x, lp.ln1_w, lp.ln1_b, a.ln1, a.ln1_mean, a.ln1_rstd);
    const float* a_in = pre ? a.ln1 : a.x;
    float* g = a.gate;
    const int64_t G = c.gate_dim();
    LinearForward(n, C, G, a_in, lp.gate_w, lp.gate_b, g, &tp);
    const int64_t per_gate = A / G;  // hd headwise, 1 elementwise
    tp.ParallelFor(n, [&](int64_t i, int) {
      for (int64_t e = 0; e < G; ++e) {
        float& gv = g[i * G + e];
        gv = 1.0f / (1.0f + std::exp(-gv));
        for (int64_t d = e * per_gate; d < (e + 1) * per_gate; ++d) {
          a.attg[i * A + d] = gv * a.att[i * A + d];
        }
      }
    });
    attg = a.attg;
  }
  if (mats_) {
    internal::MatmulWeightT(n, attg, mats_->layers[l].proj, lp.proj_b, a.o, &tp);
  } else {
    LinearForward(n, A, C, attg, lp.proj_w, lp.proj_b, a.o, &tp);
  }
  if (Hooked(HookPoint::kAttnOut, l)) {  // (hooks: never chunked, n = N)
    ATTNLAB_RETURN_IF_ERROR(RunHook(HookPoint::kAttnOut, l, a.o, {B_, Tm_, C}));
  }
  ResidualForward(norm, AttentionResidual(c, lp, a));
  if (Hooked(HookPoint::kResidMid, l)) {
    ATTNLAB_RETURN_IF_ERROR(RunHook(HookPoint::kResidMid, l, a.mid, {B_, Tm_, C}));
  }
  return MlpRowsForward(l, a, n);
}

// Every rank's keys and values of the sequence-parallel forward's layer, in position order, into
// striped_kv_ and seen (each rank writes its striped rows into zeros and the all-reduce adds
// them: x + 0 is exact, so every rank holds the same bits).
Status Gpt::GatherStripedKv(const AttentionTensor& k, const AttentionTensor& v, int64_t B,
                            int64_t Tm, LayerTensors* seen) {
  const ModelConfig& c = config_;
  const int64_t Hkv = c.kv_heads(), hd = c.head_dim(), N = ring_len_;
  const int64_t P = ring_->size(), r = ring_->rank(), one = B * Hkv * N * hd;
  striped_kv_.assign(2 * one, 0.0f);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < Hkv; ++h) {
      for (int64_t t = 0; t < Tm; ++t) {
        const int64_t at = ((b * Hkv + h) * N + r + P * t) * hd;
        std::copy_n(k.at(b, h, t), hd, striped_kv_.data() + at);
        std::copy_n(v.at(b, h, t), hd, striped_kv_.data() + one + at);
      }
    }
  }
  ATTNLAB_RETURN_IF_ERROR(ring_->AllReduceSum(
      std::span<float>(striped_kv_), "sequence-parallel forward: gathering keys for the observer"));
  seen->k_all = ContiguousView<const float>(striped_kv_.data(), B, Hkv, N, hd);
  seen->v_all = ContiguousView<const float>(striped_kv_.data() + one, B, Hkv, N, hd);
  seen->len_k = N;
  seen->stripe_rank = r, seen->stripe_ranks = P;
  return Status::Ok();
}

// att = attention(q, k, v) of layer l into Layer(l).att ([N, H, hd]) and its row statistics
// into .lse: softmax attention (flash), linear attention (its denominators in lse), or a 16-bit
// cache's one-token decode.
Status Gpt::AttentionCoreForward(int64_t l, const AttentionParams& ap, KvCache* cache,
                                 const AttentionShape& shape, const AttentionTensor& q,
                                 const AttentionTensor& k_all, const AttentionTensor& v_all) {
  const ModelConfig& c = config_;
  ThreadPool& tp = *pool();
  const int64_t B = B_, Tm = Tm_, N = N_, H = c.n_head, Hkv = c.kv_heads(), hd = c.head_dim();
  const LayerActivations a = Layer(l);
  if (c.attention_type == AttentionType::kLinear) {
    if (Hooked(HookPoint::kAttnScores, l) || Hooked(HookPoint::kPattern, l)) {
      return Status::InvalidArgument(
          "a linear-attention model has no attention scores or pattern to hook");
    }
    // O_i = sum_{j <= i} phi(q_i).phi(k_j) v_j / (sum_j phi(q_i).phi(k_j) + eps), continuing
    // the cache's state when decoding (updated in place); one token runs the recurrence.
    // CheckForwardInputs made sure a cache here is a LinearAttentionCache.
    auto* state_cache = static_cast<LinearAttentionCache*>(cache);
    LinearAttentionParams lap;
    lap.pool = &tp;
    const std::span<float> state = state_cache ? state_cache->State(l) : std::span<float>();
    const auto kernel =
        state_cache && Tm == 1 ? LinearAttentionForwardRecurrent : LinearAttentionForwardChunked;
    return kernel(shape, lap, q, k_all, v_all, TokenMajorView(a.att, B, H, Tm, hd),
                  std::span<float>(a.lse, N * H), state, state);
  }
  if (cache && !k_all.data) {
    // A 16-bit cache's one-token step (kv_cache.h): attend over its own storage. B = T = 1,
    // so q is the [H, hd] head rows of the token and att its [H, hd] output.
    KvView kh, vh;
    int64_t n = 0;
    if (!cache->DecodeViews(l, &kh, &vh, &n)) {
      return Status::Internal("the KV cache handed out no keys and has no decode views");
    }
    DecodeParams dp;
    dp.pool = &tp;
    return AttentionDecode(DecodeShape{H, Hkv, n, hd}, dp, std::span<const float>(q.data, H * hd),
                           kh, vh, std::span<float>(a.att, H * hd), std::span<float>(a.lse, H));
  }
  if (ring_) {
    return dist::RingAttentionForward(*ring_, dist::RingShape{B, H, Hkv, ring_len_, hd}, ap, q,
                                      k_all, v_all, TokenMajorView(a.att, B, H, Tm, hd),
                                      std::span<float>(a.lse, N * H));
  }
  if (Hooked(HookPoint::kAttnScores, l) || Hooked(HookPoint::kPattern, l)) {
    if (c.key_bias) {
      return Status::InvalidArgument(
          "a key_bias model's scores and pattern include the bias entry, which the explicit "
          "steps do not compute: hook lse, attn_out or the residual stream instead");
    }
    return ExplicitAttentionForward(l, ap, shape, q, k_all, v_all);
  }
  return AttentionForwardFlash(shape, ap, q, k_all, v_all, TokenMajorView(a.att, B, H, Tm, hd),
                               std::span<float>(a.lse, N * H));
}

// The MLP sublayer of layer l on N rows of `a`, from mid to out:
//   m_in = LN2(mid) (pre-LN) or mid;  m = gelu(m_in W_fc + b) W_proj + b;
//   s2 = skip mid + alpha2 m (residual) or m;  out = LN2(s2) (post-LN) or s2.
// Without an MLP, out = mid.
Status Gpt::MlpRowsForward(int64_t l, const LayerActivations& a, int64_t N) {
  const ModelConfig& c = config_;
  ThreadPool& tp = *pool();
  const int64_t C = c.d_model, F = c.hidden();
  if (!c.mlp) {
    std::memcpy(a.out, a.mid, sizeof(float) * N * C);
    return Status::Ok();
  }
  const LayerParams& lp = params_.ptrs().layers[l];
  const Norm norm{c, N, tp};
  const bool pre = c.norm == NormPlacement::kPre;
  const float* m_in = a.mid;
  if (pre) {  // parallel residual (GPT-NeoX): the MLP reads the layer's input, not mid
    norm.Forward(c.parallel_residual ? a.x : a.mid, lp.ln2_w, lp.ln2_b, a.ln2, a.ln2_mean,
                 a.ln2_rstd);
    m_in = a.ln2;
  }
  if (mats_) {
    internal::MatmulWeightT(N, m_in, mats_->layers[l].fc, lp.fc_b, a.h, &tp);
  } else {
    LinearForward(N, C, c.fc_dim(), m_in, lp.fc_w, lp.fc_b, a.h, &tp);
  }
  switch (c.mlp_activation) {
    case MlpActivation::kGeluTanh: internal::GeluForward(N * F, a.h, a.gelu, &tp); break;
    case MlpActivation::kGeluErf: internal::GeluErfForward(N * F, a.h, a.gelu, &tp); break;
    case MlpActivation::kSwiGlu: internal::SwigluForward(N, F, a.h, a.gelu, &tp); break;
  }
  if (mats_) {
    internal::MatmulWeightT(N, a.gelu, mats_->layers[l].fcproj, lp.fcproj_b, a.m, &tp);
  } else {
    LinearForward(N, F, C, a.gelu, lp.fcproj_w, lp.fcproj_b, a.m, &tp);
  }
  if (Hooked(HookPoint::kMlpOut, l)) {  // (hooks: never chunked, N = N_)
    ATTNLAB_RETURN_IF_ERROR(RunHook(HookPoint::kMlpOut, l, a.m, {B_, Tm_, C}));
  }
  ResidualForward(norm, MlpResidual(c, lp, a));
  return Status::Ok();
}

// Qwen3's per-head RMSNorm of q and k (qk_norm), in place on layer l's qkv before RoPE: each
// of the H query and Hkv key head vectors of a row (contiguous: q | k lead the row) becomes
// x * rstd * w, rstd = 1 / sqrt(mean(x^2) + eps), w = q_norm or k_norm ([hd]). The raw vectors
// and rstd are kept for the backward.
void Gpt::QkNormForward(int64_t l) {
  const ModelConfig& c = config_;
  const int64_t N = N_, H = c.n_head, Hqk = H + c.kv_heads(), hd = c.head_dim();
  const int64_t Q = c.qkv_dim();
  const LayerParams& lp = params_.ptrs().layers[l];
  const LayerActivations a = Layer(l);
  pool()->ParallelFor(N, [&](int64_t n, int) {
    float* row = a.qkv + n * Q;
    if (a.qk_raw) std::memcpy(a.qk_raw + n * Hqk * hd, row, sizeof(float) * Hqk * hd);
    for (int64_t h = 0; h < Hqk; ++h) {
      float* x = row + h * hd;
      const float* w = h < H ? lp.q_norm : lp.k_norm;
      float ss = 0;
      for (int64_t e = 0; e < hd; ++e) ss += x[e] * x[e];
      const float r = 1.0f / std::sqrt(ss / static_cast<float>(hd) + c.norm_eps);
      if (a.qk_rstd) a.qk_rstd[n * Hqk + h] = r;
      for (int64_t e = 0; e < hd; ++e) x[e] = x[e] * r * w[e];
    }
  });
}

// Its reverse, in place on d_.qkv's q | k part (gradients w.r.t. the normalised vectors on entry,
// w.r.t. the raw ones on exit): with xhat = x r and g = w * dy, dx = r (g - xhat mean(xhat g)),
// dw += sum over rows of dy * xhat (rows in order: deterministic).
void Gpt::QkNormBackward(int64_t l) {
  const ModelConfig& c = config_;
  const int64_t N = N_, H = c.n_head, Hqk = H + c.kv_heads(), hd = c.head_dim();
  const int64_t Q = c.qkv_dim();
  const LayerParams& lp = params_.ptrs().layers[l];
  const LayerParams& lg = grads_.ptrs().layers[l];
  const LayerActivations a = Layer(l);
  float* dq = d_.qkv.data();
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t h = 0; h < Hqk; ++h) {
      const float* x = a.qk_raw + (n * Hqk + h) * hd;
      const float* dy = dq + n * Q + h * hd;
      const float r = a.qk_rstd[n * Hqk + h];
      float* dw = h < H ? lg.q_norm : lg.k_norm;
      for (int64_t e = 0; e < hd; ++e) dw[e] += dy[e] * x[e] * r;
    }
  }
  pool()->ParallelFor(N, [&](int64_t n, int) {
    for (int64_t h = 0; h < Hqk; ++h) {
      const float* x = a.qk_raw + (n * Hqk + h) * hd;
      float* dy = dq + n * Q + h * hd;
      const float r = a.qk_rstd[n * Hqk + h];
      const float* w = h < H ? lp.q_norm : lp.k_norm;
      float dot = 0;
      for (int64_t e = 0; e < hd; ++e) dot += x[e] * r * w[e] * dy[e];
      dot /= static_cast<float>(hd);
      for (int64_t e = 0; e < hd; ++e) dy[e] = r * (w[e] * dy[e] - x[e] * r * dot);
    }
  });
}

// logits = LN_f(x_L) W_head^T (W_head is [V, C]); with targets, the probabilities (in place)
// and the mean cross-entropy over counted rows.
Status Gpt::HeadForward(const int32_t* targets, double* loss) {
  const ModelConfig& c = config_;
  ThreadPool& tp = *pool();
  const int64_t N = N_, C = c.d_model, V = c.vocab_size;
  const ModelParams& P = params_.ptrs();
  Activations& a = acts_;
  const float* xf = a.res.data() + ResidualSlot(c.n_layer) * N * C;
  if (c.norm == NormPlacement::kPre) {
    Norm{c, N, tp}.Forward(xf, P.lnf_w, P.lnf_b, a.lnf.data(), a.lnf_mean.data(),
                           a.lnf_rstd.data());
    xf = a.lnf.data();
    if (Hooked(HookPoint::kLnFinal, -1)) {
      ATTNLAB_RETURN_IF_ERROR(RunHook(HookPoint::kLnFinal, -1, a.lnf.data(), {B_, Tm_, C}));
    }
  }
  if (head_.values.size() < static_cast<size_t>(N * V)) head_.values.Resize(N * V);
  if (mats_) {
    internal::MatmulWeightT(N, xf, mats_->head, nullptr, head_.values.data(), &tp);
  } else {
    internal::Sgemm(internal::Trans::kNo, internal::Trans::kYes, N, V, C, 1.0f, xf, C, P.lm_head,
                    C, 0.0f, head_.values.data(), V, &tp);
  }
  head_.holds = HeadBuffer::Holds::kLogits;
  if (targets) {
    const double mean = internal::SoftmaxCrossEntropyForward(
        N, V, head_.values.data(), targets_.data(), a.losses.data(), &tp);
    head_.holds = HeadBuffer::Holds::kProbabilities;
    if (loss) *loss = mean;
  } else if (loss) {
    *loss = 0.0;
  }
  return Status::Ok();
}

Status Gpt::Forward(const int32_t* tokens, const int32_t* targets, int64_t B, int64_t T,
                    double* loss, KvCache* cache) {
  if (ring_) {
    ATTNLAB_RETURN_IF_ERROR(
        CheckSequenceParallel(CheckForwardInputs(tokens, targets, B, T, cache), B, T, cache));
  } else {
    ATTNLAB_RETURN_IF_ERROR(CheckForwardInputs(tokens, targets, B, T, cache));
  }
  const ModelConfig& c = config_;
  const int64_t off = c.sink_token && (!cache || cache->size() == 0) ? 1 : 0;
  const auto t_start = std::chrono::steady_clock::now();
  // A lean sequence-parallel forward (set_partial_forward): diagnostics over one long sequence.
  const bool lean = ring_ && !cache && !targets && skip_head_;
  one_layer_ = cache != nullptr || lean;
  row_chunk_ = lean ? lean_chunk_rows_ : 0;
  const int64_t first = cache ? start_layer_ : 0;
  const int64_t rows_before = cache ? cache->size() : 0;
  if (first < 0 || first >= c.n_layer) {
    return Status::InvalidArgument("the forward's first layer " + std::to_string(first) +
                                   " is outside [0, " + std::to_string(c.n_layer) + ")");
  }
  if (first > 0 && B != 1) {
    return Status::InvalidArgument("a forward from layer " + std::to_string(first) +
                                   " takes one sequence, not " + std::to_string(B));
  }
  EnsureActivations(B, T + off);
  has_targets_ = targets != nullptr && !cache;
  input_grad_ready_ = false;
  ATTNLAB_RETURN_IF_ERROR(PlaceTokens(tokens, targets, B, T, off, cache));
  if (first > 0) {
    // The stream entering layer `first` for these rows, from set_forward_start.
    if (!start_residual_ || rows_before + N_ > start_rows_) {
      return Status::InvalidArgument(
          "a forward from layer " + std::to_string(first) + " needs the residual rows " +
          std::to_string(rows_before) + ".." + std::to_string(rows_before + N_ - 1) + ", but " +
          std::to_string(start_rows_) + " were given");
    }
    std::memcpy(acts_.res.data() + ResidualSlot(first) * N_ * c.d_model,
                start_residual_ + rows_before * c.d_model, sizeof(float) * N_ * c.d_model);
  } else if (Hooked(HookPoint::kEmbed, -1) || Hooked(HookPoint::kPosEmbed, -1)) {
    ATTNLAB_RETURN_IF_ERROR(EmbedForwardHooked());
  } else {
    EmbedForward();
  }
  const int64_t layers =
      (cache || lean) && partial_layers_ > 0 ? std::min(partial_layers_, c.n_layer) : c.n_layer;
  for (int64_t l = first; l < layers; ++l) {
    if (c.position_every_layer && l > 0) AddPositions(Layer(l).x);
    const AttentionParams ap = MakeAttentionParams(l);
    LayerTensors seen;
    ATTNLAB_RETURN_IF_ERROR(AttentionBlockForward(l, ap, cache, &seen));
    const bool chunked = row_chunk_ > 0 && row_chunk_ < N_;
    ATTNLAB_RETURN_IF_ERROR(ForEachRowChunk(Layer(l), [&](const LayerActivations& r, int64_t n) {
      return LayerRowsForward(l, r, n, chunked);
    }));
    if (Hooked(HookPoint::kResidPost, l)) {
      ATTNLAB_RETURN_IF_ERROR(RunHook(HookPoint::kResidPost, l, Layer(l).out, {B, Tm_, c.d_model}));
    }
    if (observer_) {
      seen.residual_out = Layer(l).out;
      seen.attention = &ap;
      const auto t0 = std::chrono::steady_clock::now();
      observer_->OnLayer(seen);
      if (profile_) profile_->observer += SecondsSince(t0);
    }
  }
  if ((cache || lean) && (skip_head_ || layers < c.n_layer)) {
    if (loss) *loss = 0.0;  // set_partial_forward: no logits
  } else {
    ATTNLAB_RETURN_IF_ERROR(HeadForward(targets, loss));
  }
  if (cache) cache->EndStep();
  if (profile_) profile_->total += SecondsSince(t_start);
  return Status::Ok();
}

// ------------------------------------------------------------------------------------------------
// Backward
// ------------------------------------------------------------------------------------------------

// From the loss to d_.residual = dL/dx_L (the stream leaving the last layer). In the forward
// pass: loss = mean over counted rows of -log p[n, t_n], logits = xf W_head^T, xf = LN_f(x_L)
// (pre-LN) or x_L. Returns false when no gradient flows (no counted row, no auxiliary loss).
bool Gpt::HeadBackward(float grad_scale, const AuxiliaryGradients* aux) {
  const ModelConfig& c = config_;
  ThreadPool& tp = *pool();
  const int64_t N = N_, C = c.d_model, V = c.vocab_size, L = c.n_layer;
  const ModelParams& P = params_.ptrs();
  const ModelParams& G = grads_.ptrs();
  Activations& a = acts_;
  int64_t count = 0;
  for (int64_t n = 0; n < N; ++n) count += targets_[n] >= 0;
  // Sequence parallel: a rank without targets still takes part in the ring's transfers.
  if (count == 0 && !ring_ &&
      !(aux && (aux->residual || aux->attention || aux->qkv || aux->logits))) {
    return false;
  }
  float* dlogits = head_.values.data();  // probabilities -> dL/dlogits in place (HeadBuffer)
  if (count == 0) {
    std::fill(dlogits, dlogits + N * V, 0.0f);
  } else {
    internal::SoftmaxCrossEntropyBackward(N, V, dlogits, targets_.data(), grad_scale / count,
                                          dlogits, &tp);
  }
  if (aux && aux->logits) AddScaled(N, V, aux->logits, grad_scale, dlogits, tp);
  head_.holds = HeadBuffer::Holds::kLogitGradients;
  // dxf = dlogits W_head, dW_head += dlogits^T xf.
  const bool pre = c.norm == NormPlacement::kPre;
  const float* xL = a.res.data() + L * N * C;
  const float* xf = pre ? a.lnf.data() : xL;
  float* dxf = pre ? d_.lnf_out.data() : d_.residual.data();
  internal::Sgemm(internal::Trans::kNo, internal::Trans::kNo, N, C, V, 1.0f, dlogits, V, P.lm_head,
                  C, 0.0f, dxf, C, &tp);
  internal::Sgemm(internal::Trans::kYes, internal::Trans::kNo, V, C, N, 1.0f, dlogits, V, xf, C,
                  1.0f, G.lm_head, C, &tp);
  if (pre) {
    ZeroFill(d_.residual, N * C);
    Norm{c, N, tp}.Backward(dxf, xL, P.lnf_w, a.lnf_mean.data(), a.lnf_rstd.data(),
                            d_.residual.data(), G.lnf_w, G.lnf_b);
  }
  return true;
}

// The MLP sublayer of layer l in reverse: from d_.residual = dL/d out to d_.mid = dL/d mid
// (forward: MlpBlockForward).
void Gpt::MlpBlockBackward(int64_t l) {
  const ModelConfig& c = config_;
  ThreadPool& tp = *pool();
  const int64_t N = N_, C = c.d_model, F = c.hidden();
  Gradients& d = d_;
  if (!c.mlp) {  // out = mid
    std::memcpy(d.mid.data(), d.residual.data(), sizeof(float) * N * C);
    return;
  }
  const LayerParams& lp = params_.ptrs().layers[l];
  const LayerParams& lg = grads_.ptrs().layers[l];
  const LayerActivations a = Layer(l);
  const Norm norm{c, N, tp};
  const bool pre = c.norm == NormPlacement::kPre;
  // out = LN2(s2) or s2, s2 = skip mid + alpha2 m (or m): d_m, and d_mid's skip-path part.
  float* dm = d.m.data();
  float* dmid = d.mid.data();
  ResidualBackward(norm, MlpResidual(c, lp, a), d.residual.data(), d.sum2, lg.ln2_w, lg.ln2_b,
                   lg.rezero ? lg.rezero + 1 : nullptr, dm, dmid);
  // m = act(h) W_proj + b; act = GELU(h) or SwiGLU(h); h = m_in W_fc + b.
  const int64_t F1 = c.fc_dim();
  ZeroFill(d.gelu, N * F);
  LinearBackward(N, F, C, a.gelu, lp.fcproj_w, dm, d.gelu.data(), lg.fcproj_w, lg.fcproj_b, &tp);
  ZeroFill(d.h, N * F1);
  switch (c.mlp_activation) {
    case MlpActivation::kGeluTanh:
      internal::GeluBackward(N * F, a.h, d.gelu.data(), d.h.data(), &tp);
      break;
    case MlpActivation::kGeluErf:
      internal::GeluErfBackward(N * F, a.h, d.gelu.data(), d.h.data(), &tp);
      break;
    case MlpActivation::kSwiGlu:
      internal::SwigluBackward(N, F, a.h, d.gelu.data(), d.h.data(), &tp);
      break;
  }
  if (pre) {  // m_in = LN2(mid): d_mid += LN2^T d_m_in (parallel residual: LN2(x), d.parallel)
    ZeroFill(d.ln2, N * C);
    LinearBackward(N, C, F1, a.ln2, lp.fc_w, d.h.data(), d.ln2.data(), lg.fc_w, lg.fc_b, &tp);
    const float* m_src = a.mid;
    float* d_src = dmid;
    if (c.parallel_residual) {
      ZeroFill(d.parallel, N * C);
      m_src = a.x, d_src = d.parallel.data();
    }
    norm.Backward(d.ln2.data(), m_src, lp.ln2_w, a.ln2_mean, a.ln2_rstd, d_src, lg.ln2_w,
                  lg.ln2_b);
  } else {  // m_in = mid
    LinearBackward(N, C, F1, a.mid, lp.fc_w, d.h.data(), dmid, lg.fc_w, lg.fc_b, &tp);
  }
}

// The attention sublayer of layer l in reverse: from d_.mid = dL/d mid to d_.residual = dL/d x
// (forward: AttentionBlockForward), adding the auxiliary gradients on att and on x.
Status Gpt::AttentionBlockBackward(int64_t l, const AttentionParams& ap, float grad_scale,
                                   const AuxiliaryGradients* aux) {
  const ModelConfig& c = config_;
  ThreadPool& tp = *pool();
  const int64_t B = B_, Tm = Tm_, N = N_, C = c.d_model, H = c.n_head, A = c.attn_dim();
  const int64_t Hkv = c.kv_heads(), hd = c.head_dim(), Q = c.qkv_dim();
  const LayerParams& lp = params_.ptrs().layers[l];
  const LayerParams& lg = grads_.ptrs().layers[l];
  const LayerActivations a = Layer(l);
  const Norm norm{c, N, tp};
  const bool pre = c.norm == NormPlacement::kPre;
  Gradients& d = d_;
  // mid = LN1(s1) or s1, s1 = skip x + alpha1 o (or o): d_o, and dx's skip-path part.
  float* d_o = d.o.data();
  float* dx = d.residual.data();
  ResidualBackward(norm, AttentionResidual(c, lp, a), d.mid.data(), d.sum1, lg.ln1_w, lg.ln1_b,
                   lg.rezero, d_o, dx);
  // o = attg W_proj + b.
  const float* attg = c.output_gate ? a.attg : a.att;
  float* d_attg = d.attg.data();
  ZeroFill(d.attg, N * A);
  LinearBackward(N, A, C, attg, lp.proj_w, d_o, d_attg, lg.proj_w, lg.proj_b, &tp);
  const float* a_in = pre ? a.ln1 : a.x;
  float* d_ain = d.attn_in.data();
  ZeroFill(d.attn_in, N * C);
  float* d_att = d_attg;  // without a gate, attg is att
  if (c.output_gate) {
    // attg = g * att, g = sigmoid(z), z = a_in W_g + b_g, each gate e covering the channels
    // [e * per_gate, (e + 1) * per_gate) (a head's hd headwise, one elementwise):
    // d_att = g * d_attg; dz_e = (sum over its channels of d_attg * att) g (1 - g).
    d_att = d.att.data();
    float* dz = d.gate.data();
    const int64_t G = c.gate_dim(), per_gate = A / G;
    tp.ParallelFor(N, [&](int64_t n, int) {
      for (int64_t e = 0; e < G; ++e) {
        const float gv = a.gate[n * G + e];
        float dg = 0;
        for (int64_t i = n * A + e * per_gate; i < n * A + (e + 1) * per_gate; ++i) {
          dg += d_attg[i] * a.att[i];
          d_att[i] = gv * d_attg[i];
        }
        dz[n * G + e] = dg * gv * (1.0f - gv);
      }
    });
    LinearBackward(N, C, G, a_in, lp.gate_w, dz, d_ain, lg.gate_w, lg.gate_b, &tp);
  }
  if (aux && aux->attention) AddScaled(N, A, aux->attention + l * N * A, grad_scale, d_att, tp);
  // Attention core: dq, dk, dv into d.qkv (the interleaved layout of qkv).
  QkvViews views = MakeQkvViews(a.qkv, B, Tm, H, Hkv, hd);
  QkvViews dviews = MakeQkvViews(d.qkv.data(), B, Tm, H, Hkv, hd);
  const AttentionShape shape{B, H, Hkv, Tm, Tm, hd};
  const auto att_view = TokenMajorView<const float>(a.att, B, H, Tm, hd);
  const auto datt_view = TokenMajorView<const float>(d_att, B, H, Tm, hd);
  const std::span<const float> lse(a.lse, N * H);
  if (c.attention_type == AttentionType::kLinear) {
    // In the forward pass this was the chunked linear attention; lse holds its denominators.
    LinearAttentionParams lap;
    lap.pool = &tp;
    ATTNLAB_RETURN_IF_ERROR(LinearAttentionBackwardChunked(
        shape, lap, Const(views.q), Const(views.k), Const(views.v), att_view, lse, datt_view,
        dviews.q, dviews.k, dviews.v));
  } else if (ring_) {  // sequence parallel: dK, dV travel the ring home (d sink: this rank's share)
    ATTNLAB_RETURN_IF_ERROR(dist::RingAttentionBackward(
        *ring_, dist::RingShape{B, H, Hkv, ring_len_, hd}, ap, Const(views.q), Const(views.k),
        Const(views.v), att_view, lse, datt_view, dviews.q, dviews.k, dviews.v,
        lp.sink ? std::span<float>(d.sink.data(), H) : std::span<float>()));
  } else {
    ATTNLAB_RETURN_IF_ERROR(AttentionBackwardFlash(
        shape, ap, Const(views.q), Const(views.k), Const(views.v), att_view, lse, datt_view,
        dviews.q, dviews.k, dviews.v,
        lp.sink ? std::span<float>(d.sink.data(), H) : std::span<float>()));
  }
  if (lg.sink) {
    for (int64_t h = 0; h < H; ++h) lg.sink[h] += d.sink[h];
  }
  if (lp.key_bias) {  // att is Y and lse is lse' here, as the engine's backward wanted
    internal::KeyBiasBackward(KeyBiasShapeOf(c, B, Tm), views.q.data, lp.key_bias, a.att, d_att,
                              a.lse, a.kb_logit, dviews.q.data, lg.key_bias, tp);
  }
  if (aux && aux->qkv) AddScaled(N, Q, aux->qkv + l * N * Q, grad_scale, d.qkv.data(), tp);
  if (rope_) {
    ATTNLAB_RETURN_IF_ERROR(RopeBackward(*rope_, dviews.q, B, H, Tm, positions_));
    ATTNLAB_RETURN_IF_ERROR(RopeBackward(*rope_, dviews.k, B, Hkv, Tm, positions_));
  }
  if (c.qk_norm) QkNormBackward(l);
  // qkv = a_in W_qkv + b.
  LinearBackward(N, C, Q, a_in, lp.qkv_w, d.qkv.data(), d_ain, lg.qkv_w, lg.qkv_b, &tp);
  if (pre) {  // a_in = LN1(x): dx += LN1^T d_ain
    norm.Backward(d_ain, a.x, lp.ln1_w, a.ln1_mean, a.ln1_rstd, dx, lg.ln1_w, lg.ln1_b);
  } else {  // a_in = x
    tp.ParallelFor(N, [&](int64_t n, int) {
      for (int64_t i = n * C; i < (n + 1) * C; ++i) dx[i] += d_ain[i];
    });
  }
  if (c.parallel_residual) {  // the MLP's branch read x too (MlpBlockBackward)
    AddScaled(N, C, d.parallel.data(), 1.0f, dx, tp);
  }
  if (aux && aux->residual) {  // dA/d residual(l)
    AddScaled(N, C, aux->residual + l * N * C, grad_scale, dx, tp);
  }
  return Status::Ok();
}

namespace {

// dst(n)[i] += dx[n, i] for the N rows of dx [N, C]. Rows may share a destination (an embedding
// row), so the columns are split into blocks among the threads and each block adds its rows in
// order: deterministic, no atomics.
template <typename Dst>
void ScatterAddRows(ThreadPool& tp, int64_t N, int64_t C, const float* dx, Dst dst) {
  const int64_t cblocks = std::max<int64_t>(1, std::min<int64_t>(C / 16, 4 * tp.num_threads()));
  const int64_t cstep = (C + cblocks - 1) / cblocks;
  tp.ParallelFor(cblocks, [&](int64_t blk, int) {
    const int64_t c0 = blk * cstep, c1 = std::min(C, c0 + cstep);
    for (int64_t n = 0; n < N; ++n) {
      float* d = dst(n);
      for (int64_t i = c0; i < c1; ++i) d[i] += dx[n * C + i];
    }
  });
}

}  // namespace

// d wpe[position of row n] += dL/dx[n] (d_.residual): the input embedding's positions, and with
// position_every_layer those added before layer l > 0 (d_.residual holds dL/dx_l after layer
// l's backward).
void Gpt::PositionsBackward() {
  const int64_t Tm = Tm_, C = config_.d_model;
  float* gwpe = grads_.ptrs().wpe;
  ScatterAddRows(*pool(), N_, C, d_.residual.data(),
                 [&](int64_t n) { return gwpe + positions_[n % Tm] * C; });
}

// x0 = wte[token] (or the sink token) + wpe[position].
void Gpt::EmbedBackward() {
  const int64_t C = config_.d_model;
  const ModelParams& G = grads_.ptrs();
  ScatterAddRows(*pool(), N_, C, d_.residual.data(), [&](int64_t n) {
    return tokens_[n] < 0 ? G.sink_token : G.wte + int64_t(tokens_[n]) * C;
  });
  if (G.wpe) PositionsBackward();
}

Status Gpt::Backward(float grad_scale, const AuxiliaryGradients* aux) {
  if (!has_targets_) {
    return Status::InvalidArgument("Backward needs a Forward with targets and without a KV cache");
  }
  if (head_.holds != HeadBuffer::Holds::kProbabilities) {
    return Status::InvalidArgument(
        "Backward already ran for this Forward (its probabilities became gradients); run "
        "Forward again");
  }
  if (!std::isfinite(grad_scale)) return Status::InvalidArgument("grad_scale must be finite");
  if (mats_) {
    return Status::InvalidArgument(
        "this model keeps its weights as stored (16-bit or quantized) for inference; training "
        "needs them in float32 (load it for training, as train --from does)");
  }
  EnsureGradients();
  const ModelConfig& c = config_;
  const int64_t N = N_, C = c.d_model, L = c.n_layer;
  if (!HeadBackward(grad_scale, aux)) {
    ZeroFill(d_.residual, N * C);  // no gradient flows: dL/d residual(0) = 0
    input_grad_ready_ = true;
    if (backward_listener_) backward_listener_(-1);
    return Status::Ok();
  }
  if (aux && aux->residual) {  // dA/d residual(L)
    AddScaled(N, C, aux->residual + L * N * C, grad_scale, d_.residual.data(), *pool());
  }
  for (int64_t l = L - 1; l >= 0; --l) {
    MlpBlockBackward(l);
    ATTNLAB_RETURN_IF_ERROR(AttentionBlockBackward(l, MakeAttentionParams(l), grad_scale, aux));
    if (c.position_every_layer && l > 0) PositionsBackward();
    if (backward_listener_) backward_listener_(l);
  }
  EmbedBackward();
  input_grad_ready_ = true;
  if (backward_listener_) backward_listener_(-1);
  return Status::Ok();
}

}  // namespace attnlab
