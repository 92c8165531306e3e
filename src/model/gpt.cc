// GPT forward and backward. Reads top to bottom like the algorithm box in model_config.h:
// embedding, then per layer the attention sublayer and the MLP sublayer, then the head and the
// loss; Backward() walks the same steps in reverse, each restating its forward.
#include "model/gpt.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "attnlab/attention.h"
#include "attnlab/attention_decode.h"
#include "attnlab/linear_attention.h"
#include "attnlab/thread_pool.h"
#include "engine/gemm.h"
#include "engine/ops.h"

namespace attnlab {

namespace {

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

Gpt::Gpt(const ModelConfig& config) : config_(config), params_(config), grads_(config) {}

Result<std::unique_ptr<Gpt>> Gpt::Create(const ModelConfig& config) {
  ATTNLAB_RETURN_IF_ERROR(ValidateModelConfig(config));
  std::unique_ptr<Gpt> g(new Gpt(config));
  if (config.position == PositionEncoding::kRope) {
    RopeConfig rc;
    rc.head_dim = config.head_dim();
    rc.rotary_dim = config.rotary_dim == 0 ? config.head_dim() : config.rotary_dim;
    rc.base = config.rope_base;
    rc.layout = config.rope_layout;
    rc.scaling = config.rope_scaling;
    rc.factor = config.rope_factor;
    rc.original_context =
        config.rope_original_context > 0 ? config.rope_original_context : config.context;
    ATTNLAB_ASSIGN_OR_RETURN(RopeTable table,
                             RopeTable::Make(rc, config.max_positions() * static_cast<int64_t>(std::max(1.0, config.rope_factor))));
    g->rope_ = std::make_unique<RopeTable>(std::move(table));
  }
  return g;
}

ThreadPool* Gpt::pool() const { return pool_ ? pool_ : &DefaultThreadPool(); }

void Gpt::EnsureActivations(int64_t B, int64_t Tm) {
  const ModelConfig& c = config_;
  const int64_t N = B * Tm, L = c.n_layer, C = c.d_model, F = c.hidden(), H = c.n_head;
  const int64_t Q = c.qkv_dim();
  B_ = B, Tm_ = Tm, N_ = N;
  if (N <= capacity_) return;
  capacity_ = N;
  const bool pre = c.norm == NormPlacement::kPre, post = c.norm == NormPlacement::kPost;
  Activations& a = acts_;
  a.res.Resize((L + 1) * N * C);
  a.mid.Resize(L * N * C);
  a.ln1.Resize(pre ? L * N * C : 0);
  a.ln2.Resize(pre && c.mlp ? L * N * C : 0);
  a.sum1.Resize(post ? L * N * C : 0);
  a.sum2.Resize(post && c.mlp ? L * N * C : 0);
  for (auto* s : {&a.ln1_mean, &a.ln1_rstd, &a.ln2_mean, &a.ln2_rstd}) s->Resize(L * N);
  a.qkv.Resize(L * N * Q);
  a.att.Resize(L * N * C);
  a.lse.Resize(L * N * H);
  a.gate.Resize(c.output_gate ? L * N * H : 0);
  a.attg.Resize(c.output_gate ? L * N * C : 0);
  a.o.Resize(L * N * C);
  a.h.Resize(c.mlp ? L * N * F : 0);
  a.gelu.Resize(c.mlp ? L * N * F : 0);
  a.m.Resize(c.mlp ? L * N * C : 0);
  a.lnf.Resize(pre ? N * C : 0);
  a.lnf_mean.Resize(N);
  a.lnf_rstd.Resize(N);
  a.losses.Resize(N);
  logits_.Resize(N * c.vocab_size);
  for (auto* s : {&d_res_, &d_mid_, &d_tmp_, &d_in_}) s->Resize(N * C);
  d_qkv_.Resize(N * Q);
  d_f1_.Resize(c.mlp ? N * F : 0);
  d_f2_.Resize(c.mlp ? N * F : 0);
  d_gate_.Resize(c.output_gate ? N * H : 0);
  d_sink_.Resize(H);
}

// ------------------------------------------------------------------------------------------------
// Forward
// ------------------------------------------------------------------------------------------------
Status Gpt::Forward(const int32_t* tokens, const int32_t* targets, int64_t B, int64_t T,
                    double* loss, KvCache* cache) {
  const ModelConfig& c = config_;
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
  LinearAttentionCache* state_cache = nullptr;
  if (cache && linear) {
    state_cache = dynamic_cast<LinearAttentionCache*>(cache);
    if (!state_cache) {
      return Status::InvalidArgument(
          "a linear-attention model decodes with a LinearAttentionCache (its running state), "
          "not a key/value cache; make it with MakeKvCache(config)");
    }
  }
  if (observer_ && linear) {
    return Status::InvalidArgument(
        "forward observers (attnlab analyze) measure softmax attention's probabilities; a "
        "linear-attention model has none to observe");
  }
  const int64_t off = c.sink_token && (!cache || cache->size() == 0) ? 1 : 0, Tm = T + off;
  EnsureActivations(B, Tm);
  ThreadPool& tp = *pool();
  const int64_t N = N_, L = c.n_layer, C = c.d_model, F = c.hidden(), H = c.n_head;
  const int64_t Hkv = c.kv_heads(), hd = c.head_dim(), Q = c.qkv_dim(), V = c.vocab_size;
  const ModelParams& P = params_.ptrs();
  Activations& a = acts_;
  has_targets_ = targets != nullptr && !cache;
  cached_ = cache != nullptr;

  tokens_.assign(N, -1);
  targets_.assign(N, -1);
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
    for (int64_t t = 0; t < Tm; ++t) positions_[t] = t;
  }
  if (P.wpe && positions_.back() >= c.max_positions()) {
    return Status::OutOfRange("position " + std::to_string(positions_.back()) +
                              " is past the learned position table (" +
                              std::to_string(c.max_positions()) +
                              " positions); learned positions cannot extrapolate");
  }
  if (rope_ && positions_.back() >= rope_->max_position()) {
    ATTNLAB_ASSIGN_OR_RETURN(RopeTable bigger,
                             RopeTable::Make(rope_->config(), 2 * positions_.back() + 1));
    *rope_ = std::move(bigger);
  }

