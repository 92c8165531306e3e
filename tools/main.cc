// attnlab: the command-line front end. Each command lives in its own cmd_*.cc and registers a
// CLI11 subcommand in cli_app.cc (RunCli), which main() only calls.
#include "cli_app.h"

int main(int argc, char** argv) { return attnlab::cli::RunCli(argc, argv); }
