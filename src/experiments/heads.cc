// heads: how redundant are the attention heads of the default model, which ones matter, and how
// many can be removed at test time? (Michel et al. 2019, "Are Sixteen Heads Really Better than
// One?", arXiv:1905.10650.)
//
// The model: the embedded default (data/default-model), or --data MODEL_DIR (any model
// `attnlab --model` loads that carries its tokenizer); the text: data/sample.txt (held-out Brown
// documents), cut into non-overlapping windows as `attnlab eval` does (BOS first when the model
// was trained with one). The first half of the windows estimates head importance and the head
// similarities, the second half (never used for importance) measures the loss after pruning.
// --quick uses the same model on 2 + 2 windows of 128 tokens; only when no default model exists
// (a checkout without it) a tiny random-init model on the sample's bytes (the report says which).
//
// Per head h (head_importance.h; Michel et al. eq. 2):
//   I_h = mean over importance windows x of |dL(x)/dxi_h|, xi_h the head's output gate (= 1),
//   L(x) the window's mean cross-entropy; then, as Michel et al. do for pruning across layers,
//   I_h / ||I_layer||_2 (l2 normalisation per layer, section 4.1 / their code).
// Pruning curve: heads sorted by normalised importance (least important first), the first k set
// to xi = 0 for k on a grid (step 4 by default, plus 20% and 40% of the heads, plus all heads),
// and the validation loss measured; the same for a few random orders (seeded) as the baseline.
// Redundancy: per layer, the Jensen-Shannon distance between the heads' attention distributions
// (normalised to [0, 1], attention_stats.h) and the linear CKA between head outputs (Kornblith et
// al. 2019), both from `attnlab analyze`'s streaming analysis of the importance windows; per head
// its mean JS distance / CKA to the other heads of its layer, and the Spearman correlation of
// importance with that dissimilarity ("are the important heads the dissimilar ones?").
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "core/atomic_file.h"
#include "core/json_number.h"
#include "diagnostics/analysis.h"
#include "experiments/experiment.h"
#include "experiments/experiment_report.h"
#include "experiments/head_importance.h"
#include "experiments/model_source.h"
#include "formats/loaded_model.h"
#include "report/svg_plot.h"
#include "train/token_data.h"