  // Embedding: x0 = wte[token] (or the sink token) + wpe[position].
  float* x0 = a.res.data();
  tp.ParallelFor(N, [&](int64_t n, int) {
    const int64_t t = n % Tm;
    float* row = x0 + n * C;
    const float* src = tokens_[n] < 0 ? P.sink_token : P.wte + int64_t(tokens_[n]) * C;
    for (int64_t i = 0; i < C; ++i) row[i] = src[i];
    if (P.wpe) {
      const float* pe = P.wpe + positions_[t] * C;
      for (int64_t i = 0; i < C; ++i) row[i] += pe[i];
    }
  });

  AttentionParams ap;
  ap.mask.causal = c.causal;
  ap.mask.mask_first_key = c.mask_first_key;
  if (c.attention_window >= 0) ap.mask.window_left = c.attention_window;
  ap.mask.n_sink = c.sink_token ? 1 : 0;  // the dedicated sink token stays visible
  if (c.attention_type == AttentionType::kSparse) ap.mask.n_global = c.attention_global;
  ap.softmax = c.softmax;
  ap.sigmoid_bias = c.effective_sigmoid_bias();
  ap.pool = &tp;
  const bool pre = c.norm == NormPlacement::kPre, post = c.norm == NormPlacement::kPost;
  const bool rms = c.norm_type == NormType::kRmsNorm;
  auto norm_forward = [&](const float* x, const float* w, const float* bias, float* y,
                          float* mean, float* rstd) {
    if (rms) {
      internal::RmsNormForward(N, C, x, w, c.norm_eps, y, rstd, &tp);
    } else {
      internal::LayerNormForward(N, C, x, w, bias, c.norm_eps, y, mean, rstd, &tp);
    }
  };
  const float fixed_scale =
      c.residual_scale == ResidualScale::kInvSqrt2L ? 1.0f / std::sqrt(2.0f * L) : 1.0f;
  const float skip = c.deepnorm_alpha();  // DeepNorm's alpha on the skip path, else 1

