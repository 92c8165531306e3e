// The command line that produced a report, for its footer: a reader can rerun it.
#ifndef ATTNLAB_REPORT_COMMAND_LINE_H_
#define ATTNLAB_REPORT_COMMAND_LINE_H_

#include <string>
#include <string_view>
#include <vector>

namespace attnlab::report {

// An argument as a POSIX shell reads it back: unchanged if it holds only safe characters
// ([A-Za-z0-9_@%+=:,./-]), else in single quotes ('it'\''s').
std::string ShellQuote(std::string_view arg);

// Arguments joined with spaces, each ShellQuote'd.
std::string JoinCommandLine(const std::vector<std::string>& args);

// This process' command line from /proc/self/cmdline (Linux), quoted; "" if unavailable.
std::string CurrentCommandLine();

// The current UTC time as "2025-01-31 14:05 UTC".
std::string CurrentUtcTime();

}  // namespace attnlab::report

#endif  // ATTNLAB_REPORT_COMMAND_LINE_H_