namespace attnlab::experiments {
namespace {

constexpr char kName[] = "heads";
constexpr double kLittleLoss = 0.05;  // nats: the "little loss" threshold of the pruning claims

struct Sizes {
  int64_t importance_windows, validation_windows;  // at most (each half of the text's windows)
  int64_t window;                                  // tokens per window (0: the model's context)
  int64_t k_step, random_orders, jsd_rows;
};

// Default: every window of the sample (40 + 40 of 256 tokens for the default model; ~4 min on
// 2 threads), k step 4, 6 random orders. Quick: 2 + 2 windows of 128 tokens, k step 16, 2 random
// orders.
Sizes SizesFor(bool quick) {
  return quick ? Sizes{2, 2, 128, 16, 2, 64} : Sizes{1000, 1000, 0, 4, 6, 256};
}

// Spearman rank correlation (ties get their mean rank); NaN when either side is constant.
double Spearman(const std::vector<double>& a, const std::vector<double>& b) {
  auto ranks = [](const std::vector<double>& v) {
    std::vector<size_t> idx(v.size());
    std::iota(idx.begin(), idx.end(), 0);
    std::stable_sort(idx.begin(), idx.end(), [&](size_t i, size_t j) { return v[i] < v[j]; });
    std::vector<double> r(v.size());
    for (size_t i = 0; i < idx.size();) {
      size_t j = i;
      while (j + 1 < idx.size() && v[idx[j + 1]] == v[idx[i]]) ++j;
      for (size_t k = i; k <= j; ++k) r[idx[k]] = 0.5 * double(i + j);
      i = j + 1;
    }
    return r;
  };
  const std::vector<double> ra = ranks(a), rb = ranks(b);
  const double n = static_cast<double>(a.size());
  double ma = 0, mb = 0;
  for (size_t i = 0; i < a.size(); ++i) ma += ra[i] / n, mb += rb[i] / n;
  double sab = 0, saa = 0, sbb = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    sab += (ra[i] - ma) * (rb[i] - mb);
    saa += (ra[i] - ma) * (ra[i] - ma);
    sbb += (rb[i] - mb) * (rb[i] - mb);
  }
  return saa > 0 && sbb > 0 ? sab / std::sqrt(saa * sbb) : NAN;
}

nlohmann::json Nested(const std::vector<double>& v, int64_t rows, int64_t cols) {
  nlohmann::json out = nlohmann::json::array();
  for (int64_t r = 0; r < rows; ++r) {
    nlohmann::json row = nlohmann::json::array();
    for (int64_t c = 0; c < cols; ++c) {
      const double x = v[r * cols + c];
      row.push_back(JsonNumber(x));
    }
    out.push_back(row);
  }
  return out;
}

// ---- Configure: the windows of the text.
struct Windows {
  size_t all = 0;               // full windows of the text
  std::vector<Window> imp, val;  // the first half (importance, similarity), the second (validation)
};

// The text's windows of T tokens, each half capped at the sizes'. InvalidArgument when the text
// has fewer than two windows.
Result<Windows> SplitWindows(const Source& src, const Sizes& sz, int64_t T) {
  const std::vector<Window> all = MakeWindows(src.ids, src.bos, T);
  if (all.size() < 2) {
    return Status::InvalidArgument("the text has " + std::to_string(src.ids.size()) +
                                   " tokens, fewer than two windows of " + std::to_string(T));
  }
  Windows w;
  w.all = all.size();
  const size_t half = all.size() / 2;
  w.imp.assign(all.begin(), all.begin() + std::min<size_t>(half, sz.importance_windows));
  w.val.assign(all.begin() + half, all.begin() + half + std::min<size_t>(all.size() - half, sz.validation_windows));
  return w;
}

// ---- What the report stages read. Per-head vectors are [L * H], layer-major.
struct Importance {
  std::vector<double> raw;          // I_h = mean over windows of |dL/dxi_h|
  std::vector<double> signed_mean;  // mean over windows of dL/dxi_h
  std::vector<double> normalized;   // I_h / ||I_layer||_2 (Michel et al. section 4.1)
};

struct Similarity {
  std::vector<double> jsd, cka;                      // [L * H, H]: head a of layer l against head b
  std::vector<double> jsd_to_others, cka_to_others;  // [L * H]: mean over the other heads of the layer
  std::vector<double> jsd_layer, cka_layer;          // [L]: the above averaged over the layer's heads
  std::vector<double> alpha1;                        // [L * H]: attention on token 0 (NaN: not measured)
  std::vector<double> rho_jsd_layer;                 // [L]: Spearman(importance, jsd_to_others) in a layer
  double rho_jsd = NAN, rho_cka = NAN, rho_alpha1 = NAN;  // Spearman over every head
  bool in_range = true;  // every JS distance and CKA in [0, 1] (up to 1e-9)
};

// Validation loss after pruning the first k heads of each order, for k on the grid.
struct Pruning {
  std::vector<int64_t> ks;  // sorted, unique; holds k20, k40 and every head
  int64_t k20 = 0, k40 = 0;  // 20% and 40% of the heads
  std::vector<int64_t> imp_order, raw_order;                // least important first
  std::vector<double> by_imp, by_raw;                       // [ks]
  std::vector<std::vector<double>> random;                  // [random orders][ks]
  std::vector<double> random_mean, random_min, random_max;  // [ks] over the random orders
  // The position of k in ks (k20, k40 and every head are there by construction).
  size_t Index(int64_t k) const { return std::find(ks.begin(), ks.end(), k) - ks.begin(); }
};

// The claims' numbers, from the pruning curves.
struct PruningComparison {
  int64_t inner = 0, imp_wins = 0;  // grid points 0 < k < n_heads; those where importance beats random
  double imp_area = 0, rnd_area = 0;  // mean loss increase over those points
  double d20 = 0, d40 = 0, r20 = 0, r40 = 0;  // loss increase at k20 / k40: importance, random mean
  int64_t k_free = 0;  // the largest k whose importance-ordered loss stays within kLittleLoss
};

struct Measured {
  Sizes sz;
  Source src;
  int64_t L = 0, H = 0, n_heads = 0, T = 0;
  size_t windows = 0, imp_windows = 0, val_windows = 0;
  double base_loss = NAN;  // unpruned validation loss
  Importance imp;
  Similarity sim;
  Pruning pr;
  PruningComparison cmp;
  int64_t sink_heads = 0;  // heads with alpha_1 > kSinkAlpha
};

constexpr double kSinkAlpha = 0.3;  // a "sink head": alpha_1 above this

// Sink heads among the first k of the importance order.
int64_t SinksAmong(const Measured& m, int64_t k) {
  int64_t n = 0;
  for (int64_t i = 0; i < k; ++i) n += m.sim.alpha1[m.pr.imp_order[i]] > kSinkAlpha;
  return n;
}

// ---- Measure.
// Importance: |dL/dxi_h| per importance window (one window = one example), averaged.
Result<Importance> MeasureImportance(const ExperimentOptions& o, Gpt& g, const std::vector<Window>& imp, int64_t T) {
  const int64_t L = g.config().n_layer, H = g.config().n_head, n_heads = L * H;
  Importance r;
  r.raw.assign(n_heads, 0.0);
  r.signed_mean.assign(n_heads, 0.0);
  for (size_t w = 0; w < imp.size(); ++w) {
    double loss = 0;
    g.grads().Zero();
    ATTNLAB_RETURN_IF_ERROR(g.Forward(imp[w].x.data(), imp[w].y.data(), 1, T, &loss));
    ATTNLAB_RETURN_IF_ERROR(g.Backward());
    const std::vector<double> grad = HeadMaskGradient(g);
    for (int64_t i = 0; i < n_heads; ++i) {
      r.raw[i] += std::abs(grad[i]) / static_cast<double>(imp.size());
      r.signed_mean[i] += grad[i] / static_cast<double>(imp.size());
    }
    if (w % 8 == 7 || w + 1 == imp.size()) {
      Progress(o, kName, "importance: %zu/%zu windows", w + 1, imp.size());
    }
  }
  r.normalized = NormalizeImportancePerLayer(r.raw, L, H);
  return r;
}

// The streaming analysis (`attnlab analyze`) of the text the first imp_windows windows cover.
Result<AnalysisResult> AnalyzeImportanceWindows(const ExperimentOptions& o, Gpt& g, const Source& src,
                                                size_t imp_windows, int64_t T, int64_t jsd_rows) {
  AnalysisOptions ao;
  ao.window = T;
  ao.bos = src.bos;
  ao.jsd_rows = jsd_rows;
  ao.effective_rank = false;
  ao.pattern_sequences = 0;
  ao.seed = o.seed;
  const int64_t step = src.bos >= 0 ? T - 1 : T;
  std::vector<int32_t> imp_ids(src.ids.begin(),
                               src.ids.begin() + std::min<int64_t>(src.ids.size(), imp_windows * step + (src.bos >= 0 ? 0 : 1)));
  ATTNLAB_ASSIGN_OR_RETURN(AnalysisResult an, AnalyzeModel(g, imp_ids, ao, false));
  g.set_observer(nullptr);
  return an;
}

// Similarity (attention JS distance, output CKA) and alpha_1 per head from the analysis, and
// their Spearman correlations with the normalised importance.
Similarity SimilarityFrom(const AnalysisResult& an, int64_t L, int64_t H, const std::vector<double>& norm_imp) {
  Similarity s;
  s.jsd.assign(L * H * H, 0.0);
  s.cka.assign(L * H * H, 0.0);
  s.jsd_to_others.assign(L * H, 0.0);
  s.cka_to_others.assign(L * H, 0.0);
  s.jsd_layer.assign(L, 0.0);
  s.cka_layer.assign(L, 0.0);
  for (int64_t l = 0; l < L; ++l) {
    const std::vector<double>& jsd = an.layers[l].attention.jsd;
    const std::vector<double>& cka = an.layers[l].head_cka;
    double js = 0, ck = 0;
    for (int64_t a = 0; a < H; ++a) {
      double ja = 0, ca = 0;
      for (int64_t b = 0; b < H; ++b) {
        s.jsd[(l * H + a) * H + b] = jsd[a * H + b];
        s.cka[(l * H + a) * H + b] = cka[a * H + b];
        if (!(jsd[a * H + b] >= 0 && jsd[a * H + b] <= 1 + 1e-9)) s.in_range = false;
        if (!(cka[a * H + b] >= -1e-9 && cka[a * H + b] <= 1 + 1e-9)) s.in_range = false;
        if (a == b) continue;
        ja += jsd[a * H + b] / double(H - 1);
        ca += cka[a * H + b] / double(H - 1);
      }
      s.jsd_to_others[l * H + a] = ja;
      s.cka_to_others[l * H + a] = ca;
      js += ja / double(H);
      ck += ca / double(H);
    }
    s.jsd_layer[l] = js;
    s.cka_layer[l] = ck;
  }
  // Attention on the first token (alpha_1, Gu et al. 2024) per head: are the unimportant heads
  // the sink heads?
  s.alpha1.assign(L * H, NAN);
  for (int64_t l = 0; l < L; ++l) {
    for (int64_t h = 0; h < H; ++h) {
      const auto& hs = an.layers[l].attention.heads[h];
      if (!hs.alpha.empty()) s.alpha1[l * H + h] = hs.alpha[0];
    }
  }
  s.rho_alpha1 = Spearman(norm_imp, s.alpha1);
  s.rho_jsd = Spearman(norm_imp, s.jsd_to_others);
  s.rho_cka = Spearman(norm_imp, s.cka_to_others);
  s.rho_jsd_layer.resize(L);
  for (int64_t l = 0; l < L; ++l) {
    s.rho_jsd_layer[l] =
        Spearman(std::vector<double>(norm_imp.begin() + l * H, norm_imp.begin() + (l + 1) * H),
                 std::vector<double>(s.jsd_to_others.begin() + l * H, s.jsd_to_others.begin() + (l + 1) * H));
  }
  return s;
}

// The k grid: 0, k_step, ... up to n_heads - 4, plus 20% and 40% of the heads and every head.
void PruningGrid(int64_t n_heads, int64_t k_step, Pruning& p) {
  for (int64_t k = 0; k <= n_heads - 4; k += k_step) p.ks.push_back(k);
  p.k20 = std::llround(0.2 * n_heads);
  p.k40 = std::llround(0.4 * n_heads);
  p.ks.push_back(p.k20);
  p.ks.push_back(p.k40);
  p.ks.push_back(n_heads);
  std::sort(p.ks.begin(), p.ks.end());
  p.ks.erase(std::unique(p.ks.begin(), p.ks.end()), p.ks.end());
}

// The heads sorted by `key`, smallest first (stable: ties keep the head order).
std::vector<int64_t> AscendingOrder(const std::vector<double>& key) {
  std::vector<int64_t> order(key.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return key[a] < key[b]; });
  return order;
}

