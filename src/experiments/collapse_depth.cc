// collapse-depth: does a deep stack of randomly initialised attention layers collapse its tokens
// to one vector (rank collapse, Dong et al. 2021), and which architectural choice prevents it?
//
// No training: random-init stacks up to `depth` layers, run once on real text (byte tokens of
// data/sample.txt or the Brown corpus, else seeded random tokens). Per depth: the relative
// residual (Dong et al.'s measure of distance to rank one), the mean token cosine and the
// normalised attention entropy (experiments/collapse_probe.h). Variants (every weight N(0, std^2): GPT-2's extra
// 1/sqrt(2L) on output projections is off, because at init it IS the "/sqrt(2L)" variant):
//   pure attention      no skip, no MLP, no norm      (Dong et al.'s SAN)
//   + skip              x + attn(x)
//   + MLP               mlp(attn(x)), no skip
//   + skip + MLP        no norm
//   post-LN, pre-LN     skip + MLP with LayerNorm after / before each sublayer
//   skip / sqrt(2L)     skip + MLP, every branch scaled by 1/sqrt(2L) (2L branches: Noci et al.
//                       2022's 1/sqrt(L) per residual branch)
//   ReZero              skip + MLP, branch scale alpha = 0 at init: the identity (reported as is)
//   DeepNorm            post-LN with x = LN(alpha x + f(x)), beta-scaled init (Wang et al. 2022)
// at two init scales (std 0.02 and 1/sqrt(d_model)) and two masks: causal (attnlab's decoder) and
// bidirectional (the encoders Dong et al. and Noci et al. analyse).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/atomic_file.h"
#include "core/resources.h"
#include "experiments/collapse_probe.h"
#include "experiments/experiment.h"
#include "experiments/experiment_report.h"
#include "model/gpt.h"
#include "report/svg_plot.h"
#include "train/corpus.h"

