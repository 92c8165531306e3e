#include "formats/gguf.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/files.h"
#include "core/printable.h"
#include "model/matrix_weights.h"  // internal::QuantCodec (engine/weight_gemm.h)

namespace attnlab {

static_assert(std::endian::native == std::endian::little,
              "gguf.cc reads little-endian data in place; port it for big-endian hosts");

namespace {

std::string U64(uint64_t x) { return std::to_string(x); }

// Printable excerpt of an untrusted string, in quotes.
std::string Quote(std::string_view s) {
  std::string r = "'";  // appended piecewise: GCC 12's false -Wrestrict (bug 105329)
  r += PrintableExcerpt(s);
  r += '\'';
  return r;
}

struct TypeInfo {
  GgmlType type;
  const char* name;
  int64_t block;  // elements per block
  int64_t size;   // bytes per block
};
// Block sizes and bytes per block from ggml's type traits (ggml.c) and block structs
// (ggml-common.h).
constexpr TypeInfo kTypes[] = {
    {GgmlType::kF32, "F32", 1, 4},
    {GgmlType::kF16, "F16", 1, 2},
    {GgmlType::kQ4_0, "Q4_0", 32, 18},
    {GgmlType::kQ4_1, "Q4_1", 32, 20},
    {GgmlType::kQ5_0, "Q5_0", 32, 22},
    {GgmlType::kQ5_1, "Q5_1", 32, 24},
    {GgmlType::kQ8_0, "Q8_0", 32, 34},
    {GgmlType::kQ8_1, "Q8_1", 32, 36},
    {GgmlType::kQ2_K, "Q2_K", 256, 84},
    {GgmlType::kQ3_K, "Q3_K", 256, 110},
    {GgmlType::kQ4_K, "Q4_K", 256, 144},
    {GgmlType::kQ5_K, "Q5_K", 256, 176},
    {GgmlType::kQ6_K, "Q6_K", 256, 210},
    {GgmlType::kQ8_K, "Q8_K", 256, 292},
    {GgmlType::kIQ2_XXS, "IQ2_XXS", 256, 66},
    {GgmlType::kIQ2_XS, "IQ2_XS", 256, 74},
    {GgmlType::kIQ3_XXS, "IQ3_XXS", 256, 98},
    {GgmlType::kIQ1_S, "IQ1_S", 256, 50},
    {GgmlType::kIQ4_NL, "IQ4_NL", 32, 18},
    {GgmlType::kIQ3_S, "IQ3_S", 256, 110},
    {GgmlType::kIQ2_S, "IQ2_S", 256, 82},
    {GgmlType::kIQ4_XS, "IQ4_XS", 256, 136},
    {GgmlType::kI8, "I8", 1, 1},
    {GgmlType::kI16, "I16", 1, 2},
    {GgmlType::kI32, "I32", 1, 4},
    {GgmlType::kI64, "I64", 1, 8},
    {GgmlType::kF64, "F64", 1, 8},
    {GgmlType::kIQ1_M, "IQ1_M", 256, 56},
    {GgmlType::kBF16, "BF16", 1, 2},
    {GgmlType::kTQ1_0, "TQ1_0", 256, 54},
    {GgmlType::kTQ2_0, "TQ2_0", 256, 66},
    {GgmlType::kMXFP4, "MXFP4", 32, 17},
};

const TypeInfo* InfoOf(GgmlType t) {
  for (const TypeInfo& i : kTypes) {
    if (i.type == t) return &i;
  }
  return nullptr;
}

// Smallest encoding of a value of each type (strings: the 8-byte length; arrays: type + count).
uint64_t MinValueBytes(GgufValueType t) {
  switch (t) {
    case GgufValueType::kUint8:
    case GgufValueType::kInt8:
    case GgufValueType::kBool:
      return 1;
    case GgufValueType::kUint16:
    case GgufValueType::kInt16:
      return 2;
    case GgufValueType::kUint32:
    case GgufValueType::kInt32:
    case GgufValueType::kFloat32:
      return 4;
    case GgufValueType::kUint64:
    case GgufValueType::kInt64:
    case GgufValueType::kFloat64:
    case GgufValueType::kString:
      return 8;
    case GgufValueType::kArray:
      return 12;
  }
  return 1;
}

bool ValueTypeKnown(uint32_t id) { return id <= 12; }

bool IsUnsignedType(GgufValueType t) {
  return t == GgufValueType::kUint8 || t == GgufValueType::kUint16 || t == GgufValueType::kUint32 ||
         t == GgufValueType::kUint64;
}
bool IsSignedType(GgufValueType t) {
  return t == GgufValueType::kInt8 || t == GgufValueType::kInt16 || t == GgufValueType::kInt32 ||
         t == GgufValueType::kInt64;
}
bool IsFloatType(GgufValueType t) {
  return t == GgufValueType::kFloat32 || t == GgufValueType::kFloat64;
}

// A cursor over untrusted bytes: every read is bounds-checked.
struct Cursor {
  const uint8_t* data;
  uint64_t size;
  uint64_t pos = 0;
  uint64_t left() const { return size - pos; }
  bool Take(void* dst, uint64_t n) {
    if (n > left()) return false;
    if (n > 0) std::memcpy(dst, data + pos, n);
    pos += n;
    return true;
  }
  bool U32(uint32_t* v) { return Take(v, 4); }
  bool U64(uint64_t* v) { return Take(v, 8); }
};

// ---------------------------------------------------------------------------------------------
// Dequantization (plain scalar code; block layouts from ggml-common.h).

uint16_t Le16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }

// Q8_0, 34 bytes per 32 elements: f16 d, int8 qs[32]; x[j] = d * qs[j].
void DequantQ8_0(const uint8_t* b, float* y) {
  const float d = GgufHalfToFloat(Le16(b));
  for (int j = 0; j < 32; ++j) y[j] = d * static_cast<float>(static_cast<int8_t>(b[2 + j]));
}

// Q4_0, 18 bytes per 32 elements: f16 d, u8 qs[16]; element j < 16 is the low nibble of qs[j],
// element j + 16 its high nibble; x = d * (nibble - 8).
void DequantQ4_0(const uint8_t* b, float* y) {
  const float d = GgufHalfToFloat(Le16(b));
  const uint8_t* qs = b + 2;
  for (int j = 0; j < 16; ++j) {
    y[j] = d * static_cast<float>((qs[j] & 0xF) - 8);
    y[j + 16] = d * static_cast<float>((qs[j] >> 4) - 8);
  }
}

// Q4_K, 144 bytes per 256 elements: f16 d, f16 dmin, u8 scales[12], u8 qs[128]. Eight
// sub-blocks of 32 elements, each with a 6-bit scale sc and a 6-bit min m packed in `scales`:
// sub-block s < 4: sc = scales[s] & 63, m = scales[s + 4] & 63; s >= 4: the low 4 bits are the
// nibbles of scales[s + 4] (sc low, m high), the top 2 bits the top bits of scales[s - 4] (sc)
// and scales[s] (m). x = d * sc * q - dmin * m. The 64 elements 64k .. 64k + 63 come from
// qs[32k .. 32k + 31]: the low nibbles (sub-block 2k) then the high nibbles (sub-block 2k + 1).
void ScaleMinK4(int s, const uint8_t* scales, int* sc, int* m) {
  if (s < 4) {
    *sc = scales[s] & 63;
    *m = scales[s + 4] & 63;
  } else {
    *sc = (scales[s + 4] & 0xF) | ((scales[s - 4] >> 6) << 4);
    *m = (scales[s + 4] >> 4) | ((scales[s] >> 6) << 4);
  }
}

void DequantQ4_K(const uint8_t* b, float* y) {
  const float d = GgufHalfToFloat(Le16(b));
  const float dmin = GgufHalfToFloat(Le16(b + 2));
  const uint8_t* scales = b + 4;
  const uint8_t* qs = b + 16;
  for (int k = 0; k < 4; ++k) {
    int sc0, m0, sc1, m1;
    ScaleMinK4(2 * k, scales, &sc0, &m0);
    ScaleMinK4(2 * k + 1, scales, &sc1, &m1);
    const float d0 = d * static_cast<float>(sc0), min0 = dmin * static_cast<float>(m0);
    const float d1 = d * static_cast<float>(sc1), min1 = dmin * static_cast<float>(m1);
    const uint8_t* q = qs + 32 * k;
    float* out = y + 64 * k;
    for (int l = 0; l < 32; ++l) out[l] = d0 * static_cast<float>(q[l] & 0xF) - min0;
    for (int l = 0; l < 32; ++l) out[32 + l] = d1 * static_cast<float>(q[l] >> 4) - min1;
  }
}

// Q6_K, 210 bytes per 256 elements: u8 ql[128] (low 4 bits), u8 qh[64] (high 2 bits), int8
// scales[16] (one per 16 elements), f16 d. x = d * scale * (q - 32) with q 6 bits. Each half
// h of 128 elements uses ql[64h ..], qh[32h ..], scales[8h ..]; for l < 32:
//   element l      : low nibble of ql[l],      bits 0-1 of qh[l], scale[l / 16]
//   element l + 32 : low nibble of ql[l + 32], bits 2-3 of qh[l], scale[l / 16 + 2]
//   element l + 64 : high nibble of ql[l],     bits 4-5 of qh[l], scale[l / 16 + 4]
//   element l + 96 : high nibble of ql[l + 32], bits 6-7 of qh[l], scale[l / 16 + 6]
void DequantQ6_K(const uint8_t* b, float* y) {
  const uint8_t* ql = b;
  const uint8_t* qh = b + 128;
  const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192);
  const float d = GgufHalfToFloat(Le16(b + 208));
  for (int h = 0; h < 2; ++h) {
    const uint8_t* l4 = ql + 64 * h;
    const uint8_t* h2 = qh + 32 * h;
    const int8_t* s = sc + 8 * h;
    float* out = y + 128 * h;
    for (int l = 0; l < 32; ++l) {
      const int g = l / 16;
      const int q1 = ((l4[l] & 0xF) | (((h2[l] >> 0) & 3) << 4)) - 32;
      const int q2 = ((l4[l + 32] & 0xF) | (((h2[l] >> 2) & 3) << 4)) - 32;
      const int q3 = ((l4[l] >> 4) | (((h2[l] >> 4) & 3) << 4)) - 32;
      const int q4 = ((l4[l + 32] >> 4) | (((h2[l] >> 6) & 3) << 4)) - 32;
      out[l] = d * static_cast<float>(s[g]) * static_cast<float>(q1);
      out[l + 32] = d * static_cast<float>(s[g + 2]) * static_cast<float>(q2);
      out[l + 64] = d * static_cast<float>(s[g + 4]) * static_cast<float>(q3);
      out[l + 96] = d * static_cast<float>(s[g + 6]) * static_cast<float>(q4);
    }
  }
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Types.

const char* GgufValueTypeName(GgufValueType t) {
  switch (t) {
    case GgufValueType::kUint8:
      return "uint8";
    case GgufValueType::kInt8:
      return "int8";
    case GgufValueType::kUint16:
      return "uint16";
    case GgufValueType::kInt16:
      return "int16";
    case GgufValueType::kUint32:
      return "uint32";
    case GgufValueType::kInt32:
      return "int32";
    case GgufValueType::kFloat32:
      return "float32";
    case GgufValueType::kBool:
      return "bool";
    case GgufValueType::kString:
      return "string";
    case GgufValueType::kArray:
      return "array";
    case GgufValueType::kUint64:
      return "uint64";
    case GgufValueType::kInt64:
      return "int64";
    case GgufValueType::kFloat64:
      return "float64";
  }
  return "?";
}

bool GgmlTypeKnown(uint32_t id) { return InfoOf(static_cast<GgmlType>(id)) != nullptr; }

const char* GgmlTypeName(GgmlType t) {
  const TypeInfo* i = InfoOf(t);
  return i ? i->name : "?";
}

int64_t GgmlBlockSize(GgmlType t) {
  const TypeInfo* i = InfoOf(t);
  return i ? i->block : 0;
}

int64_t GgmlTypeSize(GgmlType t) {
  const TypeInfo* i = InfoOf(t);
  return i ? i->size : 0;
}

bool GgmlTypeDequantizable(GgmlType t) {
  switch (t) {
    case GgmlType::kF32:
    case GgmlType::kF16:
    case GgmlType::kBF16:
    case GgmlType::kF64:
    case GgmlType::kQ8_0:
    case GgmlType::kQ4_0:
    case GgmlType::kQ4_K:
    case GgmlType::kQ6_K:
      return true;
    default:
      return false;
  }
}

float GgufHalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1f;
  const uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {
      const float f = std::ldexp(static_cast<float>(mant), -24);  // subnormal, exact
      return sign ? -f : f;
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp - 15 + 127) << 23) | (mant << 13);
  }
  return std::bit_cast<float>(bits);
}

