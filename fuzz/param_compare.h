// Bitwise comparison of two parameter stores, slice by slice (padding between slices ignored).
#ifndef ATTNLAB_FUZZ_PARAM_COMPARE_H_
#define ATTNLAB_FUZZ_PARAM_COMPARE_H_

#include <cstring>

#include "model/parameters.h"

namespace attnlab::fuzz {

inline bool SameParameters(const ParameterStore& a, const ParameterStore& b) {
  if (a.infos().size() != b.infos().size()) return false;
  for (size_t i = 0; i < a.infos().size(); ++i) {
    const ParamInfo& p = a.infos()[i];
    const ParamInfo& q = b.infos()[i];
    if (p.name != q.name || p.shape != q.shape) return false;
    if (p.size > 0 && std::memcmp(a.Slice(p), b.Slice(q), sizeof(float) * p.size) != 0) {
      return false;
    }
  }
  return true;
}

}  // namespace attnlab::fuzz

#endif  // ATTNLAB_FUZZ_PARAM_COMPARE_H_