// Random order r of n heads: a Fisher-Yates shuffle driven by SplitMix64 from (seed, r).
std::vector<int64_t> RandomOrder(int64_t n, uint64_t seed, int64_t r) {
  std::vector<int64_t> ord(n);
  std::iota(ord.begin(), ord.end(), 0);
  uint64_t state = SplitMix64(seed * 1000003 + static_cast<uint64_t>(r));
  for (int64_t i = n - 1; i > 0; --i) {
    state = SplitMix64(state);
    std::swap(ord[i], ord[state % static_cast<uint64_t>(i + 1)]);
  }
  return ord;
}

// Validation loss with the first k heads of `order` pruned (xi = 0), for each k of ks; g's
// parameters are those of `base` with the mask applied (the caller restores them).
Result<std::vector<double>> PruningCurve(Gpt& g, const ParameterStore& base, const std::vector<int64_t>& order,
                                         const std::vector<int64_t>& ks, const std::vector<Window>& val) {
  std::vector<double> curve;
  for (int64_t k : ks) {
    std::vector<float> mask(order.size(), 1.0f);
    for (int64_t i = 0; i < k; ++i) mask[order[i]] = 0.0f;
    ATTNLAB_RETURN_IF_ERROR(ApplyHeadMask(base, mask, &g));
    ATTNLAB_ASSIGN_OR_RETURN(const double loss, MeanLoss(g, val));
    curve.push_back(loss);
  }
  return curve;
}

