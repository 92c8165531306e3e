// attnlab._attnlab.run_cli: the whole command line in-process (tools/cli_app.h), for the lab's
// Python functions (attnlab.analyze, stream, generate, experiment in python/attnlab/lab.py).
// What the command prints on stdout (its --json result) is captured and returned; stderr
// (progress, notes) stays the process's, so long work still shows progress.
#include <pybind11/stl.h>
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <tuple>
#include <vector>

#include "bindings.h"
#include "cli_app.h"

namespace attnlab::python {
namespace {

std::mutex cli_mu;  // one command at a time: fd 1 is redirected while it runs

// Runs attnlab with args (no program name); returns (exit code, stdout text, error line).
std::tuple<int, std::string, std::string> RunCliCaptured(const std::vector<std::string>& args) {
  std::vector<std::string> storage;
  storage.reserve(args.size() + 1);
  storage.push_back("attnlab");
  storage.insert(storage.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& s : storage) argv.push_back(s.data());
  argv.push_back(nullptr);
  ThrowIfInsideKernelLock("a command");
  int code = 0;
  std::string out, error;
  {
    py::gil_scoped_release release;
    // Exclusive: a command may replace the thread pool (--threads) and runs kernels itself.
    std::unique_lock<std::shared_mutex> pool(PoolMutex());
    std::lock_guard<std::mutex> lock(cli_mu);
    std::cout.flush();
    std::fflush(stdout);
    FILE* tmp = std::tmpfile();
    const int saved = tmp ? dup(1) : -1;
    if (saved < 0 || dup2(fileno(tmp), 1) < 0) {
      if (tmp) std::fclose(tmp);
      if (saved >= 0) close(saved);
      error = "attnlab: error: could not capture the command's output (temporary file)";
      code = 1;
    } else {
      code = cli::RunCli(static_cast<int>(storage.size()), argv.data(), &error);
      std::cout.flush();
      std::fflush(stdout);
      dup2(saved, 1);
      close(saved);
      std::rewind(tmp);
      char buf[65536];
      size_t n;
      while ((n = std::fread(buf, 1, sizeof(buf), tmp)) > 0) out.append(buf, n);
      std::fclose(tmp);
    }
  }
  return {code, out, error};
}

}  // namespace

void BindLab(py::module_& m) {
  m.def("run_cli", &RunCliCaptured, py::arg("args"),
        "Runs `attnlab ARGS...` in-process: (exit code, stdout, error line).");
}

}  // namespace attnlab::python