  for (int64_t l = 0; l < L; ++l) {
    const LayerParams& lp = P.layers[l];
    const float* x = a.res.data() + l * N * C;
    float* mid = a.mid.data() + l * N * C;
    float* ln1_mean = a.ln1_mean.data() + l * N;
    float* ln1_rstd = a.ln1_rstd.data() + l * N;
    // --- attention sublayer: a_in = LN1(x) (pre-LN) or x.
    const float* a_in = x;
    if (pre) {
      float* y = a.ln1.data() + l * N * C;
      norm_forward(x, lp.ln1_w, lp.ln1_b, y, ln1_mean, ln1_rstd);
      a_in = y;
    }
    float* qkv = a.qkv.data() + l * N * Q;
    LinearForward(N, C, Q, a_in, lp.qkv_w, lp.qkv_b, qkv, &tp);
    QkvViews views = MakeQkvViews(qkv, B, Tm, H, Hkv, hd);
    if (rope_) ATTNLAB_RETURN_IF_ERROR(RopeForward(*rope_, views.q, B, H, Tm, positions_));
    AttentionTensor k_all = Const(views.k), v_all = Const(views.v);
    AttentionShape shape{B, H, Hkv, Tm, Tm, hd};
    if (cache && !linear) {  // the cache rotates (or not) and stores the new keys; attend to
                             // all it holds
      ATTNLAB_RETURN_IF_ERROR(cache->Update(l, views.k.data, views.v.data, Q, rope_.get(), &k_all,
                                            &v_all, &shape.len_k));
    } else if (rope_) {
      ATTNLAB_RETURN_IF_ERROR(RopeForward(*rope_, views.k, B, Hkv, Tm, positions_));
    }
    float* att = a.att.data() + l * N * C;
    float* lse = a.lse.data() + l * N * H;  // linear attention: its denominators
    if (linear) {
      // O_i = sum_{j <= i} phi(q_i).phi(k_j) v_j / (sum_j phi(q_i).phi(k_j) + eps), continuing
      // the cache's state when decoding (updated in place); one token runs the recurrence.
      LinearAttentionParams lap;
      lap.pool = &tp;
      const std::span<float> state = state_cache ? state_cache->State(l) : std::span<float>();
      const auto kernel =
          state_cache && Tm == 1 ? LinearAttentionForwardRecurrent : LinearAttentionForwardChunked;
      ATTNLAB_RETURN_IF_ERROR(kernel(shape, lap, Const(views.q), k_all, v_all,
                                     TokenMajorView(att, B, H, Tm, hd),
                                     std::span<float>(lse, N * H), state, state));
    } else if (cache && !k_all.data) {
      // A 16-bit cache's one-token step (kv_cache.h): attend over its own storage. B = T = 1,
      // so q is the [H, hd] head rows of the token and att its [H, hd] output.
      KvView kh, vh;
      int64_t n = 0;
      if (!cache->DecodeViews(l, &kh, &vh, &n)) {
        return Status::Internal("the KV cache handed out no keys and has no decode views");
      }
      DecodeParams dp;
      dp.pool = &tp;
      ATTNLAB_RETURN_IF_ERROR(AttentionDecode(DecodeShape{H, Hkv, n, hd}, dp,
                                              std::span<const float>(views.q.data, H * hd), kh,
                                              vh, std::span<float>(att, H * hd),
                                              std::span<float>(lse, H)));
    } else {
      if (lp.sink) ap.sink_logits = std::span<const float>(lp.sink, H);
      ATTNLAB_RETURN_IF_ERROR(AttentionForwardFlash(shape, ap, Const(views.q), k_all, v_all,
                                                    TokenMajorView(att, B, H, Tm, hd),
                                                    std::span<float>(lse, N * H)));
    }
    const float* attg = att;
    if (c.output_gate) {
      // g = sigmoid(a_in W_g + b_g) per (token, head); attg[n, h, :] = g[n, h] * att[n, h, :].
      float* g = a.gate.data() + l * N * H;
      float* ag = a.attg.data() + l * N * C;
      LinearForward(N, C, H, a_in, lp.gate_w, lp.gate_b, g, &tp);
      tp.ParallelFor(N, [&](int64_t n, int) {
        for (int64_t h = 0; h < H; ++h) {
          float& gv = g[n * H + h];
          gv = 1.0f / (1.0f + std::exp(-gv));
          for (int64_t d = 0; d < hd; ++d) ag[n * C + h * hd + d] = gv * att[n * C + h * hd + d];
        }
      });
      attg = ag;
    }
    float* o = a.o.data() + l * N * C;
    LinearForward(N, C, C, attg, lp.proj_w, lp.proj_b, o, &tp);
    // s = skip x + alpha o (residual) or o; post-LN: mid = LN1(s), else mid = s.
    const float alpha1 = lp.rezero ? lp.rezero[0] : fixed_scale;
    float* s1 = post ? a.sum1.data() + l * N * C : mid;
    tp.ParallelFor(N, [&](int64_t n, int) {
      for (int64_t i = n * C; i < (n + 1) * C; ++i) {
        s1[i] = c.residual ? skip * x[i] + alpha1 * o[i] : o[i];
      }
    });
    if (post) norm_forward(s1, lp.ln1_w, lp.ln1_b, mid, ln1_mean, ln1_rstd);

    // --- MLP sublayer.
    float* out = a.res.data() + (l + 1) * N * C;
    if (c.mlp) {
      float* ln2_mean = a.ln2_mean.data() + l * N;
      float* ln2_rstd = a.ln2_rstd.data() + l * N;
      const float* m_in = mid;
      if (pre) {
        float* y = a.ln2.data() + l * N * C;
        norm_forward(mid, lp.ln2_w, lp.ln2_b, y, ln2_mean, ln2_rstd);
        m_in = y;
      }
      float* h = a.h.data() + l * N * F;
      float* ge = a.gelu.data() + l * N * F;
      float* m = a.m.data() + l * N * C;
      LinearForward(N, C, F, m_in, lp.fc_w, lp.fc_b, h, &tp);
      internal::GeluForward(N * F, h, ge, &tp);
      LinearForward(N, F, C, ge, lp.fcproj_w, lp.fcproj_b, m, &tp);
      const float alpha2 = lp.rezero ? lp.rezero[1] : fixed_scale;
      float* s2 = post ? a.sum2.data() + l * N * C : out;
      tp.ParallelFor(N, [&](int64_t n, int) {
        for (int64_t i = n * C; i < (n + 1) * C; ++i) {
          s2[i] = c.residual ? skip * mid[i] + alpha2 * m[i] : m[i];
        }
      });
      if (post) norm_forward(s2, lp.ln2_w, lp.ln2_b, out, ln2_mean, ln2_rstd);
    } else {
      std::memcpy(out, mid, sizeof(float) * N * C);
    }
    if (observer_) {
      LayerTensors lt;
      lt.layer = l, lt.batch = B, lt.len = Tm, lt.len_k = shape.len_k;
      lt.residual_in = x, lt.attn_in = a_in, lt.qkv = qkv, lt.attn_out = att, lt.lse = lse;
      lt.k_all = k_all, lt.v_all = v_all;
      lt.residual_out = out;
      lt.attention = &ap;
      observer_->OnLayer(lt);
    }
  }

