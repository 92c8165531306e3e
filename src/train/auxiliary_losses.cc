#include "train/auxiliary_losses.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "attnlab/thread_pool.h"
#include "train/first_token_penalty.h"

namespace attnlab {

namespace {

// Norms below this count as zero vectors (no direction, no gradient).
constexpr double kTinyNorm = 1e-30;

}  // namespace

// Per row: with unit vectors e_h = o_h / |o_h| and S = sum_h e_h (over the non-zero heads),
//   sum_{h<h'} cos(o_h, o_h') = (|S|^2 - K) / 2          (K non-zero heads)
//   d/d o_h of that sum        = (S - (e_h . S) e_h) / |o_h|
// since d e_h / d o_h = (I - e_h e_h^T) / |o_h| and d(|S|^2 / 2)/d e_h = S, (I - e e^T) e = 0.
template <typename T>
double HeadCosineLoss(const T* att, int64_t rows, int64_t heads, int64_t head_dim, int64_t stride,
                      T* grad, double scale) {
  if (heads < 2 || rows < 1) return 0.0;
  const double pairs = 0.5 * heads * (heads - 1);
  const double coef = 1.0 / (rows * pairs);  // d D / d (row's pair sum)
  std::vector<double> e(heads * head_dim), s(head_dim), norm(heads);
  double total = 0;
  for (int64_t n = 0; n < rows; ++n) {
    const T* o = att + n * stride;
    std::fill(s.begin(), s.end(), 0.0);
    int64_t k = 0;
    for (int64_t h = 0; h < heads; ++h) {
      double nn = 0;
      for (int64_t d = 0; d < head_dim; ++d) nn += double(o[h * head_dim + d]) * o[h * head_dim + d];
      norm[h] = std::sqrt(nn);
      const double inv = norm[h] > kTinyNorm ? 1.0 / norm[h] : 0.0;
      k += norm[h] > kTinyNorm;
      for (int64_t d = 0; d < head_dim; ++d) {
        e[h * head_dim + d] = o[h * head_dim + d] * inv;
        s[d] += e[h * head_dim + d];
      }
    }
    double ss = 0;
    for (int64_t d = 0; d < head_dim; ++d) ss += s[d] * s[d];
    total += 0.5 * (ss - k);
    if (!grad) continue;
    T* g = grad + n * stride;
    for (int64_t h = 0; h < heads; ++h) {
      if (!(norm[h] > kTinyNorm)) continue;
      double es = 0;
      for (int64_t d = 0; d < head_dim; ++d) es += e[h * head_dim + d] * s[d];
      const double f = scale * coef / norm[h];
      for (int64_t d = 0; d < head_dim; ++d) {
        g[h * head_dim + d] += static_cast<T>(f * (s[d] - es * e[h * head_dim + d]));
      }
    }
  }
  return total * coef;
}

// With G_ij = (softmax_j(s_i.) - [i == j]) / T:
//   dI/du_i = 1/tau sum_j G_ij w_j,   dI/dw_j = 1/tau sum_i G_ij u_i,
//   dI/dx_i = (dI/du_i - (dI/du_i . u_i) u_i) / |x_i|   (and likewise for y).
template <typename T>
double InfoNceLoss(const T* x, const T* y, int64_t rows, int64_t cols, int64_t stride, double tau,
                   T* gx, T* gy, double scale) {
  const int64_t R = rows, C = cols;
  std::vector<double> u(R * C), w(R * C), nx(R), ny(R);
  auto unit = [&](const T* a, std::vector<double>& out, std::vector<double>& norm) {
    for (int64_t i = 0; i < R; ++i) {
      double nn = 0;
      for (int64_t c = 0; c < C; ++c) nn += double(a[i * stride + c]) * a[i * stride + c];
      norm[i] = std::sqrt(nn);
      const double inv = norm[i] > kTinyNorm ? 1.0 / norm[i] : 0.0;
      for (int64_t c = 0; c < C; ++c) out[i * C + c] = a[i * stride + c] * inv;
    }
  };
  unit(x, u, nx);
  unit(y, w, ny);
  std::vector<double> g(R * R);  // s, then G
  double loss = 0;
  for (int64_t i = 0; i < R; ++i) {
    double mx = -INFINITY;
    for (int64_t j = 0; j < R; ++j) {
      double d = 0;
      for (int64_t c = 0; c < C; ++c) d += u[i * C + c] * w[j * C + c];
      g[i * R + j] = d / tau;
      mx = std::max(mx, g[i * R + j]);
    }
    double sum = 0;
    for (int64_t j = 0; j < R; ++j) sum += std::exp(g[i * R + j] - mx);
    const double lse = mx + std::log(sum);
    loss += lse - g[i * R + i];
    for (int64_t j = 0; j < R; ++j) {
      g[i * R + j] = (std::exp(g[i * R + j] - lse) - (i == j ? 1.0 : 0.0)) / R;
    }
  }
  loss /= R;
  if (!gx && !gy) return loss;
  std::vector<double> du(C);
  auto project = [&](const std::vector<double>& unitv, int64_t i, double norm, T* out) {
    if (!(norm > kTinyNorm)) return;
    double dot = 0;
    for (int64_t c = 0; c < C; ++c) dot += du[c] * unitv[i * C + c];
    for (int64_t c = 0; c < C; ++c) {
      out[i * stride + c] += static_cast<T>(scale * (du[c] - dot * unitv[i * C + c]) / norm);
    }
  };
  if (gx) {
    for (int64_t i = 0; i < R; ++i) {
      std::fill(du.begin(), du.end(), 0.0);
      for (int64_t j = 0; j < R; ++j) {
        const double gij = g[i * R + j] / tau;
        for (int64_t c = 0; c < C; ++c) du[c] += gij * w[j * C + c];
      }
      project(u, i, nx[i], gx);
    }
  }
  if (gy) {
    for (int64_t j = 0; j < R; ++j) {
      std::fill(du.begin(), du.end(), 0.0);
      for (int64_t i = 0; i < R; ++i) {
        const double gij = g[i * R + j] / tau;
        for (int64_t c = 0; c < C; ++c) du[c] += gij * u[i * C + c];
      }
      project(w, j, ny[j], gy);
    }
  }
  return loss;
}

template double HeadCosineLoss<float>(const float*, int64_t, int64_t, int64_t, int64_t, float*,
                                      double);
template double HeadCosineLoss<double>(const double*, int64_t, int64_t, int64_t, int64_t, double*,
                                       double);
template double InfoNceLoss<float>(const float*, const float*, int64_t, int64_t, int64_t, double,
                                   float*, float*, double);
template double InfoNceLoss<double>(const double*, const double*, int64_t, int64_t, int64_t,
                                    double, double*, double*, double);

Status AuxiliaryLosses::Compute(const Gpt& model) {
  const ModelConfig& c = model.config();
  const int64_t L = c.n_layer, C = c.d_model, H = c.n_head, hd = c.head_dim();
  const int64_t A = c.attn_dim();  // the attention output's width (H * hd)
  const int64_t B = model.last_batch(), Tm = model.last_len(), N = B * Tm;
  if (N < 1) return Status::InvalidArgument("auxiliary losses need a Forward first");
  if (!(options_.temperature > 0)) return Status::InvalidArgument("temperature must be > 0");
  ThreadPool& tp = DefaultThreadPool();
  diversity_ = contrastive_ = first_token_ = 0;
  grads_ = AuxiliaryGradients();
  // Head diversity: tasks are (layer, block of rows); partial sums reduced in task order.
  if (options_.diversity_weight != 0 && H >= 2) {
    d_att_.assign(L * N * A, 0.0f);
    const int64_t block = 64, nb = (N + block - 1) / block;
    std::vector<double> part(L * nb, 0.0);
    // D = 1/L sum_l D_l, D_l = 1/N sum_n (row term): each block's HeadCosineLoss averages over
    // its own rows, so rescale by rows / N.
    tp.ParallelFor(L * nb, [&](int64_t task, int) {
      const int64_t l = task / nb, b = task % nb, n0 = b * block, n1 = std::min(N, n0 + block);
      const double share = double(n1 - n0) / N / L;
      const float* att = model.attention_output(l) + n0 * A;
      float* g = d_att_.data() + l * N * A + n0 * A;
      part[task] = share * HeadCosineLoss(att, n1 - n0, H, hd, A, g,
                                          options_.diversity_weight * share);
    });
    for (double p : part) diversity_ += p;
    grads_.attention = d_att_.data();
  }
  // Contrastive: one task per sequence (it owns its rows of every layer, so no races).
  if (options_.contrastive_weight != 0 && L >= 2) {
    d_res_.assign((L + 1) * N * C, 0.0f);
    const int64_t pairs = L - 1;
    const double share = 1.0 / (double(B) * pairs);
    std::vector<double> part(B, 0.0);
    tp.ParallelFor(B, [&](int64_t b, int) {
      double s = 0;
      for (int64_t l = 1; l < L; ++l) {
        const float* x = model.residual(l) + b * Tm * C;
        const float* y = model.residual(l + 1) + b * Tm * C;
        float* gx = d_res_.data() + l * N * C + b * Tm * C;
        float* gy = d_res_.data() + (l + 1) * N * C + b * Tm * C;
        s += InfoNceLoss(x, y, Tm, C, C, options_.temperature, gx, gy,
                         options_.contrastive_weight * share);
      }
      part[b] = s * share;
    });
    for (double p : part) contrastive_ += p;
    grads_.residual = d_res_.data();
  }
  if (options_.first_token_weight != 0) ATTNLAB_RETURN_IF_ERROR(ComputeFirstToken(model));
  return Status::Ok();
}

// R = 1/(L H) sum_{l,h} a_{l,h}^p with a_{l,h} = 1/B sum_b alpha_{b,l,h} (first_token_penalty.h):
// first every alpha, then dR/d q|k = sum_b dR/d a_{l,h} / B * d alpha_{b,l,h}/d q|k. Tasks are
// (layer, sequence, kv head): a task owns its kv head's key gradients and its heads' queries.
Status AuxiliaryLosses::ComputeFirstToken(const Gpt& model) {
  const ModelConfig& c = model.config();
  ATTNLAB_RETURN_IF_ERROR(CheckFirstTokenPenaltySupported(c));
  const int p = options_.first_token_power;
  if (p != 1 && p != 2) {
    return Status::InvalidArgument("the first-token penalty's power must be 1 (L1) or 2 (L2), not " +
                                   std::to_string(p));
  }
  const int64_t L = c.n_layer, H = c.n_head, Hkv = c.kv_heads(), group = H / Hkv;
  const int64_t hd = c.head_dim(), Q = c.qkv_dim();
  const int64_t B = model.last_batch(), Tm = model.last_len(), N = B * Tm;
  const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
  ThreadPool& tp = DefaultThreadPool();
  auto q_of = [&](int64_t l, int64_t b, int64_t h) { return model.qkv(l) + b * Tm * Q + h * hd; };
  auto k_of = [&](int64_t l, int64_t b, int64_t g) {
    return model.qkv(l) + b * Tm * Q + (H + g) * hd;
  };
  std::vector<double> alpha(L * B * H);  // [l][b][h]
  tp.ParallelFor(L * B * H, [&](int64_t task, int) {
    const int64_t l = task / (B * H), b = task / H % B, h = task % H;
    alpha[task] = FirstKeyShare<float>(q_of(l, b, h), Q, k_of(l, b, h / group), Q, Tm, hd, scale,
                                       nullptr, nullptr, 0.0);
  });
  std::vector<double> coef(L * H);  // dR/d a_{l,h} / B
  first_token_ = 0;
  for (int64_t l = 0; l < L; ++l) {
    for (int64_t h = 0; h < H; ++h) {
      double a = 0;
      for (int64_t b = 0; b < B; ++b) a += alpha[(l * B + b) * H + h];
      a /= static_cast<double>(B);
      first_token_ += (p == 1 ? a : a * a) / static_cast<double>(L * H);
      coef[l * H + h] = (p == 1 ? 1.0 : 2.0 * a) / static_cast<double>(L * H * B);
    }
  }
  d_qkv_.assign(L * N * Q, 0.0f);
  tp.ParallelFor(L * B * Hkv, [&](int64_t task, int) {
    const int64_t l = task / (B * Hkv), b = task / Hkv % B, g = task % Hkv;
    float* base = d_qkv_.data() + l * N * Q + b * Tm * Q;
    for (int64_t h = g * group; h < (g + 1) * group; ++h) {
      FirstKeyShare<float>(q_of(l, b, h), Q, k_of(l, b, g), Q, Tm, hd, scale, base + h * hd,
                           base + (H + g) * hd, options_.first_token_weight * coef[l * H + h]);
    }
  });
  grads_.qkv = d_qkv_.data();
  return Status::Ok();
}

}  // namespace attnlab
