// A double as a JSON value: the number when finite, null otherwise (JSON has no NaN or
// infinity, and nlohmann::json would write them as null anyway, silently). The one helper every
// report writer uses, so a NaN metric always reads as null.
#ifndef ATTNLAB_CORE_JSON_NUMBER_H_
#define ATTNLAB_CORE_JSON_NUMBER_H_

#include <cmath>
#include <nlohmann/json.hpp>

namespace attnlab {

template <typename Json = nlohmann::json>
Json JsonNumber(double x) {
  return std::isfinite(x) ? Json(x) : Json(nullptr);
}

}  // namespace attnlab

#endif  // ATTNLAB_CORE_JSON_NUMBER_H_
