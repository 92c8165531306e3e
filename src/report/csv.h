// CSV files as RFC 4180 describes them: fields separated by commas, records ended by CRLF, a
// field quoted (with inner quotes doubled) when it holds a comma, a quote, CR or LF, or begins
// or ends with a space (which some readers would trim). Text is made valid UTF-8 first
// (escape.h: SanitizeUtf8), so any reader that expects UTF-8 can read the file.
#ifndef ATTNLAB_REPORT_CSV_H_
#define ATTNLAB_REPORT_CSV_H_

#include <string>
#include <string_view>
#include <vector>

#include "attnlab/status.h"

namespace attnlab::report {

// One field, quoted if needed: `a,b` -> `"a,b"`, `say "hi"` -> `"say ""hi"""`.
std::string CsvField(std::string_view text);

// A table with a header row. Usage:
//   CsvWriter csv({"layer", "head", "alpha"});
//   csv.AddRow({"0", "3", FormatShortest(0.25)});
//   ATTNLAB_RETURN_IF_ERROR(csv.WriteTo(dir + "/sinks.csv"));
class CsvWriter {
 public:
  explicit CsvWriter(std::vector<std::string> header);

  // REQUIRES: cells.size() == the header's size (a mismatch is a bug in the caller).
  void AddRow(const std::vector<std::string>& cells);
  // Numbers as FormatShortest (round-trips exactly; "nan", "inf" for non-finite values).
  void AddNumericRow(const std::vector<double>& values);

  size_t num_columns() const { return columns_; }
  size_t num_rows() const { return rows_; }
  const std::string& text() const { return text_; }  // header and rows so far
  // Writes text() atomically (core/atomic_file.h): readers see the old file or the whole new one.
  Status WriteTo(const std::string& path) const;

 private:
  void AppendRecord(const std::vector<std::string>& cells);
  size_t columns_ = 0, rows_ = 0;
  std::string text_;
};

}  // namespace attnlab::report

#endif  // ATTNLAB_REPORT_CSV_H_
