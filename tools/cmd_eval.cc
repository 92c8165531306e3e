// `attnlab eval`: perplexity of a model on a text, over consecutive windows of its context.
//
//   attnlab eval [--model M] [--text FILE] [--max-tokens N] [--window T]
//   mpirun -np P attnlab eval ... [--sequence-parallel]
//
// The text (default: the bundled sample) is tokenised and cut into consecutive windows of the
// model's context (at most --window, default 2048, tokens), each run as its own sequence (starting with BOS when the model was trained that
// way). Every text token is scored exactly once: with BOS, all N of them (the first from BOS alone);
// without, all but the first (N - 1), since nothing predicts it.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <span>
#include <string>
#include <vector>

#include "cli_model.h"
#include "commands.h"
#include "core/resources.h"
#include "dist/comm.h"

namespace attnlab::cli {
namespace {

struct EvalOptions {
  std::string model, tokenizer, text;
  int64_t max_tokens = 0, window = 0;
  bool json = false, sequence_parallel = false;
};

void Run(const EvalOptions& o) {
  std::string path = o.text;
  if (path.empty()) {
    path = FindResource(kSampleTextPath);
    if (path.empty()) throw CommandError("no --text given and the bundled sample text was not found");
  }
  const std::string text = ReadTextInput(path, "");
  CliModel m = LoadCliModel(o.model, o.tokenizer, /*need_tokenizer=*/true);
  Gpt& g = *m.gpt;
  const ModelConfig& c = g.config();
  auto enc = m.tokenizer->Encode(text);
  Check(enc.status());
  std::vector<int32_t> ids = std::move(enc).value();
  if (o.max_tokens > 0 && static_cast<int64_t>(ids.size()) > o.max_tokens) ids.resize(o.max_tokens);
  const bool bos = TrainedWithBos(m);
  // Windows of the model's context, capped (a released model's 32k-128k context would hold a
  // [T, vocab] logit matrix of tens of GB): --window, default min(context, 2048).
  const int64_t T = std::min(c.context, o.window > 0 ? o.window : int64_t{2048});
  const int64_t N = static_cast<int64_t>(ids.size());
  // Window w scores each token exactly once, so windows advance by T in both cases: with BOS,
  // x = [BOS, ids[s .. s+T-2]] (T tokens) predicts y = ids[s .. s+T-1]; without, x = ids[s ..
  // s+T-1] predicts y = ids[s+1 .. s+T]. The next window starts at s + T: with BOS its first
  // target is ids[s+T], which no earlier window scored; without BOS, ids[s+T] (already scored as
  // the last target) is only its first input.
  const int64_t step = T;
  if (N < (bos ? 1 : 2)) {
    throw CommandError(bos ? "the text has no tokens"
                           : "the text has fewer than 2 tokens (nothing predicts the first)");
  }
  const auto t0 = std::chrono::steady_clock::now();
  // Data parallel (`mpirun -np P attnlab eval`, docs/DISTRIBUTED.md): window w runs on rank
  // w mod P. Each window's NLL lands in its own slot (zero on every other rank), the slots are
  // summed over the ranks (x + 0 is exact) and then added in window order, so the result is
  // bit for bit the single-process one.
  // With --sequence-parallel every window is split across the ranks instead (Gpt::
  // set_sequence_parallel: token t of the window on rank t mod P, ring attention); each rank adds
  // its tokens' NLL to the window's slot, so the result equals one process's up to the order of
  // the additions. A window shorter than P runs whole on rank w mod P.
  dist::Comm& comm = dist::World();
  std::vector<double> window_nll;
  int64_t scored = 0;
  std::vector<int32_t> x, y;
  for (int64_t s = 0, w = 0; s < N; s += step, ++w) {
    x.clear();
    y.clear();
    if (bos) {
      x.push_back(*m.tokenizer->bos_id());
      for (int64_t t = s; t < std::min(s + T - 1, N); ++t) x.push_back(ids[t]);
      for (int64_t t = 0; t < static_cast<int64_t>(x.size()); ++t) y.push_back(s + t < N ? ids[s + t] : -1);
    } else {
      for (int64_t t = s; t < std::min(s + T, N); ++t) x.push_back(ids[t]);
      for (int64_t t = 0; t < static_cast<int64_t>(x.size()); ++t) {
        y.push_back(s + t + 1 < N ? ids[s + t + 1] : -1);
      }
    }
    int64_t n = 0;
    for (int32_t v : y) n += v >= 0;
    if (n == 0) break;
    scored += n;
    window_nll.push_back(0.0);
    const int64_t len = static_cast<int64_t>(x.size());
    const int P = comm.size(), r = comm.rank();
    if (o.sequence_parallel && len >= P) {
      std::vector<int32_t> lx, ly;
      for (int64_t t = r; t < len; t += P) lx.push_back(x[t]), ly.push_back(y[t]);
      int64_t mine = 0;
      for (int32_t v : ly) mine += v >= 0;
      g.set_sequence_parallel(&comm, len);
      double loss = 0;
      const Status st = g.Forward(lx.data(), ly.data(), 1, static_cast<int64_t>(lx.size()), &loss);
      g.set_sequence_parallel(nullptr, 0);
      Check(st);
      if (mine > 0) window_nll.back() = loss * mine;
      continue;
    }
    if (w % comm.size() != comm.rank()) continue;
    double loss = 0;
    Check(g.Forward(x.data(), y.data(), 1, len, &loss));
    window_nll.back() = loss * n;
  }
  Check(comm.AllReduceSum(std::span<double>(window_nll), "eval: the windows' losses"));
  double nll = 0;
  for (double v : window_nll) nll += v;
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double mean = nll / scored;
  if (o.json) {
    std::printf("{\"tokens\": %ld, \"loss\": %.6f, \"perplexity\": %.4f, \"seconds\": %.3f}\n",
                static_cast<long>(scored), mean, std::exp(mean), secs);
  } else {
    std::printf("%s on %s: %ld tokens scored, loss %.4f nats/token, perplexity %.3f (%.1f s)\n",
                m.path.c_str(), path.c_str(), static_cast<long>(scored), mean, std::exp(mean), secs);
  }
}

}  // namespace

void RegisterEvalCommand(CLI::App& app) {
  auto o = std::make_shared<EvalOptions>();
  CLI::App* cmd = app.add_subcommand("eval", "Perplexity of a model on a text");
  AddModelOptions(cmd, &o->model, &o->tokenizer);
  cmd->add_option("--text", o->text, "text file (default: the bundled sample)");
  cmd->add_option("--window", o->window,
                  "tokens per window (default: min(the model's context, 2048))")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  cmd->add_option("--max-tokens", o->max_tokens, "use at most the first N tokens of the text (default: all)")
      ->check(CLI::PositiveNumber);
  cmd->add_flag("--json", o->json, "print JSON");
  cmd->add_flag("--sequence-parallel", o->sequence_parallel,
                "under mpirun: split every window across the ranks (ring attention) instead of "
                "giving each rank whole windows");
  cmd->callback([o] { Run(*o); });
}

}  // namespace attnlab::cli