// Mean, min and max over the random orders at each k.
void RandomEnvelope(Pruning& p) {
  const size_t n = p.ks.size();
  p.random_mean.assign(n, 0.0);
  p.random_min.assign(n, INFINITY);
  p.random_max.assign(n, -INFINITY);
  for (const std::vector<double>& curve : p.random) {
    for (size_t i = 0; i < n; ++i) {
      p.random_mean[i] += curve[i] / double(p.random.size());
      p.random_min[i] = std::min(p.random_min[i], curve[i]);
      p.random_max[i] = std::max(p.random_max[i], curve[i]);
    }
  }
}

// Pruning curves: importance order (normalised per layer, as Michel et al.), raw importance
// order, and sz.random_orders random orders. Leaves g with `base`'s parameters.
Result<Pruning> MeasurePruning(const ExperimentOptions& o, const Sizes& sz, Gpt& g, const ParameterStore& base,
                               const Importance& imp, const std::vector<Window>& val) {
  const int64_t n_heads = static_cast<int64_t>(imp.raw.size());
  Pruning p;
  PruningGrid(n_heads, sz.k_step, p);
  p.imp_order = AscendingOrder(imp.normalized);
  // Michel et al. normalise per layer before sorting across layers; the raw order shows why.
  p.raw_order = AscendingOrder(imp.raw);
  std::vector<std::vector<int64_t>> orders = {p.imp_order, p.raw_order};
  for (int64_t r = 0; r < sz.random_orders; ++r) orders.push_back(RandomOrder(n_heads, o.seed, r));
  for (size_t oi = 0; oi < orders.size(); ++oi) {
    ATTNLAB_ASSIGN_OR_RETURN(std::vector<double> curve, PruningCurve(g, base, orders[oi], p.ks, val));
    Progress(o, kName, "pruning order %s: loss %.4f at k = %lld (20%%), %.4f at k = %lld (40%%), %.4f with "
             "every head pruned",
             oi == 0 ? "by importance" : oi == 1 ? "by raw importance" : ("random " + std::to_string(oi - 1)).c_str(),
             curve[p.Index(p.k20)], static_cast<long long>(p.k20), curve[p.Index(p.k40)],
             static_cast<long long>(p.k40), curve.back());
    if (oi == 0) p.by_imp = std::move(curve);
    else if (oi == 1) p.by_raw = std::move(curve);
    else p.random.push_back(std::move(curve));
  }
  ATTNLAB_RETURN_IF_ERROR(CopyParameters(base, &g.params()));
  RandomEnvelope(p);
  return p;
}

PruningComparison ComparePruning(const Pruning& p, double base_loss, int64_t n_heads) {
  PruningComparison c;
  const std::vector<int64_t>& ks = p.ks;
  for (size_t i = 0; i < ks.size(); ++i) {
    if (ks[i] == 0 || ks[i] == n_heads) continue;
    ++c.inner;
    c.imp_wins += p.by_imp[i] < p.random_mean[i];
    c.imp_area += (p.by_imp[i] - base_loss) / double(ks.size() - 2);
    c.rnd_area += (p.random_mean[i] - base_loss) / double(ks.size() - 2);
  }
  c.d20 = p.by_imp[p.Index(p.k20)] - base_loss;
  c.d40 = p.by_imp[p.Index(p.k40)] - base_loss;
  c.r20 = p.random_mean[p.Index(p.k20)] - base_loss;
  c.r40 = p.random_mean[p.Index(p.k40)] - base_loss;
  for (size_t i = 0; i < ks.size(); ++i) {
    if (p.by_imp[i] - base_loss < kLittleLoss) c.k_free = std::max(c.k_free, ks[i]);
    else break;
  }
  return c;
}

