// CSV: RFC 4180 quoting, checked field by field and by parsing random tables back with an
// independent reader; atomic writes.
#include "report/csv.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <random>

#include "core/atomic_file.h"
#include "report/report_test_util.h"

namespace attnlab::report {
namespace {

// RFC 4180 reader: records of fields; quoted fields may hold commas, CRLF and doubled quotes.
std::vector<std::vector<std::string>> ParseCsv(const std::string& s) {
  std::vector<std::vector<std::string>> records;
  std::vector<std::string> record;
  std::string field;
  size_t i = 0;
  bool quoted = false;
  while (i < s.size()) {
    const char c = s[i];
    if (quoted) {
      if (c == '"' && i + 1 < s.size() && s[i + 1] == '"') {
        field += '"';
        i += 2;
      } else if (c == '"') {
        quoted = false;
        ++i;
      } else {
        field += c;
        ++i;
      }
    } else if (c == '"') {
      quoted = true;
      ++i;
    } else if (c == ',') {
      record.push_back(field);
      field.clear();
      ++i;
    } else if (c == '\r' && i + 1 < s.size() && s[i + 1] == '\n') {
      record.push_back(field);
      field.clear();
      records.push_back(record);
      record.clear();
      i += 2;
    } else {
      field += c;
      ++i;
    }
  }
  EXPECT_TRUE(record.empty() && field.empty()) << "file does not end with CRLF";
  return records;
}

TEST(ReportCsv, FieldQuoting) {
  EXPECT_EQ(CsvField("abc"), "abc");
  EXPECT_EQ(CsvField(""), "");
  EXPECT_EQ(CsvField("a,b"), "\"a,b\"");
  EXPECT_EQ(CsvField("say \"hi\""), "\"say \"\"hi\"\"\"");
  EXPECT_EQ(CsvField("line1\nline2"), "\"line1\nline2\"");
  EXPECT_EQ(CsvField("cr\r"), "\"cr\r\"");
  EXPECT_EQ(CsvField(" padded"), "\" padded\"");
  EXPECT_EQ(CsvField("x "), "\"x \"");
  EXPECT_EQ(CsvField("-1.5e-3"), "-1.5e-3");
  EXPECT_EQ(CsvField("caf\xC3\xA9"), "caf\xC3\xA9");
  EXPECT_EQ(CsvField("bad\xFF"), "bad\xEF\xBF\xBD");
}

TEST(ReportCsv, WriterProducesCrlfRecords) {
  CsvWriter csv({"layer", "head", "note"});
  csv.AddRow({"0", "1", "plain"});
  csv.AddRow({"2", "3", "a, \"b\"\nc"});
  csv.AddNumericRow({0.1, NAN, -INFINITY});
  EXPECT_EQ(csv.num_rows(), 3u);
  EXPECT_EQ(csv.num_columns(), 3u);
  EXPECT_EQ(csv.text(),
            "layer,head,note\r\n0,1,plain\r\n2,3,\"a, \"\"b\"\"\nc\"\r\n0.1,nan,-inf\r\n");
  CsvWriter one({"x"});
  one.AddRow({""});
  EXPECT_EQ(one.text(), "x\r\n\"\"\r\n");  // an empty record would be a blank line
  EXPECT_EQ(ParseCsv(one.text()).size(), 2u);
}

TEST(ReportCsv, RandomTablesParseBack) {
  std::mt19937 rng(11);
  const std::vector<std::string> pieces = {"a",  "b",  " ", ",", "\"",      "\r",
                                           "\n", "\t", ";", "'", "\xC3\xA9"};
  for (int iter = 0; iter < 300; ++iter) {
    const size_t cols = 1 + rng() % 5;
    std::vector<std::string> header;
    for (size_t c = 0; c < cols; ++c) header.push_back(std::string("c").append(std::to_string(c)));
    CsvWriter csv(header);
    std::vector<std::vector<std::string>> rows;
    const size_t n_rows = rng() % 6;
    for (size_t r = 0; r < n_rows; ++r) {
      std::vector<std::string> row;
      for (size_t c = 0; c < cols; ++c) {
        std::string f;
        const size_t len = rng() % 8;
        for (size_t k = 0; k < len; ++k) f += pieces[rng() % pieces.size()];
        row.push_back(f);
      }
      csv.AddRow(row);
      rows.push_back(row);
    }
    const auto parsed = ParseCsv(csv.text());
    ASSERT_EQ(parsed.size(), rows.size() + 1);
    EXPECT_EQ(parsed[0], header);
    for (size_t r = 0; r < rows.size(); ++r) EXPECT_EQ(parsed[r + 1], rows[r]);
  }
}

TEST(ReportCsv, WriteToIsAtomicAndReportsErrors) {
  const char* base = std::getenv("TMPDIR");
  std::string dir = std::string(base && *base ? base : "/tmp") + "/attnlab_csv_XXXXXX";
  ASSERT_NE(::mkdtemp(dir.data()), nullptr);
  CsvWriter csv({"a", "b"});
  csv.AddRow({"1", "x,y"});
  ASSERT_TRUE(csv.WriteTo(dir + "/t.csv").ok());
  auto read = ReadFileToString(dir + "/t.csv", 1 << 20);
  ASSERT_TRUE(read.ok());
  EXPECT_EQ(read.value(), csv.text());
  const Status bad = csv.WriteTo(dir + "/missing/t.csv");
  EXPECT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("missing/t.csv"), std::string::npos);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace attnlab::report
