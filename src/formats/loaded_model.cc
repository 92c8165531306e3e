#include "formats/loaded_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "formats/safetensors.h"
#include "model/gpt.h"

namespace attnlab {

namespace {

int64_t FirstNonFinite(const float* x, int64_t n) {
  int64_t i = 0;
  while (i < n && std::isfinite(x[i])) ++i;
  return i;
}

Status NonFinite(float x, int64_t i, int64_t n, const std::string& what,
                 const std::string& tensor) {
  const char* kind = std::isnan(x) ? "NaN" : (x > 0 ? "+Inf" : "-Inf");
  return Status::InvalidArgument(what + ": tensor '" + tensor + "' has " + kind + " at index " +
                                 std::to_string(i) + " (of " + std::to_string(n) + " values)");
}

}  // namespace

Status CheckFinite(const float* x, int64_t n, const std::string& what, const std::string& tensor) {
  const int64_t i = FirstNonFinite(x, n);
  return i == n ? Status::Ok() : NonFinite(x[i], i, n, what, tensor);
}

Status CheckFiniteStored(const internal::WeightBlock& b, int64_t cols, const std::string& what,
                         const std::string& tensor) {
  const int64_t n = b.rows * cols;
  if (!b.quant && b.dtype == KvDtype::kF32) {
    return CheckFinite(static_cast<const float*>(b.data), n, what, tensor);
  }
  // Widen ~64K elements (whole rows) at a time; 16-bit values are looked at widened only when
  // their exponent bits are all ones (NaN/Inf).
  const int64_t step = std::max<int64_t>(1, (int64_t{1} << 16) / std::max<int64_t>(1, cols));
  const int64_t row_bytes = internal::WeightRowBytes(b, cols);
  const auto* bytes = static_cast<const uint8_t*>(b.data);
  std::vector<float> buf(static_cast<size_t>(std::min(step, b.rows) * cols));
  for (int64_t r = 0; r < b.rows; r += step) {
    const int64_t m = std::min(step, b.rows - r) * cols;
    const uint8_t* src = bytes + r * row_bytes;
    if (!b.quant) {
      const auto* u = reinterpret_cast<const uint16_t*>(src);
      const uint16_t exp = b.dtype == KvDtype::kBF16 ? 0x7f80 : 0x7c00;
      bool clean = true;
      for (int64_t i = 0; i < m; ++i) clean &= (u[i] & exp) != exp;
      if (clean) continue;
    }
    internal::WidenRows(b, src, m, buf.data());
    const int64_t i = FirstNonFinite(buf.data(), m);
    if (i < m) return NonFinite(buf[static_cast<size_t>(i)], r * cols + i, n, what, tensor);
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