// ---- Report stages.
// Checks (robust facts only).
Status AddChecks(const Measured& m, ExperimentResult& r) {
  const Pruning& p = m.pr;
  std::vector<const std::vector<double>*> curves = {&p.by_imp};  // importance, then the random orders
  for (const std::vector<double>& cv : p.random) curves.push_back(&cv);
  bool k0 = p.by_raw[0] == m.base_loss;
  for (const auto* cv : curves) k0 = k0 && (*cv)[0] == m.base_loss;
  r.AddCheck("k = 0 is the unpruned model", k0,
             "loss at k = 0 for every order equals the unpruned loss " + Fmt(m.base_loss, "%.6f") + " exactly: " +
                 (k0 ? "yes" : "no"));
  bool all_same = p.by_raw.back() == p.by_imp.back(), finite = true;
  for (const auto* cv : curves) {
    all_same = all_same && cv->back() == p.by_imp.back();
    finite = finite && std::isfinite(cv->back());
  }
  r.AddCheck("pruning every head gives a finite loss, whatever the order", all_same && finite,
             "loss with all " + std::to_string(m.n_heads) + " heads pruned: " + Fmt(p.by_imp.back(), "%.4f") +
                 (all_same ? " for every order" : " but the orders disagree"));
  bool imp_ok = true;
  double imp_sum = 0;
  for (double x : m.imp.raw) {
    imp_ok = imp_ok && std::isfinite(x) && x >= 0;
    imp_sum += x;
  }
  r.AddCheck("importance is finite, >= 0 and not all zero", imp_ok && imp_sum > 0,
             "sum of I_h " + Fmt(imp_sum, "%.4g") + ", min " +
                 Fmt(*std::min_element(m.imp.raw.begin(), m.imp.raw.end()), "%.3g"));
  bool unit = true;
  for (int64_t l = 0; l < m.L; ++l) {
    double ss = 0;
    for (int64_t h = 0; h < m.H; ++h) ss += m.imp.normalized[l * m.H + h] * m.imp.normalized[l * m.H + h];
    unit = unit && std::abs(ss - 1) < 1e-9;
  }
  r.AddCheck("per-layer normalised importance has unit l2 norm", unit, "every layer: " + std::string(unit ? "yes" : "no"));
  const Similarity& s = m.sim;
  r.AddCheck("JS distances and CKA lie in [0, 1]", s.in_range,
             "mean JS distance per layer from " + Fmt(*std::min_element(s.jsd_layer.begin(), s.jsd_layer.end()), "%.3f") +
                 " to " + Fmt(*std::max_element(s.jsd_layer.begin(), s.jsd_layer.end()), "%.3f") +
                 "; mean CKA from " + Fmt(*std::min_element(s.cka_layer.begin(), s.cka_layer.end()), "%.3f") +
                 " to " + Fmt(*std::max_element(s.cka_layer.begin(), s.cka_layer.end()), "%.3f"));
  return Status::Ok();
}

// Claims (Michel et al. 2019).
Status AddClaims(const Measured& m, ExperimentResult& r) {
  const Pruning& p = m.pr;
  const PruningComparison& c = m.cmp;
  const std::string src_paper = "Michel et al. 2019 (arXiv:1905.10650), section 4";
  const std::string heads = std::to_string(m.n_heads);
  r.claims.push_back(
      {"20% of heads can be pruned with little loss", src_paper,
       "pruning the " + std::to_string(p.k20) + " least important of " + heads +
           " heads (20%) raises the validation loss by < " + Fmt(kLittleLoss, "%.2f") + " nats",
       Fmt(c.d20, "%+.4f") + " nats (" + Fmt(m.base_loss, "%.4f") + " -> " + Fmt(p.by_imp[p.Index(p.k20)], "%.4f") +
           "); random order " + Fmt(c.r20, "%+.4f"),
       c.d20 < kLittleLoss});
  r.claims.push_back(
      {"40% of heads can be pruned with little loss", src_paper,
       "pruning the " + std::to_string(p.k40) + " least important of " + heads +
           " heads (40%) raises the validation loss by < " + Fmt(kLittleLoss, "%.2f") + " nats",
       Fmt(c.d40, "%+.4f") + " nats (" + Fmt(m.base_loss, "%.4f") + " -> " + Fmt(p.by_imp[p.Index(p.k40)], "%.4f") +
           "); random order " + Fmt(c.r40, "%+.4f"),
       c.d40 < kLittleLoss});
  r.claims.push_back(
      {"importance order beats random order", src_paper + " (pruning by importance); the random baseline is ours",
       "the importance-ordered loss is below the mean of " + std::to_string(m.sz.random_orders) +
           " random orders at >= 75% of the grid points 0 < k < " + heads + " and on average over them",
       "below at " + std::to_string(c.imp_wins) + "/" + std::to_string(c.inner) + " points; mean loss increase " +
           Fmt(c.imp_area, "%.4f") + " (importance) vs " + Fmt(c.rnd_area, "%.4f") + " (random)",
       c.inner > 0 && c.imp_wins * 4 >= c.inner * 3 && c.imp_area < c.rnd_area});
  return Status::Ok();
}

nlohmann::json SimilarityJson(const Measured& m) {
  const Similarity& s = m.sim;
  const int64_t L = m.L, H = m.H;
  nlohmann::json j = {{"jsd_rows", m.sz.jsd_rows},
                      {"jsd", Nested(s.jsd, m.n_heads, H)},
                      {"cka", Nested(s.cka, m.n_heads, H)},
                      {"jsd_mean_per_layer", s.jsd_layer},
                      {"cka_mean_per_layer", s.cka_layer},
                      {"jsd_to_others", Nested(s.jsd_to_others, L, H)},
                      {"cka_to_others", Nested(s.cka_to_others, L, H)},
                      {"spearman_importance_jsd", JsonNumber(s.rho_jsd)},
                      {"alpha1", Nested(s.alpha1, L, H)},
                      {"spearman_importance_alpha1", JsonNumber(s.rho_alpha1)},
                      {"sink_heads", m.sink_heads},
                      {"sink_heads_among_first_k20", SinksAmong(m, m.pr.k20)},
                      {"sink_heads_among_first_k40", SinksAmong(m, m.pr.k40)},
                      {"spearman_importance_cka", JsonNumber(s.rho_cka)},
                      {"spearman_importance_jsd_per_layer", nlohmann::json::array()}};
  for (double x : s.rho_jsd_layer) j["spearman_importance_jsd_per_layer"].push_back(JsonNumber(x));
  return j;
}

