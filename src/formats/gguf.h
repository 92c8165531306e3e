// GGUF files (llama.cpp's model container), versions 2 and 3.
// ref: https://github.com/ggml-org/ggml/blob/master/docs/gguf.md
//
// Layout of a file (every number little-endian):
//   "GGUF"                       magic (4 bytes)
//   u32 version                  2 or 3 (1 used 32-bit counts and is refused; 2 and 3 differ
//                                only in big-endian support, which attnlab does not read)
//   u64 tensor_count, u64 kv_count
//   kv_count times:              key: string; u32 value type; value
//   tensor_count times:          name: string; u32 n_dims (<= 4); u64 ne[n_dims] (ne[0] is the
//                                fastest-varying dimension: the row length); u32 ggml type;
//                                u64 offset (relative to the data section, a multiple of the
//                                alignment)
//   padding to `general.alignment` (a u32 key; 32 when absent)
//   the data section: each tensor's blocks, row-major with ne[0] fastest
// A string is u64 length + bytes (no NUL). Value types: 0 u8, 1 i8, 2 u16, 3 i16, 4 u32, 5 i32,
// 6 f32, 7 bool (one byte, 0 or 1), 8 string, 9 array (u32 element type, u64 count, elements;
// arrays of arrays are refused), 10 u64, 11 i64, 12 f64.
//
// The reader trusts nothing: every count and length is checked against the bytes left in the
// file before anything sized by it is allocated (an array of n elements needs at least n times
// the element's smallest encoding), n_dims <= 4, dims whose element count fits 63 bits, rows a
// whole number of blocks, type ids known, data inside the file at aligned offsets, no two
// tensors overlapping, no key or tensor name twice. Errors are one line naming the file and the
// key or tensor: Corrupt when the bytes contradict the format, InvalidArgument for a valid file
// attnlab cannot use (version 1, big-endian, nested arrays, dequantizing an unsupported type).
// The file is memory-mapped read-only; the checks make every later access in bounds.
#ifndef ATTNLAB_FORMATS_GGUF_H_
#define ATTNLAB_FORMATS_GGUF_H_

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "attnlab/status.h"

namespace attnlab::internal {
struct QuantCodec;  // engine/weight_gemm.h
}  // namespace attnlab::internal

namespace attnlab {

inline constexpr uint64_t kGgufDefaultAlignment = 32;
inline constexpr int kGgufMaxDims = 4;
// Longest key or tensor name accepted (ggml itself caps tensor names at 63 bytes).
inline constexpr uint64_t kGgufMaxNameBytes = 65535;

enum class GgufValueType : uint32_t {
  kUint8 = 0,
  kInt8 = 1,
  kUint16 = 2,
  kInt16 = 3,
  kUint32 = 4,
  kInt32 = 5,
  kFloat32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kUint64 = 10,
  kInt64 = 11,
  kFloat64 = 12,
};
// "uint32", "string", "array", ...; "?" for an id outside the enum.
const char* GgufValueTypeName(GgufValueType t);

// ggml's tensor types (ggml.h `enum ggml_type`). Ids 4, 5, 31-33 and 36-38 were removed from
// ggml and are refused like any other unknown id.
enum class GgmlType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ8_1 = 9,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kQ8_K = 15,
  kIQ2_XXS = 16,
  kIQ2_XS = 17,
  kIQ3_XXS = 18,
  kIQ1_S = 19,
  kIQ4_NL = 20,
  kIQ3_S = 21,
  kIQ2_S = 22,
  kIQ4_XS = 23,
  kI8 = 24,
  kI16 = 25,
  kI32 = 26,
  kI64 = 27,
  kF64 = 28,
  kIQ1_M = 29,
  kBF16 = 30,
  kTQ1_0 = 34,
  kTQ2_0 = 35,
  kMXFP4 = 39,
};
// True if `id` is one of the GgmlType values above.
bool GgmlTypeKnown(uint32_t id);
// "F32", "Q8_0", "Q4_K", ... ("?" for an unknown id).
const char* GgmlTypeName(GgmlType t);
// Elements per block (1 for plain types, 32 for Q8_0, 256 for the K-quants); 0 if unknown.
int64_t GgmlBlockSize(GgmlType t);
// Bytes per block; 0 if unknown.
int64_t GgmlTypeSize(GgmlType t);
// True for the types GgufFile::ReadFloat and DequantizeGgml turn into floats: F32, F16, BF16,
// F64, Q8_0, Q4_0, Q4_K, Q6_K.
bool GgmlTypeDequantizable(GgmlType t);

// Decodes n elements (n a multiple of the block size) of `type` from src (n / block * type_size
// bytes) into out. Plain scalar code. InvalidArgument "unsupported GGUF tensor type Q5_K in
// <what>" for a type outside GgmlTypeDequantizable, or when n is not a whole number of blocks.
Status DequantizeGgml(GgmlType type, const uint8_t* src, int64_t n, float* out,
                      std::string_view what);

// The row codec (engine/weight_gemm.h) that widens the quantized types DequantizeGgml reads
// (Q8_0, Q4_0, Q4_K, Q6_K), so their matrices can stay quantized in memory; nullptr for any
// other type (plain types are KvDtypes there).
const internal::QuantCodec* GgmlRowCodec(GgmlType t);

