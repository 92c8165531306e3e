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

#include "attnlab/tokenizer.h"
#include "core/resources.h"
#include "experiments/collapse_probe.h"
#include "experiments/experiment.h"
#include "model/tokenizer_spec.h"
#include "report/svg_plot.h"
#include "train/auxiliary_losses.h"
#include "train/corpus.h"
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

struct Data {
  std::vector<int32_t> train, val;
  int64_t vocab = 0;
  std::string source;
};

// --data DIR (attnlab prepare), else the Brown corpus as bytes (every 20th document held out,
// as `attnlab prepare` splits it), tokenised in memory.
Result<Data> LoadData(const ExperimentOptions& o) {
  Data d;
  if (!o.data.empty()) {
    ATTNLAB_ASSIGN_OR_RETURN(TokenFile train, ReadTokenFile(o.data + "/train.tok"));
    ATTNLAB_ASSIGN_OR_RETURN(TokenFile val, ReadTokenFile(o.data + "/val.tok"));
    d.train = std::move(train.tokens);
    d.val = std::move(val.tokens);
    d.vocab = std::max(train.vocab_size, val.vocab_size);
    d.source = o.data;
    return d;
  }
  const std::string dir = FindResource(kBrownCorpusPath);
  if (dir.empty()) {
    return Status::NotFound(std::string("no --data DIR given and the Brown corpus (") +
                            kBrownCorpusPath + ") is not installed: run scripts/setup.sh, or "
                            "make a data directory with `attnlab prepare --text FILE --out DIR`");
  }
  ATTNLAB_ASSIGN_OR_RETURN(std::vector<std::string> docs, LoadBrownCorpus(dir));
  std::unique_ptr<Tokenizer> tok = MakeByteTokenizer();
  for (size_t i = 0; i < docs.size(); ++i) {
    ATTNLAB_ASSIGN_OR_RETURN(std::vector<int32_t> ids, tok->Encode(docs[i]));
    std::vector<int32_t>& dst = i % 20 == 19 ? d.val : d.train;
    dst.insert(dst.end(), ids.begin(), ids.end());
    dst.push_back(*tok->eos_id());
  }
  d.vocab = tok->vocab_size();
  d.source = "the Brown corpus as bytes (" + std::to_string(docs.size()) + " documents, every 20th held out)";
  return d;
}

// Cross-entropy (nats per token) of the whole validation split under the training split's unigram
// distribution, add-one smoothed: the loss of a model that ignores context entirely.
double UnigramValLoss(const Data& d) {
  std::vector<double> count(d.vocab, 1.0);
  for (int32_t t : d.train) count[t] += 1.0;
  const double total = static_cast<double>(d.train.size() + d.vocab);
  double loss = 0;
  for (int32_t t : d.val) loss -= std::log(count[t] / total);
  return loss / static_cast<double>(d.val.size());
}

struct Checkpoint {
  int64_t step = 0;
  double val_loss = NAN;
  std::vector<DepthMetrics> depth;  // [layers + 1]
  double diversity = NAN, contrastive = NAN;  // D and I on the probe batch
};

struct VariantRun {
  const Variant* v = nullptr;
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

Result<ExperimentResult> RunCollapseTraining(const ExperimentOptions& o) {
  const Sizes s = o.quick ? Sizes{6, 32, 4, 32, 4, 40, 4, 2, 2}
                          : Sizes{24, 64, 4, 64, 8, 200, 5, 4, 8};
  ATTNLAB_ASSIGN_OR_RETURN(Data data, LoadData(o));
  const double unigram = UnigramValLoss(data);
  if (static_cast<int64_t>(data.val.size()) < s.eval_batches * s.batch * (s.len + 1) ||
      static_cast<int64_t>(data.train.size()) < 4 * (s.len + 1)) {
    return Status::InvalidArgument("the data is too small: need at least " +
                                   std::to_string(s.eval_batches * s.batch * (s.len + 1)) +
                                   " validation tokens and " + std::to_string(4 * (s.len + 1)) +
                                   " training tokens");
  }
  // The probe batch: the first validation windows.
  std::vector<int32_t> probe(s.probe_sequences * s.len), probe_targets(probe.size());
  if (!EvalBatch(data.val, 0, s.probe_sequences, s.len, -1, probe.data(), probe_targets.data())) {
    return Status::InvalidArgument("the validation data is shorter than the probe batch");
  }
  Progress(o, kName, "%zu variants: %ld layers, d_model %ld, %ld heads, %ld steps x %ld x %ld tokens; %s",
           Variants().size(), static_cast<long>(s.layers), static_cast<long>(s.d_model),
           static_cast<long>(s.heads), static_cast<long>(s.steps), static_cast<long>(s.batch),
           static_cast<long>(s.len), data.source.c_str());

  std::vector<VariantRun> runs;
  for (const Variant& v : Variants()) {
    const auto t0 = std::chrono::steady_clock::now();
    const ModelConfig c = MakeConfig(s, v, data.vocab);
    ATTNLAB_ASSIGN_OR_RETURN(std::unique_ptr<Gpt> g, Gpt::Create(c));
    g->params().Initialize(c, o.seed);
    TrainOptions to;
    to.batch = s.batch;
    to.seq_len = s.len;
    to.steps = s.steps;
    to.seed = o.seed;
    to.opt.lr = 1e-3f;
    to.opt.min_lr = 1e-4f;
    to.opt.warmup_steps = s.steps / 10;
    to.eval_every = 0;
    to.eval_batches = s.eval_batches;
    to.quiet = true;
    to.diversity_weight = v.diversity_weight;
    to.contrastive_weight = v.contrastive_weight;
    Trainer trainer(g.get(), to, data.train, data.val);
    VariantRun run;
    run.v = &v;
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
               cp.val_loss, last.aux_loss, MinOverLayers(cp.depth, &DepthMetrics::relative_residual),
               std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      run.checkpoints.push_back(cp);
    }
    for (const TrainRecord& rec : trainer.history()) {
      run.train_loss.push_back(rec.loss);
      run.skipped += rec.skipped;
    }
    run.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    runs.push_back(std::move(run));
  }