// Results (docs/EXPERIMENTS.md lists the fields).
Status AddResults(const Measured& m, ExperimentResult& r) {
  const Pruning& p = m.pr;
  const PruningComparison& c = m.cmp;
  nlohmann::json& res = r.results;
  res["model"] = m.src.model;
  res["model_kind"] = m.src.model_kind;
  res["text"] = m.src.text;
  res["layers"] = m.L;
  res["heads"] = m.H;
  res["window"] = m.T;
  res["bos"] = m.src.bos;
  res["text_tokens"] = m.src.ids.size();
  res["windows"] = m.windows;
  res["importance_windows"] = m.imp_windows;
  res["validation_windows"] = m.val_windows;
  res["validation_tokens"] = m.val_windows * m.T;
  res["base_loss"] = m.base_loss;
  res["importance"] = Nested(m.imp.raw, m.L, m.H);
  res["importance_normalized"] = Nested(m.imp.normalized, m.L, m.H);
  res["mask_gradient_mean"] = Nested(m.imp.signed_mean, m.L, m.H);
  res["importance_order"] = p.imp_order;
  res["k"] = p.ks;
  res["k20"] = p.k20;
  res["k40"] = p.k40;
  res["loss_importance"] = p.by_imp;
  res["loss_raw_importance"] = p.by_raw;
  res["raw_importance_order"] = p.raw_order;
  res["loss_random"] = p.random;
  res["loss_random_mean"] = p.random_mean;
  res["delta20"] = c.d20;
  res["delta40"] = c.d40;
  res["random_delta20"] = c.r20;
  res["random_delta40"] = c.r40;
  res["k_within_threshold"] = c.k_free;
  res["threshold_nats"] = kLittleLoss;
  res["similarity"] = SimilarityJson(m);
  return Status::Ok();
}

Status AddSummary(const Measured& m, ExperimentResult& r) {
  const Pruning& p = m.pr;
  const PruningComparison& c = m.cmp;
  const Similarity& s = m.sim;
  r.summary = "On " + m.src.model_kind + " model " + m.src.model + " (" + std::to_string(m.L) + " x " +
              std::to_string(m.H) + " heads), held-out loss " + Fmt(m.base_loss, "%.4f") +
              " nats/token. Pruning the least important heads (Michel et al.'s |dL/dxi_h|, normalised per layer): " +
              Fmt(c.d20, "%+.4f") + " nats at 20% (" + std::to_string(p.k20) + " heads), " + Fmt(c.d40, "%+.4f") +
              " at 40% (" + std::to_string(p.k40) + "); random order: " + Fmt(c.r20, "%+.4f") + " / " +
              Fmt(c.r40, "%+.4f") + "; raw (not normalised) importance order: " +
              Fmt(p.by_raw[p.Index(p.k20)] - m.base_loss, "%+.4f") + " / " +
              Fmt(p.by_raw[p.Index(p.k40)] - m.base_loss, "%+.4f") + ". Up to " + std::to_string(c.k_free) +
              " heads go within " + Fmt(kLittleLoss, "%.2f") + " nats. Every head pruned: " +
              Fmt(p.by_imp.back(), "%.3f") + ". Heads differ: mean JS distance per layer " +
              Fmt(*std::min_element(s.jsd_layer.begin(), s.jsd_layer.end()), "%.2f") + "-" +
              Fmt(*std::max_element(s.jsd_layer.begin(), s.jsd_layer.end()), "%.2f") +
              "; Spearman(importance, JS distance to the other heads) = " + Fmt(s.rho_jsd, "%.2f") +
              ". Sink heads (alpha_1 > 0.3): " + std::to_string(m.sink_heads) + " of " + std::to_string(m.n_heads) +
              ", " + std::to_string(SinksAmong(m, p.k20)) + " of the " + std::to_string(p.k20) +
              " least important; Spearman(importance, alpha_1) = " + Fmt(s.rho_alpha1, "%.2f") + ".";
  return Status::Ok();
}

// The pruning curves: importance, raw importance and the random orders' envelope, and a table.
void AddPruningSection(const Measured& m, report::HtmlReport& html) {
  const Pruning& p = m.pr;
  html.AddSection("pruning", "Loss after pruning k heads");
  report::XyPlot plot;
  plot.title = "Validation loss after pruning k heads";
  plot.x.label = "heads pruned (k)";
  plot.y.label = "cross-entropy (nats/token)";
  plot.markers = true;
  plot.reference_lines = {{m.base_loss, "unpruned"}, {m.base_loss + kLittleLoss, "+" + Fmt(kLittleLoss, "%.2f")}};
  std::vector<double> kx(p.ks.begin(), p.ks.end());
  plot.x.min = 0;
  plot.x.max = static_cast<double>(m.n_heads);
  plot.series.push_back({"importance order", kx, p.by_imp});
  plot.series.push_back({"raw importance order", kx, p.by_raw});
  plot.series.push_back({"random orders, mean", kx, p.random_mean});
  plot.series.push_back({"random orders, min", kx, p.random_min});
  plot.series.push_back({"random orders, max", kx, p.random_max});
  html.AddFigure(report::RenderLinePlot(plot),
                 "Least important heads first (importance normalised per layer, as Michel et al.; raw: "
                 "not normalised) against " + std::to_string(m.sz.random_orders) +
                     " random orders (their mean, and the lowest and highest loss at each k).",
                 "fig-pruning");
  std::vector<std::vector<std::string>> rows;
  for (size_t i = 0; i < p.ks.size(); ++i) {
    rows.push_back({std::to_string(p.ks[i]), Fmt(100.0 * p.ks[i] / m.n_heads, "%.1f%%"), Fmt(p.by_imp[i], "%.4f"),
                    Fmt(p.by_imp[i] - m.base_loss, "%+.4f"), Fmt(p.by_raw[i], "%.4f"), Fmt(p.random_mean[i], "%.4f"),
                    Fmt(p.random_min[i], "%.4f") + " - " + Fmt(p.random_max[i], "%.4f")});
  }
  html.AddTable({"k", "pruned", "loss (importance)", "increase", "loss (raw importance)", "loss (random, mean)",
                 "random range"}, rows,
                "Validation loss on held-out windows never used for the importance.");
}

