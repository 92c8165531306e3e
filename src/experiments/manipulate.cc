// manipulate: can a head's attention be moved to an arbitrary position by a small input change
// that leaves the predictions alone (the mission's document on attention's limits: attention
// weights are then a weak explanation and a robustness risk)? And the converse: does imposing a
// different attention distribution on the head change the predictions? On the model and text of
// experiments/model_source.h (the default model and data/sample.txt unless --data).
//
//   1. The head: --layer/--head, or the strongest non-sink head: among heads whose first-token
//      share alpha_1 is below Gu et al.'s 0.3 (arXiv:2410.10781), the most focused one, i.e. the
//      lowest mean normalised entropy H_t / log(t + 1) over rows t >= 1 (the head whose pattern
//      a reader would take as an explanation). Target key c = Tm / 2 (a text token mid-window).
//   2. Steering (experiments/manipulation.h): per budget eps, the perturbation of the embeddings
//      with ||delta_b|| <= eps ||x0_b|| minimising -m_c + w max(0, KL - 0.05) (w = 10: a KL up
//      to the claim's bound is free), found by projected gradient steps through the model's own
//      backward, each budget starting from the previous one's result; the control is a random
//      perturbation of the same norm. Reported: m_c moved, KL(p_clean || p), top-1 agreement.
//   3. Imposed (Jain & Wallace 2019's setting): the head's pattern replaced by all-on-c, a random
//      permutation of each row, or uniform, and the output change each causes.
//   4. The same for the strongest sink head (largest alpha_1, if >= 0.3), for comparison: a
//      dormant head's attention should move freely (Guo et al. 2024, arXiv:2410.13835).
// Claims: Jain & Wallace 2019 (arXiv:1902.10186) and Serrano & Smith 2019 (arXiv:1906.03731)
// against Wiegreffe & Pinter 2019 (arXiv:1908.04626), verdicts from the numbers.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <string>
#include <vector>

#include "core/json_number.h"
#include "diagnostics/attention_stats.h"
#include "experiments/experiment.h"
#include "experiments/experiment_report.h"
#include "experiments/manipulation.h"
#include "experiments/model_source.h"
#include "train/first_token_penalty.h"
#include "report/svg_plot.h"

