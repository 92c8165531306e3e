#include "report/command_line.h"

#include <errno.h>  // program_invocation_short_name (glibc)
#include <gtest/gtest.h>

#include <regex>

namespace attnlab::report {
namespace {

TEST(ReportCommandLine, ShellQuoting) {
  EXPECT_EQ(ShellQuote("plain-arg_1.txt"), "plain-arg_1.txt");
  EXPECT_EQ(ShellQuote("--out=/tmp/x,y:z@1%+"), "--out=/tmp/x,y:z@1%+");
  EXPECT_EQ(ShellQuote(""), "''");
  EXPECT_EQ(ShellQuote("two words"), "'two words'");
  EXPECT_EQ(ShellQuote("it's"), "'it'\\''s'");
  EXPECT_EQ(ShellQuote("$HOME;rm"), "'$HOME;rm'");
  EXPECT_EQ(JoinCommandLine({"attnlab", "analyze", "--text", "hello world"}),
            "attnlab analyze --text 'hello world'");
}

TEST(ReportCommandLine, CurrentProcess) {
  EXPECT_NE(CurrentCommandLine().find(program_invocation_short_name), std::string::npos);
  EXPECT_TRUE(std::regex_match(
      CurrentUtcTime(), std::regex("20[0-9]{2}-[01][0-9]-[0-3][0-9] [0-2][0-9]:[0-5][0-9] UTC")));
}

}  // namespace
}  // namespace attnlab::report