float GgufBf16ToFloat(uint16_t b) { return std::bit_cast<float>(static_cast<uint32_t>(b) << 16); }

Status DequantizeGgml(GgmlType type, const uint8_t* src, int64_t n, float* out,
                      std::string_view what) {
  if (!GgmlTypeDequantizable(type)) {
    return Status::InvalidArgument(std::string("unsupported GGUF tensor type ") +
                                   GgmlTypeName(type) + " in " + std::string(what) +
                                   " (attnlab reads F32, F16, BF16, F64, Q8_0, Q4_0, Q4_K, Q6_K)");
  }
  const int64_t block = GgmlBlockSize(type), bsize = GgmlTypeSize(type);
  if (n < 0 || n % block != 0) {
    return Status::InvalidArgument(std::string(what) + ": " + std::to_string(n) + " elements of " +
                                   GgmlTypeName(type) + " are not whole blocks of " +
                                   std::to_string(block));
  }
  const int64_t nb = n / block;
  switch (type) {
    case GgmlType::kF32:
      if (n > 0) std::memcpy(out, src, static_cast<size_t>(n) * 4);
      break;
    case GgmlType::kF16:
      for (int64_t i = 0; i < n; ++i) out[i] = GgufHalfToFloat(Le16(src + 2 * i));
      break;
    case GgmlType::kBF16:
      for (int64_t i = 0; i < n; ++i) out[i] = GgufBf16ToFloat(Le16(src + 2 * i));
      break;
    case GgmlType::kF64:
      for (int64_t i = 0; i < n; ++i) {
        double d = 0;
        std::memcpy(&d, src + 8 * i, 8);
        out[i] = static_cast<float>(d);
      }
      break;
    case GgmlType::kQ8_0:
      for (int64_t i = 0; i < nb; ++i) DequantQ8_0(src + i * bsize, out + i * block);
      break;
    case GgmlType::kQ4_0:
      for (int64_t i = 0; i < nb; ++i) DequantQ4_0(src + i * bsize, out + i * block);
      break;
    case GgmlType::kQ4_K:
      for (int64_t i = 0; i < nb; ++i) DequantQ4_K(src + i * bsize, out + i * block);
      break;
    case GgmlType::kQ6_K:
      for (int64_t i = 0; i < nb; ++i) DequantQ6_K(src + i * bsize, out + i * block);
      break;
    default:
      break;  // excluded above
  }
  return Status::Ok();
}

