// The command line (cli_app.h): every command registers itself on one CLI11 app here. The front
// door: `attnlab` alone or `--help` lists the commands by topic, a misspelt command gets
// suggestions, `--version` names the commit and the SIMD target, and `--threads` is accepted
// before or after any command. Exit codes and conventions: docs/CLI.md.
#include "cli_app.h"

#include <algorithm>
#include <cstdio>
#include <exception>
#include <functional>
#include <map>
#include <new>
#include <string>
#include <vector>

#include "attnlab/matmul_precision.h"
#include "attnlab/simd_target.h"
#include "attnlab/thread_pool.h"
#include "build_info.h"
#include "commands.h"
#include "dist/comm.h"

namespace attnlab::cli {
namespace {

// The overview's topics, in order; every registered command must be in one (cli_test checks).
const std::vector<std::pair<std::string, std::vector<std::string>>>& Topics() {
  static const std::vector<std::pair<std::string, std::vector<std::string>>> t = {
      {"Diagnostics", {"analyze"}},
      {"Streaming", {"stream", "generate"}},
      {"Experiments", {"experiment"}},
      {"The attention engine", {"attention", "memory", "bench"}},
      {"Data, training, inference", {"prepare", "tokenize", "train", "eval", "logits"}},
  };
  return t;
}

std::string VersionString() {
  std::string available;
  for (SimdTarget t : AvailableSimdTargets()) {
    available += (available.empty() ? "" : ", ") + std::string(SimdTargetName(t));
  }
  return "attnlab " + BuildVersion() + " (commit " + BuildCommit() + "; SIMD: kernels " +
         KernelSimd() + ", available " + available + "; baseline compiled for " + CompiledSimd() +
         "; this CPU has " + CpuSimd() + "; distributed: " +
         (dist::BuiltWithMpi() ? "MPI" : "no, built without MPI") +
         "; products with BF16 weights: " + WeightMatmulDescription() + ")";
}

// Edit distance, for "did you mean".
size_t Distance(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] != b[j - 1])});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

std::vector<std::string> Suggestions(const std::string& word, const std::vector<std::string>& names) {
  std::vector<std::pair<size_t, std::string>> scored;
  for (const std::string& n : names) {
    const size_t d = Distance(word, n);
    const bool prefix = word.size() >= 2 && n.compare(0, word.size(), word) == 0;
    if (prefix || d <= std::max<size_t>(1, n.size() / 3)) scored.push_back({prefix ? 0 : d, n});
  }
  std::sort(scored.begin(), scored.end());
  std::vector<std::string> out;
  for (auto& [d, n] : scored) out.push_back(n);
  return out;
}

std::vector<std::string> VisibleCommands(const CLI::App& app) {
  std::vector<std::string> out;
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App* s) { return !s->get_group().empty(); })) {
    out.push_back(sub->get_name());
  }
  return out;
}

std::string Overview(const CLI::App& app) {
  std::string s =
      "attnlab: a laboratory for transformer attention: where are a model's attention sinks, is its\n"
      "attention collapsing with depth, what do long contexts cost.\n\n"
      "usage: attnlab [--threads N] <command> [options]     (attnlab <command> --help for its options)\n";
  std::map<std::string, std::string> desc;
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
    desc[sub->get_name()] = sub->get_description();
  }
  for (const auto& [topic, names] : Topics()) {
    s += "\n" + topic + ":\n";
    for (const std::string& n : names) {
      char line[256];
      std::snprintf(line, sizeof line, "  %-11s %s\n", n.c_str(), desc.count(n) ? desc[n].c_str() : "");
      s += line;
    }
  }
  s +=
      "\nGlobal options:\n"
      "  --threads N  worker threads (default: $ATTNLAB_NUM_THREADS or every core), before or after the command\n"
      "  --simd T     kernels' SIMD target: baseline, avx2, avx512 (default: the CPU's best; $ATTNLAB_SIMD)\n"
      "  --matmul P   products with BF16 weights: auto, fp32, bf16 (default auto: bf16 where the CPU\n"
      "               multiplies bf16 natively; $ATTNLAB_MATMUL)\n"
      "  --version    version, git commit and SIMD target\n"
      "  --help       this overview\n"
      "\nConventions (exit codes, --out, --text, --json): docs/CLI.md. With no --model, commands use the\n"
      "embedded default model; with no --text, the bundled sample text.\n";
  return s;
}

// Global options that take a value (so that their value is not mistaken for a command).
bool TakesValue(const std::string& arg) {
  return arg == "--threads" || arg == "--simd" || arg == "--matmul";
}

}  // namespace

std::vector<std::string> OverviewTopicCommands() {
  std::vector<std::string> out;
  for (const auto& [topic, names] : Topics()) out.insert(out.end(), names.begin(), names.end());
  return out;
}

