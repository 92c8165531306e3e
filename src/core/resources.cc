#include "core/resources.h"

#include <cstdlib>
#include <filesystem>
#include <vector>

namespace attnlab {

std::string FindResource(const std::string& relative) {
  namespace fs = std::filesystem;
  std::error_code ec;
  std::vector<fs::path> roots;
  if (const char* home = std::getenv("ATTNLAB_HOME")) roots.emplace_back(home);
  for (fs::path start : {fs::read_symlink("/proc/self/exe", ec).parent_path(), fs::current_path(ec)}) {
    for (fs::path p = start; !p.empty(); p = p.parent_path()) {
      roots.push_back(p);
      if (p == p.root_path()) break;
    }
  }
  for (const fs::path& r : roots) {
    const fs::path candidate = r / relative;
    if (fs::exists(candidate, ec)) return candidate.string();
  }
  return "";
}

}  // namespace attnlab