namespace {

// Whole rows of a block type for the engine's products (engine/weight_gemm.h).
template <void (*kBlock)(const uint8_t*, float*), int64_t kElems, int64_t kBytes>
void WidenBlocks(const uint8_t* src, int64_t n, float* out) {
  for (int64_t i = 0; i < n / kElems; ++i) kBlock(src + i * kBytes, out + i * kElems);
}

constexpr internal::QuantCodec kQ8_0Codec{"Q8_0", 32, 34, &WidenBlocks<DequantQ8_0, 32, 34>,
                                          internal::QuantLayout::kQ8_0};
constexpr internal::QuantCodec kQ4_0Codec{"Q4_0", 32, 18, &WidenBlocks<DequantQ4_0, 32, 18>};
constexpr internal::QuantCodec kQ4_KCodec{"Q4_K", 256, 144, &WidenBlocks<DequantQ4_K, 256, 144>};
constexpr internal::QuantCodec kQ6_KCodec{"Q6_K", 256, 210, &WidenBlocks<DequantQ6_K, 256, 210>};

}  // namespace

const internal::QuantCodec* GgmlRowCodec(GgmlType t) {
  switch (t) {
    case GgmlType::kQ8_0:
      return &kQ8_0Codec;
    case GgmlType::kQ4_0:
      return &kQ4_0Codec;
    case GgmlType::kQ4_K:
      return &kQ4_KCodec;
    case GgmlType::kQ6_K:
      return &kQ6_KCodec;
    default:
      return nullptr;
  }
}

