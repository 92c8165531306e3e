// The whole `attnlab` command line as a function, so that it can run in-process: main.cc calls
// it, and so does the CLI fuzz target (fuzz/cli_fuzzer.cc) on fuzzed argument vectors.
#ifndef ATTNLAB_TOOLS_CLI_APP_H_
#define ATTNLAB_TOOLS_CLI_APP_H_

#include <string>
#include <vector>

namespace attnlab::cli {

// Parses argv and runs the command. Returns the process exit code: 0 on success, 1 for an error
// (one "attnlab <command>: error: ..." line on stderr), CLI11's code (usually 2 or 106...) for a
// usage error, 0 for --help. Never calls exit(); every exception is caught.
// error_line (optional): receives that error line too (the Python API raises it).
int RunCli(int argc, char** argv, std::string* error_line = nullptr);

// The commands the overview (`attnlab --help`) lists, by topic order (for the test that every
// registered command is listed).
std::vector<std::string> OverviewTopicCommands();

}  // namespace attnlab::cli

#endif  // ATTNLAB_TOOLS_CLI_APP_H_