  ExperimentResult r;
  auto find = [&](const char* id) -> const VariantRun& {
    for (const VariantRun& run : runs) {
      if (std::string(run.v->id) == id) return run;
    }
    return runs.front();
  };
  auto final_val = [](const VariantRun& run) { return run.checkpoints.back().val_loss; };
  // ---- Checks.
  for (const VariantRun& run : runs) {
    const double v0 = run.checkpoints.front().val_loss, v1 = final_val(run);
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
  std::string remedy_summary;
  for (const VariantRun& run : runs) {
    if (!run.v->base) continue;
    const VariantRun& b = find(run.v->base);
    const bool div = run.v->diversity_weight != 0;
    const double mine = div ? run.checkpoints.back().diversity : run.checkpoints.back().contrastive;
    const double theirs = div ? b.checkpoints.back().diversity : b.checkpoints.back().contrastive;
    r.AddCheck(std::string(run.v->label) + " lowers " + (div ? "head-output cosine D" : "the InfoNCE between layers I"),
               mine < theirs,
               std::string(div ? "D" : "I") + " at the end: " + Fmt(mine, "%.4f") + ", " + b.v->label +
                   " " + Fmt(theirs, "%.4f"));
    remedy_summary += std::string(remedy_summary.empty() ? "" : "; ") + run.v->label + ": " +
                      (div ? "D " : "I ") + Fmt(theirs, "%.3f") + " -> " + Fmt(mine, "%.3f");
  }
  const VariantRun& base = find("pre_ln");

  // ---- Claims.
  const double post = final_val(find("post_ln")), pre = final_val(base), deep = final_val(find("deepnorm"));
  r.claims.push_back({"pre-LN trains a deep stack better than post-LN", "Xiong et al. 2020",
                      "lower loss for pre-LN at equal steps without a long warmup",
                      "validation loss pre-LN " + Fmt(pre, "%.3f") + ", post-LN " + Fmt(post, "%.3f") +
                          " (unigram " + Fmt(unigram, "%.3f") + ")",
                      pre < post - kLossMargin});
  r.claims.push_back({"DeepNorm makes post-LN trainable at depth", "Wang et al. 2022",
                      "DeepNorm's loss below plain post-LN's",
                      "validation loss DeepNorm " + Fmt(deep, "%.3f") + ", post-LN " + Fmt(post, "%.3f") +
                          " (unigram " + Fmt(unigram, "%.3f") + ")",
                      deep < post - kLossMargin});

  // The documents' qualitative statements (docs/EXPERIMENTS.md quotes them), on the trained pre-LN
  // baseline: attention becomes more uniform and tokens more alike with depth, and the two
  // remedies help. Layer l is index l + 1 of the depth metrics.
  {
    const std::vector<DepthMetrics>& bd = base.checkpoints.back().depth;
    const int64_t L = s.layers, q = std::max<int64_t>(1, L / 4);
    auto mean_layers = [&](double DepthMetrics::*f, int64_t lo, int64_t hi) {
      double sum = 0;
      for (int64_t l = lo; l < hi; ++l) sum += bd[l + 1].*f;
      return sum / static_cast<double>(hi - lo);
    };
    const double e_lo = mean_layers(&DepthMetrics::entropy, 0, q),
                 e_hi = mean_layers(&DepthMetrics::entropy, L - q, L);
    r.claims.push_back({"attention weights become uniform in deep layers", "Dong et al. 2021; Noci et al. 2022 (rank collapse)",
                        "normalised entropy higher in the deepest quarter of layers than in the first",
                        "pre-LN after training: layers 0-" + std::to_string(q - 1) + " " +
                            Fmt(e_lo, "%.3f") + ", layers " + std::to_string(L - q) + "-" +
                            std::to_string(L - 1) + " " + Fmt(e_hi, "%.3f"),
                        e_hi > e_lo});
    const double rr1 = bd[1].relative_residual, rrL = bd[L].relative_residual;
    const double c1 = bd[1].mean_cosine, cL = bd[L].mean_cosine;
    r.claims.push_back({"token representations homogenise with depth", "Dong et al. 2021 (rank collapse)",
                        "relative residual falls and token cosine rises from the first to the last layer",
                        "pre-LN after training: relative residual " + Fmt(rr1, "%.3f") + " -> " +
                            Fmt(rrL, "%.3f") + ", token cosine " + Fmt(c1, "%.3f") + " -> " +
                            Fmt(cL, "%.3f"),
                        rrL < rr1 && cL > c1});
    for (const VariantRun& remedy : runs) {
      if (!remedy.v->base) continue;
      const VariantRun& b = find(remedy.v->base);
      const double vl = final_val(remedy), vb = final_val(b);
      const double rr_r = MeanOverLayers(remedy.checkpoints.back().depth, &DepthMetrics::relative_residual);
      const double rr_b = MeanOverLayers(b.checkpoints.back().depth, &DepthMetrics::relative_residual);
      r.claims.push_back({std::string(remedy.v->label) + " lowers the loss and the collapse",
                          remedy.v->diversity_weight != 0 ? "proposed remedy: head-diversity penalty (Li et al. 2018)"
                                                         : "proposed remedy: contrastive loss between layers",
                          std::string("lower validation loss and higher mean relative residual than ") +
                              b.v->label,
                          "validation loss " + Fmt(vl, "%.3f") + " vs " + Fmt(vb, "%.3f") +
                              "; mean relative residual " + Fmt(rr_r, "%.3f") + " vs " + Fmt(rr_b, "%.3f"),
                          vl < vb - kLossMargin && rr_r > rr_b});
    }
  }

  // ---- JSON.
  nlohmann::json jruns = nlohmann::json::array();
  for (const VariantRun& run : runs) {
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
               {"data", data.source}, {"probe_sequences", s.probe_sequences},
               {"unigram_val_loss", unigram}, {"loss_margin", kLossMargin}, {"runs", jruns}};

  // ---- Summary.
  const VariantRun* best = &runs.front();
  for (const VariantRun& run : runs) {
    if (final_val(run) < final_val(*best)) best = &run;
  }
  std::string sum = "After " + std::to_string(s.steps) + " steps of " + std::to_string(s.layers) +
                    "-layer, d_model " + std::to_string(s.d_model) +
                    " models, validation loss: ";
  for (size_t i = 0; i < runs.size(); ++i) {
    sum += std::string(i ? ", " : "") + runs[i].v->label + " " + Fmt(final_val(runs[i]), "%.3f");
  }
  sum += " (best: " + std::string(best->v->label) + "; a unigram model scores " + Fmt(unigram, "%.3f") +
         "). Smallest relative residual over layers at the end: ";
  for (size_t i = 0; i < runs.size(); ++i) {
    sum += std::string(i ? ", " : "") + runs[i].v->label + " " +
           Fmt(MinOverLayers(runs[i].checkpoints.back().depth, &DepthMetrics::relative_residual), "%.2f");
  }
  sum += ". What each remedy optimises, from its base to the remedy: " + remedy_summary + ".";
  r.summary = sum;

  // ---- Report.
  r.html = report::HtmlReport("Collapse during training of deep, narrow models");
  r.html.SetSubtitle(std::to_string(s.layers) + " layers, d_model " + std::to_string(s.d_model) +
                     ", " + std::to_string(s.heads) + " heads, " + std::to_string(s.steps) +
                     " steps of " + std::to_string(s.batch) + " x " + std::to_string(s.len) +
                     " tokens; " + data.source);
  r.html.AddSummaryFact("best validation loss", std::string(best->v->label) + ": " + Fmt(final_val(*best), "%.3f"));
  r.html.AddSummaryFact("post-LN / pre-LN / DeepNorm", Fmt(post, "%.3f") + " / " + Fmt(pre, "%.3f") + " / " + Fmt(deep, "%.3f"));
  r.html.AddSection("loss", "Loss curves");
  {
    report::XyPlot p;
    p.title = "Training loss (mean over 10-step windows)";
    p.x.label = "step";
    p.y.label = "cross-entropy (nats/token)";
    p.reference_lines = {{unigram, "unigram"}};
    for (const VariantRun& run : runs) {
      report::Series se;
      se.name = run.v->label;
      const int64_t w = std::max<int64_t>(1, std::min<int64_t>(10, s.steps / 20));
      for (int64_t i = 0; i + w <= static_cast<int64_t>(run.train_loss.size()); i += w) {
        double m = 0;
        for (int64_t k = 0; k < w; ++k) m += run.train_loss[i + k];
        se.x.push_back(static_cast<double>(i + w));
        se.y.push_back(m / w);
      }
      p.series.push_back(se);
    }
    r.html.AddFigure(report::RenderLinePlot(p), "LM loss only (the auxiliary losses are not included).",
                     "fig-train-loss");
    report::XyPlot vp = p;
    vp.title = "Validation loss";
    vp.series.clear();
    vp.markers = true;
    for (const VariantRun& run : runs) {
      report::Series se;
      se.name = run.v->label;
      for (auto [st, l] : run.val_loss) se.x.push_back(static_cast<double>(st)), se.y.push_back(l);
      vp.series.push_back(se);
    }
    r.html.AddFigure(report::RenderLinePlot(vp), "Validation loss at every segment.", "fig-val-loss");
    std::vector<std::vector<std::string>> rows;
    for (const VariantRun& run : runs) {
      const Checkpoint& e = run.checkpoints.back();
      rows.push_back({run.v->label, Fmt(final_val(run), "%.3f"),
                      Fmt(MinOverLayers(e.depth, &DepthMetrics::relative_residual), "%.3f"),
                      Fmt(MeanOverLayers(e.depth, &DepthMetrics::relative_residual), "%.3f"),
                      Fmt(MeanOverLayers(e.depth, &DepthMetrics::mean_cosine), "%.3f"),
                      Fmt(MeanOverLayers(e.depth, &DepthMetrics::entropy), "%.3f"),
                      Fmt(e.diversity, "%.3f"), Fmt(e.contrastive, "%.3f"),
                      std::to_string(run.skipped), Fmt(run.seconds, "%.0f")});
    }
    r.html.AddTable({"variant", "val loss", "min rel. residual", "mean rel. residual",
                     "mean token cosine", "mean entropy", "D (head cos)", "I (InfoNCE)",
                     "skipped steps", "seconds"},
                    rows, "At the end of training; means over layers.");
  }
  r.html.AddSection("collapse", "Collapse metrics per layer");
  {
    auto final_plot = [&](const std::string& title, const std::string& ylabel, double DepthMetrics::*f,
                          bool skip_embedding, const char* id) {
      report::XyPlot p;
      p.title = title;
      p.x.label = "layer (0 = embedding)";
      p.y.label = ylabel;
      for (const VariantRun& run : runs) {
        report::Series se;
        se.name = run.v->label;
        const auto& d = run.checkpoints.back().depth;
        for (size_t l = skip_embedding ? 1 : 0; l < d.size(); ++l) {
          se.x.push_back(static_cast<double>(l));
          se.y.push_back(d[l].*f);
        }
        p.series.push_back(se);
      }
      r.html.AddFigure(report::RenderLinePlot(p), title + " after training, per layer.", id);
    };
    final_plot("Relative residual", "relative residual", &DepthMetrics::relative_residual, false, "fig-rr-final");
    final_plot("Mean token cosine", "mean pairwise cosine", &DepthMetrics::mean_cosine, false, "fig-cos-final");
    final_plot("Attention entropy", "normalised entropy", &DepthMetrics::entropy, true, "fig-entropy-final");
    final_plot("Head-output cosine", "mean pairwise cosine between heads", &DepthMetrics::head_cosine, true,
               "fig-headcos-final");
  }
  r.html.AddSection("over-training", "Relative residual per layer over training");
  for (const VariantRun& run : runs) {
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
    r.html.AddFigure(report::RenderLinePlot(p), "One line per checkpoint.");
  }
  r.html.AddSection("setup", "Setup");
  r.html.AddBulletList({
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
  return r;
}

}  // namespace

Experiment CollapseTrainingExperiment() {
  return {kName,
          "train deep narrow models: post-LN vs pre-LN vs residual scaling vs DeepNorm vs a "
          "head-diversity penalty vs a contrastive loss; loss and collapse over training",
          RunCollapseTraining};
}

}  // namespace attnlab::experiments
