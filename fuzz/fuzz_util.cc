// Helpers shared by the fuzz targets (fuzz_target.h).
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "fuzz_target.h"

namespace attnlab::fuzz {

namespace fs = std::filesystem;

std::vector<Target>& Registry() {
  static std::vector<Target> targets;
  return targets;
}

void FuzzFail(const std::string& what) {
  std::fprintf(stderr, "fuzz target broke an invariant: %s\n", what.c_str());
  std::fflush(stderr);
  std::abort();
}

namespace {
std::string* g_scratch = nullptr;
void RemoveScratchDir() {
  if (g_scratch == nullptr) return;
  std::error_code ec;
  fs::remove_all(*g_scratch, ec);
}
}  // namespace

const std::string& ScratchDir() {
  if (g_scratch == nullptr) {
    const char* base = std::getenv("TMPDIR");
    std::string templ = std::string(base && *base ? base : "/tmp") + "/attnlab_fuzz_XXXXXX";
    if (::mkdtemp(templ.data()) == nullptr) FuzzFail("cannot create a scratch directory");
    g_scratch = new std::string(templ);
    std::atexit(RemoveScratchDir);
  }
  return *g_scratch;
}

std::string WriteScratchFile(const std::string& name, std::string_view bytes) {
  const fs::path p = fs::path(ScratchDir()) / name;
  std::error_code ec;
  fs::create_directories(p.parent_path(), ec);
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out) FuzzFail("cannot write scratch file " + p.string());
  return p.string();
}

void RemoveScratch(const std::string& name) {
  std::error_code ec;
  fs::remove_all(fs::path(ScratchDir()) / name, ec);
}

bool Sometimes(const uint8_t* data, size_t size, uint32_t one_in) {
  uint32_t h = 2166136261u;  // FNV-1a
  for (size_t i = 0; i < size; ++i) h = (h ^ data[i]) * 16777619u;
  return h % one_in == 0;
}

std::vector<std::string_view> SplitInput(std::string_view input, size_t max_parts) {
  std::vector<std::string_view> parts;
  while (parts.size() + 1 < max_parts) {
    const size_t at = input.find(kSplit);
    if (at == std::string_view::npos) break;
    parts.push_back(input.substr(0, at));
    input.remove_prefix(at + kSplit.size());
  }
  parts.push_back(input);
  return parts;
}

}  // namespace attnlab::fuzz
