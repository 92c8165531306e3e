#include "report/command_line.h"

#include <ctime>
#include <fstream>
#include <iterator>

namespace attnlab::report {

std::string ShellQuote(std::string_view arg) {
  if (arg.empty()) return "''";
  bool safe = true;
  for (char c : arg) {
    const bool ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
                    std::string_view("_@%+=:,./-").find(c) != std::string_view::npos;
    safe = safe && ok;
  }
  if (safe) return std::string(arg);
  std::string out = "'";
  for (char c : arg) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  out += "'";
  return out;
}

std::string JoinCommandLine(const std::vector<std::string>& args) {
  std::string out;
  for (size_t i = 0; i < args.size(); ++i) {
    if (i > 0) out += ' ';
    out += ShellQuote(args[i]);
  }
  return out;
}

std::string CurrentCommandLine() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  if (!in) return "";
  const std::string raw((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::string> args;
  size_t start = 0;
  while (start < raw.size()) {
    size_t end = raw.find('\0', start);
    if (end == std::string::npos) end = raw.size();
    args.push_back(raw.substr(start, end - start));
    start = end + 1;
  }
  return JoinCommandLine(args);
}

std::string CurrentUtcTime() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[64];
  std::strftime(buf, sizeof(buf), "%Y-%m-%d %H:%M UTC", &tm);
  return buf;
}

}  // namespace attnlab::report
