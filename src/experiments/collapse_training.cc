// collapse-training: when deep, narrow models are trained, do their tokens' representations
// collapse with depth, and what do post-LN, pre-LN, residual scaling, DeepNorm and the two
// training-side remedies (a head-diversity penalty, a contrastive loss between layers;
// train/auxiliary_losses.h) change, in loss and in collapse?
//
// Every variant is trained from the same initialisation seed on the same batches (byte tokens;
// the Brown corpus, or --data DIR made by `attnlab prepare`). At a few checkpoints the collapse
// metrics of experiments/collapse_probe.h are measured per layer on a fixed validation batch,
// together with the two auxiliary losses' values D (head-output cosine) and I (InfoNCE between
// consecutive layers) whether or not the variant trains on them.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>

#include "experiments/collapse_probe.h"
#include "experiments/experiment.h"
#include "experiments/experiment_data.h"
#include "experiments/experiment_report.h"
#include "report/svg_plot.h"
#include "train/auxiliary_losses.h"
#include "train/token_data.h"
#include "train/trainer.h"

namespace attnlab::experiments {
namespace {

constexpr char kName[] = "collapse-training";

struct Variant {
  const char* id;
  const char* label;
  NormPlacement norm;
  ResidualScale scale;
  double diversity_weight, contrastive_weight;
  const char* base;  // a remedy: the id of the variant it is added to; else null
};

// The remedies are added one at a time to post-LN (which collapses when trained here) and to pre-LN
// (which does not).
constexpr double kDiversityWeight = 0.1, kContrastiveWeight = 0.1;
// Claims compare final validation losses of single-seed runs: a difference below this margin
// (nats per byte) counts as a tie, not as one variant beating another. It is a chosen threshold,
// not a measured seed-to-seed spread.
constexpr double kLossMargin = 0.02;
const std::vector<Variant>& Variants() {
  static const std::vector<Variant> v = {
      {"post_ln", "post-LN", NormPlacement::kPost, ResidualScale::kOne, 0, 0, nullptr},
      {"pre_ln", "pre-LN", NormPlacement::kPre, ResidualScale::kOne, 0, 0, nullptr},
      {"scaled", "pre-LN, branches / sqrt(2L)", NormPlacement::kPre, ResidualScale::kInvSqrt2L, 0, 0,
       nullptr},
      {"deepnorm", "DeepNorm (post-LN)", NormPlacement::kPost, ResidualScale::kDeepNorm, 0, 0, nullptr},
      {"post_ln_diversity", "post-LN + head diversity", NormPlacement::kPost, ResidualScale::kOne,
       kDiversityWeight, 0, "post_ln"},
      {"post_ln_contrastive", "post-LN + contrastive", NormPlacement::kPost, ResidualScale::kOne, 0,
       kContrastiveWeight, "post_ln"},
      {"diversity", "pre-LN + head diversity", NormPlacement::kPre, ResidualScale::kOne,
       kDiversityWeight, 0, "pre_ln"},
      {"contrastive", "pre-LN + contrastive", NormPlacement::kPre, ResidualScale::kOne, 0,
       kContrastiveWeight, "pre_ln"},
  };
  return v;
}

struct Sizes {
  int64_t layers, d_model, heads, len, batch, steps, segments, eval_batches, probe_sequences;
};

struct Checkpoint {
  int64_t step = 0;
  double val_loss = NAN;
  std::vector<DepthMetrics> depth;  // [layers + 1]
  double diversity = NAN, contrastive = NAN;  // D and I on the probe batch
};

struct VariantRun {
  const Variant* v = nullptr;
  const char* id = "";  // v->id (FindById)
  std::vector<double> train_loss;  // per step
  std::vector<std::pair<int64_t, double>> val_loss;
  std::vector<Checkpoint> checkpoints;
  int64_t skipped = 0;
  double seconds = 0;
};

ModelConfig MakeConfig(const Sizes& s, const Variant& v, int64_t vocab) {
  ModelConfig c;
  c.vocab_size = vocab;
  c.context = s.len;
  c.d_model = s.d_model;
  c.n_layer = s.layers;
  c.n_head = s.heads;
  c.norm = v.norm;
  c.residual_scale = v.scale;
  return c;  // GPT-2 init: std 0.02, output projections / sqrt(2L) (DeepNorm: its own beta)
}

// val_loss < 0: evaluate now (Trainer::Run has already evaluated at the step where it stops).
Result<Checkpoint> Measure(Gpt& g, Trainer& trainer, const std::vector<int32_t>& probe,
                           const Sizes& s, double val_loss) {
  Checkpoint cp;
  cp.step = trainer.step();
  cp.val_loss = val_loss;
  if (!(val_loss >= 0)) {
    ATTNLAB_ASSIGN_OR_RETURN(cp.val_loss, trainer.Evaluate());
  }
  ATTNLAB_ASSIGN_OR_RETURN(cp.depth, MeasureCollapse(g, probe, s.probe_sequences, s.len));
  AuxiliaryLossOptions ao;
  ao.diversity_weight = ao.contrastive_weight = 1.0;
  AuxiliaryLosses aux(ao);
  ATTNLAB_RETURN_IF_ERROR(aux.Compute(g));  // on the probe batch's activations
  cp.diversity = aux.diversity();
  cp.contrastive = aux.contrastive();
  return cp;
}

double MeanOverLayers(const std::vector<DepthMetrics>& d, double DepthMetrics::*f) {
  double s = 0;
  for (size_t i = 1; i < d.size(); ++i) s += d[i].*f;
  return s / static_cast<double>(d.size() - 1);
}

double MinOverLayers(const std::vector<DepthMetrics>& d, double DepthMetrics::*f) {
  double m = INFINITY;
  for (size_t i = 1; i < d.size(); ++i) m = std::min(m, d[i].*f);
  return m;
}

// One variant trained from the common seed, with the collapse metrics at every segment boundary.
Result<VariantRun> TrainVariant(const ExperimentOptions& o, const Sizes& s, const TokenData& data,
                                const std::vector<int32_t>& probe, const Variant& v) {
  const auto t0 = std::chrono::steady_clock::now();
  const ModelConfig c = MakeConfig(s, v, data.vocab);
  ATTNLAB_ASSIGN_OR_RETURN(std::unique_ptr<Gpt> g, Gpt::Create(c));
  g->params().Initialize(c, o.seed);
  ATTNLAB_ASSIGN_OR_RETURN(TrainOptions to, ScheduledTrainOptions({.batch = s.batch,
                                                                    .seq_len = s.len,
                                                                    .steps = s.steps,
                                                                    .seed = o.seed,
                                                                    .lr = 1e-3,
                                                                    .min_lr = 1e-4,
                                                                    .warmup_steps = s.steps / 10,
                                                                    .eval_batches = s.eval_batches}));
  to.diversity_weight = v.diversity_weight;
  to.contrastive_weight = v.contrastive_weight;
  Trainer trainer(g.get(), to, data.train, data.val);
  VariantRun run;
  run.v = &v;
  run.id = v.id;
  ATTNLAB_ASSIGN_OR_RETURN(Checkpoint cp0, Measure(*g, trainer, probe, s, -1.0));
  run.checkpoints.push_back(cp0);
  run.val_loss.push_back({0, cp0.val_loss});
  for (int64_t seg = 1; seg <= s.segments; ++seg) {
    ATTNLAB_RETURN_IF_ERROR(trainer.Run(s.steps * seg / s.segments));
    const TrainRecord& last = trainer.history().back();
    ATTNLAB_ASSIGN_OR_RETURN(Checkpoint cp, Measure(*g, trainer, probe, s, last.val_loss));
    run.val_loss.push_back({cp.step, cp.val_loss});
    Progress(o, kName, "%-28s step %4ld/%ld | loss %.3f | val %.3f | aux %.4f | min rel. residual %.3f | %.0f s",
             v.label, static_cast<long>(trainer.step()), static_cast<long>(s.steps), last.loss,
             cp.val_loss, last.aux_loss, MinOverLayers(cp.depth, &DepthMetrics::relative_residual), SecondsSince(t0));
    run.checkpoints.push_back(cp);
  }
  for (const TrainRecord& rec : trainer.history()) {
    run.train_loss.push_back(rec.loss);
    run.skipped += rec.skipped;
  }
  run.seconds = SecondsSince(t0);
  return run;
}

// ---- What the report stages read.
struct Measured {
  Sizes s;
  std::string source;    // the data
  double unigram = NAN;  // UnigramValLoss of the data
  std::vector<VariantRun> runs;  // in Variants() order
};

Result<const VariantRun*> Find(const Measured& m, const char* id) {
  return FindById(m.runs, id, "collapse-training variant");
}

double FinalVal(const VariantRun& run) { return run.checkpoints.back().val_loss; }

// A remedy against its base: what it optimises (D for the diversity penalty, I for the
// contrastive loss) at the end of training, in both.
struct RemedyEffect {
  const VariantRun* remedy = nullptr;
  const VariantRun* base = nullptr;
  bool diversity = false;
  double mine = NAN, theirs = NAN;
};

Result<std::vector<RemedyEffect>> RemedyEffects(const Measured& m) {
  std::vector<RemedyEffect> out;
  for (const VariantRun& run : m.runs) {
    if (!run.v->base) continue;
    RemedyEffect e;
    e.remedy = &run;
    ATTNLAB_ASSIGN_OR_RETURN(e.base, Find(m, run.v->base));
    e.diversity = run.v->diversity_weight != 0;
    const Checkpoint &a = run.checkpoints.back(), &b = e.base->checkpoints.back();
    e.mine = e.diversity ? a.diversity : a.contrastive;
    e.theirs = e.diversity ? b.diversity : b.contrastive;
    out.push_back(e);
  }
  return out;
}

// ---- Checks.
Status AddChecks(const Measured& m, ExperimentResult& r) {
  for (const VariantRun& run : m.runs) {
    const double v0 = run.checkpoints.front().val_loss, v1 = FinalVal(run);
    bool finite = std::isfinite(v1);
    for (const Checkpoint& cp : run.checkpoints) {
      for (const DepthMetrics& d : cp.depth) finite &= std::isfinite(d.relative_residual);
    }
    r.AddCheck(std::string(run.v->label) + ": metrics finite", finite,
               "final validation loss " + Fmt(v1, "%.4f"));
    r.AddCheck(std::string(run.v->label) + ": learns", v1 < v0 - 0.3,
               "validation loss " + Fmt(v0, "%.3f") + " -> " + Fmt(v1, "%.3f"));
  }
  // Each remedy lowers what it optimises (D or I, on the probe batch) below its base's value.
  ATTNLAB_ASSIGN_OR_RETURN(const std::vector<RemedyEffect> effects, RemedyEffects(m));
  for (const RemedyEffect& e : effects) {
    r.AddCheck(std::string(e.remedy->v->label) + " lowers " +
                   (e.diversity ? "head-output cosine D" : "the InfoNCE between layers I"),
               e.mine < e.theirs,
               std::string(e.diversity ? "D" : "I") + " at the end: " + Fmt(e.mine, "%.4f") + ", " +
                   e.base->v->label + " " + Fmt(e.theirs, "%.4f"));
  }
  return Status::Ok();
}

// ---- Claims.
Status AddClaims(const Measured& m, ExperimentResult& r) {
  ATTNLAB_ASSIGN_OR_RETURN(const VariantRun* post_ln, Find(m, "post_ln"));
  ATTNLAB_ASSIGN_OR_RETURN(const VariantRun* base, Find(m, "pre_ln"));
  ATTNLAB_ASSIGN_OR_RETURN(const VariantRun* deepnorm, Find(m, "deepnorm"));
  const double post = FinalVal(*post_ln), pre = FinalVal(*base), deep = FinalVal(*deepnorm);
  const double unigram = m.unigram;
  r.AddClaim("pre-LN trains a deep stack better than post-LN", "Xiong et al. 2020",
             "lower loss for pre-LN at equal steps without a long warmup",
             "validation loss pre-LN " + Fmt(pre, "%.3f") + ", post-LN " + Fmt(post, "%.3f") + " (unigram " +
                 Fmt(unigram, "%.3f") + ")",
             pre < post - kLossMargin);
  r.AddClaim("DeepNorm makes post-LN trainable at depth", "Wang et al. 2022", "DeepNorm's loss below plain post-LN's",
             "validation loss DeepNorm " + Fmt(deep, "%.3f") + ", post-LN " + Fmt(post, "%.3f") + " (unigram " +
                 Fmt(unigram, "%.3f") + ")",
             deep < post - kLossMargin);

  // The documents' qualitative statements (docs/EXPERIMENTS.md quotes them), on the trained pre-LN
  // baseline: attention becomes more uniform and tokens more alike with depth, and the two
  // remedies help. Layer l is index l + 1 of the depth metrics.
  const std::vector<DepthMetrics>& bd = base->checkpoints.back().depth;
  const int64_t L = m.s.layers, q = std::max<int64_t>(1, L / 4);
  auto mean_layers = [&](double DepthMetrics::*f, int64_t lo, int64_t hi) {
    double sum = 0;
    for (int64_t l = lo; l < hi; ++l) sum += bd[l + 1].*f;
    return sum / static_cast<double>(hi - lo);
  };
  const double e_lo = mean_layers(&DepthMetrics::entropy, 0, q), e_hi = mean_layers(&DepthMetrics::entropy, L - q, L);
  r.AddClaim("attention weights become uniform in deep layers", "Dong et al. 2021; Noci et al. 2022 (rank collapse)",
             "normalised entropy higher in the deepest quarter of layers than in the first",
             "pre-LN after training: layers 0-" + std::to_string(q - 1) + " " + Fmt(e_lo, "%.3f") + ", layers " +
                 std::to_string(L - q) + "-" + std::to_string(L - 1) + " " + Fmt(e_hi, "%.3f"),
             e_hi > e_lo);
  const double rr1 = bd[1].relative_residual, rrL = bd[L].relative_residual;
  const double c1 = bd[1].mean_cosine, cL = bd[L].mean_cosine;
  r.AddClaim("token representations homogenise with depth", "Dong et al. 2021 (rank collapse)",
             "relative residual falls and token cosine rises from the first to the last layer",
             "pre-LN after training: relative residual " + Fmt(rr1, "%.3f") + " -> " + Fmt(rrL, "%.3f") +
                 ", token cosine " + Fmt(c1, "%.3f") + " -> " + Fmt(cL, "%.3f"),
             rrL < rr1 && cL > c1);
  ATTNLAB_ASSIGN_OR_RETURN(const std::vector<RemedyEffect> effects, RemedyEffects(m));
  for (const RemedyEffect& e : effects) {
    const VariantRun &remedy = *e.remedy, &b = *e.base;
    const double vl = FinalVal(remedy), vb = FinalVal(b);
    const double rr_r = MeanOverLayers(remedy.checkpoints.back().depth, &DepthMetrics::relative_residual);
    const double rr_b = MeanOverLayers(b.checkpoints.back().depth, &DepthMetrics::relative_residual);
    r.AddClaim(std::string(remedy.v->label) + " lowers the loss and the collapse",
               e.diversity ? "proposed remedy: head-diversity penalty (Li et al. 2018)"
                           : "proposed remedy: contrastive loss between layers",
               std::string("lower validation loss and higher mean relative residual than ") + b.v->label,
               "validation loss " + Fmt(vl, "%.3f") + " vs " + Fmt(vb, "%.3f") + "; mean relative residual " +
                   Fmt(rr_r, "%.3f") + " vs " + Fmt(rr_b, "%.3f"),
               vl < vb - kLossMargin && rr_r > rr_b);
  }
  return Status::Ok();
}

// ---- results in report.json.
Status AddResults(const Measured& m, ExperimentResult& r) {
  const Sizes& s = m.s;
  nlohmann::json jruns = nlohmann::json::array();
  for (const VariantRun& run : m.runs) {
    nlohmann::json cps = nlohmann::json::array();
    for (const Checkpoint& cp : run.checkpoints) {
      cps.push_back({{"step", cp.step}, {"val_loss", cp.val_loss}, {"diversity", cp.diversity},
                     {"contrastive", cp.contrastive}, {"depth", DepthMetricsToJson(cp.depth)}});
    }
    nlohmann::json val = nlohmann::json::array();
    for (auto [st, l] : run.val_loss) val.push_back({{"step", st}, {"loss", l}});
    jruns.push_back({{"variant", run.v->id}, {"label", run.v->label},
                     {"diversity_weight", run.v->diversity_weight},
                     {"contrastive_weight", run.v->contrastive_weight},
                     {"train_loss", run.train_loss}, {"val_loss", val}, {"skipped_steps", run.skipped},
                     {"seconds", run.seconds}, {"checkpoints", cps}});
  }
  r.results = {{"layers", s.layers}, {"d_model", s.d_model}, {"heads", s.heads},
               {"seq_len", s.len}, {"batch", s.batch}, {"steps", s.steps}, {"lr", 1e-3},
               {"data", m.source}, {"probe_sequences", s.probe_sequences},
               {"unigram_val_loss", m.unigram}, {"loss_margin", kLossMargin}, {"runs", jruns}};
  return Status::Ok();
}

const VariantRun& Best(const Measured& m) {
  const VariantRun* best = &m.runs.front();
  for (const VariantRun& run : m.runs) {
    if (FinalVal(run) < FinalVal(*best)) best = &run;
  }
  return *best;
}

// ---- Summary.
Status AddSummary(const Measured& m, ExperimentResult& r) {
  const Sizes& s = m.s;
  const std::vector<VariantRun>& runs = m.runs;
  std::string sum = "After " + std::to_string(s.steps) + " steps of " + std::to_string(s.layers) +
                    "-layer, d_model " + std::to_string(s.d_model) + " models, validation loss: ";
  for (size_t i = 0; i < runs.size(); ++i) {
    sum += std::string(i ? ", " : "") + runs[i].v->label + " " + Fmt(FinalVal(runs[i]), "%.3f");
  }
  sum += " (best: " + std::string(Best(m).v->label) + "; a unigram model scores " + Fmt(m.unigram, "%.3f") +
         "). Smallest relative residual over layers at the end: ";
  for (size_t i = 0; i < runs.size(); ++i) {
    sum += std::string(i ? ", " : "") + runs[i].v->label + " " +
           Fmt(MinOverLayers(runs[i].checkpoints.back().depth, &DepthMetrics::relative_residual), "%.2f");
  }
  ATTNLAB_ASSIGN_OR_RETURN(const std::vector<RemedyEffect> effects, RemedyEffects(m));
  std::string remedy_summary;
  for (const RemedyEffect& e : effects) {
    remedy_summary += std::string(remedy_summary.empty() ? "" : "; ") + e.remedy->v->label + ": " +
                      (e.diversity ? "D " : "I ") + Fmt(e.theirs, "%.3f") + " -> " + Fmt(e.mine, "%.3f");
  }
  sum += ". What each remedy optimises, from its base to the remedy: " + remedy_summary + ".";
  r.summary = sum;
  return Status::Ok();
}

// ---- The page.
void AddLossSection(const Measured& m, report::HtmlReport& html) {
  const Sizes& s = m.s;
  html.AddSection("loss", "Loss curves");
  report::XyPlot p;
  p.title = "Training loss (mean over 10-step windows)";
  p.x.label = "step";
  p.y.label = "cross-entropy (nats/token)";
  p.reference_lines = {{m.unigram, "unigram"}};
  for (const VariantRun& run : m.runs) {
    report::Series se;
    se.name = run.v->label;
    const int64_t w = std::max<int64_t>(1, std::min<int64_t>(10, s.steps / 20));
    for (int64_t i = 0; i + w <= static_cast<int64_t>(run.train_loss.size()); i += w) {
      double mean = 0;
      for (int64_t k = 0; k < w; ++k) mean += run.train_loss[i + k];
      se.x.push_back(static_cast<double>(i + w));
      se.y.push_back(mean / w);
    }
    p.series.push_back(se);
  }
  html.AddFigure(report::RenderLinePlot(p), "LM loss only (the auxiliary losses are not included).",
                 "fig-train-loss");
  report::XyPlot vp = p;
  vp.title = "Validation loss";
  vp.series.clear();
  vp.markers = true;
  for (const VariantRun& run : m.runs) {
    report::Series se;
    se.name = run.v->label;
    for (auto [st, l] : run.val_loss) se.x.push_back(static_cast<double>(st)), se.y.push_back(l);
    vp.series.push_back(se);
  }
  html.AddFigure(report::RenderLinePlot(vp), "Validation loss at every segment.", "fig-val-loss");
  std::vector<std::vector<std::string>> rows;
  for (const VariantRun& run : m.runs) {
    const Checkpoint& e = run.checkpoints.back();
    rows.push_back({run.v->label, Fmt(FinalVal(run), "%.3f"),
                    Fmt(MinOverLayers(e.depth, &DepthMetrics::relative_residual), "%.3f"),
                    Fmt(MeanOverLayers(e.depth, &DepthMetrics::relative_residual), "%.3f"),
                    Fmt(MeanOverLayers(e.depth, &DepthMetrics::mean_cosine), "%.3f"),
                    Fmt(MeanOverLayers(e.depth, &DepthMetrics::entropy), "%.3f"),
                    Fmt(e.diversity, "%.3f"), Fmt(e.contrastive, "%.3f"),
                    std::to_string(run.skipped), Fmt(run.seconds, "%.0f")});
  }
  html.AddTable({"variant", "val loss", "min rel. residual", "mean rel. residual", "mean token cosine",
                 "mean entropy", "D (head cos)", "I (InfoNCE)", "skipped steps", "seconds"},
                rows, "At the end of training; means over layers.");
}

void AddCollapseSections(const Measured& m, report::HtmlReport& html) {
  html.AddSection("collapse", "Collapse metrics per layer");
  auto final_plot = [&](const std::string& title, const std::string& ylabel, double DepthMetrics::*f,
                        bool skip_embedding, const char* id) {
    report::XyPlot p;
    p.title = title;
    p.x.label = "layer (0 = embedding)";
    p.y.label = ylabel;
    for (const VariantRun& run : m.runs) {
      report::Series se;
      se.name = run.v->label;
      const auto& d = run.checkpoints.back().depth;
      for (size_t l = skip_embedding ? 1 : 0; l < d.size(); ++l) {
        se.x.push_back(static_cast<double>(l));
        se.y.push_back(d[l].*f);
      }
      p.series.push_back(se);
    }
    html.AddFigure(report::RenderLinePlot(p), title + " after training, per layer.", id);
  };
  final_plot("Relative residual", "relative residual", &DepthMetrics::relative_residual, false, "fig-rr-final");
  final_plot("Mean token cosine", "mean pairwise cosine", &DepthMetrics::mean_cosine, false, "fig-cos-final");
  final_plot("Attention entropy", "normalised entropy", &DepthMetrics::entropy, true, "fig-entropy-final");
  final_plot("Head-output cosine", "mean pairwise cosine between heads", &DepthMetrics::head_cosine, true,
             "fig-headcos-final");
  html.AddSection("over-training", "Relative residual per layer over training");
  for (const VariantRun& run : m.runs) {
    report::XyPlot p;
    p.title = std::string(run.v->label) + ": relative residual per layer";
    p.x.label = "layer (0 = embedding)";
    p.y.label = "relative residual";
    p.y.min = 0.0;
    p.height = 320;
    for (const Checkpoint& cp : run.checkpoints) {
      report::Series se;
      se.name = "step " + std::to_string(cp.step);
      for (size_t l = 0; l < cp.depth.size(); ++l) {
        se.x.push_back(static_cast<double>(l));
        se.y.push_back(cp.depth[l].relative_residual);
      }
      p.series.push_back(se);
    }
    html.AddFigure(report::RenderLinePlot(p), "One line per checkpoint.");
  }
}

Status AddHtml(const Measured& m, ExperimentResult& r) {
  const Sizes& s = m.s;
  ATTNLAB_ASSIGN_OR_RETURN(const VariantRun* post_ln, Find(m, "post_ln"));
  ATTNLAB_ASSIGN_OR_RETURN(const VariantRun* pre_ln, Find(m, "pre_ln"));
  ATTNLAB_ASSIGN_OR_RETURN(const VariantRun* deepnorm, Find(m, "deepnorm"));
  const VariantRun& best = Best(m);
  r.html = report::HtmlReport("Collapse during training of deep, narrow models");
  r.html.SetSubtitle(std::to_string(s.layers) + " layers, d_model " + std::to_string(s.d_model) + ", " +
                     std::to_string(s.heads) + " heads, " + std::to_string(s.steps) + " steps of " +
                     std::to_string(s.batch) + " x " + std::to_string(s.len) + " tokens; " + m.source);
  r.html.AddSummaryFact("best validation loss", std::string(best.v->label) + ": " + Fmt(FinalVal(best), "%.3f"));
  r.html.AddSummaryFact("post-LN / pre-LN / DeepNorm", Fmt(FinalVal(*post_ln), "%.3f") + " / " +
                                                           Fmt(FinalVal(*pre_ln), "%.3f") + " / " +
                                                           Fmt(FinalVal(*deepnorm), "%.3f"));
  AddLossSection(m, r.html);
  AddCollapseSections(m, r.html);
  AddSetupSection(r.html, {
      "Model: " + std::to_string(s.layers) + " layers, d_model " + std::to_string(s.d_model) + ", " +
          std::to_string(s.heads) + " heads, MLP 4 d_model, RoPE, GPT-2 init (std 0.02, output "
          "projections / sqrt(2L); DeepNorm: its beta); every variant from the same seed.",
      "Training: AdamW lr 1e-3 (warmup " + std::to_string(s.steps / 10) + " steps, cosine to 1e-4), "
          "weight decay 0.1, clip 1.0, batch " + std::to_string(s.batch) + " x " + std::to_string(s.len) +
          " tokens, the same batches for every variant.",
      "Remedies, each added alone to post-LN and to pre-LN: head-diversity penalty weight " + Fmt(kDiversityWeight, "%g") +
          " (D: mean pairwise cosine between heads' outputs per token), contrastive weight " +
          Fmt(kContrastiveWeight, "%g") + " (I: InfoNCE between consecutive layers' outputs, tau 0.1); "
          "definitions in docs/EXPERIMENTS.md.",
      "Collapse metrics on the first " + std::to_string(s.probe_sequences) + " validation windows.",
  });
  return Status::Ok();
}

// configure -> run variants (each measured at its checkpoints) -> report.
Result<ExperimentResult> RunCollapseTraining(const ExperimentOptions& o) {
  Measured m;
  m.s = o.quick ? Sizes{6, 32, 4, 32, 4, 40, 4, 2, 2} : Sizes{24, 64, 4, 64, 8, 200, 5, 4, 8};
  const Sizes& s = m.s;
  ATTNLAB_ASSIGN_OR_RETURN(TokenData data, LoadTextData(o));
  if (static_cast<int64_t>(data.val.size()) < s.eval_batches * s.batch * (s.len + 1) ||
      static_cast<int64_t>(data.train.size()) < 4 * (s.len + 1)) {
    return Status::InvalidArgument("the data is too small: need at least " +
                                   std::to_string(s.eval_batches * s.batch * (s.len + 1)) +
                                   " validation tokens and " + std::to_string(4 * (s.len + 1)) +
                                   " training tokens");
  }
  ATTNLAB_ASSIGN_OR_RETURN(m.unigram, UnigramValLoss(data));
  m.source = data.source;
  // The probe batch: the first validation windows.
  std::vector<int32_t> probe(s.probe_sequences * s.len), probe_targets(probe.size());
  if (!EvalBatch(data.val, 0, s.probe_sequences, s.len, -1, probe.data(), probe_targets.data())) {
    return Status::InvalidArgument("the validation data is shorter than the probe batch");
  }
  Progress(o, kName, "%zu variants: %ld layers, d_model %ld, %ld heads, %ld steps x %ld x %ld tokens; %s",
           Variants().size(), static_cast<long>(s.layers), static_cast<long>(s.d_model),
           static_cast<long>(s.heads), static_cast<long>(s.steps), static_cast<long>(s.batch),
           static_cast<long>(s.len), data.source.c_str());
  for (const Variant& v : Variants()) {
    ATTNLAB_ASSIGN_OR_RETURN(VariantRun run, TrainVariant(o, s, data, probe, v));
    m.runs.push_back(std::move(run));
  }
  return AssembleReport<Measured>(m, {AddChecks, AddClaims, AddResults, AddSummary, AddHtml});
}

}  // namespace

Experiment CollapseTrainingExperiment() {
  return {kName,
          "train deep narrow models: post-LN vs pre-LN vs residual scaling vs DeepNorm vs a "
          "head-diversity penalty vs a contrastive loss; loss and collapse over training",
          RunCollapseTraining};
}

}  // namespace attnlab::experiments