  // Head: logits = LN_f(x_L) W_head^T (W_head is [V, C]).
  const float* xf = a.res.data() + L * N * C;
  if (pre) {
    norm_forward(xf, P.lnf_w, P.lnf_b, a.lnf.data(), a.lnf_mean.data(), a.lnf_rstd.data());
    xf = a.lnf.data();
  }
  internal::Sgemm(internal::Trans::kNo, internal::Trans::kYes, N, V, C, 1.0f, xf, C, P.lm_head, C,
                  0.0f, logits_.data(), V, &tp);
  if (cache) cache->EndStep();
  if (targets) {
    const double mean = internal::SoftmaxCrossEntropyForward(N, V, logits_.data(), targets_.data(),
                                                             a.losses.data(), &tp);
    if (loss) *loss = mean;
  } else if (loss) {
    *loss = 0.0;
  }
  return Status::Ok();
}

// ------------------------------------------------------------------------------------------------
// Backward
// ------------------------------------------------------------------------------------------------
Status Gpt::Backward(float grad_scale, const AuxiliaryGradients* aux) {
  if (!has_targets_) {
    return Status::InvalidArgument("Backward needs a Forward with targets and without a KV cache");
  }
  const ModelConfig& c = config_;
  ThreadPool& tp = *pool();
  const int64_t B = B_, Tm = Tm_, N = N_, L = c.n_layer, C = c.d_model, F = c.hidden();
  const int64_t H = c.n_head, Hkv = c.kv_heads(), hd = c.head_dim(), Q = c.qkv_dim();
  const int64_t V = c.vocab_size;
  const ModelParams& P = params_.ptrs();
  const ModelParams& G = grads_.ptrs();
  Activations& a = acts_;
  const bool pre = c.norm == NormPlacement::kPre, post = c.norm == NormPlacement::kPost;
  const bool rms = c.norm_type == NormType::kRmsNorm;
  auto norm_backward = [&](const float* dy, const float* x, const float* w, const float* mean,
                           const float* rstd, float* dx, float* dw, float* db) {
    if (rms) {
      internal::RmsNormBackward(N, C, dy, x, w, rstd, dx, dw, &tp);
    } else {
      internal::LayerNormBackward(N, C, dy, x, w, mean, rstd, dx, dw, db, &tp);
    }
  };
  auto zero = [](AlignedBuffer<float>& b, int64_t n) { std::fill(b.data(), b.data() + n, 0.0f); };
  const float fixed_scale =
      c.residual_scale == ResidualScale::kInvSqrt2L ? 1.0f / std::sqrt(2.0f * L) : 1.0f;
  const float skip = c.deepnorm_alpha();
  // Auxiliary-loss gradients on intermediate activations, scaled like the loss' own.
  auto add_aux = [&](const float* g, float* d) {
    tp.ParallelFor(N, [&](int64_t n, int) {
      for (int64_t i = n * C; i < (n + 1) * C; ++i) d[i] += grad_scale * g[i];
    });
  };

  // Loss: mean over counted rows; in the forward pass this was loss = mean_n -log p[n, t_n].
  int64_t count = 0;
  for (int64_t n = 0; n < N; ++n) count += targets_[n] >= 0;
  if (count == 0 && !(aux && (aux->residual || aux->attention))) return Status::Ok();
  float* dlogits = logits_.data();  // probabilities -> dlogits in place
  if (count == 0) {
    std::fill(dlogits, dlogits + N * V, 0.0f);
  } else {
    internal::SoftmaxCrossEntropyBackward(N, V, dlogits, targets_.data(), grad_scale / count,
                                          dlogits, &tp);
  }
  // logits = xf W^T: dxf = dlogits W, dW += dlogits^T xf.
  const float* xf = pre ? a.lnf.data() : a.res.data() + L * N * C;
  float* dxf = pre ? d_tmp_.data() : d_res_.data();
  internal::Sgemm(internal::Trans::kNo, internal::Trans::kNo, N, C, V, 1.0f, dlogits, V, P.lm_head,
                  C, 0.0f, dxf, C, &tp);
  internal::Sgemm(internal::Trans::kYes, internal::Trans::kNo, V, C, N, 1.0f, dlogits, V, xf, C,
                  1.0f, G.lm_head, C, &tp);
  if (pre) {
    zero(d_res_, N * C);
    norm_backward(dxf, a.res.data() + L * N * C, P.lnf_w, a.lnf_mean.data(), a.lnf_rstd.data(),
                  d_res_.data(), G.lnf_w, G.lnf_b);
  }
  if (aux && aux->residual) add_aux(aux->residual + L * N * C, d_res_.data());

  AttentionParams ap;
  ap.mask.causal = c.causal;
  ap.mask.mask_first_key = c.mask_first_key;
  if (c.attention_window >= 0) ap.mask.window_left = c.attention_window;
  ap.mask.n_sink = c.sink_token ? 1 : 0;  // the dedicated sink token stays visible
  if (c.attention_type == AttentionType::kSparse) ap.mask.n_global = c.attention_global;
  ap.softmax = c.softmax;
  ap.sigmoid_bias = c.effective_sigmoid_bias();
  ap.pool = &tp;
  const AttentionShape shape{B, H, Hkv, Tm, Tm, hd};

  for (int64_t l = L - 1; l >= 0; --l) {
    const LayerParams& lp = P.layers[l];
    const LayerParams& lg = G.layers[l];
    const float* x = a.res.data() + l * N * C;
    const float* mid = a.mid.data() + l * N * C;
    // d_res_ holds dL/d(out of layer l). Produce d_mid_ = dL/d mid.
    if (c.mlp) {
      const float* s2 = post ? a.sum2.data() + l * N * C : nullptr;
      // post-LN: out = LN2(s2): d_s2 = LN2^T d_out.
      const float* ds2 = d_res_.data();
      if (post) {
        zero(d_tmp_, N * C);
        norm_backward(d_res_.data(), s2, lp.ln2_w, a.ln2_mean.data() + l * N,
                      a.ln2_rstd.data() + l * N, d_tmp_.data(), lg.ln2_w, lg.ln2_b);
        ds2 = d_tmp_.data();
      }
      // s2 = skip mid + alpha2 m (or m): d_mid = skip d_s2 (residual), d_m = alpha2 d_s2.
      const float* m = a.m.data() + l * N * C;
      const float alpha2 = lp.rezero ? lp.rezero[1] : fixed_scale;
      if (lg.rezero && c.residual) lg.rezero[1] += static_cast<float>(Dot(N * C, ds2, m, tp));
      float* dm = d_in_.data();
      tp.ParallelFor(N, [&](int64_t n, int) {
        for (int64_t i = n * C; i < (n + 1) * C; ++i) {
          dm[i] = c.residual ? alpha2 * ds2[i] : ds2[i];
          d_mid_[i] = c.residual ? skip * ds2[i] : 0.0f;
        }
      });
      // m = gelu(h) W_proj + b: d_gelu = dm W_proj^T; then h = m_in W_fc + b.
      const float* h = a.h.data() + l * N * F;
      const float* ge = a.gelu.data() + l * N * F;
      zero(d_f1_, N * F);
      LinearBackward(N, F, C, ge, lp.fcproj_w, dm, d_f1_.data(), lg.fcproj_w, lg.fcproj_b, &tp);
      zero(d_f2_, N * F);
      internal::GeluBackward(N * F, h, d_f1_.data(), d_f2_.data(), &tp);
      const float* m_in = pre ? a.ln2.data() + l * N * C : mid;
      if (pre) {
        zero(d_tmp_, N * C);
        LinearBackward(N, C, F, m_in, lp.fc_w, d_f2_.data(), d_tmp_.data(), lg.fc_w, lg.fc_b, &tp);
        norm_backward(d_tmp_.data(), mid, lp.ln2_w, a.ln2_mean.data() + l * N,
                      a.ln2_rstd.data() + l * N, d_mid_.data(), lg.ln2_w, lg.ln2_b);
      } else {
        LinearBackward(N, C, F, m_in, lp.fc_w, d_f2_.data(), d_mid_.data(), lg.fc_w, lg.fc_b, &tp);
      }
    } else {
      std::memcpy(d_mid_.data(), d_res_.data(), sizeof(float) * N * C);
    }

    // Attention sublayer: from d_mid_ to d_res_ (= dL/dx).
    const float* ds1 = d_mid_.data();
    if (post) {
      zero(d_tmp_, N * C);
      norm_backward(d_mid_.data(), a.sum1.data() + l * N * C, lp.ln1_w, a.ln1_mean.data() + l * N,
                    a.ln1_rstd.data() + l * N, d_tmp_.data(), lg.ln1_w, lg.ln1_b);
      ds1 = d_tmp_.data();
    }
    // s1 = skip x + alpha1 o (or o): dx = skip d_s1 (residual), d_o = alpha1 d_s1.
    const float* o = a.o.data() + l * N * C;
    const float alpha1 = lp.rezero ? lp.rezero[0] : fixed_scale;
    if (lg.rezero && c.residual) lg.rezero[0] += static_cast<float>(Dot(N * C, ds1, o, tp));
    float* d_o = d_in_.data();
    float* dx = d_res_.data();
    tp.ParallelFor(N, [&](int64_t n, int) {
      for (int64_t i = n * C; i < (n + 1) * C; ++i) {
        const float v = ds1[i];  // read before dx (d_res_) is overwritten: ds1 may be d_mid_
        d_o[i] = c.residual ? alpha1 * v : v;
        dx[i] = c.residual ? skip * v : 0.0f;
      }
    });
    // o = attg W_proj + b.
    const float* att = a.att.data() + l * N * C;
    const float* attg = c.output_gate ? a.attg.data() + l * N * C : att;
    float* d_attg = d_mid_.data();  // d_mid_ is free now
    zero(d_mid_, N * C);
    LinearBackward(N, C, C, attg, lp.proj_w, d_o, d_attg, lg.proj_w, lg.proj_b, &tp);
    const float* a_in = pre ? a.ln1.data() + l * N * C : x;
    float* d_ain = d_tmp_.data();
    zero(d_tmp_, N * C);
    float* d_att = d_attg;
    if (c.output_gate) {
      // attg = g * att, g = sigmoid(z), z = a_in W_g + b_g:
      // d_att = g * d_attg; dz = (sum_d d_attg * att) g (1 - g).
      const float* g = a.gate.data() + l * N * H;
      float* dz = d_gate_.data();
      tp.ParallelFor(N, [&](int64_t n, int) {
        for (int64_t h = 0; h < H; ++h) {
          const float gv = g[n * H + h];
          float dg = 0;
          for (int64_t d = 0; d < hd; ++d) {
            const int64_t i = n * C + h * hd + d;
            dg += d_attg[i] * att[i];
            d_att[i] = gv * d_attg[i];  // in place: d_attg[i] is read first
          }
          dz[n * H + h] = dg * gv * (1.0f - gv);
        }
      });
      LinearBackward(N, C, H, a_in, lp.gate_w, dz, d_ain, lg.gate_w, lg.gate_b, &tp);
    }
    if (aux && aux->attention) add_aux(aux->attention + l * N * C, d_att);
    // Attention core: dq, dk, dv into d_qkv_ (same interleaved layout as qkv).
    float* qkv = a.qkv.data() + l * N * Q;
    QkvViews views = MakeQkvViews(qkv, B, Tm, H, Hkv, hd);
    QkvViews dviews = MakeQkvViews(d_qkv_.data(), B, Tm, H, Hkv, hd);
    if (c.attention_type == AttentionType::kLinear) {
      // In the forward pass this was the chunked linear attention; lse holds its denominators.
      LinearAttentionParams lap;
      lap.pool = &tp;
      ATTNLAB_RETURN_IF_ERROR(LinearAttentionBackwardChunked(
          shape, lap, Const(views.q), Const(views.k), Const(views.v),
          TokenMajorView<const float>(att, B, H, Tm, hd),
          std::span<const float>(a.lse.data() + l * N * H, N * H),
          TokenMajorView<const float>(d_att, B, H, Tm, hd), dviews.q, dviews.k, dviews.v));
    } else {
      if (lp.sink) ap.sink_logits = std::span<const float>(lp.sink, H);
      ATTNLAB_RETURN_IF_ERROR(AttentionBackwardFlash(
          shape, ap, Const(views.q), Const(views.k), Const(views.v),
          TokenMajorView<const float>(att, B, H, Tm, hd),
          std::span<const float>(a.lse.data() + l * N * H, N * H),
          TokenMajorView<const float>(d_att, B, H, Tm, hd), dviews.q, dviews.k, dviews.v,
          lp.sink ? std::span<float>(d_sink_.data(), H) : std::span<float>()));
    }
    if (lg.sink) {
      for (int64_t h = 0; h < H; ++h) lg.sink[h] += d_sink_[h];
    }
    if (rope_) {
      ATTNLAB_RETURN_IF_ERROR(RopeBackward(*rope_, dviews.q, B, H, Tm, positions_));
      ATTNLAB_RETURN_IF_ERROR(RopeBackward(*rope_, dviews.k, B, Hkv, Tm, positions_));
    }
    // qkv = a_in W_qkv + b.
    LinearBackward(N, C, Q, a_in, lp.qkv_w, d_qkv_.data(), d_ain, lg.qkv_w, lg.qkv_b, &tp);
    if (pre) {
      norm_backward(d_ain, x, lp.ln1_w, a.ln1_mean.data() + l * N, a.ln1_rstd.data() + l * N, dx,
                    lg.ln1_w, lg.ln1_b);
    } else {
      tp.ParallelFor(N, [&](int64_t n, int) {
        for (int64_t i = n * C; i < (n + 1) * C; ++i) dx[i] += d_ain[i];
      });
    }
    if (aux && aux->residual) add_aux(aux->residual + l * N * C, dx);  // dA/d residual(l)
  }

  // Embedding: x0 = wte[token] + wpe[t]; rows scatter into wte, so reduce per column block with
  // rows in order (deterministic, no atomics).
  const float* dx0 = d_res_.data();
  const int64_t cblocks = std::max<int64_t>(1, std::min<int64_t>(C / 16, 4 * tp.num_threads()));
  const int64_t cstep = (C + cblocks - 1) / cblocks;
  tp.ParallelFor(cblocks, [&](int64_t blk, int) {
    const int64_t c0 = blk * cstep, c1 = std::min(C, c0 + cstep);
    for (int64_t n = 0; n < N; ++n) {
      const int64_t t = n % Tm;
      float* dst = tokens_[n] < 0 ? G.sink_token : G.wte + int64_t(tokens_[n]) * C;
      for (int64_t i = c0; i < c1; ++i) dst[i] += dx0[n * C + i];
      if (G.wpe) {
        for (int64_t i = c0; i < c1; ++i) G.wpe[t * C + i] += dx0[n * C + i];
      }
    }
  });
  return Status::Ok();
}

}  // namespace attnlab
