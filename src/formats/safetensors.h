// safetensors files (Hugging Face's tensor container).
// ref: https://github.com/huggingface/safetensors (README, "Format")
//
// Layout of a file:
//   bytes 0-7      N: u64 little-endian, the size of the header
//   bytes 8..8+N   the header: a UTF-8 JSON object, possibly padded with trailing spaces
//                    { "__metadata__": {"key": "value", ...},          (optional, str -> str)
//                      "wte": {"dtype": "F32", "shape": [50257, 768],
//                              "data_offsets": [0, 154389504]}, ... }
//   then           the byte buffer: every tensor's data, little-endian, C order. data_offsets
//                  are [begin, end) relative to the start of the buffer.
//
// The reader trusts nothing in the file. Before it allocates anything it checks N against the
// file size and a cap (kSafetensorsMaxHeaderBytes); the header must be a JSON object (parsed
// without exceptions, duplicate names rejected); every entry needs a known dtype, a shape of
// non-negative integers whose element count does not overflow, data_offsets inside the buffer
// with end - begin == numel * itemsize; and, as the spec requires, the tensors must tile the
// buffer exactly: no two overlap and no byte belongs to no tensor. Every error names the file,
// the tensor and what was expected versus found. The file is memory-mapped read-only; the
// checks above make every later access in bounds.
//
// The writer emits F32 (or any dtype from raw bytes) with the header padded by spaces so the
// buffer starts at a multiple of 8 bytes, and writes the file atomically (core/atomic_file.h).
#ifndef ATTNLAB_FORMATS_SAFETENSORS_H_
#define ATTNLAB_FORMATS_SAFETENSORS_H_

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "attnlab/status.h"

namespace attnlab {

// Largest header the reader accepts (GPT-2 XL's header is ~40 KB).
inline constexpr uint64_t kSafetensorsMaxHeaderBytes = 100ull << 20;

enum class SafetensorsDtype {
  kBool,
  kU8,
  kI8,
  kU16,
  kI16,
  kF16,
  kBF16,
  kU32,
  kI32,
  kF32,
  kU64,
  kI64,
  kF64,
  kF8E4M3,
  kF8E5M2,
};

// "F32" etc. (the spelling used in headers).
const char* SafetensorsDtypeName(SafetensorsDtype d);
// Bytes per element.
int64_t SafetensorsDtypeSize(SafetensorsDtype d);
// Parses "F32", "BF16", ...; false if unknown.
bool ParseSafetensorsDtype(std::string_view s, SafetensorsDtype* out);
// "[2, 3]".
std::string TensorShapeString(std::span<const int64_t> shape);

// One tensor of a file.
struct SafetensorsTensor {
  std::string name;
  SafetensorsDtype dtype = SafetensorsDtype::kF32;
  std::vector<int64_t> shape;   // empty for a scalar
  uint64_t begin = 0, end = 0;  // [begin, end) in the data buffer
  int64_t numel() const;        // product(shape), 1 for a scalar
};

// A parsed, validated file. Cheap to copy (the mapping is shared).
class SafetensorsFile {
 public:
  const std::string& path() const { return path_; }
  // Sorted by data offset.
  const std::vector<SafetensorsTensor>& tensors() const { return tensors_; }
  // nullptr if absent.
  const SafetensorsTensor* Find(std::string_view name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // The raw little-endian bytes of a tensor of this file.
  std::span<const uint8_t> Bytes(const SafetensorsTensor& t) const;
  // Keeps the file's bytes (its mapping) alive for as long as the caller holds it.
  std::shared_ptr<const void> keepalive() const { return storage_; }

  // The elements as float: F32 as is, F64 rounded to nearest, F16 and BF16 exactly. Other
  // dtypes are an InvalidArgument naming the file, the tensor and the dtype.
  Result<std::vector<float>> ToFloat(const SafetensorsTensor& t) const;
  // Same, into out[0, t.numel()). REQUIRES: out_size == t.numel() (else InvalidArgument).
  Status ReadFloat(const SafetensorsTensor& t, float* out, int64_t out_size) const;

 private:
  friend Result<SafetensorsFile> ParseSafetensors(std::string bytes, const std::string& name);
  friend Result<SafetensorsFile> ReadSafetensors(const std::string& path);
  struct Storage;
  static Result<SafetensorsFile> Parse(std::shared_ptr<const Storage> storage,
                                       const std::string& name);
  std::string path_;
  std::shared_ptr<const Storage> storage_;
  const uint8_t* buffer_ = nullptr;  // start of the data buffer (inside storage_)
  uint64_t buffer_size_ = 0;
  std::vector<SafetensorsTensor> tensors_;
  std::map<std::string, size_t, std::less<>> index_;
  std::map<std::string, std::string> metadata_;
};

// Maps and validates `path`. NotFound if it does not exist, IoError if the OS refuses, Corrupt if
// the contents contradict the format, InvalidArgument/OutOfRange for valid files attnlab cannot
// use (unknown dtype, header larger than the cap).
Result<SafetensorsFile> ReadSafetensors(const std::string& path);
// Same checks on the bytes of a whole file held in memory; `name` prefixes the errors.
Result<SafetensorsFile> ParseSafetensors(std::string bytes, const std::string& name);

// A tensor to write: a view of caller memory (numel * itemsize bytes, little-endian, C order).
struct NamedTensor {
  std::string name;
  std::vector<int64_t> shape;
  const void* data = nullptr;
  SafetensorsDtype dtype = SafetensorsDtype::kF32;

  static NamedTensor F32(std::string name, std::vector<int64_t> shape, const float* data) {
    return NamedTensor{std::move(name), std::move(shape), data, SafetensorsDtype::kF32};
  }
};

// The bytes of the header (8-byte length + JSON padded to a multiple of 8). Tensors are laid out
// in the order given. InvalidArgument for empty or duplicate names, "__metadata__" as a name,
// negative shapes.
Result<std::string> EncodeSafetensorsHeader(const std::vector<NamedTensor>& tensors,
                                            const std::map<std::string, std::string>& metadata);
// Writes the file atomically.
Status WriteSafetensors(const std::string& path, const std::vector<NamedTensor>& tensors,
                        const std::map<std::string, std::string>& metadata = {});

}  // namespace attnlab

#endif  // ATTNLAB_FORMATS_SAFETENSORS_H_