namespace attnlab::experiments {
namespace {

constexpr char kName[] = "manipulate";
constexpr double kKlWeight = 10;      // w in -m_c + w max(0, KL - kKlClaim)
constexpr double kSinkAlpha = 0.3;     // Gu et al.'s epsilon: alpha_1 above it is a sink head
constexpr double kMovedClaim = 0.3;    // the steering claim: m_c rises by at least this ...
constexpr double kKlClaim = 0.05;      // ... while KL(p_clean || p) stays at most this (nats)
constexpr double kGradientTolerance = 0.05;  // relative, fp32 model, directional difference

struct Sizes {
  int64_t windows, window, steps;
  std::vector<double> budgets;  // eps: ||delta_b|| / ||x0_b||
};
Sizes SizesFor(bool quick) {
  if (quick) return {2, 64, 30, {0.03, 0.1, 0.3}};
  return {8, 256, 60, {0.01, 0.03, 0.1, 0.3}};
}

struct HeadStat {
  int64_t layer = 0, head = 0;
  double alpha1 = 0;  // mean attention on key 0
  double focus = 0;   // 1 - mean over rows t >= 1 of H_t / log(t + 1)
};

// Every head's alpha_1 and focus from the last Forward's q and k, by the analysis' own
// statistics (diagnostics/attention_stats.h: alpha_1 and the mean normalised entropy over rows
// with two or more visible keys), window by window; causal standard softmax is the attention
// CheckKeyShareSupported admits.
Result<std::vector<HeadStat>> HeadStats(const Gpt& g) {
  const ModelConfig& c = g.config();
  const int64_t H = c.n_head, Hkv = c.kv_heads(), hd = c.head_dim(), Q = c.qkv_dim();
  const int64_t B = g.last_batch(), Tm = g.last_len();
  AttentionParams ap;
  ap.mask.causal = true;
  AttentionStatsOptions so;
  so.first_k = 1;
  std::vector<HeadStat> out;
  for (int64_t l = 0; l < c.n_layer; ++l) {
    ATTNLAB_ASSIGN_OR_RETURN(AttentionStatsAccumulator acc,
                             AttentionStatsAccumulator::Create(so, H, Hkv, hd));
    for (int64_t b = 0; b < B; ++b) {
      const float* rows = g.qkv(l) + b * Tm * Q;  // q | k | v of window b
      const AttentionTensor k{rows + H * hd, (Tm - 1) * Q + Hkv * hd, 0, hd, Q};
      ATTNLAB_RETURN_IF_ERROR(acc.AddRows(ap, rows, Q, Tm, k, Tm));
    }
    const AttentionLayerStats st = acc.Finish();
    for (int64_t h = 0; h < H; ++h) {
      const AttentionHeadStats& hs = st.heads[h];
      out.push_back({l, h, hs.alpha[0], std::isfinite(hs.entropy) ? 1.0 - hs.entropy : 0.0});
    }
  }
  return out;
}

struct BudgetRow {
  double budget = 0, norm = 0;  // asked; the optimised delta's mean ||delta_b|| / ||x0_b||
  ManipulationValue opt, rnd;
};

struct ImposedRow {
  const char* name;
  ImposedPattern pattern;
  ManipulationValue value;
};

// One head the experiment steers: the studied one (given, or the most focused non-sink head),
// then, for comparison, the strongest sink head.
struct Subject {
  HeadStat head;
  std::string role;  // "given", "most focused non-sink head", "strongest sink head"
  ManipulationValue clean;
  double grad_analytic = 0, grad_numeric = 0;
  std::vector<BudgetRow> budgets;
  std::vector<ImposedRow> imposed;
};

struct Measured {
  Source src;
  int64_t T = 0, Tm = 0, windows = 0, steps = 0, key = 0;
  std::vector<HeadStat> heads;
  std::vector<Subject> subjects;  // [0] the studied head; [1] the strongest sink head, if any
};

Result<Subject> ChooseHead(const ExperimentOptions& o, const std::vector<HeadStat>& heads,
                           const ModelConfig& c) {
  Subject s;
  if (o.layer >= 0 || o.head >= 0) {
    if (o.layer < 0 || o.layer >= c.n_layer || o.head < 0 || o.head >= c.n_head) {
      return Status::InvalidArgument(
          "--layer " + std::to_string(o.layer) + " --head " + std::to_string(o.head) +
          " is not a head of this model (" + std::to_string(c.n_layer) + " layers of " +
          std::to_string(c.n_head) + " heads; give both)");
    }
    s.head = heads[o.layer * c.n_head + o.head];
    s.role = "given";
    return s;
  }
  const HeadStat* best = nullptr;
  for (const HeadStat& h : heads) {
    if (h.alpha1 < kSinkAlpha && (!best || h.focus > best->focus)) best = &h;
  }
  if (!best) {  // every head a sink: the least sink-like
    for (const HeadStat& h : heads) {
      if (!best || h.alpha1 < best->alpha1) best = &h;
    }
  }
  s.head = *best;
  s.role = "most focused non-sink head";
  return s;
}

// The head with the largest alpha_1 if it is a sink (alpha_1 >= 0.3) and not `other`.
bool SinkHead(const std::vector<HeadStat>& heads, const HeadStat& other, Subject* s) {
  const HeadStat* best = nullptr;
  for (const HeadStat& h : heads) {
    if (!best || h.alpha1 > best->alpha1) best = &h;
  }
  if (!best || best->alpha1 < kSinkAlpha ||
      (best->layer == other.layer && best->head == other.head)) {
    return false;
  }
  s->head = *best;
  s->role = "strongest sink head";
  return true;
}

std::string HeadName(const HeadStat& h) {
  return "layer " + std::to_string(h.layer) + " head " + std::to_string(h.head);
}

// Steering and imposing for one head (Measure's steps 2 and 3).
Status MeasureSubject(const ExperimentOptions& o, const Sizes& sz, Gpt& g,
                      const std::vector<int32_t>& x, Measured& m, Subject& s) {
  ATTNLAB_ASSIGN_OR_RETURN(
      ManipulationObjective obj,
      ManipulationObjective::Create(g, x, m.windows, m.T, {s.head.layer, s.head.head, m.key},
                                    kKlWeight, kKlClaim));
  s.clean = obj.clean();
  const std::string name = HeadName(s.head);
  {  // The gradient through the model's own backward, along a random direction u, at a point
     // inside the smallest ball (u and the point scaled to the windows' embedding norms).
    const std::vector<float>& x0 = obj.clean_stream();
    std::vector<float> point = RandomLike(x0, m.windows, o.seed * 31 + 1);
    std::vector<float> u = RandomLike(x0, m.windows, o.seed * 31 + 2);
    const float sp = static_cast<float>(sz.budgets.front()), su = 0.01f;
    for (float& v : point) v *= sp;
    for (float& v : u) v *= su;
    std::vector<float> grad;
    ATTNLAB_RETURN_IF_ERROR(obj.Evaluate(point, &grad).status());
    for (size_t i = 0; i < u.size(); ++i) s.grad_analytic += static_cast<double>(grad[i]) * u[i];
    Status failed = Status::Ok();
    auto f = [&](double h) {
      std::vector<float> d = point;
      for (size_t i = 0; i < d.size(); ++i) d[i] += static_cast<float>(h) * u[i];
      Result<ManipulationValue> v = obj.Evaluate(d, nullptr);
      if (!v.ok()) {
        failed = v.status();
        return 0.0;
      }
      return v->objective;
    };
    // Richardson-extrapolated central difference over steps h and h / 2 (O(h^4) truncation).
    const double h = 0.1, d1 = (f(h) - f(-h)) / (2 * h), d2 = (f(h / 2) - f(-h / 2)) / h;
    s.grad_numeric = (4 * d2 - d1) / 3;
    ATTNLAB_RETURN_IF_ERROR(failed);
  }
  std::vector<float> previous;  // the last budget's perturbation: where the next one starts
  for (size_t i = 0; i < sz.budgets.size(); ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    BudgetRow row;
    row.budget = sz.budgets[i];
    ATTNLAB_ASSIGN_OR_RETURN(
        MoveResult mv,
        MoveAttention(obj, row.budget, sz.steps, previous.empty() ? nullptr : &previous));
    previous = mv.delta;
    row.opt = mv.value;
    const std::vector<double> dn = WindowNorms(mv.delta, m.windows);
    const std::vector<double> xn = WindowNorms(obj.clean_stream(), m.windows);
    for (int64_t b = 0; b < m.windows; ++b) row.norm += dn[b] / xn[b] / double(m.windows);
    ATTNLAB_ASSIGN_OR_RETURN(row.rnd,
                             obj.Evaluate(RandomLike(mv.delta, m.windows, o.seed * 97 + i), nullptr));
    Progress(o, kName,
             "%s, budget %.3g: attention on key %lld %.3f -> %.3f, KL %.4f, top-1 %.1f%%; random "
             "of the same norm: %.3f, KL %.4f (%.1f s)",
             name.c_str(), row.budget, static_cast<long long>(m.key), s.clean.mass, row.opt.mass,
             row.opt.kl, 100 * row.opt.top1, row.rnd.mass, row.rnd.kl, SecondsSince(t0));
    s.budgets.push_back(row);
  }
  s.imposed = {{"unchanged (explicit path)", ImposedPattern::kNone, {}},
               {"all on the target key", ImposedPattern::kOnTarget, {}},
               {"each row permuted", ImposedPattern::kPermuted, {}},
               {"uniform", ImposedPattern::kUniform, {}}};
  for (ImposedRow& r : s.imposed) {
    ATTNLAB_ASSIGN_OR_RETURN(r.value, obj.EvaluateImposed(r.pattern, o.seed));
    Progress(o, kName, "%s, imposed %s: attention on key %lld %.3f, KL %.4f, top-1 %.1f%%",
             name.c_str(), r.name, static_cast<long long>(m.key), r.value.mass, r.value.kl,
             100 * r.value.top1);
  }
  return Status::Ok();
}

Result<Measured> Measure(const ExperimentOptions& o) {
  Measured m;
  const Sizes sz = SizesFor(o.quick);
  ATTNLAB_ASSIGN_OR_RETURN(m.src, LoadSource(o));
  Gpt& g = *m.src.g;
  const ModelConfig& c = g.config();
  m.T = std::min<int64_t>(sz.window, c.context);
  std::vector<Window> ws = MakeWindows(m.src.ids, m.src.bos, m.T);
  if (static_cast<int64_t>(ws.size()) > sz.windows) ws.resize(sz.windows);
  if (ws.empty()) return Status::InvalidArgument("the text is shorter than one window");
  m.windows = static_cast<int64_t>(ws.size());
  m.steps = sz.steps;
  std::vector<int32_t> x;
  for (const Window& w : ws) x.insert(x.end(), w.x.begin(), w.x.end());
  Progress(o, kName, "model %s (%s): %lld layers x %lld heads; %s: %lld windows of %lld tokens",
           m.src.model.c_str(), m.src.model_kind.c_str(), static_cast<long long>(c.n_layer),
           static_cast<long long>(c.n_head), m.src.text.c_str(),
           static_cast<long long>(m.windows), static_cast<long long>(m.T));
  ATTNLAB_RETURN_IF_ERROR(CheckKeyShareSupported(c, "the attention manipulation"));
  ATTNLAB_RETURN_IF_ERROR(g.Forward(x.data(), nullptr, m.windows, m.T, nullptr));
  m.Tm = g.last_len();
  m.key = m.Tm / 2;
  ATTNLAB_ASSIGN_OR_RETURN(m.heads, HeadStats(g));
  ATTNLAB_ASSIGN_OR_RETURN(Subject studied, ChooseHead(o, m.heads, c));
  m.subjects.push_back(studied);
  Subject sink;
  if (SinkHead(m.heads, studied.head, &sink)) m.subjects.push_back(sink);
  for (Subject& s : m.subjects) {
    Progress(o, kName, "head: %s (%s; alpha_1 %.3f, focus %.3f); target key %lld",
             HeadName(s.head).c_str(), s.role.c_str(), s.head.alpha1, s.head.focus,
             static_cast<long long>(m.key));
    ATTNLAB_RETURN_IF_ERROR(MeasureSubject(o, sz, g, x, m, s));
  }
  return m;
}

bool Finite(const ManipulationValue& v) {
  return std::isfinite(v.mass) && std::isfinite(v.kl) && std::isfinite(v.top1);
}

// The smallest budget whose optimised perturbation meets the steering claim; null: none.
const BudgetRow* Steered(const Subject& s) {
  for (const BudgetRow& b : s.budgets) {
    if (b.opt.mass - s.clean.mass >= kMovedClaim && b.opt.kl <= kKlClaim) return &b;
  }
  return nullptr;
}

Status AddChecks(const Measured& m, ExperimentResult& r) {
  for (const Subject& s : m.subjects) {
    const std::string who = " (" + HeadName(s.head) + ")";
    bool finite = Finite(s.clean);
    for (const BudgetRow& b : s.budgets) finite = finite && Finite(b.opt) && Finite(b.rnd);
    for (const ImposedRow& i : s.imposed) finite = finite && Finite(i.value);
    r.AddCheck("every attention share, KL and agreement is finite" + who, finite, "");
    const double err = std::abs(s.grad_analytic - s.grad_numeric);
    r.AddCheck(
        "the objective's gradient through the model's backward matches central differences" + who,
        err <= kGradientTolerance * std::abs(s.grad_numeric) + 1e-6,
        "directional derivative " + Fmt(s.grad_analytic, "%.6g") + " analytic vs " +
            Fmt(s.grad_numeric, "%.6g") + " (Richardson central difference)");
    bool in_budget = true, not_worse = true;
    std::string norms;
    for (const BudgetRow& b : s.budgets) {
      in_budget = in_budget && b.norm <= b.budget * (1 + 1e-4);
      not_worse = not_worse && b.opt.objective <= s.clean.objective;
      norms += (norms.empty() ? "" : ", ") + Fmt(b.norm, "%.4g") + " <= " + Fmt(b.budget);
    }
    r.AddCheck("every optimised perturbation stays within its budget" + who, in_budget, norms);
    r.AddCheck("the optimiser never ends above the clean objective" + who, not_worse, "");
    const ManipulationValue& none = s.imposed[0].value;
    r.AddCheck("the pattern hook with nothing rewritten reproduces the clean forward" + who,
               none.kl < 1e-6 && std::abs(none.mass - s.clean.mass) < 1e-4 && none.top1 == 1.0,
               "KL " + Fmt(none.kl) + ", share " + Fmt(none.mass, "%.6f") + " vs " +
                   Fmt(s.clean.mass, "%.6f"));
    r.AddCheck("the imposed all-on-target pattern puts all attention on the target" + who,
               std::abs(s.imposed[1].value.mass - 1.0) < 1e-5,
               Fmt(s.imposed[1].value.mass, "%.6f"));
  }
  return Status::Ok();
}

std::string Describe(const ManipulationValue& v, const ManipulationValue& clean) {
  return "share " + Fmt(clean.mass, "%.3f") + " -> " + Fmt(v.mass, "%.3f") + ", KL " +
         Fmt(v.kl, "%.4f") + " nats, top-1 agreement " + Fmt(100 * v.top1, "%.1f") + "%";
}

std::string SteeringMeasured(const Subject& s) {
  const BudgetRow* st = Steered(s);
  const BudgetRow& largest = s.budgets.back();
  return HeadName(s.head) + ", " +
         (st ? "budget " + Fmt(st->budget) + ": " + Describe(st->opt, s.clean)
             : "no budget does; largest (" + Fmt(largest.budget) + "): " +
                   Describe(largest.opt, s.clean));
}

Status AddClaims(const Measured& m, ExperimentResult& r) {
  const Subject& s = m.subjects[0];
  const std::string rule = "at some budget the attention share on the target key rises by >= " +
                           Fmt(kMovedClaim) + " while KL(p_clean || p) <= " + Fmt(kKlClaim) +
                           " nats";
  r.AddClaim("a small input change moves a head's attention without changing the predictions",
             "Jain & Wallace 2019 (arXiv:1902.10186); Serrano & Smith 2019 (arXiv:1906.03731)",
             rule + " (the studied head)", SteeringMeasured(s), Steered(s) != nullptr);
  bool control = true;
  std::string measured;
  for (const BudgetRow& b : s.budgets) {
    const double opt = b.opt.mass - s.clean.mass, rnd = b.rnd.mass - s.clean.mass;
    control = control && rnd < opt / 3;
    measured += (measured.empty() ? "" : "; ") + Fmt(b.budget) + ": " + Fmt(opt, "%+.3f") +
                " vs random " + Fmt(rnd, "%+.3f");
  }
  r.AddClaim("the steering is targeted: a random change of the same norm moves far less",
             "the control of this experiment",
             "at every budget the random perturbation's share change is below a third of the "
             "optimised one's (the studied head)",
             measured, control);
  const ManipulationValue& on = s.imposed[1].value;
  const ManipulationValue& perm = s.imposed[2].value;
  r.AddClaim("imposing a different attention distribution on the head barely changes the "
             "predictions",
             "Jain & Wallace 2019 (arXiv:1902.10186); against: Wiegreffe & Pinter 2019 "
             "(arXiv:1908.04626)",
             "all attention on the target key and a random permutation of each row each keep "
             "KL(p_clean || p) <= " + Fmt(kKlClaim) + " nats (the studied head)",
             "all on the target: KL " + Fmt(on.kl, "%.4f") + ", top-1 " +
                 Fmt(100 * on.top1, "%.1f") + "%; permuted: KL " + Fmt(perm.kl, "%.4f") +
                 ", top-1 " + Fmt(100 * perm.top1, "%.1f") + "%",
             on.kl <= kKlClaim && perm.kl <= kKlClaim);
  if (m.subjects.size() > 1) {
    const Subject& k = m.subjects[1];
    r.AddClaim("a sink head's attention can be moved freely: it is dormant",
               "Guo et al. 2024, \"Active-Dormant Attention Heads\" (arXiv:2410.13835); Gu et "
               "al. 2024 (arXiv:2410.10781)",
               rule + " (the strongest sink head)", SteeringMeasured(k), Steered(k) != nullptr);
  }
  return Status::Ok();
}

nlohmann::json ValueJson(const ManipulationValue& v) {
  return {{"attention_on_target", JsonNumber(v.mass)}, {"kl", JsonNumber(v.kl)},
          {"top1_agreement", JsonNumber(v.top1)}, {"objective", JsonNumber(v.objective)}};
}

nlohmann::json SubjectJson(const Subject& s) {
  nlohmann::json budgets = nlohmann::json::array(), imposed = nlohmann::json::array();
  for (const BudgetRow& b : s.budgets) {
    budgets.push_back({{"budget", b.budget}, {"relative_norm", JsonNumber(b.norm)},
                       {"optimised", ValueJson(b.opt)}, {"random", ValueJson(b.rnd)}});
  }
  for (const ImposedRow& i : s.imposed) {
    nlohmann::json j = ValueJson(i.value);
    j["pattern"] = i.name;
    imposed.push_back(j);
  }
  return {{"role", s.role}, {"layer", s.head.layer}, {"head", s.head.head},
          {"alpha_1", JsonNumber(s.head.alpha1)}, {"focus", JsonNumber(s.head.focus)},
          {"clean", ValueJson(s.clean)},
          {"gradient_check", {{"analytic", JsonNumber(s.grad_analytic)},
                              {"numeric", JsonNumber(s.grad_numeric)}}},
          {"budgets", budgets}, {"imposed", imposed}};
}

Status AddResults(const Measured& m, ExperimentResult& r) {
  nlohmann::json heads = nlohmann::json::array(), subjects = nlohmann::json::array();
  for (const HeadStat& h : m.heads) {
    heads.push_back({{"layer", h.layer}, {"head", h.head}, {"alpha_1", JsonNumber(h.alpha1)},
                     {"focus", JsonNumber(h.focus)}});
  }
  for (const Subject& s : m.subjects) subjects.push_back(SubjectJson(s));
  r.results = {{"model", m.src.model}, {"model_kind", m.src.model_kind}, {"text", m.src.text},
               {"windows", m.windows}, {"window", m.T}, {"positions", m.Tm},
               {"target_key", m.key}, {"kl_weight", kKlWeight}, {"steps", m.steps},
               {"claim_moved", kMovedClaim}, {"claim_kl", kKlClaim}, {"sink_alpha", kSinkAlpha},
               {"subjects", subjects}, {"heads", heads}};
  return Status::Ok();
}

std::string SubjectSentence(const Measured& m, const Subject& s) {
  const BudgetRow* st = Steered(s);
  const BudgetRow& best = st ? *st : s.budgets.back();
  return HeadName(s.head) + " (" + s.role + ", alpha_1 " + Fmt(s.head.alpha1, "%.2f") +
         ") puts " + Fmt(s.clean.mass, "%.3f") + " of its attention on position " +
         std::to_string(m.key) + "; " +
         (st ? "a perturbation of " + Fmt(100 * best.budget) + "% of the embeddings' norm "
                   "raises that to "
             : "within KL " + Fmt(kKlClaim) + " no budget up to " + Fmt(100 * best.budget) +
                   "% of the embeddings' norm moves it past ") +
         Fmt(best.opt.mass, "%.3f") + " (KL " + Fmt(best.opt.kl, "%.4f") + " nats, top-1 " +
         Fmt(100 * best.opt.top1, "%.1f") + "% unchanged; a random change of that norm: " +
         Fmt(best.rnd.mass, "%.3f") + "), and imposing all its attention there costs KL " +
         Fmt(s.imposed[1].value.kl, "%.4f") + " nats.";
}

Status AddSummary(const Measured& m, ExperimentResult& r) {
  r.summary = "On " + m.src.model + ": " + SubjectSentence(m, m.subjects[0]);
  if (m.subjects.size() > 1) r.summary += " For comparison, " + SubjectSentence(m, m.subjects[1]);
  return Status::Ok();
}

Status AddHtml(const Measured& m, ExperimentResult& r) {
  const Subject& s0 = m.subjects[0];
  r.html = report::HtmlReport("Steering attention without steering the output");
  r.html.SetSubtitle(m.src.model + " (" + m.src.model_kind + "); " + m.src.text + ": " +
                     std::to_string(m.windows) + " windows of " + std::to_string(m.T) +
                     " tokens; target position " + std::to_string(m.key));
  for (const Subject& s : m.subjects) {
    const BudgetRow* st = Steered(s);
    r.html.AddSummaryFact(HeadName(s.head) + " (" + s.role + ")",
                          Fmt(s.clean.mass, "%.3f") + " -> " +
                              (st ? Fmt(st->opt.mass, "%.3f") + " at budget " + Fmt(st->budget)
                                  : Fmt(s.budgets.back().opt.mass, "%.3f") + " (not steered)") +
                              " within KL " + Fmt(kKlClaim));
  }
  r.html.AddSummaryFact("imposed all-on-target KL (" + HeadName(s0.head) + ")",
                        Fmt(s0.imposed[1].value.kl, "%.4f") + " nats");

  r.html.AddSection("steering", "Attention moved against the output's change, per budget");
  report::XyPlot moved;
  moved.title = "Attention moved vs KL per budget";
  moved.x.label = "KL(p_clean || p), nats (log)";
  moved.x.scale = report::ScaleType::kLog10;
  moved.y.label = "attention share on the target, change";
  moved.markers = true;
  for (const Subject& s : m.subjects) {
    std::vector<std::vector<std::string>> rows;
    report::Series so{HeadName(s.head) + ", optimised", {}, {}};
    report::Series sr{HeadName(s.head) + ", random", {}, {}};
    for (const BudgetRow& b : s.budgets) {
      rows.push_back({Fmt(b.budget), Fmt(b.norm, "%.4f"), Fmt(b.opt.mass, "%.3f"),
                      Fmt(b.opt.kl, "%.4f"), Fmt(100 * b.opt.top1, "%.1f") + "%",
                      Fmt(b.rnd.mass, "%.3f"), Fmt(b.rnd.kl, "%.4f"),
                      Fmt(100 * b.rnd.top1, "%.1f") + "%"});
      so.x.push_back(std::max(b.opt.kl, 1e-9)), so.y.push_back(b.opt.mass - s.clean.mass);
      sr.x.push_back(std::max(b.rnd.kl, 1e-9)), sr.y.push_back(b.rnd.mass - s.clean.mass);
    }
    moved.series.push_back(so);
    moved.series.push_back(sr);
    r.html.AddHeading(HeadName(s.head) + " (" + s.role + ", alpha_1 " +
                      Fmt(s.head.alpha1, "%.3f") + ", focus " + Fmt(s.head.focus, "%.3f") + ")");
    r.html.AddTable({"budget", "||delta|| / ||x0||", "share (optimised)", "KL", "top-1",
                     "share (random)", "KL", "top-1"},
                    rows,
                    "Share: the head's attention on the target position, mean over the queries "
                    "that see it and the windows (clean " + Fmt(s.clean.mass, "%.3f") +
                        "). KL: mean over every position of KL(p_clean || p) of the next-token "
                        "distributions. top-1: share of positions whose most likely next token "
                        "is unchanged.");
  }
  moved.reference_lines = {{kMovedClaim, "claim: moved >= " + Fmt(kMovedClaim)}};
  std::vector<double> budgets;
  for (const BudgetRow& b : s0.budgets) budgets.push_back(b.budget);
  r.html.AddFigure(report::RenderLinePlot(moved),
                   "Each point is one budget (" + JoinNumbers(budgets, "%.3g", ", ") +
                       " of the embeddings' norm); the steering claim asks for a point above the "
                       "dashed line left of KL " + Fmt(kKlClaim) + ".",
                   "fig-moved-vs-kl");

  r.html.AddSection("imposed", "The converse: the head's attention imposed directly");
  report::BarChart bc;
  bc.title = "Output change when one head's pattern is replaced";
  bc.y.label = "KL(p_clean || p), nats";
  for (const ImposedRow& i : s0.imposed) bc.categories.push_back(i.name);
  std::vector<std::vector<std::string>> irows;
  for (const Subject& s : m.subjects) {
    report::BarSeries d{HeadName(s.head), {}};
    for (const ImposedRow& i : s.imposed) {
      d.values.push_back(i.value.kl);
      irows.push_back({HeadName(s.head), i.name, Fmt(i.value.mass, "%.3f"),
                       Fmt(i.value.kl, "%.4f"), Fmt(100 * i.value.top1, "%.1f") + "%"});
    }
    bc.series.push_back(d);
  }
  bc.reference_lines = {{kKlClaim, "claim bound"}};
  r.html.AddTable({"head", "pattern", "share on the target", "KL", "top-1"}, irows,
                  "The clean input; only this head's probabilities rewritten (its other inputs "
                  "and every other head as computed).");
  r.html.AddFigure(report::RenderBarChart(bc), "The KL column of the table.", "fig-imposed");

  r.html.AddSection("heads", "Candidate heads");
  std::vector<std::vector<std::string>> hrows;
  std::vector<HeadStat> sorted = m.heads;
  std::sort(sorted.begin(), sorted.end(),
            [](const HeadStat& a, const HeadStat& b) { return a.focus > b.focus; });
  for (size_t i = 0; i < sorted.size() && i < 8; ++i) {
    hrows.push_back({std::to_string(sorted[i].layer), std::to_string(sorted[i].head),
                     Fmt(sorted[i].alpha1, "%.3f"), Fmt(sorted[i].focus, "%.3f"),
                     sorted[i].alpha1 >= kSinkAlpha ? "sink" : ""});
  }
  r.html.AddTable({"layer", "head", "alpha_1", "focus", ""}, hrows,
                  "The most focused heads (focus = 1 - mean normalised entropy); sink heads "
                  "(alpha_1 >= 0.3) are not chosen as the studied head.");
  AddSetupSection(r.html, {
      "Perturbation: added to the stream entering layer 0 (blocks.0.hook_resid_pre), every "
      "position of each window, ||delta_b|| <= budget x ||x0_b|| (Frobenius, per window).",
      "Objective: -share + " + Fmt(kKlWeight) + " x max(0, KL - " + Fmt(kKlClaim) +
          ") (KL up to the claim's bound is free), " + std::to_string(m.steps) +
          " projected normalised gradient steps per budget with an adaptive step (x1.5 after a "
          "step that lowers the objective, x0.5 and undone after one that does not; the first "
          "5% of the ball's radius), each budget starting from the previous one's result; "
          "gradients through the model's own backward.",
      "Control: a Gaussian perturbation with the optimised one's per-window norms.",
  });
  return Status::Ok();
}

Result<ExperimentResult> RunManipulate(const ExperimentOptions& o) {
  ATTNLAB_ASSIGN_OR_RETURN(const Measured m, Measure(o));
  return AssembleReport<Measured>(m, {AddChecks, AddClaims, AddResults, AddSummary, AddHtml});
}

}  // namespace

Experiment ManipulateExperiment() {
  Experiment e{kName,
               "steer one head's attention with a small input change that leaves the "
               "predictions alone, and impose attention directly (Jain & Wallace 2019)",
               RunManipulate};
  e.takes_head = true;
  return e;
}

}  // namespace attnlab::experiments
