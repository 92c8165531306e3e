#include "core/process_memory.h"

#include <malloc.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

namespace attnlab {

int64_t ResidentBytes() {
  FILE* f = std::fopen("/proc/self/statm", "r");
  if (!f) return 0;
  long pages = 0, resident = 0;
  const int n = std::fscanf(f, "%ld %ld", &pages, &resident);
  std::fclose(f);
  return n == 2 ? static_cast<int64_t>(resident) * sysconf(_SC_PAGESIZE) : 0;
}

namespace {

// The number after "key" on its line of a /proc file (kB for the fields read here); 0 if absent.
int64_t ProcField(const char* path, const char* key) {
  FILE* f = std::fopen(path, "r");
  if (!f) return 0;
  const size_t n = std::strlen(key);
  char line[256];
  int64_t value = 0;
  while (std::fgets(line, sizeof line, f)) {
    long long v = 0;
    if (std::strncmp(line, key, n) == 0 && std::sscanf(line + n, "%lld", &v) == 1) {
      value = v;
      break;
    }
  }
  std::fclose(f);
  return value;
}

}  // namespace

int64_t PeakResidentBytes() { return ProcField("/proc/self/status", "VmHWM:") * 1024; }

int64_t MemAvailableBytes() { return ProcField("/proc/meminfo", "MemAvailable:") * 1024; }

void ReleaseFreeHeap() { malloc_trim(0); }

bool ResetPeakResident() {
  ReleaseFreeHeap();
  FILE* f = std::fopen("/proc/self/clear_refs", "w");
  if (!f) return false;
  const bool ok = std::fputs("5", f) >= 0;
  return std::fclose(f) == 0 && ok;
}

}  // namespace attnlab