namespace attnlab::experiments {
namespace {

constexpr char kName[] = "collapse-depth";

struct Variant {
  const char* id;
  const char* label;
  bool residual, mlp;
  NormPlacement norm;
  ResidualScale scale;
};

const std::vector<Variant>& Variants() {
  static const std::vector<Variant> v = {
      {"pure", "pure attention", false, false, NormPlacement::kNone, ResidualScale::kOne},
      {"skip", "+ skip", true, false, NormPlacement::kNone, ResidualScale::kOne},
      {"mlp", "+ MLP", false, true, NormPlacement::kNone, ResidualScale::kOne},
      {"skip_mlp", "+ skip + MLP", true, true, NormPlacement::kNone, ResidualScale::kOne},
      {"post_ln", "post-LN", true, true, NormPlacement::kPost, ResidualScale::kOne},
      {"pre_ln", "pre-LN", true, true, NormPlacement::kPre, ResidualScale::kOne},
      {"scaled", "skip + MLP, branches / sqrt(2L)", true, true, NormPlacement::kNone,
       ResidualScale::kInvSqrt2L},
      {"rezero", "ReZero (alpha = 0 at init)", true, true, NormPlacement::kNone,
       ResidualScale::kReZero},
      {"deepnorm", "DeepNorm", true, true, NormPlacement::kPost, ResidualScale::kDeepNorm},
  };
  return v;
}

// The stack and its input. Default: 64 layers, d_model 128, 4 heads, 4 sequences of 128 bytes;
// quick: 12 layers, d_model 32, 2 heads, 2 sequences of 32 bytes.
struct Sizes {
  int64_t d_model, heads, len, sequences, depth;
};

Sizes SizesFor(bool quick) { return quick ? Sizes{32, 2, 32, 2, 12} : Sizes{128, 4, 128, 4, 64}; }

// One random-init stack: a variant at one init scale and mask, measured at every depth.
struct Run {
  std::string id;  // RunId(variant, init, mask): what FindRun looks up
  std::string variant, init, mask;
  std::vector<DepthMetrics> m;  // [depth + 1]
};

std::string RunId(std::string_view variant, std::string_view init, std::string_view mask) {
  return std::string(variant) + " " + std::string(init) + " " + std::string(mask);
}

// Byte tokens of real text: `sequences` windows of `len` bytes spread evenly over data/sample.txt,
// else over the Brown corpus (its documents joined by blank lines), else seeded random bytes.
// The source is described in *source.
std::vector<int32_t> Tokens(const Sizes& s, uint64_t seed, std::string* source) {
  const int64_t need = s.sequences * s.len;
  std::vector<int32_t> out;
  auto windows = [&](const std::string& t, const std::string& what) {
    const int64_t stride =
        (static_cast<int64_t>(t.size()) - s.len) / std::max<int64_t>(1, s.sequences);
    for (int64_t b = 0; b < s.sequences; ++b) {
      for (int64_t i = 0; i < s.len; ++i) {
        out.push_back(static_cast<unsigned char>(t[b * stride + i]));
      }
    }
    *source = std::to_string(s.sequences) + " windows of " + std::to_string(s.len) +
              " bytes of " + what;
  };
  if (const std::string path = FindResource(kSampleTextPath); !path.empty()) {
    auto text = ReadFileToString(path, int64_t{1} << 26);
    if (text.ok() && static_cast<int64_t>(text.value().size()) >= need) {
      windows(text.value(), path);
      return out;
    }
  }
  if (const std::string dir = FindResource(kBrownCorpusPath); !dir.empty()) {
    auto docs = LoadBrownCorpus(dir);
    if (docs.ok()) {
      std::string t;
      for (const std::string& d : docs.value()) t += d + "\n\n";
      if (static_cast<int64_t>(t.size()) >= need) {
        windows(t, "the Brown corpus");
        return out;
      }
    }
  }
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> u(0, 255);
  for (int64_t i = 0; i < need; ++i) out.push_back(u(rng));
  *source = std::to_string(s.sequences) + " sequences of " + std::to_string(s.len) +
            " uniformly random bytes (neither data/sample.txt nor the Brown corpus was found)";
  return out;
}

ModelConfig MakeConfig(const Sizes& s, const Variant& v, float init_std, bool causal) {
  ModelConfig c;
  c.vocab_size = 256;
  c.context = s.len;
  c.d_model = s.d_model;
  c.n_layer = s.depth;
  c.n_head = s.heads;
  c.residual = v.residual;
  c.mlp = v.mlp;
  c.norm = v.norm;
  c.residual_scale = v.scale;
  c.causal = causal;
  c.init_std = init_std;
  c.scale_residual_init = false;
  return c;
}

// ---- What the report stages read.
struct Measured {
  Sizes s;
  std::string source;  // the input tokens (Tokens)
  std::vector<std::pair<std::string, float>> inits;  // (name, std)
  std::vector<std::pair<std::string, bool>> masks;   // (name, causal)
  std::vector<Run> runs;  // masks x inits x Variants(), in that nesting
};

// The run of variant v at (init, mask); NotFound for a combination that was not run.
Result<const Run*> FindRun(const Measured& m, std::string_view v, std::string_view init, std::string_view mask) {
  return FindById(m.runs, RunId(v, init, mask), "collapse-depth run");
}

// The runs of every variant (Variants() order) at (init, mask).
Result<std::vector<const Run*>> VariantRuns(const Measured& m, std::string_view init, std::string_view mask) {
  std::vector<const Run*> out;
  for (const Variant& v : Variants()) {
    ATTNLAB_ASSIGN_OR_RETURN(const Run* r, FindRun(m, v.id, init, mask));
    out.push_back(r);
  }
  return out;
}

// Relative residual at depth d (clamped to the stack).
double Rr(const Run& r, int64_t d) {
  d = std::min<int64_t>(d, static_cast<int64_t>(r.m.size()) - 1);
  return r.m[d].relative_residual;
}

Result<double> Rr(const Measured& m, std::string_view v, std::string_view init, std::string_view mask, int64_t d) {
  ATTNLAB_ASSIGN_OR_RETURN(const Run* r, FindRun(m, v, init, mask));
  return Rr(*r, d);
}

// The deepest depth at which r's relative residual was measured (finite: the stream neither
// diverged nor vanished below fp32's range, collapse_probe.h); 0 if none.
int64_t DeepestMeasured(const Run& r) {
  int64_t d = static_cast<int64_t>(r.m.size()) - 1;
  while (d > 0 && !std::isfinite(r.m[d].relative_residual)) --d;
  return d;
}

report::Series DepthSeries(const Run& r, const std::string& name, double DepthMetrics::*f) {
  report::Series s;
  s.name = name;
  for (size_t d = 0; d < r.m.size(); ++d) {
    s.x.push_back(static_cast<double>(d));
    s.y.push_back(r.m[d].*f);
  }
  return s;
}

constexpr char kInvSqrtD[] = "1/sqrt(d)";  // the name of the 1/sqrt(d_model) init scale

// ---- Run variants -> measure: every variant at every init scale and mask, once.
Status RunVariants(const ExperimentOptions& o, const std::vector<int32_t>& tokens, Measured& m) {
  const Sizes& s = m.s;
  const int64_t total = static_cast<int64_t>(Variants().size() * m.inits.size() * m.masks.size());
  for (const auto& [mask, causal] : m.masks) {
    for (const auto& [init, init_std] : m.inits) {
      for (const Variant& v : Variants()) {
        const ModelConfig c = MakeConfig(s, v, init_std, causal);
        ATTNLAB_ASSIGN_OR_RETURN(std::unique_ptr<Gpt> g, Gpt::Create(c));
        g->params().Initialize(c, o.seed);
        ATTNLAB_ASSIGN_OR_RETURN(std::vector<DepthMetrics> dm, MeasureCollapse(*g, tokens, s.sequences, s.len));
        m.runs.push_back(Run{RunId(v.id, init, mask), v.id, init, mask, std::move(dm)});
        const Run& run = m.runs.back();
        Progress(o, kName, "%3zu/%ld %-13s std %-9s %-32s rel. residual %.3g -> %.3g (layer %ld)",
                 m.runs.size(), static_cast<long>(total), mask.c_str(), init.c_str(), v.label,
                 run.m[0].relative_residual, run.m.back().relative_residual, static_cast<long>(s.depth));
      }
    }
  }
  return Status::Ok();
}

// ---- Report stages.
// The checks at one (mask, init): pure attention against + skip and pre-LN, ReZero the identity.
Status AddScaleChecks(const Measured& m, const std::string& mask, const std::string& init, ExperimentResult& r) {
  const int64_t L = m.s.depth;
  ATTNLAB_ASSIGN_OR_RETURN(const Run* pure_run, FindRun(m, "pure", init, mask));
  ATTNLAB_ASSIGN_OR_RETURN(const Run* skip_run, FindRun(m, "skip", init, mask));
  ATTNLAB_ASSIGN_OR_RETURN(const Run* pre_run, FindRun(m, "pre_ln", init, mask));
  ATTNLAB_ASSIGN_OR_RETURN(const Run* rz, FindRun(m, "rezero", init, mask));
  // At the deepest layer where pure attention's stream is still measurable (at std 0.02 it
  // shrinks ~20x per layer and leaves fp32's range before layer 64).
  const int64_t dp = DeepestMeasured(*pure_run);
  const double pure = Rr(*pure_run, dp), skip = Rr(*skip_run, dp);
  r.AddCheck("pure attention collapses faster than + skip (" + mask + ", std " + init + ")",
             dp >= std::min<int64_t>(L, 12) && pure < 0.1 * skip,
             "relative residual at layer " + std::to_string(dp) + ": pure " + Fmt(pure) + ", + skip " + Fmt(skip));
  const double pre = Rr(*pre_run, dp);
  r.AddCheck("pre-LN keeps more diversity than pure attention (" + mask + ", std " + init + ")", pre > pure,
             "layer " + std::to_string(dp) + ": pre-LN " + Fmt(pre) + ", pure " + Fmt(pure));
  // ReZero at init is the identity: the same relative residual at every depth, exactly.
  bool identity = true;
  for (const DepthMetrics& d : rz->m) identity &= d.relative_residual == rz->m[0].relative_residual;
  r.AddCheck("ReZero is the identity at init (" + mask + ", std " + init + ")", identity,
             "relative residual " + Fmt(rz->m[0].relative_residual) + " at every depth");
  return Status::Ok();
}

// Checks (hold at both sizes).
Status AddChecks(const Measured& m, ExperimentResult& r) {
  const int64_t L = m.s.depth;
  auto all_finite = [&](const std::string& v) {
    for (const Run& run : m.runs) {
      if (run.variant != v) continue;
      for (const DepthMetrics& d : run.m) {
        if (!std::isfinite(d.relative_residual) || !std::isfinite(d.mean_cosine)) return false;
      }
    }
    return true;
  };
  for (const char* v : {"pre_ln", "post_ln", "deepnorm", "scaled", "rezero"}) {
    r.AddCheck(std::string(v) + " stays finite", all_finite(v), "every depth, both init scales and masks");
  }
  for (const auto& [mask, causal] : m.masks) {
    for (const auto& [init, init_std] : m.inits) ATTNLAB_RETURN_IF_ERROR(AddScaleChecks(m, mask, init, r));
    ATTNLAB_ASSIGN_OR_RETURN(const Run* pure, FindRun(m, "pure", "0.02", mask));
    const double pure_entropy = pure->m[1].entropy;
    r.AddCheck("attention is uniform at std 0.02 (" + mask + ")", pure_entropy > 0.99,
               "normalised entropy of layer 0: " + Fmt(pure_entropy, "%.5f"));
  }
  ATTNLAB_ASSIGN_OR_RETURN(const double bi4, Rr(m, "pure", "0.02", "bidirectional", 4));
  r.AddCheck("bidirectional pure attention is rank one within 4 layers at std 0.02", bi4 < 1e-3,
             "relative residual at layer 4: " + Fmt(bi4));
  for (const auto& [mask, causal] : m.masks) {
    ATTNLAB_ASSIGN_OR_RETURN(const double un, Rr(m, "skip_mlp", kInvSqrtD, mask, L));
    ATTNLAB_ASSIGN_OR_RETURN(const double sc, Rr(m, "scaled", kInvSqrtD, mask, L));
    r.AddCheck("1/sqrt(2L) branch scaling keeps more diversity than none (" + mask + ", std " + kInvSqrtD + ")",
               sc > un, "layer " + std::to_string(L) + ": scaled " + Fmt(sc) + ", unscaled " + Fmt(un));
  }
  return Status::Ok();
}

// Claims: the acceptance numbers, from Dong et al. 2021 and Noci et al. 2022.
Status AddClaims(const Measured& m, ExperimentResult& r) {
  const int64_t L = m.s.depth, d24 = std::min<int64_t>(24, L);
  for (const auto& [mask, causal] : m.masks) {
    ATTNLAB_ASSIGN_OR_RETURN(const Run* pure, FindRun(m, "pure", "0.02", mask));
    const double p4 = Rr(*pure, 4);
    const int64_t dp = DeepestMeasured(*pure);
    r.claims.push_back({"pure attention reaches rank one fast (" + mask + ")", "Dong et al. 2021",
                        "std 0.02: relative residual < 1e-4 by layer 4 (fp32)",
                        "layer 4: " + Fmt(p4) + "; layer " + std::to_string(dp) +
                            " (deepest before fp32 underflow): " + Fmt(Rr(*pure, dp)),
                        p4 < 1e-4});
    ATTNLAB_ASSIGN_OR_RETURN(const double sk, Rr(m, "skip", "0.02", mask, d24));
    ATTNLAB_ASSIGN_OR_RETURN(const double pre, Rr(m, "pre_ln", "0.02", mask, d24));
    ATTNLAB_ASSIGN_OR_RETURN(const double post, Rr(m, "post_ln", "0.02", mask, d24));
    r.claims.push_back({"skip, pre-LN and post-LN keep the tokens apart (" + mask + ")", "Dong et al. 2021",
                        "std 0.02: relative residual > 0.9 at layer 24",
                        "layer " + std::to_string(d24) + ": + skip " + Fmt(sk) + ", pre-LN " + Fmt(pre) +
                            ", post-LN " + Fmt(post),
                        sk > 0.9 && pre > 0.9 && post > 0.9});
    ATTNLAB_ASSIGN_OR_RETURN(const double un, Rr(m, "skip", kInvSqrtD, mask, L));
    ATTNLAB_ASSIGN_OR_RETURN(const double unm, Rr(m, "skip_mlp", kInvSqrtD, mask, L));
    ATTNLAB_ASSIGN_OR_RETURN(const double sc, Rr(m, "scaled", kInvSqrtD, mask, L));
    r.claims.push_back({"1/sqrt(L) branch scaling prevents rank collapse (" + mask + ")", "Noci et al. 2022",
                        "std 1/sqrt(d), deepest layer: skip + MLP unscaled < 0.05, with each of "
                        "the 2L branches scaled by 1/sqrt(2L) > 0.9",
                        "layer " + std::to_string(L) + ": + skip " + Fmt(un) + ", + skip + MLP " + Fmt(unm) +
                            ", / sqrt(2L) " + Fmt(sc),
                        unm < 0.05 && sc > 0.9});
  }
  return Status::Ok();
}

// Results (docs/EXPERIMENTS.md lists the fields).
Status AddResults(const Measured& m, ExperimentResult& r) {
  const Sizes& s = m.s;
  nlohmann::json jruns = nlohmann::json::array();
  for (const Run& run : m.runs) {
    jruns.push_back({{"variant", run.variant}, {"init", run.init}, {"mask", run.mask},
                     {"depth", DepthMetricsToJson(run.m)}});
  }
  nlohmann::json jvariants = nlohmann::json::array();
  for (const Variant& v : Variants()) jvariants.push_back({{"id", v.id}, {"label", v.label}});
  r.results = {{"d_model", s.d_model}, {"heads", s.heads}, {"tokens", s.len},
               {"sequences", s.sequences}, {"layers", s.depth}, {"text", m.source},
               {"variants", jvariants}, {"runs", jruns}};
  return Status::Ok();
}

// Summary: numbers only (the verdicts are the claims and docs/EXPERIMENTS.md).
Status AddSummary(const Measured& m, ExperimentResult& r) {
  const int64_t L = m.s.depth, d24 = std::min<int64_t>(24, L);
  ATTNLAB_ASSIGN_OR_RETURN(const Run* pure_c, FindRun(m, "pure", "0.02", "causal"));
  const int64_t dpc = DeepestMeasured(*pure_c);
  ATTNLAB_ASSIGN_OR_RETURN(const double bi4, Rr(m, "pure", "0.02", "bidirectional", 4));
  std::vector<double> c24;  // std 0.02, causal, layer d24
  for (const char* v : {"skip", "skip_mlp", "post_ln", "pre_ln", "deepnorm"}) {
    ATTNLAB_ASSIGN_OR_RETURN(const double x, Rr(m, v, "0.02", "causal", d24));
    c24.push_back(x);
  }
  std::vector<double> inv;  // std 1/sqrt(d), layer L: unscaled causal / bidirectional, scaled the same
  for (const char* v : {"skip_mlp", "scaled"}) {
    for (const char* mask : {"causal", "bidirectional"}) {
      ATTNLAB_ASSIGN_OR_RETURN(const double x, Rr(m, v, kInvSqrtD, mask, L));
      inv.push_back(x);
    }
  }
  ATTNLAB_ASSIGN_OR_RETURN(const double rezero, Rr(m, "rezero", "0.02", "causal", 0));
  char buf[1400];
  std::snprintf(
      buf, sizeof buf,
      "Relative residual (1 = tokens spread, 0 = one vector). Pure attention at std 0.02: %s at "
      "layer 4 with bidirectional attention (Dong et al.'s setting), %s with attnlab's causal "
      "mask (%s at layer %ld, the deepest before its signal underflows fp32). Layer %ld, std "
      "0.02, causal: + skip %s, + skip + MLP %s, post-LN %s, pre-LN %s, DeepNorm %s. Std "
      "1/sqrt(d), layer %ld: skip + MLP unscaled %s (causal) / %s (bidirectional), branches "
      "scaled by 1/sqrt(2L) %s / %s (Noci et al. 2022). ReZero is the identity at init "
      "(alpha = 0): %s at every depth.",
      Fmt(bi4).c_str(), Fmt(Rr(*pure_c, 4)).c_str(), Fmt(Rr(*pure_c, dpc)).c_str(), static_cast<long>(dpc),
      static_cast<long>(d24), Fmt(c24[0]).c_str(), Fmt(c24[1]).c_str(), Fmt(c24[2]).c_str(), Fmt(c24[3]).c_str(),
      Fmt(c24[4]).c_str(), static_cast<long>(L), Fmt(inv[0]).c_str(), Fmt(inv[1]).c_str(), Fmt(inv[2]).c_str(),
      Fmt(inv[3]).c_str(), Fmt(rezero).c_str());
  r.summary = buf;
  return Status::Ok();
}

// The relative residual, mean token cosine, attention entropy and stream size against depth at
// one (mask, init), one line per variant.
Status AddDepthFigures(const Measured& m, const std::string& mask, const std::string& init,
                       report::HtmlReport& html) {
  ATTNLAB_ASSIGN_OR_RETURN(const std::vector<const Run*> runs, VariantRuns(m, init, mask));
  const std::vector<Variant>& vs = Variants();
  report::XyPlot p;
  p.title = "Relative residual, std " + init + ", " + mask;
  p.x.label = "layer (0 = embedding)";
  p.y.label = "relative residual";
  p.y.scale = report::ScaleType::kLog10;
  p.y.min = 1e-8;
  p.y.max = 2.0;
  for (size_t i = 0; i < vs.size(); ++i) {
    p.series.push_back(DepthSeries(*runs[i], vs[i].label, &DepthMetrics::relative_residual));
  }
  p.reference_lines = {{0.9, "0.9"}, {0.05, "0.05"}, {1e-4, "1e-4"}};
  p.height = 460;
  html.AddFigure(report::RenderLinePlot(p),
                 "Relative residual against depth, one line per variant (log scale; values "
                 "below 1e-8 are clipped; a line stops where its stream diverged or "
                 "underflowed fp32).",
                 "fig-rr-" + mask + "-" + (init == "0.02" ? "002" : "invsqrtd"));
  report::XyPlot cp = p;
  cp.title = "Mean token cosine, std " + init + ", " + mask;
  cp.y = report::Axis{"mean pairwise cosine", report::ScaleType::kLinear, -0.1, 1.0};
  cp.series.clear();
  cp.reference_lines.clear();
  for (size_t i = 0; i < vs.size(); ++i) {
    cp.series.push_back(DepthSeries(*runs[i], vs[i].label, &DepthMetrics::mean_cosine));
  }
  html.AddFigure(report::RenderLinePlot(cp), "Mean pairwise cosine between tokens (1 = collapsed).");
  report::XyPlot ep = cp;
  ep.title = "Attention entropy, std " + init + ", " + mask;
  ep.y = report::Axis{"normalised entropy (mean over heads)", report::ScaleType::kLinear, {}, 1.0};
  ep.series.clear();
  for (size_t i = 0; i < vs.size(); ++i) {
    report::Series se = DepthSeries(*runs[i], vs[i].label, &DepthMetrics::entropy);
    se.x.erase(se.x.begin()), se.y.erase(se.y.begin());  // no attention at the embedding
    ep.series.push_back(se);
  }
  html.AddFigure(report::RenderLinePlot(ep), "Normalised attention entropy per layer (1 = uniform).");
  report::XyPlot np = cp;
  np.title = "Size of the residual stream, std " + init + ", " + mask;
  np.y = report::Axis{"||X||_{1,inf}", report::ScaleType::kLog10, {}, {}};
  np.series.clear();
  for (size_t i = 0; i < vs.size(); ++i) {
    np.series.push_back(DepthSeries(*runs[i], vs[i].label, &DepthMetrics::norm));
  }
  html.AddFigure(report::RenderLinePlot(np),
                 "||X||_{1,inf} per depth: without skips the signal shrinks by a constant "
                 "factor per layer; without norms and scaling it grows.");
  return Status::Ok();
}

// One mask's section: the figures at each init scale, then the relative residual at a few depths.
Status AddMaskSection(const Measured& m, const std::string& mask, report::HtmlReport& html) {
  const int64_t L = m.s.depth;
  html.AddSection(mask, mask == "causal" ? "Causal attention (attnlab's decoder)"
                                         : "Bidirectional attention (Dong et al.'s setting)");
  for (const auto& [init, init_std] : m.inits) ATTNLAB_RETURN_IF_ERROR(AddDepthFigures(m, mask, init, html));
  std::vector<int64_t> ds = {1, 4, 12, 24, L};
  ds.erase(std::remove_if(ds.begin(), ds.end(), [&](int64_t d) { return d > L; }), ds.end());
  ds.erase(std::unique(ds.begin(), ds.end()), ds.end());
  std::vector<std::string> cols = {"variant", "std"};
  for (int64_t d : ds) cols.push_back("layer " + std::to_string(d));
  std::vector<std::vector<std::string>> rows;
  for (const auto& [init, init_std] : m.inits) {
    ATTNLAB_ASSIGN_OR_RETURN(const std::vector<const Run*> runs, VariantRuns(m, init, mask));
    for (size_t i = 0; i < runs.size(); ++i) {
      std::vector<std::string> row = {Variants()[i].label, init};
      for (int64_t d : ds) row.push_back(Fmt(Rr(*runs[i], d)));
      rows.push_back(row);
    }
  }
  html.AddTable(cols, rows, "Relative residual at selected depths (" + mask + ").");
  return Status::Ok();
}

// The variants' architecture, one row each.
void AddVariantTable(report::HtmlReport& html) {
  std::vector<std::vector<std::string>> vrows;
  for (const Variant& v : Variants()) {
    vrows.push_back({v.label, v.residual ? "yes" : "no", v.mlp ? "yes" : "no",
                     v.norm == NormPlacement::kPre ? "pre" : v.norm == NormPlacement::kPost ? "post" : "none",
                     v.scale == ResidualScale::kInvSqrt2L ? "1/sqrt(2L)"
                     : v.scale == ResidualScale::kReZero ? "alpha (0 at init)"
                     : v.scale == ResidualScale::kDeepNorm ? "x * (2L)^(1/4), init * (8L)^(-1/4)"
                                                           : "1"});
  }
  html.AddTable({"variant", "skip", "MLP", "LayerNorm", "residual scale"}, vrows);
}

Status AddHtml(const Measured& m, ExperimentResult& r) {
  const Sizes& s = m.s;
  const int64_t L = s.depth, d24 = std::min<int64_t>(24, L);
  ATTNLAB_ASSIGN_OR_RETURN(const double bi4, Rr(m, "pure", "0.02", "bidirectional", 4));
  ATTNLAB_ASSIGN_OR_RETURN(const double c4, Rr(m, "pure", "0.02", "causal", 4));
  ATTNLAB_ASSIGN_OR_RETURN(const double pre24, Rr(m, "pre_ln", "0.02", "causal", d24));
  ATTNLAB_ASSIGN_OR_RETURN(const double unscaled, Rr(m, "skip_mlp", kInvSqrtD, "causal", L));
  ATTNLAB_ASSIGN_OR_RETURN(const double scaled, Rr(m, "scaled", kInvSqrtD, "causal", L));
  r.html = report::HtmlReport("Rank collapse with depth at initialisation");
  r.html.SetSubtitle(std::to_string(L) + "-layer random-init stacks, d_model " + std::to_string(s.d_model) + ", " +
                     std::to_string(s.heads) + " heads; " + m.source);
  r.html.AddSummaryFact("pure attention, layer 4 (bidirectional / causal)", Fmt(bi4) + " / " + Fmt(c4));
  r.html.AddSummaryFact("pre-LN, layer " + std::to_string(d24) + " (causal)", Fmt(pre24));
  r.html.AddSummaryFact("1/sqrt(d): unscaled vs /sqrt(2L), layer " + std::to_string(L),
                        Fmt(unscaled) + " vs " + Fmt(scaled));
  r.html.AddSection("setup", "Setup");
  r.html.AddParagraph(
      "Relative residual = ||X - 1 xbar^T||_{1,inf} / ||X||_{1,inf} of the residual stream after "
      "each layer (Dong et al. 2021; 1 = spread tokens, 0 = every token the same vector; depth 0 "
      "is the embedding). Every weight is drawn N(0, std^2) with no extra 1/sqrt(2L) on output "
      "projections (at init that scaling IS the '/sqrt(2L)' variant). RoPE positions, so two "
      "equal bytes start with equal embeddings.");
  AddVariantTable(r.html);
  for (const auto& [mask, causal] : m.masks) ATTNLAB_RETURN_IF_ERROR(AddMaskSection(m, mask, r.html));
  return Status::Ok();
}

// configure -> run variants -> measure -> report.
Result<ExperimentResult> RunCollapseDepth(const ExperimentOptions& o) {
  Measured m;
  m.s = SizesFor(o.quick);
  const Sizes& s = m.s;
  const std::vector<int32_t> tokens = Tokens(s, o.seed, &m.source);
  m.inits = {{"0.02", 0.02f}, {kInvSqrtD, 1.0f / std::sqrt(static_cast<float>(s.d_model))}};
  m.masks = {{"causal", true}, {"bidirectional", false}};
  Progress(o, kName, "%zu variants x 2 init scales x 2 masks, %ld layers, d_model %ld, %ld heads; %s",
           Variants().size(), static_cast<long>(s.depth), static_cast<long>(s.d_model),
           static_cast<long>(s.heads), m.source.c_str());
  ATTNLAB_RETURN_IF_ERROR(RunVariants(o, tokens, m));
  return AssembleReport<Measured>(m, {AddChecks, AddClaims, AddResults, AddSummary, AddHtml});
}

}  // namespace

Experiment CollapseDepthExperiment() {
  return {kName,
          "rank collapse of random-init attention stacks up to 64 layers: skip, MLP, LayerNorm, "
          "residual scaling, ReZero, DeepNorm (Dong et al. 2021, Noci et al. 2022)",
          RunCollapseDepth};
}

}  // namespace attnlab::experiments
