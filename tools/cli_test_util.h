// Shared by the tests that run the `attnlab` binary as a user runs it: where the binary is, a
// temporary directory, and a run with stdout and stderr captured separately.
#ifndef ATTNLAB_TOOLS_CLI_TEST_UTIL_H_
#define ATTNLAB_TOOLS_CLI_TEST_UTIL_H_

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace attnlab::cli_test {

// $ATTNLAB_BIN (CMake sets it for the test binary), else the `attnlab` next to this executable.
inline std::string CliPath() {
  if (const char* b = std::getenv("ATTNLAB_BIN"); b && *b) return b;
  std::error_code ec;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  return (self.parent_path() / "attnlab").string();
}

// A fresh directory under $TMPDIR (or /tmp), removed with everything in it.
class TempDir {
 public:
  TempDir() {
    const char* base = std::getenv("TMPDIR");
    std::string templ = std::string(base && *base ? base : "/tmp") + "/attnlab_cli_XXXXXX";
    if (::mkdtemp(templ.data()) == nullptr) ADD_FAILURE() << "mkdtemp failed for " << templ;
    path_ = templ;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string File(const std::string& name) const { return path_ + "/" + name; }
  std::vector<std::string> List() const {
    std::vector<std::string> r;
    for (const auto& e : std::filesystem::directory_iterator(path_)) {
      r.push_back(e.path().filename().string());
    }
    std::sort(r.begin(), r.end());
    return r;
  }

 private:
  std::string path_;
};

inline std::string Slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

struct RunResult {
  int code = -1;  // the exit status; 128 + signal if the process was killed
  std::string out, err;
};

// Runs `attnlab <args>` (args as a shell would split them); stdout and stderr are captured in
// files outside any directory the arguments name.
inline RunResult RunCli(const std::string& args) {
  TempDir io;
  const std::string cmd = "'" + CliPath() + "' " + args + " > '" + io.File("stdout") + "' 2> '" +
                          io.File("stderr") + "'";
  const int st = std::system(cmd.c_str());
  RunResult r;
  r.code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
  r.out = Slurp(io.File("stdout"));
  r.err = Slurp(io.File("stderr"));
  return r;
}

}  // namespace attnlab::cli_test

#endif  // ATTNLAB_TOOLS_CLI_TEST_UTIL_H_
