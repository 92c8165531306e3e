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
#include "core/resources.h"
#include "diagnostics/analysis.h"
#include "experiments/experiment.h"
#include "experiments/head_importance.h"
#include "model/checkpoint.h"
#include "model/tokenizer_spec.h"
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

struct Source {
  std::unique_ptr<Gpt> g;
  std::vector<int32_t> ids;  // the text's tokens (no BOS)
  int32_t bos = -1;
  std::string model, model_kind, text;
};

Result<Source> LoadSource(const ExperimentOptions& o) {
  Source s;
  const std::string model_path = o.data.empty() ? FindResource(kDefaultModelPath) : o.data;
  const std::string text_path = FindResource(kSampleTextPath);
  if (model_path.empty() && !o.quick) {
    return Status::NotFound(std::string("the default model (") + kDefaultModelPath +
                            ") was not found; pass --data MODEL_DIR");
  }
  if (model_path.empty()) {
    // CI without the default model: a tiny random-init byte-level model.
    ModelConfig c;
    c.vocab_size = 257;  // bytes + BOS
    c.context = 128;
    c.d_model = 32;
    c.n_layer = 2;
    c.n_head = 4;
    ATTNLAB_ASSIGN_OR_RETURN(s.g, Gpt::Create(c));
    s.g->params().Initialize(c, o.seed);
    s.bos = 256;
    s.model = "random-init byte model (2 layers, d_model 32, 4 heads, seed " + std::to_string(o.seed) + ")";
    s.model_kind = "random-init";
    if (!text_path.empty()) {
      ATTNLAB_ASSIGN_OR_RETURN(std::string text, ReadFileToString(text_path, int64_t{1} << 30));
      for (unsigned char ch : text) s.ids.push_back(ch);
      s.text = text_path;
    } else {
      for (int64_t i = 0; i < 4096; ++i) s.ids.push_back(static_cast<int32_t>(SplitMix64(o.seed * 7919 + i) % 256));
      s.text = "pseudo-random bytes (no data/sample.txt found)";
    }
    return s;
  }
  if (text_path.empty()) {
    return Status::NotFound(std::string("the sample text (") + kSampleTextPath + ") was not found");
  }
  ATTNLAB_ASSIGN_OR_RETURN(LoadedModel m, LoadAnyModel(model_path));
  ATTNLAB_ASSIGN_OR_RETURN(s.g, MakeGpt(m));
  if (!m.meta.is_object() || !m.meta.contains("tokenizer")) {
    return Status::InvalidArgument("the model " + model_path +
                                   " carries no tokenizer (heads needs an attnlab checkpoint)");
  }
  ATTNLAB_ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> tok, TokenizerFromJson(m.meta["tokenizer"]));
  if (tok->vocab_size() != s.g->config().vocab_size) {
    return Status::InvalidArgument("the model's tokenizer does not match its vocabulary");
  }
  auto it = m.meta.find("trainer");
  if (it != m.meta.end() && it->is_object() && it->contains("bos") &&
      (*it)["bos"].is_number_integer() && (*it)["bos"].get<int64_t>() >= 0 && tok->bos_id()) {
    s.bos = *tok->bos_id();
  }
  ATTNLAB_ASSIGN_OR_RETURN(std::string text, ReadFileToString(text_path, int64_t{1} << 30));
  ATTNLAB_ASSIGN_OR_RETURN(s.ids, tok->Encode(text));
  s.model = m.path;
  s.model_kind = o.data.empty() ? "default" : "checkpoint";
  s.text = text_path;
  return s;
}

// One window: tokens x [T] and targets y [T] (every target counted).
struct Window {
  std::vector<int32_t> x, y;
};

// Windows exactly as `attnlab eval` cuts them (full windows only).
std::vector<Window> MakeWindows(const std::vector<int32_t>& ids, int32_t bos, int64_t T) {
  std::vector<Window> out;
  const int64_t N = static_cast<int64_t>(ids.size());
  const int64_t step = bos >= 0 ? T - 1 : T;
  for (int64_t s = 0; s + step + (bos >= 0 ? 0 : 1) <= N; s += step) {
    Window w;
    if (bos >= 0) {
      w.x.push_back(bos);
      for (int64_t t = s; t < s + T - 1; ++t) w.x.push_back(ids[t]);
      for (int64_t t = s; t < s + T; ++t) w.y.push_back(ids[t]);
    } else {
      for (int64_t t = s; t < s + T; ++t) w.x.push_back(ids[t]);
      for (int64_t t = s + 1; t < s + T + 1; ++t) w.y.push_back(ids[t]);
    }
    out.push_back(std::move(w));
  }
  return out;
}

