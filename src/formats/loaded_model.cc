#include "formats/loaded_model.h"

#include <cmath>
#include <cstring>

#include "formats/safetensors.h"
#include "model/gpt.h"

namespace attnlab {

Status CheckFinite(const float* x, int64_t n, const std::string& what, const std::string& tensor) {
  for (int64_t i = 0; i < n; ++i) {
    if (!std::isfinite(x[i])) {
      const char* kind = std::isnan(x[i]) ? "NaN" : (x[i] > 0 ? "+Inf" : "-Inf");
      return Status::InvalidArgument(what + ": tensor '" + tensor + "' has " + kind + " at index " +
                                     std::to_string(i) + " (of " + std::to_string(n) + " values)");
    }
  }
  return Status::Ok();
}

Status CopyParameters(const ParameterStore& src, ParameterStore* dst) {
  if (src.size() != dst->size() || src.infos().size() != dst->infos().size()) {
    return Status::InvalidArgument("parameter layouts differ: " + std::to_string(src.size()) +
                                   " vs " + std::to_string(dst->size()) + " floats");
  }
  for (size_t i = 0; i < src.infos().size(); ++i) {
    const ParamInfo& a = src.infos()[i];
    const ParamInfo& b = dst->infos()[i];
    if (a.name != b.name || a.shape != b.shape || a.offset != b.offset) {
      return Status::InvalidArgument("parameter layouts differ at tensor " + std::to_string(i) +
                                     ": '" + a.name + "' " + TensorShapeString(a.shape) + " vs '" +
                                     b.name + "' " + TensorShapeString(b.shape));
    }
  }
  if (src.size() > 0) std::memcpy(dst->data(), src.data(), sizeof(float) * src.size());
  return Status::Ok();
}

Result<std::unique_ptr<Gpt>> MakeGpt(LoadedModel&& m) {
  return Gpt::Create(m.config, std::move(m.params), std::move(m.matrices));
}

Result<std::unique_ptr<Gpt>> MakeGpt(const LoadedModel& m) {
  if (m.matrices) {
    ParameterStore p(m.config, ParameterStore::Matrices::kOutside);
    ATTNLAB_RETURN_IF_ERROR(CopyParameters(m.params, &p));
    return Gpt::Create(m.config, std::move(p), m.matrices);
  }
  ATTNLAB_ASSIGN_OR_RETURN(std::unique_ptr<Gpt> gpt, Gpt::Create(m.config));
  ATTNLAB_RETURN_IF_ERROR(CopyParameters(m.params, &gpt->params()));
  return gpt;
}

}  // namespace attnlab
