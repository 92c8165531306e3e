// NumPy .npy files: the format numpy.save writes (format versions 1.0, 2.0 and 3.0 are read;
// 1.0 is written, 2.0 only when a header would not fit 1.0's 16-bit length).
// ref: https://numpy.org/doc/stable/reference/generated/numpy.lib.format.html
//
// Layout of a file:
//   bytes 0-5   magic "\x93NUMPY"
//   bytes 6-7   major, minor version (1.0, 2.0 or 3.0)
//   then        header length, little-endian: uint16 (1.0) or uint32 (2.0, 3.0)
//   then        the header: a Python dict literal, e.g.
//                 {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
//               padded with spaces and ended by '\n'
//   then        the data: product(shape) items, C order, exactly; nothing after it.
//
// The reader trusts nothing in the file: it checks the magic, the version, the header length
// against the file size, parses the dict (keys in any order, either quote style, optional
// trailing comma, "(5,)" and "()" shapes), rejects negative or overflowing shapes and checks that
// the data section holds exactly product(shape) * itemsize bytes before it allocates anything.
//
// Supported dtypes (descr): '<f4' float32, '<f8' float64, '|u1' uint8, '|b1' bool, '<i4' int32,
// '<i8' int64. C order only. The host must be little-endian (checked at compile time).
#ifndef ATTNLAB_CORE_NPY_H_
#define ATTNLAB_CORE_NPY_H_

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "attnlab/status.h"
#include "core/atomic_file.h"

namespace attnlab {

// One array as read from (or to be written to) a .npy file.
struct NpyArray {
  std::string dtype;           // canonical descr: "<f4", "<f8", "|u1", "|b1", "<i4" or "<i8"
  std::vector<int64_t> shape;  // empty for a scalar
  std::vector<char> bytes;     // the data, C order, little-endian: NumElements() * ItemSize()

  int64_t NumElements() const;      // product(shape); 1 for a scalar
  int64_t ItemSize() const;         // bytes per element of `dtype` (0 if unknown)
  std::string ShapeString() const;  // "[2, 3]", "[]" for a scalar

  // The elements as float: '<f4' as is, '<f8' rounded to nearest. Any other dtype is an error
  // that names `what` (e.g. "q.npy") and the dtype found.
  Result<std::vector<float>> ToFloat(const std::string& what) const;
  // The elements as bytes: '|u1' as is, '|b1' as 0/1. Any other dtype is an error.
  Result<std::vector<uint8_t>> ToUint8(const std::string& what) const;
  // The elements as int64: '<i4', '<i8', '|u1', '|b1'. Any other dtype is an error.
  Result<std::vector<int64_t>> ToInt64(const std::string& what) const;
};

// "float32" for "<f4" and so on; the descr itself if unknown.
std::string NpyDtypeName(const std::string& descr);

// Parses the bytes of a whole .npy file; `name` (usually the path) prefixes every error.
Result<NpyArray> ParseNpy(std::string_view file, const std::string& name);

// Reads and parses `path`. Errors: NotFound (no such file), IoError (the OS refused),
// Corrupt (the file contradicts the format), InvalidArgument (valid .npy that attnlab does not
// support: big-endian, Fortran order, other dtypes).
Result<NpyArray> ReadNpy(const std::string& path);

// The bytes of a version 1.0 .npy file holding `a` (2.0 if the header needs more than 64 KiB).
// REQUIRES: a.dtype supported and a.bytes.size() == NumElements() * ItemSize().
Result<std::string> EncodeNpy(const NpyArray& a);

// Writes `a` atomically (core/atomic_file.h: a temporary file, fsync, rename over `path`). On
// failure `path` is untouched and the temporary file removed.
Status WriteNpy(const std::string& path, const NpyArray& a);
// Convenience writers for contiguous C-order buffers of product(shape) elements.
Status WriteNpyFloat(const std::string& path, const float* data, std::span<const int64_t> shape);
Status WriteNpyUint8(const std::string& path, const uint8_t* data, std::span<const int64_t> shape);

// Builds an NpyArray from a contiguous buffer (copies).
NpyArray MakeNpyFloat(const float* data, std::span<const int64_t> shape);
NpyArray MakeNpyUint8(const uint8_t* data, std::span<const int64_t> shape);

// Writes several files all-or-nothing, as far as POSIX allows: Stage() writes and fsyncs each
// file under a temporary name next to its target; Commit() renames them all into place. Files
// staged but not committed (an error later, or no Commit()) are removed by the destructor, so a
// command that fails half-way leaves no output behind.
class NpyOutputSet {
 public:
  NpyOutputSet() = default;
  ~NpyOutputSet();
  NpyOutputSet(const NpyOutputSet&) = delete;
  NpyOutputSet& operator=(const NpyOutputSet&) = delete;

  Status Stage(const std::string& path, const NpyArray& a);
  Status Commit();

 private:
  std::vector<AtomicFileWriter> staged_;  // staged, in the order given
};

}  // namespace attnlab

#endif  // ATTNLAB_CORE_NPY_H_
