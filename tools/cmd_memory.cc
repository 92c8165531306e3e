#include "commands.h"

namespace attnlab::cli {

void RegisterMemoryCommand(CLI::App& app) {
  app.add_subcommand("memory", "(not yet available)");
}

}  // namespace attnlab::cli
