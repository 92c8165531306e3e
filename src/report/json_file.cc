#include "report/json_file.h"

#include "core/atomic_file.h"

namespace attnlab::report {

std::string JsonText(const nlohmann::json& value, int indent) {
  return value.dump(indent, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

Status WriteJsonFile(const std::string& path, const nlohmann::json& value, int indent) {
  return WriteFileAtomically(path, JsonText(value, indent));
}

}  // namespace attnlab::report