int RunCli(int argc, char** argv, std::string* error_line) {
  CLI::App app{"attnlab: a laboratory for transformer attention (sinks, collapse, limits)"};
  app.require_subcommand(1);
  // Inherited by every subcommand registered below: options a subcommand does not know (the
  // global --threads) go to the parent, so `attnlab eval --threads 2` works like
  // `attnlab --threads 2 eval`.
  app.fallthrough();
  int threads = 0;
  app.add_option("--threads", threads, "worker threads (default: ATTNLAB_NUM_THREADS or all cores)")
      ->check(CLI::Range(1, 1024));
  std::string simd;
  app.add_option("--simd", simd,
                 "SIMD target of the kernels: baseline, avx2 or avx512 (default: the best this CPU "
                 "runs, or $ATTNLAB_SIMD)")
      ->check(CLI::Validator(
          [](std::string& v) -> std::string {
            Result<SimdTarget> t = ParseSimdTarget(v);
            if (!t.ok()) return t.status().message();
            if (!SimdTargetAvailable(*t)) {
              return "SIMD target " + v + " is not supported by this CPU or build";
            }
            return "";
          },
          "TARGET"));
  std::string matmul;
  app.add_option("--matmul", matmul,
                 "products with BF16 weights: auto (bf16 where the CPU multiplies bf16 natively), "
                 "fp32 or bf16 (default: auto, or $ATTNLAB_MATMUL)")
      ->check(CLI::Validator(
          [](std::string& v) -> std::string {
            Result<WeightMatmul> m = ParseWeightMatmul(v);
            if (!m.ok()) return m.status().message();
            if (*m == WeightMatmul::kBf16) {
              ScopedWeightMatmul probe(*m);
              if (!probe.status().ok()) return probe.status().message();
            }
            return "";
          },
          "PRECISION"));
  app.parse_complete_callback([&] {
    if (!matmul.empty()) {
      Result<WeightMatmul> m = ParseWeightMatmul(matmul);
      if (m.ok()) (void)SetWeightMatmul(*m);  // validated above
    }
    if (threads > 0) attnlab::SetDefaultThreadCount(threads);
    if (!simd.empty()) {
      Result<SimdTarget> t = ParseSimdTarget(simd);
      if (t.ok()) (void)SetSimdTarget(*t);  // validated above
    }
  });
  RegisterAttentionCommand(app);
  RegisterMemoryCommand(app);
  RegisterBenchCommand(app);
  RegisterBenchModelCommand(app);
  RegisterBenchDecodeCommand(app);
  RegisterBenchSuiteCommand(app);
  RegisterTokenizeCommand(app);
  RegisterPrepareCommand(app);
  RegisterTrainCommand(app);
  RegisterGenerateCommand(app);
  RegisterEvalCommand(app);
  RegisterLogitsCommand(app);
  RegisterReportDemoCommand(app);
  RegisterStreamCommand(app);
  RegisterAnalyzeCommand(app);
  RegisterExperimentCommand(app);
  // After the commands (they copy the parent's help flag when created): the top level's --help
  // is the overview by topic below; each command keeps CLI11's --help.
  app.set_help_flag();
  app.set_version_flag("--version", std::function<std::string()>(VersionString),
                       "version, git commit, SIMD target and BF16 products");

  // The front door, before CLI11: find the command word (skipping global options).
  std::string command;
  bool help = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h" || a == "help") {
      help = true;
      break;
    }
    if (TakesValue(a)) {
      ++i;
      continue;
    }
    if (a.rfind("-", 0) == 0) continue;
    command = a;
    break;
  }
  if (help) {
    std::fputs(Overview(app).c_str(), stdout);
    return 0;
  }
  bool is_version = false;
  for (int i = 1; i < argc && command.empty(); ++i) is_version |= std::string(argv[i]) == "--version";
  if (command.empty() && !is_version) {
    bool bad_option = false;
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      if (TakesValue(a)) ++i;
      else if (a.rfind("--threads=", 0) != 0 && a.rfind("--simd=", 0) != 0 &&
               a.rfind("--matmul=", 0) != 0) {
        bad_option = true;
      }
    }
    if (!bad_option) {
      std::fputs(Overview(app).c_str(), stderr);
      std::fprintf(stderr, "\nattnlab: usage error: name a command (see the list above)\n");
      if (error_line) *error_line = "attnlab: usage error: name a command";
      return 2;
    }
  }
  if (!command.empty()) {
    const std::vector<std::string> names = VisibleCommands(app);
    bool known = false;
    for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
      known |= sub->check_name(command);
    }
    if (!known) {
      std::string msg = "attnlab: usage error: unknown command '" + command + "'";
      const std::vector<std::string> s = Suggestions(command, names);
      if (!s.empty()) {
        msg += "; did you mean ";
        for (size_t i = 0; i < s.size() && i < 3; ++i) msg += (i ? " or " : "") + s[i];
        msg += "?";
      }
      std::fprintf(stderr, "%s\nrun `attnlab --help` for the list of commands\n", msg.c_str());
      if (error_line) *error_line = msg;
      return 2;
    }
  }

  auto name = [&] {
    return app.get_subcommands().empty() ? std::string("attnlab")
                                         : "attnlab " + app.get_subcommands()[0]->get_name();
  };
  // Every failure is one line on stderr (and in *error_line for in-process callers).
  auto fail = [&](int code, const std::string& line) {
    std::fprintf(stderr, "%s\n", line.c_str());
    if (error_line) *error_line = line;
    return code;
  };
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version are CLI11 "errors" with code 0: it prints them. Every other parse
    // error (CLI11's codes 101-115) is a usage error: one line, exit 2 (docs/CLI.md).
    if (e.get_exit_code() == 0) return app.exit(e);
    return fail(2, name() + ": usage error: " + e.what() + " (run `" + name() +
                       " --help` for the options)");
  } catch (const UsageError& e) {
    return fail(2, name() + ": usage error: " + e.what());
  } catch (const CommandError& e) {
    return fail(1, name() + ": error: " + e.what());
  } catch (const std::bad_alloc&) {
    return fail(1, name() + ": error: out of memory: an allocation failed (sizes too large for "
                            "this machine's memory? try smaller sizes)");
  } catch (const std::exception& e) {
    return fail(1, name() + ": error: " + e.what());
  }
  return 0;
}

}  // namespace attnlab::cli