// The importance heatmap and, per layer, raw importance and redundancy.
void AddImportanceSection(const Measured& m, report::HtmlReport& html) {
  const int64_t L = m.L, H = m.H;
  const Similarity& s = m.sim;
  html.AddSection("importance", "Head importance");
  report::Heatmap hm;
  hm.values = m.imp.normalized;
  hm.rows = L;
  hm.cols = H;
  hm.x_label = "head";
  hm.y_label = "layer";
  hm.value_label = "I_h / ||I_layer||";
  html.AddFigure(report::RenderHeatmap(hm), "Importance |dL/dxi_h| per head, normalised per layer.",
                 "fig-importance");
  std::vector<std::vector<std::string>> rows;
  for (int64_t l = 0; l < L; ++l) {
    double sum = 0, mx = 0;
    for (int64_t h = 0; h < H; ++h) sum += m.imp.raw[l * H + h], mx = std::max(mx, m.imp.raw[l * H + h]);
    rows.push_back({std::to_string(l), Fmt(sum, "%.4g"), Fmt(mx / std::max(sum, 1e-300), "%.3f"),
                    Fmt(s.jsd_layer[l], "%.3f"), Fmt(s.cka_layer[l], "%.3f"), Fmt(s.rho_jsd_layer[l], "%.2f")});
  }
  html.AddTable({"layer", "sum of I_h", "top head's share", "mean JS distance", "mean CKA",
                 "Spearman(I, JS distance)"},
                rows, "Raw importance per layer (before normalisation) and the heads' redundancy.");
}

// Importance against dissimilarity (one point per head), and the heads pruned first.
void AddSimilaritySection(const Measured& m, report::HtmlReport& html) {
  const int64_t L = m.L, H = m.H, k20 = m.pr.k20, k40 = m.pr.k40;
  const Similarity& s = m.sim;
  const std::vector<double>& norm_imp = m.imp.normalized;
  html.AddSection("similarity", "Redundancy: are important heads the dissimilar ones?");
  report::XyPlot p;
  p.title = "Importance against dissimilarity";
  p.x.label = "mean JS distance to the other heads of the layer";
  p.y.label = "normalised importance";
  for (int64_t l = 0; l < L; ++l) {
    p.series.push_back({"layer " + std::to_string(l),
                        std::vector<double>(s.jsd_to_others.begin() + l * H, s.jsd_to_others.begin() + (l + 1) * H),
                        std::vector<double>(norm_imp.begin() + l * H, norm_imp.begin() + (l + 1) * H)});
  }
  html.AddFigure(report::RenderScatterPlot(p),
                 "One point per head. Spearman over all heads: " + Fmt(s.rho_jsd, "%.2f") +
                     " (JS distance), " + Fmt(s.rho_cka, "%.2f") + " (mean CKA to the others).",
                 "fig-similarity");
  std::vector<std::vector<std::string>> rows;
  for (int64_t i = 0; i < k40; ++i) {
    const int64_t hh = m.pr.imp_order[i];
    rows.push_back({std::to_string(i + 1), std::to_string(hh / H) + "." + std::to_string(hh % H),
                    Fmt(norm_imp[hh], "%.3f"), Fmt(s.alpha1[hh], "%.3f"), Fmt(s.jsd_to_others[hh], "%.3f"),
                    Fmt(s.cka_to_others[hh], "%.3f")});
  }
  html.AddTable({"rank", "layer.head", "normalised importance", "alpha_1 (attention on token 0)",
                 "mean JS distance to the others", "mean CKA to the others"},
                rows, "The " + std::to_string(k40) + " heads pruned first (40%). Spearman(importance, alpha_1) over all heads: " +
                          Fmt(s.rho_alpha1, "%.2f") + "; sink heads (alpha_1 > 0.3) among the first " + std::to_string(k20) +
                          " / " + std::to_string(k40) + ": " + std::to_string(SinksAmong(m, k20)) + " / " +
                          std::to_string(SinksAmong(m, k40)) + " (of " + std::to_string(m.sink_heads) + " in the model).");
}