// ---------------------------------------------------------------------------------------------
// Values and tensors.

uint64_t GgufValue::array_size() const {
  return array_uints.size() + array_ints.size() + array_floats.size() + array_strings.size();
}

std::string GgufValue::Describe() const {
  std::string r = GgufValueTypeName(type);
  switch (type) {
    case GgufValueType::kUint8:
    case GgufValueType::kUint16:
    case GgufValueType::kUint32:
    case GgufValueType::kUint64:
      return r + " " + U64(u);
    case GgufValueType::kInt8:
    case GgufValueType::kInt16:
    case GgufValueType::kInt32:
    case GgufValueType::kInt64:
      return r + " " + std::to_string(i);
    case GgufValueType::kFloat32:
    case GgufValueType::kFloat64: {
      char buf[64];
      const auto res = std::to_chars(buf, buf + sizeof(buf), f);
      return r + " " + std::string(buf, res.ptr);
    }
    case GgufValueType::kBool:
      return r + (b ? " true" : " false");
    case GgufValueType::kString:
      return r + " " + Quote(s);
    case GgufValueType::kArray:
      return "an array of " + U64(array_size()) + " " + GgufValueTypeName(array_type);
  }
  return r;
}

int64_t GgufTensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;  // validated not to overflow when parsed
  return n;
}

int64_t GgufTensorInfo::rows() const {
  if (dims.empty()) return 1;
  if (dims[0] == 0) return 0;
  return numel() / dims[0];
}

struct GgufFile::Storage {
  const uint8_t* data = nullptr;
  uint64_t size = 0;
  void* map = nullptr;
  std::string owned;
  Storage() = default;
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  ~Storage() {
    if (map != nullptr) ::munmap(map, size);
  }
};

const GgufValue* GgufFile::Find(std::string_view key) const {
  auto it = key_index_.find(key);
  return it == key_index_.end() ? nullptr : &metadata_[it->second].second;
}

