// `attnlab experiment`: run one of the reproducible experiments (src/experiments/experiment.h).
//
//   attnlab [--threads N] experiment <name> [--quick] [--seed S] [--out DIR] [--data DIR]
//                                           [--layer L --head H]  (manipulate)
//   attnlab experiment --list
//
// Writes DIR/report.json and DIR/report.html (DIR defaults to experiments/<name>), prints the
// summary, and exits 1 when one of the experiment's invariant checks fails (--quick is the CI
// size). Progress goes to stderr.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "attnlab/thread_pool.h"
#include "commands.h"
#include "experiments/experiment.h"

namespace attnlab::cli {
namespace {

struct ExperimentFlags {
  std::string name, out, data;
  bool quick = false, list = false, json = false;
  uint64_t seed = 1;
  int64_t layer = -1, head = -1;
};

void List(bool json = false) {
  if (json) {
    nlohmann::ordered_json j = nlohmann::json::array();
    for (const experiments::Experiment& e : experiments::AllExperiments()) {
      j.push_back({{"name", e.name}, {"description", e.description}});
    }
    std::printf("%s\n", j.dump(2).c_str());
    return;
  }
  std::printf("experiments (attnlab experiment <name> [--quick]):\n");
  for (const experiments::Experiment& e : experiments::AllExperiments()) {
    std::printf("  %-20s %s\n", e.name.c_str(), e.description.c_str());
  }
}

void Run(const ExperimentFlags& f) {
  if (f.list || f.name.empty()) {
    List(f.json && f.list);
    if (f.name.empty() && !f.list) throw UsageError("name an experiment (see the list above)");
    return;
  }
  const experiments::Experiment* e = experiments::FindExperiment(f.name);
  if (!e) {
    List();
    throw UsageError("unknown experiment '" + f.name + "' (see the list above)");
  }
  if ((f.layer >= 0 || f.head >= 0) && !e->takes_head) {
    throw UsageError("--layer and --head are for experiments that study one head (manipulate), "
                     "not " + e->name);
  }
  experiments::ExperimentOptions o;
  o.layer = f.layer;
  o.head = f.head;
  o.quick = f.quick;
  o.seed = f.seed;
  o.data = f.data;
  o.out_dir = f.out.empty() ? "experiments/" + e->name : f.out;
  // The outermost directory this run creates: a run that fails before its report removes it, so
  // a bad input leaves nothing behind (docs/BAD_INPUTS.md).
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path created;
  for (fs::path p = fs::path(o.out_dir).lexically_normal(); !p.empty() && !fs::exists(p, ec);
       p = p.parent_path()) {
    created = p;
    if (p == p.parent_path()) break;
  }
  fs::create_directories(o.out_dir, ec);
  if (ec) throw CommandError("cannot create " + o.out_dir + ": " + ec.message());
  const auto t0 = std::chrono::steady_clock::now();
  auto result = e->run(o);
  if (!result.ok() && !created.empty()) fs::remove_all(created, ec);
  Check(result.status(), e->name);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  experiments::ExperimentResult& r = result.value();
  Check(experiments::WriteExperimentReport(*e, o, r, secs), "writing the report");
  int failed = 0;
  for (const experiments::Check& c : r.checks) failed += !c.passed;
  if (f.json) {
    nlohmann::ordered_json j;
    j["experiment"] = e->name;
    j["report"] = o.out_dir + "/report.html";
    j["report_json"] = o.out_dir + "/report.json";
    j["seconds"] = secs;
    j["threads"] = DefaultThreadCount();
    j["summary"] = r.summary;
    j["checks"] = nlohmann::json::array();
    for (const experiments::Check& c : r.checks) {
      j["checks"].push_back({{"name", c.name}, {"passed", c.passed}, {"detail", c.detail}});
    }
    j["claims"] = nlohmann::json::array();
    for (const experiments::Claim& c : r.claims) {
      j["claims"].push_back({{"name", c.name}, {"source", c.source}, {"expected", c.expected},
                             {"measured", c.measured}, {"holds", c.holds}});
    }
    std::printf("%s\n", j.dump(2).c_str());
  }
  if (failed > 0 && f.json) {
    throw CommandError(std::to_string(failed) + " invariant check(s) failed (see " + o.out_dir +
                       "/report.json)");
  }
  if (f.json) return;
  failed = 0;
  std::printf("%s\n\n", r.summary.c_str());
  for (const experiments::Check& c : r.checks) {
    if (!c.passed) {
      ++failed;
      std::printf("FAILED check: %s (%s)\n", c.name.c_str(), c.detail.c_str());
    }
  }
  for (const experiments::Claim& c : r.claims) {
    std::printf("claim %-13s %s [%s]: %s\n", c.holds ? "holds:" : "DOES NOT hold:", c.name.c_str(),
                c.source.c_str(), c.measured.c_str());
  }
  std::printf("%zu/%zu checks passed in %.1f s on %d threads; report: %s/report.html\n",
              r.checks.size() - failed, r.checks.size(), secs, DefaultThreadCount(),
              o.out_dir.c_str());
  if (failed > 0) {
    throw CommandError(std::to_string(failed) + " invariant check(s) failed (see " + o.out_dir +
                       "/report.json)");
  }
}

}  // namespace

void RegisterExperimentCommand(CLI::App& app) {
  auto f = std::make_shared<ExperimentFlags>();
  CLI::App* cmd = app.add_subcommand(
      "experiment", "Reproducible experiments on attention collapse and sinks, with reports");
  cmd->add_option("name", f->name, "the experiment (--list shows them)");
  cmd->add_flag("--list", f->list, "list the experiments");
  cmd->add_flag("--quick", f->quick, "the small CI size (seconds)");
  cmd->add_option("--seed", f->seed, "seed of every random choice (1)");
  cmd->add_flag("--json", f->json, "print the checks and claims as JSON (the report is written too)");
  cmd->add_option("--out", f->out, "report directory (experiments/<name>)");
  cmd->add_option("--data", f->data,
                  "input of the experiment: a data directory (attnlab prepare) for the training "
                  "experiments, a model directory for heads");
  cmd->add_option("--layer", f->layer,
                  "manipulate: the layer of the head to steer (with --head; default: the most "
                  "focused non-sink head)")->check(CLI::NonNegativeNumber);
  cmd->add_option("--head", f->head, "manipulate: the head to steer (with --layer)")
      ->check(CLI::NonNegativeNumber);
  cmd->callback([f] { Run(*f); });
}

}  // namespace attnlab::cli
