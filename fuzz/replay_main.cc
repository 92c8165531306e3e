// The replay driver: runs files through the fuzz targets without libFuzzer, so that every build
// (gcc or clang, with or without sanitizers) checks the committed corpora. Usage:
//   attnlab_fuzz_replay --list                    the target names
//   attnlab_fuzz_replay TARGET FILE|DIR...        those inputs through one target
//   attnlab_fuzz_replay --all CORPUS_ROOT         every file under CORPUS_ROOT (all targets'
//                                                 corpora) through every target; each target
//                                                 must have a non-empty CORPUS_ROOT/<target>/
// A crash or sanitizer report ends the run (the input being replayed is printed first); exit 0
// means every input was handled.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <string>
#include <vector>

#include "fuzz_target.h"

namespace fs = std::filesystem;
using attnlab::fuzz::Registry;
using attnlab::fuzz::Target;

namespace {

std::vector<fs::path> Files(const fs::path& p) {
  std::vector<fs::path> out;
  if (fs::is_directory(p)) {
    for (const auto& e : fs::recursive_directory_iterator(p)) {
      if (e.is_regular_file()) out.push_back(fs::absolute(e.path()));
    }
  } else if (fs::is_regular_file(p)) {
    out.push_back(fs::absolute(p));
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::string Slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void RunOne(const Target& t, const fs::path& file) {
  const std::string bytes = Slurp(file);
  std::fprintf(stderr, "replay %s < %s\n", t.name, file.c_str());
  std::vector<uint8_t> copy(bytes.begin(), bytes.end());  // exact size: overreads are caught
  t.fn(copy.data(), copy.size());
}

const Target* Find(const std::string& name) {
  for (const Target& t : Registry()) {
    if (name == t.name) return &t;
  }
  return nullptr;
}

}  // namespace

int main(int argc, char** argv) {
  std::sort(Registry().begin(), Registry().end(),
            [](const Target& a, const Target& b) { return std::strcmp(a.name, b.name) < 0; });
  if (argc == 2 && std::strcmp(argv[1], "--list") == 0) {
    for (const Target& t : Registry()) std::printf("%s\n", t.name);
    return 0;
  }
  if (argc == 3 && std::strcmp(argv[1], "--all") == 0) {
    const fs::path root = fs::absolute(argv[2]);
    std::vector<fs::path> all;
    for (const Target& t : Registry()) {
      const std::vector<fs::path> mine = Files(root / t.name);
      if (mine.empty()) {
        std::fprintf(stderr, "no corpus for target %s under %s\n", t.name, root.c_str());
        return 1;
      }
      all.insert(all.end(), mine.begin(), mine.end());
    }
    for (const Target& t : Registry()) {
      for (const fs::path& f : all) RunOne(t, f);
    }
    std::printf("replayed %zu corpus files through each of %zu targets: no crash\n", all.size(),
                Registry().size());
    return 0;
  }
  if (argc >= 3) {
    const Target* t = Find(argv[1]);
    if (t == nullptr) {
      std::fprintf(stderr, "unknown target '%s' (see --list)\n", argv[1]);
      return 1;
    }
    size_t n = 0;
    for (int i = 2; i < argc; ++i) {
      for (const fs::path& f : Files(argv[i])) {
        RunOne(*t, f);
        ++n;
      }
    }
    std::printf("replayed %zu files through %s: no crash\n", n, t->name);
    return 0;
  }
  std::fprintf(stderr,
               "usage: %s --list | TARGET FILE|DIR... | --all CORPUS_ROOT\n", argv[0]);
  return 2;
}