// Mean cross-entropy over every target of the windows (forwards of up to 8 windows).
Result<double> MeanLoss(Gpt& g, const std::vector<Window>& ws) {
  const int64_t T = static_cast<int64_t>(ws.front().x.size());
  double sum = 0;
  int64_t n = 0;
  for (size_t b0 = 0; b0 < ws.size(); b0 += 8) {
    const size_t b1 = std::min(ws.size(), b0 + 8);
    std::vector<int32_t> x, y;
    for (size_t i = b0; i < b1; ++i) {
      x.insert(x.end(), ws[i].x.begin(), ws[i].x.end());
      y.insert(y.end(), ws[i].y.begin(), ws[i].y.end());
    }
    double loss = 0;
    const int64_t B = static_cast<int64_t>(b1 - b0);
    ATTNLAB_RETURN_IF_ERROR(g.Forward(x.data(), y.data(), B, T, &loss));
    sum += loss * static_cast<double>(B * T);
    n += B * T;
  }
  return sum / static_cast<double>(n);
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


Result<ExperimentResult> Run(const ExperimentOptions& o) {
  const Sizes sz = SizesFor(o.quick);
  ATTNLAB_ASSIGN_OR_RETURN(Source src, LoadSource(o));
  Gpt& g = *src.g;
  const ModelConfig& c = g.config();
  const int64_t L = c.n_layer, H = c.n_head, n_heads = L * H;
  const int64_t T = sz.window > 0 ? std::min<int64_t>(sz.window, c.context) : c.context;
  const std::vector<Window> all = MakeWindows(src.ids, src.bos, T);
  if (all.size() < 2) {
    return Status::InvalidArgument("the text has " + std::to_string(src.ids.size()) +
                                   " tokens, fewer than two windows of " + std::to_string(T));
  }
  const size_t half = all.size() / 2;
  const std::vector<Window> imp(all.begin(), all.begin() + std::min<size_t>(half, sz.importance_windows));
  const std::vector<Window> val(all.begin() + half,
                                all.begin() + half + std::min<size_t>(all.size() - half, sz.validation_windows));
  Progress(o, kName, "model %s (%s): %lld layers x %lld heads; text %s: %zu tokens, %zu windows of %lld "
           "(importance %zu, validation %zu)", src.model.c_str(), src.model_kind.c_str(),
           static_cast<long long>(L), static_cast<long long>(H), src.text.c_str(), src.ids.size(),
           all.size(), static_cast<long long>(T), imp.size(), val.size());

  ParameterStore base(c);
  ATTNLAB_RETURN_IF_ERROR(CopyParameters(g.params(), &base));
  ATTNLAB_ASSIGN_OR_RETURN(const double base_loss, MeanLoss(g, val));
  Progress(o, kName, "unpruned validation loss %.4f", base_loss);

  // ---- Importance: |dL/dxi_h| per importance window (one window = one example), averaged.
  std::vector<double> importance(n_heads, 0.0), signed_mean(n_heads, 0.0);
  for (size_t w = 0; w < imp.size(); ++w) {
    double loss = 0;
    g.grads().Zero();
    ATTNLAB_RETURN_IF_ERROR(g.Forward(imp[w].x.data(), imp[w].y.data(), 1, T, &loss));
    ATTNLAB_RETURN_IF_ERROR(g.Backward());
    const std::vector<double> grad = HeadMaskGradient(g);
    for (int64_t i = 0; i < n_heads; ++i) {
      importance[i] += std::abs(grad[i]) / static_cast<double>(imp.size());
      signed_mean[i] += grad[i] / static_cast<double>(imp.size());
    }
    if (w % 8 == 7 || w + 1 == imp.size()) {
      Progress(o, kName, "importance: %zu/%zu windows", w + 1, imp.size());
    }
  }
  const std::vector<double> norm_imp = NormalizeImportancePerLayer(importance, L, H);

  // ---- Similarity (attention JS distance, output CKA) on the importance windows.
  AnalysisOptions ao;
  ao.window = T;
  ao.bos = src.bos;
  ao.jsd_rows = sz.jsd_rows;
  ao.effective_rank = false;
  ao.pattern_sequences = 0;
  ao.seed = o.seed;
  const int64_t step = src.bos >= 0 ? T - 1 : T;
  std::vector<int32_t> imp_ids(src.ids.begin(),
                               src.ids.begin() + std::min<int64_t>(src.ids.size(), imp.size() * step + (src.bos >= 0 ? 0 : 1)));
  ATTNLAB_ASSIGN_OR_RETURN(AnalysisResult an, AnalyzeModel(g, imp_ids, ao, false));
  g.set_observer(nullptr);
  std::vector<double> jsd_all(n_heads * H), cka_all(n_heads * H);
  std::vector<double> jsd_to_others(n_heads), cka_to_others(n_heads), jsd_layer(L), cka_layer(L);
  bool sim_in_range = true;
  for (int64_t l = 0; l < L; ++l) {
    const std::vector<double>& jsd = an.layers[l].attention.jsd;
    const std::vector<double>& cka = an.layers[l].head_cka;
    double js = 0, ck = 0;
    for (int64_t a = 0; a < H; ++a) {
      double ja = 0, ca = 0;
      for (int64_t b = 0; b < H; ++b) {
        jsd_all[(l * H + a) * H + b] = jsd[a * H + b];
        cka_all[(l * H + a) * H + b] = cka[a * H + b];
        if (!(jsd[a * H + b] >= 0 && jsd[a * H + b] <= 1 + 1e-9)) sim_in_range = false;
        if (!(cka[a * H + b] >= -1e-9 && cka[a * H + b] <= 1 + 1e-9)) sim_in_range = false;
        if (a == b) continue;
        ja += jsd[a * H + b] / double(H - 1);
        ca += cka[a * H + b] / double(H - 1);
      }
      jsd_to_others[l * H + a] = ja;
      cka_to_others[l * H + a] = ca;
      js += ja / double(H);
      ck += ca / double(H);
    }
    jsd_layer[l] = js;
    cka_layer[l] = ck;
  }
  // Attention on the first token (alpha_1, Gu et al. 2024) per head: are the unimportant heads
  // the sink heads?
  std::vector<double> alpha1(n_heads, NAN);
  for (int64_t l = 0; l < L; ++l) {
    for (int64_t h = 0; h < H; ++h) {
      const auto& hs = an.layers[l].attention.heads[h];
      if (!hs.alpha.empty()) alpha1[l * H + h] = hs.alpha[0];
    }
  }
  const double rho_alpha1 = Spearman(norm_imp, alpha1);
  const double rho_jsd = Spearman(norm_imp, jsd_to_others);
  const double rho_cka = Spearman(norm_imp, cka_to_others);
  std::vector<double> rho_jsd_layer(L);
  for (int64_t l = 0; l < L; ++l) {
    rho_jsd_layer[l] = Spearman(std::vector<double>(norm_imp.begin() + l * H, norm_imp.begin() + (l + 1) * H),
                                std::vector<double>(jsd_to_others.begin() + l * H, jsd_to_others.begin() + (l + 1) * H));
  }
  Progress(o, kName, "similarity: mean JS distance per layer %s %s %s ..., Spearman(importance, JS "
           "distance to the others) %s", Fmt(jsd_layer[0], "%.3f").c_str(),
           L > 1 ? Fmt(jsd_layer[1], "%.3f").c_str() : "", L > 2 ? Fmt(jsd_layer[2], "%.3f").c_str() : "",
           Fmt(rho_jsd, "%.3f").c_str());

  // ---- Pruning curves.
  std::vector<int64_t> ks;
  for (int64_t k = 0; k <= n_heads - 4; k += sz.k_step) ks.push_back(k);
  const int64_t k20 = std::llround(0.2 * n_heads), k40 = std::llround(0.4 * n_heads);
  ks.push_back(k20);
  ks.push_back(k40);
  ks.push_back(n_heads);
  std::sort(ks.begin(), ks.end());
  ks.erase(std::unique(ks.begin(), ks.end()), ks.end());
  auto index_of = [&](int64_t k) { return std::find(ks.begin(), ks.end(), k) - ks.begin(); };

  std::vector<int64_t> imp_order(n_heads);
  std::iota(imp_order.begin(), imp_order.end(), 0);
  std::stable_sort(imp_order.begin(), imp_order.end(),
                   [&](int64_t a, int64_t b) { return norm_imp[a] < norm_imp[b]; });
  // Michel et al. normalise per layer before sorting across layers; the raw order shows why.
  std::vector<int64_t> raw_order(n_heads);
  std::iota(raw_order.begin(), raw_order.end(), 0);
  std::stable_sort(raw_order.begin(), raw_order.end(),
                   [&](int64_t a, int64_t b) { return importance[a] < importance[b]; });
  std::vector<std::vector<int64_t>> orders = {imp_order, raw_order};
  for (int64_t r = 0; r < sz.random_orders; ++r) {
    std::vector<int64_t> ord(n_heads);
    std::iota(ord.begin(), ord.end(), 0);
    uint64_t state = SplitMix64(o.seed * 1000003 + static_cast<uint64_t>(r));
    for (int64_t i = n_heads - 1; i > 0; --i) {
      state = SplitMix64(state);
      std::swap(ord[i], ord[state % static_cast<uint64_t>(i + 1)]);
    }
    orders.push_back(ord);
  }
  std::vector<std::vector<double>> curves;
  for (size_t oi = 0; oi < orders.size(); ++oi) {
    std::vector<double> curve;
    for (int64_t k : ks) {
      std::vector<float> mask(n_heads, 1.0f);
      for (int64_t i = 0; i < k; ++i) mask[orders[oi][i]] = 0.0f;
      ATTNLAB_RETURN_IF_ERROR(ApplyHeadMask(base, mask, &g));
      ATTNLAB_ASSIGN_OR_RETURN(const double loss, MeanLoss(g, val));
      curve.push_back(loss);
    }
    Progress(o, kName, "pruning order %s: loss %.4f at k = %lld (20%%), %.4f at k = %lld (40%%), %.4f with "
             "every head pruned",
             oi == 0 ? "by importance" : oi == 1 ? "by raw importance" : ("random " + std::to_string(oi - 1)).c_str(),
             curve[index_of(k20)], static_cast<long long>(k20), curve[index_of(k40)],
             static_cast<long long>(k40), curve.back());
    curves.push_back(std::move(curve));
  }
  ATTNLAB_RETURN_IF_ERROR(CopyParameters(base, &g.params()));
  const std::vector<double> by_raw = curves[1];
  curves.erase(curves.begin() + 1);  // from here: curves[0] importance order, then the random ones
  const std::vector<double>& by_imp = curves[0];
  std::vector<double> random_mean(ks.size(), 0.0), random_min(ks.size(), INFINITY), random_max(ks.size(), -INFINITY);
  for (size_t r = 1; r < curves.size(); ++r) {
    for (size_t i = 0; i < ks.size(); ++i) {
      random_mean[i] += curves[r][i] / double(curves.size() - 1);
      random_min[i] = std::min(random_min[i], curves[r][i]);
      random_max[i] = std::max(random_max[i], curves[r][i]);
    }
  }
  int64_t inner = 0, imp_wins = 0;
  double imp_area = 0, rnd_area = 0;
  for (size_t i = 0; i < ks.size(); ++i) {
    if (ks[i] == 0 || ks[i] == n_heads) continue;
    ++inner;
    imp_wins += by_imp[i] < random_mean[i];
    imp_area += (by_imp[i] - base_loss) / double(ks.size() - 2);
    rnd_area += (random_mean[i] - base_loss) / double(ks.size() - 2);
  }
  const double d20 = by_imp[index_of(k20)] - base_loss, d40 = by_imp[index_of(k40)] - base_loss;
  const double r20 = random_mean[index_of(k20)] - base_loss, r40 = random_mean[index_of(k40)] - base_loss;
  // The largest k whose importance-ordered loss stays within kLittleLoss of the unpruned model.
  int64_t k_free = 0;
  for (size_t i = 0; i < ks.size(); ++i) {
    if (by_imp[i] - base_loss < kLittleLoss) k_free = std::max(k_free, ks[i]);
    else break;
  }

  auto sinks_among = [&](int64_t k) {
    int64_t n = 0;
    for (int64_t i = 0; i < k; ++i) n += alpha1[imp_order[i]] > 0.3;
    return n;
  };
  int64_t sink_heads = 0;
  for (double a : alpha1) sink_heads += a > 0.3;

  ExperimentResult r;
  // ---- Checks (robust facts only).
  {
    bool k0 = true;
    k0 = by_raw[0] == base_loss;
    for (const auto& cv : curves) k0 = k0 && cv[0] == base_loss;
    r.AddCheck("k = 0 is the unpruned model", k0,
               "loss at k = 0 for every order equals the unpruned loss " + Fmt(base_loss, "%.6f") + " exactly: " +
                   (k0 ? "yes" : "no"));
    bool all_same = by_raw.back() == curves[0].back(), finite = true;
    for (const auto& cv : curves) {
      all_same = all_same && cv.back() == curves[0].back();
      finite = finite && std::isfinite(cv.back());
    }
    r.AddCheck("pruning every head gives a finite loss, whatever the order", all_same && finite,
               "loss with all " + std::to_string(n_heads) + " heads pruned: " + Fmt(curves[0].back(), "%.4f") +
                   (all_same ? " for every order" : " but the orders disagree"));
    bool imp_ok = true;
    double imp_sum = 0;
    for (double x : importance) {
      imp_ok = imp_ok && std::isfinite(x) && x >= 0;
      imp_sum += x;
    }
    r.AddCheck("importance is finite, >= 0 and not all zero", imp_ok && imp_sum > 0,
               "sum of I_h " + Fmt(imp_sum, "%.4g") + ", min " +
                   Fmt(*std::min_element(importance.begin(), importance.end()), "%.3g"));
    bool unit = true;
    for (int64_t l = 0; l < L; ++l) {
      double ss = 0;
      for (int64_t h = 0; h < H; ++h) ss += norm_imp[l * H + h] * norm_imp[l * H + h];
      unit = unit && std::abs(ss - 1) < 1e-9;
    }
    r.AddCheck("per-layer normalised importance has unit l2 norm", unit, "every layer: " + std::string(unit ? "yes" : "no"));
    r.AddCheck("JS distances and CKA lie in [0, 1]", sim_in_range,
               "mean JS distance per layer from " + Fmt(*std::min_element(jsd_layer.begin(), jsd_layer.end()), "%.3f") +
                   " to " + Fmt(*std::max_element(jsd_layer.begin(), jsd_layer.end()), "%.3f") +
                   "; mean CKA from " + Fmt(*std::min_element(cka_layer.begin(), cka_layer.end()), "%.3f") +
                   " to " + Fmt(*std::max_element(cka_layer.begin(), cka_layer.end()), "%.3f"));
  }
  // ---- Claims (Michel et al. 2019).
  const std::string src_paper = "Michel et al. 2019 (arXiv:1905.10650), section 4";
  r.claims.push_back(
      {"20% of heads can be pruned with little loss", src_paper,
       "pruning the " + std::to_string(k20) + " least important of " + std::to_string(n_heads) +
           " heads (20%) raises the validation loss by < " + Fmt(kLittleLoss, "%.2f") + " nats",
       Fmt(d20, "%+.4f") + " nats (" + Fmt(base_loss, "%.4f") + " -> " + Fmt(by_imp[index_of(k20)], "%.4f") +
           "); random order " + Fmt(r20, "%+.4f"),
       d20 < kLittleLoss});
  r.claims.push_back(
      {"40% of heads can be pruned with little loss", src_paper,
       "pruning the " + std::to_string(k40) + " least important of " + std::to_string(n_heads) +
           " heads (40%) raises the validation loss by < " + Fmt(kLittleLoss, "%.2f") + " nats",
       Fmt(d40, "%+.4f") + " nats (" + Fmt(base_loss, "%.4f") + " -> " + Fmt(by_imp[index_of(k40)], "%.4f") +
           "); random order " + Fmt(r40, "%+.4f"),
       d40 < kLittleLoss});
  r.claims.push_back(
      {"importance order beats random order", src_paper + " (pruning by importance); the random baseline is ours",
       "the importance-ordered loss is below the mean of " + std::to_string(sz.random_orders) +
           " random orders at >= 75% of the grid points 0 < k < " + std::to_string(n_heads) +
           " and on average over them",
       "below at " + std::to_string(imp_wins) + "/" + std::to_string(inner) + " points; mean loss increase " +
           Fmt(imp_area, "%.4f") + " (importance) vs " + Fmt(rnd_area, "%.4f") + " (random)",
       inner > 0 && imp_wins * 4 >= inner * 3 && imp_area < rnd_area});

  // ---- Results.
  nlohmann::json& res = r.results;
  res["model"] = src.model;
  res["model_kind"] = src.model_kind;
  res["text"] = src.text;
  res["layers"] = L;
  res["heads"] = H;
  res["window"] = T;
  res["bos"] = src.bos;
  res["text_tokens"] = src.ids.size();
  res["windows"] = all.size();
  res["importance_windows"] = imp.size();
  res["validation_windows"] = val.size();
  res["validation_tokens"] = val.size() * T;
  res["base_loss"] = base_loss;
  res["importance"] = Nested(importance, L, H);
  res["importance_normalized"] = Nested(norm_imp, L, H);
  res["mask_gradient_mean"] = Nested(signed_mean, L, H);
  res["importance_order"] = imp_order;
  res["k"] = ks;
  res["k20"] = k20;
  res["k40"] = k40;
  res["loss_importance"] = by_imp;
  res["loss_raw_importance"] = by_raw;
  res["raw_importance_order"] = raw_order;
  res["loss_random"] = std::vector<std::vector<double>>(curves.begin() + 1, curves.end());
  res["loss_random_mean"] = random_mean;
  res["delta20"] = d20;
  res["delta40"] = d40;
  res["random_delta20"] = r20;
  res["random_delta40"] = r40;
  res["k_within_threshold"] = k_free;
  res["threshold_nats"] = kLittleLoss;
  res["similarity"] = {{"jsd_rows", sz.jsd_rows},
                       {"jsd", Nested(jsd_all, n_heads, H)},
                       {"cka", Nested(cka_all, n_heads, H)},
                       {"jsd_mean_per_layer", jsd_layer},
                       {"cka_mean_per_layer", cka_layer},
                       {"jsd_to_others", Nested(jsd_to_others, L, H)},
                       {"cka_to_others", Nested(cka_to_others, L, H)},
                       {"spearman_importance_jsd", JsonNumber(rho_jsd)},
                       {"alpha1", Nested(alpha1, L, H)},
                       {"spearman_importance_alpha1", JsonNumber(rho_alpha1)},
                       {"sink_heads", sink_heads},
                       {"sink_heads_among_first_k20", sinks_among(k20)},
                       {"sink_heads_among_first_k40", sinks_among(k40)},
                       {"spearman_importance_cka", JsonNumber(rho_cka)},
                       {"spearman_importance_jsd_per_layer", nlohmann::json::array()}};
  for (double x : rho_jsd_layer) res["similarity"]["spearman_importance_jsd_per_layer"].push_back(JsonNumber(x));

  // ---- Summary.
  r.summary = "On " + src.model_kind + " model " + src.model + " (" + std::to_string(L) + " x " + std::to_string(H) +
              " heads), held-out loss " + Fmt(base_loss, "%.4f") + " nats/token. Pruning the least important heads " +
              "(Michel et al.'s |dL/dxi_h|, normalised per layer): " + Fmt(d20, "%+.4f") + " nats at 20% (" +
              std::to_string(k20) + " heads), " + Fmt(d40, "%+.4f") + " at 40% (" + std::to_string(k40) +
              "); random order: " + Fmt(r20, "%+.4f") + " / " + Fmt(r40, "%+.4f") + "; raw (not normalised) importance order: " +
              Fmt(by_raw[index_of(k20)] - base_loss, "%+.4f") + " / " + Fmt(by_raw[index_of(k40)] - base_loss, "%+.4f") +
              ". Up to " + std::to_string(k_free) +
              " heads go within " + Fmt(kLittleLoss, "%.2f") + " nats. Every head pruned: " +
              Fmt(by_imp.back(), "%.3f") + ". Heads differ: mean JS distance per layer " +
              Fmt(*std::min_element(jsd_layer.begin(), jsd_layer.end()), "%.2f") + "-" +
              Fmt(*std::max_element(jsd_layer.begin(), jsd_layer.end()), "%.2f") +
              "; Spearman(importance, JS distance to the other heads) = " + Fmt(rho_jsd, "%.2f") +
              ". Sink heads (alpha_1 > 0.3): " + std::to_string(sink_heads) + " of " + std::to_string(n_heads) + ", " +
              std::to_string(sinks_among(k20)) + " of the " + std::to_string(k20) + " least important; Spearman(importance, alpha_1) = " +
              Fmt(rho_alpha1, "%.2f") + ".";

  // ---- Report.
  r.html = report::HtmlReport("Head importance and pruning (Michel et al. 2019)");
  r.html.SetSubtitle(src.model + " (" + src.model_kind + "), " + std::to_string(L) + " layers x " + std::to_string(H) +
                     " heads; " + src.text + ": " + std::to_string(imp.size()) + " importance + " +
                     std::to_string(val.size()) + " validation windows of " + std::to_string(T) + " tokens");
  r.html.AddSummaryFact("unpruned loss", Fmt(base_loss, "%.4f"));
  r.html.AddSummaryFact("loss change at 20% / 40% pruned", Fmt(d20, "%+.4f") + " / " + Fmt(d40, "%+.4f"));
  r.html.AddSummaryFact("random order at 20% / 40%", Fmt(r20, "%+.4f") + " / " + Fmt(r40, "%+.4f"));
  r.html.AddSummaryFact("Spearman(importance, JS distance)", Fmt(rho_jsd, "%.2f"));
  r.html.AddSection("pruning", "Loss after pruning k heads");
  {
    report::XyPlot p;
    p.title = "Validation loss after pruning k heads";
    p.x.label = "heads pruned (k)";
    p.y.label = "cross-entropy (nats/token)";
    p.markers = true;
    p.reference_lines = {{base_loss, "unpruned"}, {base_loss + kLittleLoss, "+" + Fmt(kLittleLoss, "%.2f")}};
    std::vector<double> kx(ks.begin(), ks.end());
    p.x.min = 0;
    p.x.max = static_cast<double>(n_heads);
    p.series.push_back({"importance order", kx, by_imp});
    p.series.push_back({"raw importance order", kx, by_raw});
    p.series.push_back({"random orders, mean", kx, random_mean});
    p.series.push_back({"random orders, min", kx, random_min});
    p.series.push_back({"random orders, max", kx, random_max});
    r.html.AddFigure(report::RenderLinePlot(p),
                     "Least important heads first (importance normalised per layer, as Michel et al.; raw: "
                     "not normalised) against " + std::to_string(sz.random_orders) +
                         " random orders (their mean, and the lowest and highest loss at each k).",
                     "fig-pruning");
    std::vector<std::vector<std::string>> rows;
    for (size_t i = 0; i < ks.size(); ++i) {
      rows.push_back({std::to_string(ks[i]), Fmt(100.0 * ks[i] / n_heads, "%.1f%%"), Fmt(by_imp[i], "%.4f"),
                      Fmt(by_imp[i] - base_loss, "%+.4f"), Fmt(by_raw[i], "%.4f"), Fmt(random_mean[i], "%.4f"),
                      Fmt(random_min[i], "%.4f") + " - " + Fmt(random_max[i], "%.4f")});
    }
    r.html.AddTable({"k", "pruned", "loss (importance)", "increase", "loss (raw importance)", "loss (random, mean)",
                     "random range"}, rows,
                    "Validation loss on held-out windows never used for the importance.");
  }
  r.html.AddSection("importance", "Head importance");
  {
    report::Heatmap hm;
    hm.values = norm_imp;
    hm.rows = L;
    hm.cols = H;
    hm.x_label = "head";
    hm.y_label = "layer";
    hm.value_label = "I_h / ||I_layer||";
    r.html.AddFigure(report::RenderHeatmap(hm), "Importance |dL/dxi_h| per head, normalised per layer.",
                     "fig-importance");
    std::vector<std::vector<std::string>> rows;
    for (int64_t l = 0; l < L; ++l) {
      double sum = 0, mx = 0;
      for (int64_t h = 0; h < H; ++h) sum += importance[l * H + h], mx = std::max(mx, importance[l * H + h]);
      rows.push_back({std::to_string(l), Fmt(sum, "%.4g"), Fmt(mx / std::max(sum, 1e-300), "%.3f"),
                      Fmt(jsd_layer[l], "%.3f"), Fmt(cka_layer[l], "%.3f"), Fmt(rho_jsd_layer[l], "%.2f")});
    }
    r.html.AddTable({"layer", "sum of I_h", "top head's share", "mean JS distance", "mean CKA",
                     "Spearman(I, JS distance)"},
                    rows, "Raw importance per layer (before normalisation) and the heads' redundancy.");
  }
  r.html.AddSection("similarity", "Redundancy: are important heads the dissimilar ones?");
  {
    report::XyPlot p;
    p.title = "Importance against dissimilarity";
    p.x.label = "mean JS distance to the other heads of the layer";
    p.y.label = "normalised importance";
    for (int64_t l = 0; l < L; ++l) {
      p.series.push_back({"layer " + std::to_string(l),
                          std::vector<double>(jsd_to_others.begin() + l * H, jsd_to_others.begin() + (l + 1) * H),
                          std::vector<double>(norm_imp.begin() + l * H, norm_imp.begin() + (l + 1) * H)});
    }
    r.html.AddFigure(report::RenderScatterPlot(p),
                     "One point per head. Spearman over all heads: " + Fmt(rho_jsd, "%.2f") +
                         " (JS distance), " + Fmt(rho_cka, "%.2f") + " (mean CKA to the others).",
                     "fig-similarity");
    std::vector<std::vector<std::string>> rows;
    for (int64_t i = 0; i < k40; ++i) {
      const int64_t hh = imp_order[i];
      rows.push_back({std::to_string(i + 1), std::to_string(hh / H) + "." + std::to_string(hh % H),
                      Fmt(norm_imp[hh], "%.3f"), Fmt(alpha1[hh], "%.3f"), Fmt(jsd_to_others[hh], "%.3f"),
                      Fmt(cka_to_others[hh], "%.3f")});
    }
    r.html.AddTable({"rank", "layer.head", "normalised importance", "alpha_1 (attention on token 0)",
                     "mean JS distance to the others", "mean CKA to the others"},
                    rows, "The " + std::to_string(k40) + " heads pruned first (40%). Spearman(importance, alpha_1) over all heads: " +
                              Fmt(rho_alpha1, "%.2f") + "; sink heads (alpha_1 > 0.3) among the first " + std::to_string(k20) +
                              " / " + std::to_string(k40) + ": " + std::to_string(sinks_among(k20)) + " / " +
                              std::to_string(sinks_among(k40)) + " (of " + std::to_string(sink_heads) + " in the model).");
  }
  r.html.AddSection("setup", "Setup");
  r.html.AddBulletList({
      "Importance (Michel et al. eq. 2): I_h = mean over " + std::to_string(imp.size()) +
          " windows of |dL/dxi_h|, xi_h the head's output gate before the output projection; read "
          "exactly from the projection's weight gradient (src/experiments/head_importance.h); "
          "normalised per layer by the l2 norm before sorting across layers, as Michel et al. do.",
      "Pruning: xi_h = 0 (the head's projection rows zeroed; the projection bias stays). Validation: " +
          std::to_string(val.size()) + " windows (" + std::to_string(val.size() * T) +
          " tokens) from the second half of the text.",
      "Random baseline: " + std::to_string(sz.random_orders) + " uniformly random orders (seeded by --seed).",
      "Similarity: JS distance between attention rows (normalised, sqrt(JSD/ln 2), " +
          std::to_string(sz.jsd_rows) + " sampled rows per layer) and linear CKA between head outputs, "
          "from attnlab analyze's streaming analysis of the importance windows.",
  });
  return r;
}

}  // namespace

Experiment HeadsExperiment() {
  return {kName,
          "head importance (Michel et al. 2019), JS/CKA redundancy and test-time pruning of the default model",
          Run};
}

}  // namespace attnlab::experiments