Status AddHtml(const Measured& m, ExperimentResult& r) {
  const PruningComparison& c = m.cmp;
  r.html = report::HtmlReport("Head importance and pruning (Michel et al. 2019)");
  r.html.SetSubtitle(m.src.model + " (" + m.src.model_kind + "), " + std::to_string(m.L) + " layers x " +
                     std::to_string(m.H) + " heads; " + m.src.text + ": " + std::to_string(m.imp_windows) +
                     " importance + " + std::to_string(m.val_windows) + " validation windows of " +
                     std::to_string(m.T) + " tokens");
  r.html.AddSummaryFact("unpruned loss", Fmt(m.base_loss, "%.4f"));
  r.html.AddSummaryFact("loss change at 20% / 40% pruned", Fmt(c.d20, "%+.4f") + " / " + Fmt(c.d40, "%+.4f"));
  r.html.AddSummaryFact("random order at 20% / 40%", Fmt(c.r20, "%+.4f") + " / " + Fmt(c.r40, "%+.4f"));
  r.html.AddSummaryFact("Spearman(importance, JS distance)", Fmt(m.sim.rho_jsd, "%.2f"));
  AddPruningSection(m, r.html);
  AddImportanceSection(m, r.html);
  AddSimilaritySection(m, r.html);
  AddSetupSection(r.html, {
      "Importance (Michel et al. eq. 2): I_h = mean over " + std::to_string(m.imp_windows) +
          " windows of |dL/dxi_h|, xi_h the head's output gate before the output projection; read "
          "exactly from the projection's weight gradient (src/experiments/head_importance.h); "
          "normalised per layer by the l2 norm before sorting across layers, as Michel et al. do.",
      "Pruning: xi_h = 0 (the head's projection rows zeroed; the projection bias stays). Validation: " +
          std::to_string(m.val_windows) + " windows (" + std::to_string(m.val_windows * m.T) +
          " tokens) from the second half of the text.",
      "Random baseline: " + std::to_string(m.sz.random_orders) + " uniformly random orders (seeded by --seed).",
      "Similarity: JS distance between attention rows (normalised, sqrt(JSD/ln 2), " +
          std::to_string(m.sz.jsd_rows) + " sampled rows per layer) and linear CKA between head outputs, "
          "from attnlab analyze's streaming analysis of the importance windows.",
  });
  return Status::Ok();
}

// configure -> measure (unpruned loss, importance, similarity, pruning curves) -> report.
Result<ExperimentResult> RunHeads(const ExperimentOptions& o) {
  Measured m;
  m.sz = SizesFor(o.quick);
  ATTNLAB_ASSIGN_OR_RETURN(m.src, LoadSource(o));
  Gpt& g = *m.src.g;
  const ModelConfig& c = g.config();
  m.L = c.n_layer;
  m.H = c.n_head;
  m.n_heads = m.L * m.H;
  m.T = m.sz.window > 0 ? std::min<int64_t>(m.sz.window, c.context) : c.context;
  ATTNLAB_ASSIGN_OR_RETURN(const Windows w, SplitWindows(m.src, m.sz, m.T));
  m.windows = w.all;
  m.imp_windows = w.imp.size();
  m.val_windows = w.val.size();
  Progress(o, kName, "model %s (%s): %lld layers x %lld heads; text %s: %zu tokens, %zu windows of %lld "
           "(importance %zu, validation %zu)", m.src.model.c_str(), m.src.model_kind.c_str(),
           static_cast<long long>(m.L), static_cast<long long>(m.H), m.src.text.c_str(), m.src.ids.size(),
           w.all, static_cast<long long>(m.T), w.imp.size(), w.val.size());

  ParameterStore base(c);
  ATTNLAB_RETURN_IF_ERROR(CopyParameters(g.params(), &base));
  ATTNLAB_ASSIGN_OR_RETURN(m.base_loss, MeanLoss(g, w.val));
  Progress(o, kName, "unpruned validation loss %.4f", m.base_loss);
  ATTNLAB_ASSIGN_OR_RETURN(m.imp, MeasureImportance(o, g, w.imp, m.T));
  ATTNLAB_ASSIGN_OR_RETURN(const AnalysisResult an,
                           AnalyzeImportanceWindows(o, g, m.src, w.imp.size(), m.T, m.sz.jsd_rows));
  m.sim = SimilarityFrom(an, m.L, m.H, m.imp.normalized);
  const std::vector<double>& jsd_layer = m.sim.jsd_layer;
  Progress(o, kName, "similarity: mean JS distance per layer %s %s %s ..., Spearman(importance, JS "
           "distance to the others) %s", Fmt(jsd_layer[0], "%.3f").c_str(),
           m.L > 1 ? Fmt(jsd_layer[1], "%.3f").c_str() : "", m.L > 2 ? Fmt(jsd_layer[2], "%.3f").c_str() : "",
           Fmt(m.sim.rho_jsd, "%.3f").c_str());
  ATTNLAB_ASSIGN_OR_RETURN(m.pr, MeasurePruning(o, m.sz, g, base, m.imp, w.val));
  m.cmp = ComparePruning(m.pr, m.base_loss, m.n_heads);
  for (double a : m.sim.alpha1) m.sink_heads += a > kSinkAlpha;
  return AssembleReport<Measured>(m, {AddChecks, AddClaims, AddResults, AddSummary, AddHtml});
}

}  // namespace

Experiment HeadsExperiment() {
  return {kName,
          "head importance (Michel et al. 2019), JS/CKA redundancy and test-time pruning of the default model",
          RunHeads};
}

}  // namespace attnlab::experiments
