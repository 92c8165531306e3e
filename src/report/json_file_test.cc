#include "report/json_file.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>

#include "core/atomic_file.h"

namespace attnlab::report {
namespace {

TEST(ReportJsonFile, InvalidUtf8AndNonFiniteNumbersDoNotThrow) {
  nlohmann::json j = {{"token", "half a character: \xE2\x82"}, {"nan", NAN}, {"x", 0.1}};
  EXPECT_THROW((void)j.dump(), nlohmann::json::type_error);  // what JsonText protects against
  const std::string text = JsonText(j);
  EXPECT_NE(text.find("half a character: \xEF\xBF\xBD"), std::string::npos);
  EXPECT_NE(text.find("\"nan\": null"), std::string::npos);
  EXPECT_EQ(text.back(), '\n');
  EXPECT_EQ(nlohmann::json::parse(text)["x"], 0.1);
  EXPECT_EQ(JsonText({{"a", 1}}, -1), "{\"a\":1}\n");
}

TEST(ReportJsonFile, WritesAtomically) {
  const char* base = std::getenv("TMPDIR");
  std::string dir = std::string(base && *base ? base : "/tmp") + "/attnlab_json_XXXXXX";
  ASSERT_NE(::mkdtemp(dir.data()), nullptr);
  const nlohmann::json j = {{"sections", {"summary", "sinks"}}};
  ASSERT_TRUE(WriteJsonFile(dir + "/r.json", j).ok());
  auto read = ReadFileToString(dir + "/r.json", 1 << 20);
  ASSERT_TRUE(read.ok());
  EXPECT_EQ(nlohmann::json::parse(read.value()), j);
  EXPECT_FALSE(WriteJsonFile(dir + "/missing/r.json", j).ok());
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace attnlab::report
