// The command line (cli_app.h): every command registers itself on one CLI11 app here; errors end
// as one line on stderr and exit code 1 (2 for usage errors).
#include "cli_app.h"

#include <cstdio>
#include <exception>
#include <new>
#include <string>

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
  auto name = [&] {
    return app.get_subcommands().empty() ? std::string("attnlab")
                                         : "attnlab " + app.get_subcommands()[0]->get_name();
  };
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // CLI11 prints the problem (or the help, which is a "success" with code 0); its own exit
    // codes (101-115) are folded into 2, the usage-error code documented above.
    return app.exit(e) == 0 ? 0 : 2;
  } catch (const CommandError& e) {
    std::fprintf(stderr, "%s: error: %s\n", name().c_str(), e.what());
    return 1;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr,
                 "%s: error: out of memory: an allocation failed (sizes too large for this "
                 "machine's memory? try smaller sizes)\n",
                 name().c_str());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: error: %s\n", name().c_str(), e.what());
    return 1;
  }
  return 0;
}

}  // namespace attnlab::cli