// One metadata value. Scalars keep their exact value in the member for their kind; arrays hold
// their elements in the vector for the element kind.
struct GgufValue {
  GgufValueType type = GgufValueType::kUint8;
  GgufValueType array_type = GgufValueType::kUint8;  // arrays only
  uint64_t u = 0;                                    // unsigned integers
  int64_t i = 0;                                     // signed integers
  double f = 0;                                      // float32 / float64
  bool b = false;                                    // bool
  std::string s;                                     // string
  // Arrays: exactly one of these is filled, by element kind (bools go to ints as 0/1).
  std::vector<uint64_t> array_uints;
  std::vector<int64_t> array_ints;
  std::vector<double> array_floats;
  std::vector<std::string> array_strings;
  uint64_t array_size() const;
  // "uint32 7", "string 'llama'", "array of 32000 string".
  std::string Describe() const;
};

struct GgufTensorInfo {
  std::string name;
  GgmlType type = GgmlType::kF32;
  std::vector<int64_t> dims;  // ggml order: dims[0] is the row length (fastest-varying)
  uint64_t offset = 0;        // in the data section
  uint64_t nbytes = 0;        // numel / block size * type size
  int64_t numel() const;      // product of dims (1 for n_dims = 0)
  // Rows of dims[0] elements: numel / dims[0] (0 when dims[0] is 0; 1 for a scalar).
  int64_t rows() const;
};

// A parsed, validated file. Cheap to copy (the mapping is shared).
class GgufFile {
 public:
  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  // File offset of the data section.
  uint64_t data_offset() const { return data_offset_; }

  // Metadata in file order; Find returns nullptr if absent.
  const std::vector<std::pair<std::string, GgufValue>>& metadata() const { return metadata_; }
  const GgufValue* Find(std::string_view key) const;
  bool Has(std::string_view key) const { return Find(key) != nullptr; }

  // Typed getters. NotFound "<file>: no metadata key 'k'" when absent; InvalidArgument naming
  // the file, the key, what was expected and what is there when the type does not fit.
  Result<std::string> GetString(std::string_view key) const;
  // Any integer type whose value is >= 0 (and bool is not an integer).
  Result<uint64_t> GetUint(std::string_view key) const;
  // Any integer type whose value fits int64.
  Result<int64_t> GetInt(std::string_view key) const;
  // float32 or float64 (integers are accepted too and converted).
  Result<double> GetFloat(std::string_view key) const;
  Result<bool> GetBool(std::string_view key) const;
  Result<std::vector<std::string>> GetStringArray(std::string_view key) const;
  // Arrays of float32/float64 (or of integers, converted).
  Result<std::vector<double>> GetFloatArray(std::string_view key) const;
  // Arrays of any integer type whose values fit int64 (or of bools, as 0/1).
  Result<std::vector<int64_t>> GetIntArray(std::string_view key) const;

  // Tensors in file order; FindTensor returns nullptr if absent.
  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  const GgufTensorInfo* FindTensor(std::string_view name) const;
  // The raw bytes of a tensor of this file.
  std::span<const uint8_t> Bytes(const GgufTensorInfo& t) const;
  // Keeps the file's bytes (its mapping) alive for as long as the caller holds it.
  std::shared_ptr<const void> keepalive() const { return storage_; }

  // Every element as float, in ggml order (dims[0] fastest). out.size() must be t.numel()
  // (else InvalidArgument); an undequantizable type is InvalidArgument "unsupported GGUF tensor
  // type Q5_K in blk.0.attn_q.weight" (prefixed with the file).
  Status ReadFloat(const GgufTensorInfo& t, std::span<float> out) const;
  // Rows [row, row + n_rows) of dims[0] elements each into out (n_rows * dims[0] floats).
  Status ReadRowsFloat(const GgufTensorInfo& t, int64_t row, int64_t n_rows,
                       std::span<float> out) const;

 private:
  friend Result<GgufFile> ParseGguf(std::string bytes, const std::string& name);
  friend Result<GgufFile> ReadGguf(const std::string& path);
  struct Storage;
  static Result<GgufFile> Parse(std::shared_ptr<const Storage> storage, const std::string& name);
  std::string path_;
  std::shared_ptr<const Storage> storage_;
  uint32_t version_ = 0;
  uint64_t alignment_ = kGgufDefaultAlignment;
  uint64_t data_offset_ = 0;
  const uint8_t* data_ = nullptr;  // start of the data section (inside storage_)
  uint64_t data_size_ = 0;
  std::vector<std::pair<std::string, GgufValue>> metadata_;
  std::map<std::string, size_t, std::less<>> key_index_;
  std::vector<GgufTensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> tensor_index_;
};

// Maps and validates `path`: NotFound if it does not exist, IoError if the OS refuses, Corrupt /
// InvalidArgument as described at the top.
Result<GgufFile> ReadGguf(const std::string& path);
// Same checks on the bytes of a whole file held in memory; `name` prefixes the errors.
Result<GgufFile> ParseGguf(std::string bytes, const std::string& name);

// IEEE half and bfloat16 to float (exact).
float GgufHalfToFloat(uint16_t h);
float GgufBf16ToFloat(uint16_t b);

}  // namespace attnlab

#endif  // ATTNLAB_FORMATS_GGUF_H_
