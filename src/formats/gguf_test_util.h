// Test helper: writes GGUF v3 files byte by byte (metadata of every type, F32/F16/BF16/Q8_0
// tensors and raw blocks of any type), with knobs to break them. Header-only; tests only.
#ifndef ATTNLAB_FORMATS_GGUF_TEST_UTIL_H_
#define ATTNLAB_FORMATS_GGUF_TEST_UTIL_H_

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "formats/gguf.h"

namespace attnlab::gguf_test {

// float -> IEEE half, round to nearest even (overflow to inf, subnormals kept).
inline uint16_t FloatToHalf(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t a = x & 0x7fffffffu;
  if (a >= 0x7f800000u)
    return static_cast<uint16_t>(sign | 0x7c00u | (a > 0x7f800000u ? 0x200u : 0));
  if (a >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // >= 65520: inf
  if (a < 0x38800000u) {  // below 2^-14: a half subnormal, round(f * 2^24)
    const float v = std::bit_cast<float>(a) * 16777216.0f;
    return static_cast<uint16_t>(sign | static_cast<uint32_t>(std::nearbyint(v)));
  }
  uint32_t h = (((a >> 23) - 127 + 15) << 10) | ((a & 0x7fffffu) >> 13);
  const uint32_t rem = a & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;
  return static_cast<uint16_t>(sign | h);
}

// float -> bfloat16, round to nearest even.
inline uint16_t FloatToBf16(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  if (std::isnan(f)) return static_cast<uint16_t>((x >> 16) | 0x40u);
  return static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

inline void PutU16(std::string* s, uint16_t v) { s->append(reinterpret_cast<const char*>(&v), 2); }
inline void PutU32(std::string* s, uint32_t v) { s->append(reinterpret_cast<const char*>(&v), 4); }
inline void PutU64(std::string* s, uint64_t v) { s->append(reinterpret_cast<const char*>(&v), 8); }
inline void PutStr(std::string* s, const std::string& v) {
  PutU64(s, v.size());
  s->append(v);
}

inline std::string F32Bytes(const std::vector<float>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4);
}
inline std::string F16Bytes(const std::vector<float>& v) {
  std::string s;
  for (float x : v) PutU16(&s, FloatToHalf(x));
  return s;
}
inline std::string Bf16Bytes(const std::vector<float>& v) {
  std::string s;
  for (float x : v) PutU16(&s, FloatToBf16(x));
  return s;
}
// ggml's reference Q8_0 quantizer: per 32 values d = max|x| / 127 (stored as f16),
// q = roundf(x * (1 / d)) with the float32 d.
inline std::string Q8_0Bytes(const std::vector<float>& v) {
  std::string s;
  for (size_t b = 0; b + 32 <= v.size(); b += 32) {
    float amax = 0;
    for (size_t j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(v[b + j]));
    const float d = amax / 127.0f;
    const float id = d != 0 ? 1.0f / d : 0.0f;
    PutU16(&s, FloatToHalf(d));
    for (size_t j = 0; j < 32; ++j)
      s.push_back(static_cast<char>(static_cast<int8_t>(std::roundf(v[b + j] * id))));
  }
  return s;
}

class GgufBuilder {
 public:
  // Metadata; each call appends one key/value.
  GgufBuilder& Raw(const std::string& key, GgufValueType t, const std::string& value_bytes) {
    std::string& s = kv_.emplace_back();
    PutStr(&s, key);
    PutU32(&s, static_cast<uint32_t>(t));
    s += value_bytes;
    return *this;
  }
  template <typename T>
  static std::string Pod(T v) {
    return std::string(reinterpret_cast<const char*>(&v), sizeof(T));
  }
  GgufBuilder& U8(const std::string& k, uint8_t v) { return Raw(k, GgufValueType::kUint8, Pod(v)); }
  GgufBuilder& I8(const std::string& k, int8_t v) { return Raw(k, GgufValueType::kInt8, Pod(v)); }
  GgufBuilder& U16(const std::string& k, uint16_t v) {
    return Raw(k, GgufValueType::kUint16, Pod(v));
  }
  GgufBuilder& I16(const std::string& k, int16_t v) {
    return Raw(k, GgufValueType::kInt16, Pod(v));
  }
  GgufBuilder& U32(const std::string& k, uint32_t v) {
    return Raw(k, GgufValueType::kUint32, Pod(v));
  }
  GgufBuilder& I32(const std::string& k, int32_t v) {
    return Raw(k, GgufValueType::kInt32, Pod(v));
  }
  GgufBuilder& F32(const std::string& k, float v) {
    return Raw(k, GgufValueType::kFloat32, Pod(v));
  }
  GgufBuilder& Bool(const std::string& k, bool v) {
    return Raw(k, GgufValueType::kBool, std::string(1, v ? '\1' : '\0'));
  }
  GgufBuilder& U64(const std::string& k, uint64_t v) {
    return Raw(k, GgufValueType::kUint64, Pod(v));
  }
  GgufBuilder& I64(const std::string& k, int64_t v) {
    return Raw(k, GgufValueType::kInt64, Pod(v));
  }
  GgufBuilder& F64(const std::string& k, double v) {
    return Raw(k, GgufValueType::kFloat64, Pod(v));
  }
  GgufBuilder& Str(const std::string& k, const std::string& v) {
    std::string b;
    PutStr(&b, v);
    return Raw(k, GgufValueType::kString, b);
  }
  GgufBuilder& StrArray(const std::string& k, const std::vector<std::string>& v) {
    std::string b;
    PutU32(&b, static_cast<uint32_t>(GgufValueType::kString));
    PutU64(&b, v.size());
    for (const std::string& x : v) PutStr(&b, x);
    return Raw(k, GgufValueType::kArray, b);
  }
  GgufBuilder& F32Array(const std::string& k, const std::vector<float>& v) {
    std::string b;
    PutU32(&b, static_cast<uint32_t>(GgufValueType::kFloat32));
    PutU64(&b, v.size());
    b += F32Bytes(v);
    return Raw(k, GgufValueType::kArray, b);
  }
  GgufBuilder& I32Array(const std::string& k, const std::vector<int32_t>& v) {
    std::string b;
    PutU32(&b, static_cast<uint32_t>(GgufValueType::kInt32));
    PutU64(&b, v.size());
    for (int32_t x : v) b += Pod(x);
    return Raw(k, GgufValueType::kArray, b);
  }
  GgufBuilder& Alignment(uint32_t a) {
    alignment_ = a;
    return U32("general.alignment", a);
  }

  // Tensors: dims in ggml order (ne[0] = row length). Offsets are packed at the alignment
  // unless given.
  GgufBuilder& Tensor(const std::string& name, GgmlType type, std::vector<uint64_t> dims,
                      std::string data, std::optional<uint64_t> offset = std::nullopt) {
    tensors_.push_back(
        {name, static_cast<uint32_t>(type), std::move(dims), std::move(data), offset});
    return *this;
  }
  GgufBuilder& TensorId(const std::string& name, uint32_t type_id, std::vector<uint64_t> dims,
                        std::string data, std::optional<uint64_t> offset = std::nullopt) {
    tensors_.push_back({name, type_id, std::move(dims), std::move(data), offset});
    return *this;
  }
  // HF-shaped helpers: shape [out, in] (or [n]) -> ggml dims reversed.
  GgufBuilder& F32Tensor(const std::string& name, std::vector<uint64_t> hf_shape,
                         const std::vector<float>& v) {
    return Tensor(name, GgmlType::kF32, Reverse(hf_shape), F32Bytes(v));
  }
  GgufBuilder& TypedTensor(const std::string& name, GgmlType t, std::vector<uint64_t> hf_shape,
                           const std::vector<float>& v) {
    std::string b = t == GgmlType::kF16    ? F16Bytes(v)
                    : t == GgmlType::kBF16 ? Bf16Bytes(v)
                    : t == GgmlType::kQ8_0 ? Q8_0Bytes(v)
                                           : F32Bytes(v);
    return Tensor(name, t, Reverse(hf_shape), b);
  }

  uint32_t version = 3;
  std::optional<uint64_t> n_tensors_override, n_kv_override;

  std::string Build() const {
    std::string s = "GGUF";
    PutU32(&s, version);
    PutU64(&s, n_tensors_override.value_or(tensors_.size()));
    PutU64(&s, n_kv_override.value_or(kv_.size()));
    for (const std::string& kv : kv_) s += kv;
    std::vector<uint64_t> offsets;
    uint64_t next = 0;
    for (const T& t : tensors_) {
      uint64_t off = next;
      if (t.offset) {
        off = *t.offset;
      } else {
        next = (next + t.data.size() + alignment_ - 1) / alignment_ * alignment_;
      }
      offsets.push_back(off);
      PutStr(&s, t.name);
      PutU32(&s, static_cast<uint32_t>(t.dims.size()));
      for (uint64_t d : t.dims) PutU64(&s, d);
      PutU32(&s, t.type);
      PutU64(&s, off);
    }
    while (s.size() % alignment_ != 0) s.push_back('\0');
    std::string data;
    for (size_t i = 0; i < tensors_.size(); ++i) {
      const uint64_t end = offsets[i] + tensors_[i].data.size();
      if (data.size() < end) data.resize(end, '\0');
      std::memcpy(data.data() + offsets[i], tensors_[i].data.data(), tensors_[i].data.size());
    }
    while (data.size() % alignment_ != 0) data.push_back('\0');
    return s + data;
  }

  static std::vector<uint64_t> Reverse(std::vector<uint64_t> v) { return {v.rbegin(), v.rend()}; }

 private:
  struct T {
    std::string name;
    uint32_t type;
    std::vector<uint64_t> dims;
    std::string data;
    std::optional<uint64_t> offset;
  };
  std::vector<std::string> kv_;
  std::vector<T> tensors_;
  uint64_t alignment_ = 32;
};

}  // namespace attnlab::gguf_test

#endif  // ATTNLAB_FORMATS_GGUF_TEST_UTIL_H_
