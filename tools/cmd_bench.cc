#include "commands.h"

namespace attnlab::cli {

void RegisterBenchCommand(CLI::App& app) {
  app.add_subcommand("bench", "(not yet available)");
}

}  // namespace attnlab::cli
