// attnlab: the command-line front end. Each command lives in its own cmd_*.cc and registers a
// CLI11 subcommand in cli_app.cc (RunCli), which main() only calls.
//
// Under an MPI launcher (`mpirun -np P attnlab ...`, issue 36) main() first joins the job
// (dist/comm.h) and gives each rank its share of the machine's cores as the default thread
// count; a command that fails on any rank ends the whole job (AbortWorld), so no rank is left
// waiting for a peer that has stopped. Only rank 0 prints: the other ranks' stdout and stderr go
// to /dev/null (their error line, if any, still reaches the terminal, prefixed with the rank),
// unless ATTNLAB_DIST_VERBOSE=1.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fcntl.h>
#include <string>
#include <unistd.h>
#include <thread>

#include "attnlab/thread_pool.h"
#include "cli_app.h"
#include "dist/comm.h"

int main(int argc, char** argv) {
  namespace dist = attnlab::dist;
  const attnlab::Status st = dist::InitWorld(&argc, &argv);
  if (!st.ok()) {
    std::fprintf(stderr, "attnlab: error: %s\n", st.message().c_str());
    return 1;
  }
  dist::Comm& world = dist::World();
  if (world.distributed() && !std::getenv("ATTNLAB_NUM_THREADS")) {
    const unsigned hw = std::thread::hardware_concurrency();
    attnlab::SetDefaultThreadCount(
        std::max(1, static_cast<int>(hw == 0 ? 1 : hw) / world.local_size()));
  }
  int err_fd = 2;
  const char* verbose = std::getenv("ATTNLAB_DIST_VERBOSE");
  if (world.distributed() && !world.root() && !(verbose && std::string(verbose) == "1")) {
    err_fd = dup(2);
    const int null_fd = open("/dev/null", O_WRONLY);
    if (err_fd >= 0 && null_fd >= 0) {
      std::fflush(stdout);
      std::fflush(stderr);
      dup2(null_fd, 1);
      dup2(null_fd, 2);
      close(null_fd);
    } else {
      err_fd = 2;
    }
  }
  std::string error_line;
  const int code = attnlab::cli::RunCli(argc, argv, &error_line);
  if (world.distributed()) {
    if (code != 0) {
      std::fflush(stdout);
      std::fflush(stderr);
      if (err_fd != 2 && !error_line.empty()) {
        dprintf(err_fd, "rank %d: %s\n", world.rank(), error_line.c_str());
      }
      dprintf(err_fd, "attnlab: rank %d of %d failed (exit %d): ending every rank\n",
              world.rank(), world.size(), code);
      dist::AbortWorld(code);
    }
    dist::FinalizeWorld();
  }
  return code;
}
