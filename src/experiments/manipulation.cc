#include "experiments/manipulation.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <utility>

#include "model/forward_hooks.h"
#include "train/first_token_penalty.h"

namespace attnlab::experiments {
namespace {

// Adds delta at blocks.0.hook_resid_pre and/or rewrites head h's rows of layer l's pattern
// ([B, H, Tm, Tm], causal: row t sees keys 0..t), measuring m_c of what it leaves.
class ManipulationHooks : public ForwardHooks {
 public:
  const std::vector<float>* delta = nullptr;
  bool pattern_hook = false;
  ImposedPattern pattern = ImposedPattern::kNone;
  ManipulationTarget target;
  uint64_t seed = 0;
  double mass = 0;  // m_c of the (rewritten) pattern, when pattern_hook

  bool Wants(HookPoint p, int64_t layer) const override {
    return (p == HookPoint::kResidPre && layer == 0 && delta) ||
           (p == HookPoint::kPattern && layer == target.layer && pattern_hook);
  }

  Status OnHook(const HookTensor& t) override {
    if (t.point == HookPoint::kResidPre) {
      if (static_cast<size_t>(t.size()) != delta->size()) {
        return Status::Internal("the perturbation does not match the stream entering layer 0");
      }
      for (int64_t i = 0; i < t.size(); ++i) t.data[i] += (*delta)[i];
      return Status::Ok();
    }
    const int64_t B = t.shape[0], H = t.shape[1], Tm = t.shape[2], c = target.key;
    std::mt19937_64 rng(seed);
    mass = 0;
    for (int64_t b = 0; b < B; ++b) {
      double m = 0;
      for (int64_t r = 0; r < Tm; ++r) {
        float* row = t.data + ((b * H + target.head) * Tm + r) * Tm;
        switch (pattern) {
          case ImposedPattern::kNone: break;
          case ImposedPattern::kOnTarget:
            if (r >= c) {
              std::fill(row, row + r + 1, 0.0f);
              row[c] = 1.0f;
            }
            break;
          case ImposedPattern::kPermuted: std::shuffle(row, row + r + 1, rng); break;
          case ImposedPattern::kUniform:
            std::fill(row, row + r + 1, 1.0f / static_cast<float>(r + 1));
            break;
        }
        if (r >= c) m += row[c];
      }
      mass += m / static_cast<double>(Tm - c);
    }
    mass /= static_cast<double>(B);
    return Status::Ok();
  }
};

constexpr double kFirstStep = 0.05;  // MoveAttention's first step, in units of the radius

double Norm(const float* x, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += static_cast<double>(x[i]) * x[i];
  return std::sqrt(s);
}

}  // namespace

std::vector<double> WindowNorms(const std::vector<float>& x, int64_t B) {
  const int64_t per = static_cast<int64_t>(x.size()) / B;
  std::vector<double> out(B);
  for (int64_t b = 0; b < B; ++b) out[b] = Norm(x.data() + b * per, per);
  return out;
}

std::vector<float> RandomLike(const std::vector<float>& like, int64_t B, uint64_t seed) {
  const int64_t per = static_cast<int64_t>(like.size()) / B;
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> out(like.size());
  const std::vector<double> want = WindowNorms(like, B);
  for (int64_t b = 0; b < B; ++b) {
    float* x = out.data() + b * per;
    for (int64_t i = 0; i < per; ++i) x[i] = nd(rng);
    const double n = Norm(x, per);
    const float s = n > 0 ? static_cast<float>(want[b] / n) : 0.0f;
    for (int64_t i = 0; i < per; ++i) x[i] *= s;
  }
  return out;
}

ManipulationObjective::ManipulationObjective(Gpt& g, std::vector<int32_t> tokens, int64_t B,
                                             int64_t T, const ManipulationTarget& target,
                                             double kl_weight, double kl_free)
    : g_(&g), tokens_(std::move(tokens)), B_(B), T_(T), target_(target), w_(kl_weight),
      kl_free_(kl_free) {}

Result<ManipulationObjective> ManipulationObjective::Create(Gpt& g, std::vector<int32_t> tokens,
                                                           int64_t B, int64_t T,
                                                           const ManipulationTarget& target,
                                                           double kl_weight, double kl_free) {
  const ModelConfig& c = g.config();
  ATTNLAB_RETURN_IF_ERROR(CheckKeyShareSupported(c, "the attention manipulation"));
  if (g.matrices()) {
    return Status::InvalidArgument(
        "the attention manipulation differentiates the model; load its weights as float32 (this "
        "model keeps them as stored for inference)");
  }
  if (B < 1 || T < 1 || static_cast<int64_t>(tokens.size()) != B * T) {
    return Status::InvalidArgument("the manipulation needs B >= 1 windows of T >= 1 tokens (" +
                                   std::to_string(tokens.size()) + " tokens for B " +
                                   std::to_string(B) + ", T " + std::to_string(T) + ")");
  }
  const int64_t Tm = T + (c.sink_token ? 1 : 0);
  if (target.layer < 0 || target.layer >= c.n_layer || target.head < 0 ||
      target.head >= c.n_head || target.key < 0 || target.key >= Tm) {
    return Status::InvalidArgument(
        "the manipulated head (layer " + std::to_string(target.layer) + ", head " +
        std::to_string(target.head) + ", key " + std::to_string(target.key) +
        ") is outside the model (" + std::to_string(c.n_layer) + " layers, " +
        std::to_string(c.n_head) + " heads, " + std::to_string(Tm) + " positions)");
  }
  if (!(kl_weight >= 0) || !std::isfinite(kl_weight) || !(kl_free >= 0) ||
      !std::isfinite(kl_free)) {
    return Status::InvalidArgument("the KL weight and the KL allowance must be finite and >= 0");
  }
  ManipulationObjective obj(g, std::move(tokens), B, T, target, kl_weight, kl_free);
  obj.no_targets_.assign(B * T, -1);
  double loss = 0;
  g.set_hooks(nullptr);
  ATTNLAB_RETURN_IF_ERROR(g.Forward(obj.tokens_.data(), obj.no_targets_.data(), B, T, &loss));
  obj.Tm_ = g.last_len();
  obj.C_ = c.d_model;
  obj.V_ = c.vocab_size;
  const int64_t N = B * obj.Tm_, V = obj.V_;
  obj.x0_.assign(g.residual(0), g.residual(0) + N * obj.C_);
  obj.p_clean_.assign(g.logits(), g.logits() + N * V);
  obj.logp_clean_.resize(N * V);
  obj.top_clean_.resize(N);
  for (int64_t n = 0; n < N; ++n) {
    const float* p = obj.p_clean_.data() + n * V;
    obj.top_clean_[n] = static_cast<int32_t>(std::max_element(p, p + V) - p);
    for (int64_t v = 0; v < V; ++v) {
      obj.logp_clean_[n * V + v] = std::log(std::max(static_cast<double>(p[v]), 1e-30));
    }
  }
  ATTNLAB_ASSIGN_OR_RETURN(obj.clean_, obj.Evaluate({}, nullptr));
  return obj;
}

Result<ManipulationValue> ManipulationObjective::Evaluate(const std::vector<float>& delta,
                                                          std::vector<float>* grad) {
  if (!delta.empty() && static_cast<int64_t>(delta.size()) != B_ * Tm_ * C_) {
    return Status::InvalidArgument("the perturbation has " + std::to_string(delta.size()) +
                                   " values; the stream entering layer 0 has " +
                                   std::to_string(B_ * Tm_ * C_));
  }
  return Run(delta.empty() ? nullptr : &delta, nullptr, 0, grad);
}

Result<ManipulationValue> ManipulationObjective::EvaluateImposed(ImposedPattern pattern,
                                                                 uint64_t seed) {
  return Run(nullptr, &pattern, seed, nullptr);
}

Result<ManipulationValue> ManipulationObjective::Run(const std::vector<float>* delta,
                                                     const ImposedPattern* pattern, uint64_t seed,
                                                     std::vector<float>* grad) {
  const ModelConfig& c = g_->config();
  const bool imposed = pattern != nullptr;
  ManipulationHooks hooks;
  hooks.delta = delta;
  hooks.pattern_hook = imposed;
  if (pattern) hooks.pattern = *pattern;
  hooks.target = target_;
  hooks.seed = seed;
  double loss = 0;
  g_->set_hooks(delta || imposed ? &hooks : nullptr);
  const Status st = g_->Forward(tokens_.data(), no_targets_.data(), B_, T_, &loss);
  g_->set_hooks(nullptr);
  ATTNLAB_RETURN_IF_ERROR(st);

  const int64_t N = B_ * Tm_, V = V_, L = c.n_layer, H = c.n_head, hd = c.head_dim();
  const int64_t Q = c.qkv_dim(), group = H / c.kv_heads(), h = target_.head;
  const int64_t kvh = h / group, l = target_.layer;
  ManipulationValue val;
  const float* P = g_->logits();  // probabilities (a Forward with targets)
  std::vector<float> d_logits(grad ? N * V : 0, 0.0f);
  for (int64_t n = 0; n < N; ++n) {
    const float* p = P + n * V;
    const float* pc = p_clean_.data() + n * V;
    const double* lpc = logp_clean_.data() + n * V;
    double kl = 0;
    for (int64_t v = 0; v < V; ++v) {
      if (pc[v] > 0) kl += pc[v] * (lpc[v] - std::log(std::max(static_cast<double>(p[v]), 1e-30)));
    }
    val.kl += kl;
    val.top1 += (std::max_element(p, p + V) - p) == top_clean_[n];
  }
  val.kl = std::max(0.0, val.kl / static_cast<double>(N));  // >= 0 (fp32 rounding aside)
  val.top1 /= static_cast<double>(N);
  if (grad && val.kl > kl_free_) {  // d/d logits of w (KL - kl_free) = w (p - p_clean) / N
    const float s = static_cast<float>(w_ / static_cast<double>(N));
    for (int64_t i = 0; i < N * V; ++i) d_logits[i] = s * (P[i] - p_clean_[i]);
  }

  const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
  const float* qkv = g_->qkv(l);
  std::vector<float> d_qkv(grad ? L * N * Q : 0, 0.0f);
  for (int64_t b = 0; b < B_; ++b) {
    const float* q = qkv + b * Tm_ * Q + h * hd;
    const float* k = qkv + b * Tm_ * Q + (H + kvh) * hd;
    float* base = grad ? d_qkv.data() + l * N * Q + b * Tm_ * Q : nullptr;
    val.mass += KeyShare<float>(q, Q, k, Q, Tm_, hd, scale, target_.key,
                                grad ? base + h * hd : nullptr,
                                grad ? base + (H + kvh) * hd : nullptr,
                                -1.0 / static_cast<double>(B_));
  }
  val.mass /= static_cast<double>(B_);
  if (imposed) val.mass = hooks.mass;  // what the head attended with, after the rewrite
  val.objective = -val.mass + w_ * std::max(0.0, val.kl - kl_free_);
  if (!grad) return val;

  AuxiliaryGradients aux;
  aux.qkv = d_qkv.data();
  aux.logits = d_logits.data();
  ATTNLAB_RETURN_IF_ERROR(g_->Backward(1.0f, &aux));
  const float* dx = g_->input_gradient();
  if (!dx) return Status::Internal("the model gave no input gradient after Backward");
  grad->assign(dx, dx + N * C_);
  return val;
}

Result<MoveResult> MoveAttention(ManipulationObjective& obj, double budget, int64_t steps,
                                 const std::vector<float>* start) {
  if (!(budget >= 0) || !std::isfinite(budget) || steps < 1) {
    return Status::InvalidArgument("the manipulation needs a finite budget >= 0 and >= 1 step");
  }
  const int64_t B = obj.batch(), per = obj.positions() * obj.width();
  if (start && static_cast<int64_t>(start->size()) != B * per) {
    return Status::InvalidArgument("the starting perturbation does not match the input");
  }
  std::vector<double> radius = WindowNorms(obj.clean_stream(), B);
  for (double& r : radius) r *= budget;
  // Window b of d onto the ball ||d_b|| <= R_b.
  auto project = [&](std::vector<float>& d) {
    for (int64_t b = 0; b < B; ++b) {
      float* x = d.data() + b * per;
      const double n = Norm(x, per);
      if (n > radius[b]) {
        const float s = static_cast<float>(radius[b] / n);
        for (int64_t i = 0; i < per; ++i) x[i] *= s;
      }
    }
  };
  MoveResult best;
  std::vector<float> grad, cand, cand_grad;
  best.delta.assign(B * per, 0.0f);
  if (start) {
    best.delta = *start;
    project(best.delta);
  }
  ATTNLAB_ASSIGN_OR_RETURN(best.value, obj.Evaluate(best.delta, &grad));
  best.evaluations = 1;
  double lr = kFirstStep;
  for (int64_t k = 0; k < steps; ++k) {
    cand = best.delta;
    for (int64_t b = 0; b < B; ++b) {
      float* d = cand.data() + b * per;
      const float* gb = grad.data() + b * per;
      const double gn = Norm(gb, per);
      if (gn > 0) {
        const float s = static_cast<float>(lr * radius[b] / gn);
        for (int64_t i = 0; i < per; ++i) d[i] -= s * gb[i];
      }
    }
    project(cand);
    ATTNLAB_ASSIGN_OR_RETURN(ManipulationValue v, obj.Evaluate(cand, &cand_grad));
    ++best.evaluations;
    if (v.objective < best.value.objective) {  // accept, and try a longer step next
      best.value = v;
      std::swap(best.delta, cand);
      std::swap(grad, cand_grad);
      lr = std::min(1.0, lr * 1.5);
    } else {  // reject: a shorter step from the same point
      lr *= 0.5;
    }
  }
  return best;
}

}  // namespace attnlab::experiments
