#include "report/csv.h"

#include "core/atomic_file.h"
#include "report/escape.h"
#include "report/format_number.h"

namespace attnlab::report {

std::string CsvField(std::string_view text) {
  const std::string s = SanitizeUtf8(text);
  const bool quote = s.find_first_of(",\"\r\n") != std::string::npos ||
                     (!s.empty() && (s.front() == ' ' || s.back() == ' ' || s.front() == '\t' ||
                                     s.back() == '\t'));
  if (!quote) return s;
  std::string out = "\"";
  for (char c : s) {
    if (c == '"') out += '"';
    out += c;
  }
  out += '"';
  return out;
}

CsvWriter::CsvWriter(std::vector<std::string> header) : columns_(header.size()) {
  ATTNLAB_CHECK(!header.empty());
  AppendRecord(header);
}

void CsvWriter::AddRow(const std::vector<std::string>& cells) {
  ATTNLAB_CHECK(cells.size() == columns_);
  AppendRecord(cells);
  ++rows_;
}

void CsvWriter::AddNumericRow(const std::vector<double>& values) {
  std::vector<std::string> cells;
  cells.reserve(values.size());
  for (double v : values) cells.push_back(FormatShortest(v));
  AddRow(cells);
}

void CsvWriter::AppendRecord(const std::vector<std::string>& cells) {
  if (cells.size() == 1 && cells[0].empty()) {  // a bare CRLF would read as no record at all
    text_ += "\"\"\r\n";
    return;
  }
  for (size_t i = 0; i < cells.size(); ++i) {
    if (i > 0) text_ += ',';
    text_ += CsvField(cells[i]);
  }
  text_ += "\r\n";
}

Status CsvWriter::WriteTo(const std::string& path) const {
  return WriteFileAtomically(path, text_);  // its messages name the path
}

}  // namespace attnlab::report
