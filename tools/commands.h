// Every `attnlab <command>` registers itself on the CLI11 app here; main.cc calls them in order.
// A command's callback throws CommandError (or returns a non-OK Status through
// ExitWithStatus) so main can print one clear message and exit non-zero.
#ifndef ATTNLAB_TOOLS_COMMANDS_H_
#define ATTNLAB_TOOLS_COMMANDS_H_

#include <CLI/CLI.hpp>
#include <stdexcept>
#include <string>

#include "attnlab/status.h"

namespace attnlab::cli {

// The conventions every command follows (docs/CLI.md): exit 0 on success; 1 when the command ran
// and failed (bad input file, impossible sizes, I/O); 2 when the command line itself is wrong
// (unknown command or option, missing required option, malformed or out-of-range value).

// Thrown by a command to stop with "attnlab <command>: error: <message>" and exit code 1.
class CommandError : public std::runtime_error {
 public:
  explicit CommandError(const std::string& msg) : std::runtime_error(msg) {}
};

// Thrown by a command whose options are wrong in a way CLI11 cannot check (a combination, a
// value out of range): "attnlab <command>: usage error: <message>" and exit code 2.
class UsageError : public std::runtime_error {
 public:
  explicit UsageError(const std::string& msg) : std::runtime_error(msg) {}
};

// Throws CommandError with the status' text if it is not OK.
inline void Check(const Status& st, const std::string& context = "") {
  if (!st.ok()) throw CommandError(context.empty() ? st.ToString() : context + ": " + st.ToString());
}

// --model and --tokenizer as every model-running command takes them (docs/CLI.md), one help text.
inline void AddModelOptions(CLI::App* cmd, std::string* model, std::string* tokenizer) {
  cmd->add_option("--model", *model,
                  "checkpoint dir, GPT-2 safetensors, or llm.c .bin (default: embedded)");
  cmd->add_option("--tokenizer", *tokenizer,
                  "override: byte, gpt2, gpt2:<dir>, a directory or a vocabulary file");
}

void RegisterAttentionCommand(CLI::App& app);  // cmd_attention.cc
void RegisterMemoryCommand(CLI::App& app);     // cmd_memory.cc
void RegisterBenchCommand(CLI::App& app);      // cmd_bench.cc
void RegisterBenchModelCommand(CLI::App& app); // cmd_bench_model.cc (after RegisterBenchCommand)
void RegisterBenchDecodeCommand(CLI::App& app); // cmd_bench_decode.cc (after RegisterBenchCommand)
void RegisterBenchSuiteCommand(CLI::App& app);  // cmd_bench_suite.cc (after RegisterBenchCommand)
void RegisterTokenizeCommand(CLI::App& app);   // cmd_tokenize.cc
void RegisterPrepareCommand(CLI::App& app);    // cmd_prepare.cc
void RegisterTrainCommand(CLI::App& app);      // cmd_train.cc
void RegisterGenerateCommand(CLI::App& app);   // cmd_generate.cc
void RegisterEvalCommand(CLI::App& app);       // cmd_eval.cc
void RegisterLogitsCommand(CLI::App& app);     // cmd_logits.cc
void RegisterReportDemoCommand(CLI::App& app);  // cmd_report_demo.cc (hidden)
void RegisterStreamCommand(CLI::App& app);     // cmd_stream.cc
void RegisterAnalyzeCommand(CLI::App& app);    // cmd_analyze.cc
void RegisterExperimentCommand(CLI::App& app); // cmd_experiment.cc

}  // namespace attnlab::cli

#endif  // ATTNLAB_TOOLS_COMMANDS_H_