const GgufTensorInfo* GgufFile::FindTensor(std::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

std::span<const uint8_t> GgufFile::Bytes(const GgufTensorInfo& t) const {
  ATTNLAB_CHECK(t.offset <= data_size_ && t.nbytes <= data_size_ - t.offset);
  return {data_ + t.offset, static_cast<size_t>(t.nbytes)};
}

Status GgufFile::ReadRowsFloat(const GgufTensorInfo& t, int64_t row, int64_t n_rows,
                               std::span<float> out) const {
  const int64_t row_len = t.dims.empty() ? 1 : t.dims[0];
  const int64_t rows = t.rows();
  if (row < 0 || n_rows < 0 || row > rows || n_rows > rows - row) {
    return Status::InvalidArgument(path_ + ": tensor " + Quote(t.name) + " has " +
                                   std::to_string(rows) + " rows; rows [" + std::to_string(row) +
                                   ", +" + std::to_string(n_rows) + ") were asked for");
  }
  if (static_cast<int64_t>(out.size()) != n_rows * row_len) {
    return Status::InvalidArgument(path_ + ": tensor " + Quote(t.name) + ": " +
                                   std::to_string(n_rows) + " rows of " + std::to_string(row_len) +
                                   " elements do not fit a destination of " +
                                   std::to_string(out.size()));
  }
  const uint64_t row_bytes = static_cast<uint64_t>(row_len / GgmlBlockSize(t.type)) *
                             static_cast<uint64_t>(GgmlTypeSize(t.type));
  const std::span<const uint8_t> b = Bytes(t);
  Status st = DequantizeGgml(t.type, b.data() + static_cast<uint64_t>(row) * row_bytes,
                             n_rows * row_len, out.data(), t.name);
  if (!st.ok()) return st.WithContext(path_);
  return Status::Ok();
}

Status GgufFile::ReadFloat(const GgufTensorInfo& t, std::span<float> out) const {
  if (static_cast<int64_t>(out.size()) != t.numel()) {
    return Status::InvalidArgument(path_ + ": tensor " + Quote(t.name) + " has " +
                                   std::to_string(t.numel()) + " elements, the destination holds " +
                                   std::to_string(out.size()));
  }
  return ReadRowsFloat(t, 0, t.rows(), out);
}

// Typed getters.
namespace {
Status Mismatch(const std::string& path, std::string_view key, const GgufValue& v,
                const char* expected) {
  return Status::InvalidArgument(path + ": metadata key " + Quote(key) + " is " + v.Describe() +
                                 ", expected " + expected);
}
}  // namespace

#define ATTNLAB_GGUF_FIND(v, key) \
  const GgufValue* v = Find(key); \
  if (v == nullptr) return Status::NotFound(path_ + ": no metadata key " + Quote(key))

Result<std::string> GgufFile::GetString(std::string_view key) const {
  ATTNLAB_GGUF_FIND(v, key);
  if (v->type != GgufValueType::kString) return Mismatch(path_, key, *v, "a string");
  return v->s;
}

Result<uint64_t> GgufFile::GetUint(std::string_view key) const {
  ATTNLAB_GGUF_FIND(v, key);
  if (IsUnsignedType(v->type)) return v->u;
  if (IsSignedType(v->type) && v->i >= 0) return static_cast<uint64_t>(v->i);
  return Mismatch(path_, key, *v, "a non-negative integer");
}

Result<int64_t> GgufFile::GetInt(std::string_view key) const {
  ATTNLAB_GGUF_FIND(v, key);
  if (IsSignedType(v->type)) return v->i;
  if (IsUnsignedType(v->type) && v->u <= static_cast<uint64_t>(INT64_MAX))
    return static_cast<int64_t>(v->u);
  return Mismatch(path_, key, *v, "an integer that fits int64");
}

Result<double> GgufFile::GetFloat(std::string_view key) const {
  ATTNLAB_GGUF_FIND(v, key);
  if (IsFloatType(v->type)) return v->f;
  if (IsUnsignedType(v->type)) return static_cast<double>(v->u);
  if (IsSignedType(v->type)) return static_cast<double>(v->i);
  return Mismatch(path_, key, *v, "a number");
}

Result<bool> GgufFile::GetBool(std::string_view key) const {
  ATTNLAB_GGUF_FIND(v, key);
  if (v->type != GgufValueType::kBool) return Mismatch(path_, key, *v, "a bool");
  return v->b;
}

Result<std::vector<std::string>> GgufFile::GetStringArray(std::string_view key) const {
  ATTNLAB_GGUF_FIND(v, key);
  if (v->type != GgufValueType::kArray || v->array_type != GgufValueType::kString)
    return Mismatch(path_, key, *v, "an array of strings");
  return v->array_strings;
}

Result<std::vector<double>> GgufFile::GetFloatArray(std::string_view key) const {
  ATTNLAB_GGUF_FIND(v, key);
  if (v->type != GgufValueType::kArray) return Mismatch(path_, key, *v, "an array of numbers");
  if (IsFloatType(v->array_type)) return v->array_floats;
  if (IsUnsignedType(v->array_type))
    return std::vector<double>(v->array_uints.begin(), v->array_uints.end());
  if (IsSignedType(v->array_type))
    return std::vector<double>(v->array_ints.begin(), v->array_ints.end());
  return Mismatch(path_, key, *v, "an array of numbers");
}

Result<std::vector<int64_t>> GgufFile::GetIntArray(std::string_view key) const {
  ATTNLAB_GGUF_FIND(v, key);
  if (v->type != GgufValueType::kArray) return Mismatch(path_, key, *v, "an array of integers");
  if (IsSignedType(v->array_type) || v->array_type == GgufValueType::kBool) return v->array_ints;
  if (IsUnsignedType(v->array_type)) {
    std::vector<int64_t> r;
    r.reserve(v->array_uints.size());
    for (uint64_t x : v->array_uints) {
      if (x > static_cast<uint64_t>(INT64_MAX))
        return Mismatch(path_, key, *v, "an array of integers that fit int64");
      r.push_back(static_cast<int64_t>(x));
    }
    return r;
  }
  return Mismatch(path_, key, *v, "an array of integers");
}

#undef ATTNLAB_GGUF_FIND

// ---------------------------------------------------------------------------------------------
// Parsing.

namespace {

class Parser {
 public:
  Parser(const uint8_t* data, uint64_t size, const std::string& name)
      : c_{data, size}, name_(name) {}

  Status Corrupt(const std::string& msg) const { return Status::Corrupt(name_ + ": " + msg); }
  Status Truncated(const std::string& what) const {
    return Corrupt("the file ends inside " + what + " (at byte " + U64(c_.pos) + " of " +
                   U64(c_.size) + ")");
  }

  Status ReadU32(uint32_t* v, const std::string& what) {
    return c_.U32(v) ? Status::Ok() : Truncated(what);
  }
  Status ReadU64(uint64_t* v, const std::string& what) {
    return c_.U64(v) ? Status::Ok() : Truncated(what);
  }
  // A GGUF string: u64 length, bytes. `cap` bounds the length beyond the bytes left.
  Status ReadString(std::string* s, const std::string& what, uint64_t cap) {
    uint64_t n = 0;
    if (!c_.U64(&n)) return Truncated("the length of " + what);
    if (n > c_.left()) {
      return Corrupt(what + ": a string of " + U64(n) + " bytes is declared but only " +
                     U64(c_.left()) + " bytes are left in the file");
    }
    if (n > cap) {
      return Corrupt(what + ": a string of " + U64(n) + " bytes is longer than the " + U64(cap) +
                     " bytes allowed");
    }
    s->assign(reinterpret_cast<const char*>(c_.data + c_.pos), n);
    c_.pos += n;
    return Status::Ok();
  }

  // One scalar of type t into v (scalar members); for arrays the caller appends.
  Status ReadScalar(GgufValueType t, GgufValue* v, const std::string& what) {
    switch (t) {
      case GgufValueType::kUint8: {
        uint8_t x = 0;
        if (!c_.Take(&x, 1)) return Truncated(what);
        v->u = x;
        return Status::Ok();
      }
      case GgufValueType::kInt8: {
        int8_t x = 0;
        if (!c_.Take(&x, 1)) return Truncated(what);
        v->i = x;
        return Status::Ok();
      }
      case GgufValueType::kUint16: {
        uint16_t x = 0;
        if (!c_.Take(&x, 2)) return Truncated(what);
        v->u = x;
        return Status::Ok();
      }
      case GgufValueType::kInt16: {
        int16_t x = 0;
        if (!c_.Take(&x, 2)) return Truncated(what);
        v->i = x;
        return Status::Ok();
      }
      case GgufValueType::kUint32: {
        uint32_t x = 0;
        if (!c_.Take(&x, 4)) return Truncated(what);
        v->u = x;
        return Status::Ok();
      }
      case GgufValueType::kInt32: {
        int32_t x = 0;
        if (!c_.Take(&x, 4)) return Truncated(what);
        v->i = x;
        return Status::Ok();
      }
      case GgufValueType::kFloat32: {
        float x = 0;
        if (!c_.Take(&x, 4)) return Truncated(what);
        v->f = x;
        return Status::Ok();
      }
      case GgufValueType::kBool: {
        uint8_t x = 0;
        if (!c_.Take(&x, 1)) return Truncated(what);
        if (x > 1) return Corrupt(what + ": a bool must be 0 or 1, found " + U64(x));
        v->b = x != 0;
        return Status::Ok();
      }
      case GgufValueType::kString:
        return ReadString(&v->s, what, std::numeric_limits<uint64_t>::max());
      case GgufValueType::kUint64: {
        uint64_t x = 0;
        if (!c_.Take(&x, 8)) return Truncated(what);
        v->u = x;
        return Status::Ok();
      }
      case GgufValueType::kInt64: {
        int64_t x = 0;
        if (!c_.Take(&x, 8)) return Truncated(what);
        v->i = x;
        return Status::Ok();
      }
      case GgufValueType::kFloat64: {
        double x = 0;
        if (!c_.Take(&x, 8)) return Truncated(what);
        v->f = x;
        return Status::Ok();
      }
      case GgufValueType::kArray:
        break;
    }
    return Status::Internal("gguf: ReadScalar on an array");
  }

  Status ReadValue(GgufValueType t, GgufValue* v, const std::string& what) {
    v->type = t;
    if (t != GgufValueType::kArray) return ReadScalar(t, v, "the value of " + what);
    uint32_t et = 0;
    ATTNLAB_RETURN_IF_ERROR(ReadU32(&et, "the element type of " + what));
    if (!ValueTypeKnown(et)) {
      return Corrupt(what + ": unknown array element type id " + U64(et) +
                     " (GGUF value types are 0-12)");
    }
    v->array_type = static_cast<GgufValueType>(et);
    if (v->array_type == GgufValueType::kArray) {
      return Status::InvalidArgument(name_ + ": " + what + ": arrays of arrays are not supported");
    }
    uint64_t n = 0;
    ATTNLAB_RETURN_IF_ERROR(ReadU64(&n, "the length of " + what));
    const uint64_t min = MinValueBytes(v->array_type);
    if (n > c_.left() / min) {
      return Corrupt(what + ": an array of " + U64(n) + " " + GgufValueTypeName(v->array_type) +
                     " needs at least " +
                     (n > UINT64_MAX / min ? std::string("2^64") : U64(n * min)) +
                     " bytes but only " + U64(c_.left()) + " bytes are left in the file");
    }
    const size_t count = static_cast<size_t>(n);
    const GgufValueType et2 = v->array_type;
    GgufValue e;
    const std::string ewhat = "an element of " + what;
    if (IsUnsignedType(et2)) {
      v->array_uints.reserve(count);
      for (size_t k = 0; k < count; ++k) {
        ATTNLAB_RETURN_IF_ERROR(ReadScalar(et2, &e, ewhat));
        v->array_uints.push_back(e.u);
      }
    } else if (IsSignedType(et2) || et2 == GgufValueType::kBool) {
      v->array_ints.reserve(count);
      for (size_t k = 0; k < count; ++k) {
        ATTNLAB_RETURN_IF_ERROR(ReadScalar(et2, &e, ewhat));
        v->array_ints.push_back(et2 == GgufValueType::kBool ? (e.b ? 1 : 0) : e.i);
      }
    } else if (IsFloatType(et2)) {
      v->array_floats.reserve(count);
      for (size_t k = 0; k < count; ++k) {
        ATTNLAB_RETURN_IF_ERROR(ReadScalar(et2, &e, ewhat));
        v->array_floats.push_back(e.f);
      }
    } else {  // strings
      v->array_strings.reserve(count);
      for (size_t k = 0; k < count; ++k) {
        std::string s;
        ATTNLAB_RETURN_IF_ERROR(ReadString(&s, "string " + U64(k) + " of " + what,
                                           std::numeric_limits<uint64_t>::max()));
        v->array_strings.push_back(std::move(s));
      }
    }
    return Status::Ok();
  }

  Cursor c_;
  const std::string& name_;
};

}  // namespace

Result<GgufFile> GgufFile::Parse(std::shared_ptr<const Storage> storage, const std::string& name) {
  Parser p(storage->data, storage->size, name);
  const uint64_t size = storage->size;
  if (size < 4) {
    return p.Corrupt("the file is " + U64(size) +
                     " bytes; a GGUF file starts with the 4-byte magic 'GGUF'");
  }
  if (std::memcmp(storage->data, "GGUF", 4) != 0) {
    return p.Corrupt("not a GGUF file: the first 4 bytes are " +
                     Quote(std::string_view(reinterpret_cast<const char*>(storage->data), 4)) +
                     ", expected 'GGUF'");
  }
  p.c_.pos = 4;
  GgufFile f;
  f.path_ = name;
  f.storage_ = storage;
  ATTNLAB_RETURN_IF_ERROR(p.ReadU32(&f.version_, "the version field"));
  if (f.version_ == 1) {
    return Status::InvalidArgument(name +
                                   ": GGUF version 1 is not supported (it used 32-bit counts; "
                                   "versions 2 and 3 are read): convert the file again");
  }
  if (f.version_ != 2 && f.version_ != 3) {
    if ((f.version_ & 0xFFFFu) == 0 && f.version_ != 0) {
      return Status::InvalidArgument(name + ": the version field reads " + U64(f.version_) +
                                     ": a big-endian GGUF file, which attnlab does not read");
    }
    if (f.version_ == 0) return p.Corrupt("GGUF version 0 does not exist");
    return Status::InvalidArgument(name + ": GGUF version " + U64(f.version_) +
                                   " is not supported (versions 2 and 3 are)");
  }
  uint64_t n_tensors = 0, n_kv = 0;
  ATTNLAB_RETURN_IF_ERROR(p.ReadU64(&n_tensors, "the tensor count"));
  ATTNLAB_RETURN_IF_ERROR(p.ReadU64(&n_kv, "the metadata key/value count"));
  // Each key/value needs at least 13 bytes (key length, type, a 1-byte value), each tensor info
  // 24 (name length, n_dims, type, offset): counts beyond that cannot be real.
  if (n_kv > p.c_.left() / 13) {
    return p.Corrupt("the header declares " + U64(n_kv) + " metadata key/values, but the " +
                     U64(p.c_.left()) + " bytes left in the file hold at most " +
                     U64(p.c_.left() / 13));
  }
  if (n_tensors > p.c_.left() / 24) {
    return p.Corrupt("the header declares " + U64(n_tensors) + " tensors, but the " +
                     U64(p.c_.left()) + " bytes left in the file hold at most " +
                     U64(p.c_.left() / 24) + " tensor infos");
  }

  // Metadata.
  f.metadata_.reserve(static_cast<size_t>(n_kv));
  for (uint64_t k = 0; k < n_kv; ++k) {
    std::string key;
    ATTNLAB_RETURN_IF_ERROR(
        p.ReadString(&key, "the key of metadata entry " + U64(k), kGgufMaxNameBytes));
    const std::string what = "metadata key " + Quote(key);
    uint32_t type = 0;
    ATTNLAB_RETURN_IF_ERROR(p.ReadU32(&type, "the value type of " + what));
    if (!ValueTypeKnown(type)) {
      return p.Corrupt(what + ": unknown value type id " + U64(type) +
                       " (GGUF value types are 0-12)");
    }
    GgufValue v;
    ATTNLAB_RETURN_IF_ERROR(p.ReadValue(static_cast<GgufValueType>(type), &v, what));
    if (!f.key_index_.emplace(key, f.metadata_.size()).second)
      return p.Corrupt(what + " appears twice");
    f.metadata_.emplace_back(std::move(key), std::move(v));
  }
  if (const GgufValue* a = f.Find("general.alignment")) {
    if (a->type != GgufValueType::kUint32) {
      return p.Corrupt("metadata key 'general.alignment' is " + a->Describe() +
                       ", expected a uint32");
    }
    if (a->u == 0 || (a->u & (a->u - 1)) != 0) {
      return p.Corrupt("metadata key 'general.alignment' is " + U64(a->u) +
                       "; it must be a power of two");
    }
    f.alignment_ = a->u;
  }

  // Tensor infos.
  f.tensors_.reserve(static_cast<size_t>(n_tensors));
  for (uint64_t k = 0; k < n_tensors; ++k) {
    GgufTensorInfo t;
    ATTNLAB_RETURN_IF_ERROR(
        p.ReadString(&t.name, "the name of tensor info " + U64(k), kGgufMaxNameBytes));
    const std::string what = "tensor " + Quote(t.name);
    uint32_t n_dims = 0;
    ATTNLAB_RETURN_IF_ERROR(p.ReadU32(&n_dims, "n_dims of " + what));
    if (n_dims > static_cast<uint32_t>(kGgufMaxDims)) {
      return p.Corrupt(what + ": n_dims is " + U64(n_dims) + "; GGUF allows at most " +
                       std::to_string(kGgufMaxDims));
    }
    uint64_t numel = 1;
    bool overflow = false;
    for (uint32_t d = 0; d < n_dims; ++d) {
      uint64_t x = 0;
      ATTNLAB_RETURN_IF_ERROR(p.ReadU64(&x, "the dimensions of " + what));
      if (x > static_cast<uint64_t>(INT64_MAX) || __builtin_mul_overflow(numel, x, &numel) ||
          numel > static_cast<uint64_t>(INT64_MAX)) {
        overflow = true;
      }
      t.dims.push_back(static_cast<int64_t>(std::min<uint64_t>(x, INT64_MAX)));
    }
    if (overflow) {
      std::string dims = "[";
      for (size_t d = 0; d < t.dims.size(); ++d)
        dims += (d ? ", " : "") + std::to_string(t.dims[d]);
      return p.Corrupt(what + ": dimensions " + dims + "] have more elements than fit 63 bits");
    }
    uint32_t type = 0;
    ATTNLAB_RETURN_IF_ERROR(p.ReadU32(&type, "the type of " + what));
    if (!GgmlTypeKnown(type)) {
      return p.Corrupt(what + ": unknown ggml type id " + U64(type) +
                       " (removed from ggml, or newer than attnlab knows)");
    }
    t.type = static_cast<GgmlType>(type);
    ATTNLAB_RETURN_IF_ERROR(p.ReadU64(&t.offset, "the data offset of " + what));
    const uint64_t block = static_cast<uint64_t>(GgmlBlockSize(t.type));
    const uint64_t row_len = t.dims.empty() ? 1 : static_cast<uint64_t>(t.dims[0]);
    if (row_len % block != 0) {
      return p.Corrupt(what + ": its rows of " + U64(row_len) + " elements are not a multiple of " +
                       "the " + GgmlTypeName(t.type) + " block size " + U64(block));
    }
    if (__builtin_mul_overflow(numel / block, static_cast<uint64_t>(GgmlTypeSize(t.type)),
                               &t.nbytes)) {
      return p.Corrupt(what + ": its " + U64(numel) + " elements of " + GgmlTypeName(t.type) +
                       " need more bytes than fit 64 bits");
    }
    if (t.offset % f.alignment_ != 0) {
      return p.Corrupt(what + ": data offset " + U64(t.offset) +
                       " is not a multiple of the alignment " + U64(f.alignment_));
    }
    if (!f.tensor_index_.emplace(t.name, f.tensors_.size()).second)
      return p.Corrupt(what + " appears twice");
    f.tensors_.push_back(std::move(t));
  }

  // The data section starts at the next multiple of the alignment.
  const uint64_t header_end = p.c_.pos;
  f.data_offset_ = (header_end + f.alignment_ - 1) / f.alignment_ * f.alignment_;
  f.data_size_ = f.data_offset_ <= size ? size - f.data_offset_ : 0;
  f.data_ = storage->data + std::min(f.data_offset_, size);
  for (const GgufTensorInfo& t : f.tensors_) {
    if (t.offset > f.data_size_ || t.nbytes > f.data_size_ - t.offset) {
      return p.Corrupt("tensor " + Quote(t.name) + ": its " + U64(t.nbytes) + " bytes at offset " +
                       U64(t.offset) + " reach past the end of the " + U64(f.data_size_) +
                       "-byte data section (the file is truncated?)");
    }
  }
  // No two tensors may share a byte.
  std::vector<const GgufTensorInfo*> by_offset;
  for (const GgufTensorInfo& t : f.tensors_) {
    if (t.nbytes > 0) by_offset.push_back(&t);
  }
  std::sort(by_offset.begin(), by_offset.end(),
            [](const GgufTensorInfo* a, const GgufTensorInfo* b) {
              if (a->offset != b->offset) return a->offset < b->offset;
              return a < b;  // file order
            });
  for (size_t k = 1; k < by_offset.size(); ++k) {
    const GgufTensorInfo* a = by_offset[k - 1];
    const GgufTensorInfo* b = by_offset[k];
    if (b->offset < a->offset + a->nbytes) {
      return p.Corrupt("tensor " + Quote(b->name) + " [" + U64(b->offset) + ", " +
                       U64(b->offset + b->nbytes) + ") overlaps tensor " + Quote(a->name) + " [" +
                       U64(a->offset) + ", " + U64(a->offset + a->nbytes) + ")");
    }
  }
  return f;
}

Result<GgufFile> ParseGguf(std::string bytes, const std::string& name) {
  auto storage = std::make_shared<GgufFile::Storage>();
  storage->owned = std::move(bytes);
  storage->data = reinterpret_cast<const uint8_t*>(storage->owned.data());
  storage->size = storage->owned.size();
  return GgufFile::Parse(std::move(storage), name);
}

Result<GgufFile> ReadGguf(const std::string& path) {
  ATTNLAB_ASSIGN_OR_RETURN(ReadOnlyFile file,
                           ReadOnlyFile::Open(path, " (a GGUF file was expected)"));
  auto storage = std::make_shared<GgufFile::Storage>();
  storage->size = static_cast<uint64_t>(file.size());
  if (storage->size > 0) {
    void* m = ::mmap(nullptr, storage->size, PROT_READ, MAP_PRIVATE, file.fd(), 0);
    if (m == MAP_FAILED) {
      const int err = errno;
      return Status::IoError(path + ": cannot map " + U64(storage->size) +
                             " bytes: " + ErrnoMessage(err));
    }
    storage->map = m;
    storage->data = static_cast<const uint8_t*>(m);
  } else {
    storage->data = reinterpret_cast<const uint8_t*>(storage->owned.data());
  }
  return GgufFile::Parse(std::move(storage), path);
}

}  // namespace attnlab
