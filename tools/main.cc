// attnlab: the command-line front end. Each command lives in its own cmd_*.cc and registers a
// CLI11 subcommand; errors end as one line on stderr and exit code 1 (2 for usage errors).
#include <cstdio>
#include <exception>

#include "attnlab/thread_pool.h"
#include "commands.h"

int main(int argc, char** argv) {
  CLI::App app{"attnlab: a laboratory for transformer attention (sinks, collapse, limits)"};
  app.require_subcommand(1);
  int threads = 0;
  app.add_option("--threads", threads, "worker threads (default: ATTNLAB_NUM_THREADS or all cores)")
      ->check(CLI::Range(1, 1024));
  app.parse_complete_callback([&] {
    if (threads > 0) attnlab::SetDefaultThreadCount(threads);
  });
  attnlab::cli::RegisterAttentionCommand(app);
  attnlab::cli::RegisterMemoryCommand(app);
  attnlab::cli::RegisterBenchCommand(app);
  attnlab::cli::RegisterBenchModelCommand(app);
  attnlab::cli::RegisterTokenizeCommand(app);
  attnlab::cli::RegisterPrepareCommand(app);
  attnlab::cli::RegisterTrainCommand(app);
  attnlab::cli::RegisterGenerateCommand(app);
  attnlab::cli::RegisterEvalCommand(app);
  attnlab::cli::RegisterLogitsCommand(app);
  attnlab::cli::RegisterReportDemoCommand(app);
  attnlab::cli::RegisterStreamCommand(app);
  attnlab::cli::RegisterAnalyzeCommand(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const attnlab::cli::CommandError& e) {
    const std::string name =
        app.get_subcommands().empty() ? "attnlab" : "attnlab " + app.get_subcommands()[0]->get_name();
    std::fprintf(stderr, "%s: error: %s\n", name.c_str(), e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "attnlab: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
