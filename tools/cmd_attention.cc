#include "commands.h"

namespace attnlab::cli {

void RegisterAttentionCommand(CLI::App& app) {
  app.add_subcommand("attention", "(not yet available)");
}

}  // namespace attnlab::cli
