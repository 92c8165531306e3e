// JSON results files next to a report (report.json), written atomically.
//
// nlohmann::json::dump() throws type_error 316 on a string that is not valid UTF-8, and model
// text (a decoded BPE token) often is not; WriteJsonFile dumps with invalid bytes replaced by
// U+FFFD instead, so a results file can always be written.
#ifndef ATTNLAB_REPORT_JSON_FILE_H_
#define ATTNLAB_REPORT_JSON_FILE_H_

#include <nlohmann/json.hpp>
#include <string>

#include "attnlab/status.h"

namespace attnlab::report {

// `value` as text: indented by `indent` spaces (-1: one line), invalid UTF-8 replaced, a final
// newline. NaN and Inf (which JSON cannot represent) become null, as nlohmann writes them.
std::string JsonText(const nlohmann::json& value, int indent = 2);

// JsonText written atomically (core/atomic_file.h).
Status WriteJsonFile(const std::string& path, const nlohmann::json& value, int indent = 2);

}  // namespace attnlab::report

#endif  // ATTNLAB_REPORT_JSON_FILE_H_
