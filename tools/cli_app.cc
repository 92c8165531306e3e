// The command line (cli_app.h): every command registers itself on one CLI11 app here; errors end
// as one line on stderr and exit code 1 (2 for usage errors).
#include "cli_app.h"

#include <cstdio>
#include <exception>

#include "attnlab/thread_pool.h"
#include "commands.h"

namespace attnlab::cli {

int RunCli(int argc, char** argv) {
  CLI::App app{"attnlab: a laboratory for transformer attention (sinks, collapse, limits)"};
  app.require_subcommand(1);
  int threads = 0;
  app.add_option("--threads", threads, "worker threads (default: ATTNLAB_NUM_THREADS or all cores)")
      ->check(CLI::Range(1, 1024));
  app.parse_complete_callback([&] {
    if (threads > 0) attnlab::SetDefaultThreadCount(threads);
  });
  RegisterAttentionCommand(app);
  RegisterMemoryCommand(app);
  RegisterBenchCommand(app);
  RegisterBenchModelCommand(app);
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
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const CommandError& e) {
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

}  // namespace attnlab::cli
