#include "core/npy.h"

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <limits>
#include <optional>
#include <set>

#include "core/atomic_file.h"
#include "core/files.h"
#include "core/printable.h"

namespace attnlab {

static_assert(std::endian::native == std::endian::little,
              "npy.cc reads and writes little-endian data in place; port it for big-endian hosts");

namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicLen = 6;
constexpr char kSupported[] =
    "'<f4' (float32), '<f8' (float64), '|u1' (uint8), '|b1' (bool), "
    "'<i4' (int32), '<i8' (int64)";

std::string Str(int64_t x) { return std::to_string(x); }

std::string Escape(std::string_view s, size_t max = 80) { return PrintableExcerpt(s, max); }

std::string ShapeToString(std::span<const int64_t> shape) {
  std::string r = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) r += ", ";
    r += Str(shape[i]);
  }
  return r + "]";
}

int64_t ItemSizeOf(const std::string& descr) {
  if (descr == "<f4" || descr == "<i4") return 4;
  if (descr == "<f8" || descr == "<i8") return 8;
  if (descr == "|u1" || descr == "|b1") return 1;
  return 0;
}

// Maps a descr from a file to its canonical form, or explains why it is not supported.
Result<std::string> CanonicalDescr(const std::string& d, const std::string& name) {
  if (d.size() == 3 && (d[1] == 'u' || d[1] == 'b') && d[2] == '1' &&
      (d[0] == '|' || d[0] == '<' || d[0] == '>' || d[0] == '=')) {
    return std::string("|") + d[1] + "1";  // byte order is meaningless for one byte
  }
  if (d.size() == 3 && (d == ">f4" || d == ">f8" || d == ">i4" || d == ">i8")) {
    return Status::InvalidArgument(name + ": dtype '" + d +
                                   "' is big-endian; attnlab reads little-endian data only. Hint: "
                                   "convert with numpy, a.astype('<" +
                                   d.substr(1) + "')");
  }
  if (d == "<f4" || d == "<f8" || d == "<i4" || d == "<i8") return d;
  return Status::InvalidArgument(name + ": unsupported dtype '" + Escape(d) +
                                 "'; expected one of " + kSupported);
}

// ---- The header dict --------------------------------------------------------------------------

struct Header {
  std::string dtype;
  std::vector<int64_t> shape;
};

// A recursive-descent parser for the one dict literal numpy writes. Accepts what Python's
// literal_eval would for this grammar (any key order, ' or " quotes, whitespace, a trailing
// comma) and nothing else.
class HeaderParser {
 public:
  HeaderParser(std::string_view text, const std::string& name) : t_(text), name_(name) {}

  Result<Header> Parse() {
    SkipWs();
    if (!Eat('{')) return Error("expected '{' at the start of the header dict");
    std::optional<std::string> descr;
    std::optional<bool> fortran;
    std::optional<std::vector<int64_t>> shape;
    SkipWs();
    while (!Eat('}')) {
      std::string key;
      ATTNLAB_RETURN_IF_ERROR(ParseString(&key, "a quoted key"));
      SkipWs();
      if (!Eat(':')) return Error("expected ':' after the key '" + Escape(key) + "'");
      SkipWs();
      if (key == "descr") {
        if (descr) return Error("duplicate key 'descr'");
        if (Peek() == '[') {
          return Status::InvalidArgument(name_ +
                                         ": structured dtypes (a list as 'descr') are not "
                                         "supported; expected one of " +
                                         kSupported);
        }
        std::string d;
        ATTNLAB_RETURN_IF_ERROR(ParseString(&d, "a quoted dtype string as the value of 'descr'"));
        descr = d;
      } else if (key == "fortran_order") {
        if (fortran) return Error("duplicate key 'fortran_order'");
        if (EatWord("True")) {
          fortran = true;
        } else if (EatWord("False")) {
          fortran = false;
        } else {
          return Error("expected True or False as the value of 'fortran_order'");
        }
      } else if (key == "shape") {
        if (shape) return Error("duplicate key 'shape'");
        std::vector<int64_t> s;
        ATTNLAB_RETURN_IF_ERROR(ParseShape(&s));
        shape = std::move(s);
      } else {
        return Error("unexpected key '" + Escape(key) +
                     "'; a .npy header has exactly 'descr', 'fortran_order' and 'shape'");
      }
      SkipWs();
      if (Eat(',')) {
        SkipWs();
        continue;
      }
      if (Peek() != '}') return Error("expected ',' or '}' after the value of '" + key + "'");
    }
    SkipWs();
    if (pos_ != t_.size()) return Error("unexpected text after the closing '}'");
    for (auto [present, key] : {std::pair{descr.has_value(), "descr"},
                                {fortran.has_value(), "fortran_order"},
                                {shape.has_value(), "shape"}}) {
      if (!present) {
        return Status::Corrupt(
            name_ + ": header lacks the key '" + key +
            "'; expected 'descr', 'fortran_order' and 'shape'; header: " + Escape(t_, 200));
      }
    }
    if (*fortran) {
      return Status::InvalidArgument(
          name_ +
          ": fortran_order is True; attnlab reads C-order arrays only. Hint: save "
          "numpy.ascontiguousarray(a) instead");
    }
    Header h;
    ATTNLAB_ASSIGN_OR_RETURN(h.dtype, CanonicalDescr(*descr, name_));
    h.shape = std::move(*shape);
    return h;
  }

 private:
  char Peek() const { return pos_ < t_.size() ? t_[pos_] : '\0'; }
  bool Eat(char c) {
    if (Peek() != c || pos_ >= t_.size()) return false;
    ++pos_;
    return true;
  }
  bool EatWord(std::string_view w) {
    if (t_.substr(pos_, w.size()) != w) return false;
    pos_ += w.size();
    return true;
  }
  void SkipWs() {
    while (pos_ < t_.size() &&
           (t_[pos_] == ' ' || t_[pos_] == '\t' || t_[pos_] == '\n' || t_[pos_] == '\r')) {
      ++pos_;
    }
  }
  Status Error(const std::string& what) const {
    const std::string found =
        pos_ < t_.size() ? "'" + Escape(t_.substr(pos_, 12)) + "'" : "the end of the header";
    return Status::Corrupt(name_ + ": malformed header: " + what + " at offset " + Str(pos_) +
                           ", found " + found + "; header: " + Escape(t_, 200));
  }

  Status ParseString(std::string* out, const char* expected) {
    const char q = Peek();
    if (q != '\'' && q != '"') return Error(std::string("expected ") + expected);
    ++pos_;
    const size_t end = t_.find(q, pos_);
    if (end == std::string_view::npos) return Error("unterminated string");
    const std::string_view s = t_.substr(pos_, end - pos_);
    if (s.find('\\') != std::string_view::npos || s.find('\n') != std::string_view::npos) {
      return Error("escape sequences and newlines are not expected in header strings");
    }
    *out = std::string(s);
    pos_ = end + 1;
    return Status::Ok();
  }

  // '(' [int (',' int)* [',']] ')'; a single element needs its comma, as in Python.
  Status ParseShape(std::vector<int64_t>* shape) {
    if (!Eat('('))
      return Error("expected a tuple such as (2, 3), (5,) or () as the value of 'shape'");
    SkipWs();
    bool trailing_comma = false;
    while (!Eat(')')) {
      int64_t d = 0;
      ATTNLAB_RETURN_IF_ERROR(ParseDim(&d));
      shape->push_back(d);
      SkipWs();
      trailing_comma = Eat(',');
      SkipWs();
      if (!trailing_comma && Peek() != ')') return Error("expected ',' or ')' in the shape tuple");
    }
    if (shape->size() == 1 && !trailing_comma) {
      return Error("a one-element shape must be written (n,), as Python writes a 1-tuple");
    }
    return Status::Ok();
  }

  Status ParseDim(int64_t* d) {
    if (Peek() == '-') {
      const size_t start = pos_++;
      while (pos_ < t_.size() && t_[pos_] >= '0' && t_[pos_] <= '9') ++pos_;
      return Status::Corrupt(name_ + ": negative dimension " +
                             Escape(t_.substr(start, pos_ - start)) +
                             " in the shape; dimensions must be >= 0; header: " + Escape(t_, 200));
    }
    if (Peek() < '0' || Peek() > '9') return Error("expected a non-negative integer dimension");
    const size_t start = pos_;
    int64_t v = 0;
    bool overflow = false;
    while (pos_ < t_.size() && t_[pos_] >= '0' && t_[pos_] <= '9') {
      const int digit = t_[pos_] - '0';
      if (v > (std::numeric_limits<int64_t>::max() - digit) / 10) overflow = true;
      if (!overflow) v = v * 10 + digit;
      ++pos_;
    }
    if (overflow) {
      return Status::Corrupt(name_ + ": dimension " + Escape(t_.substr(start, pos_ - start)) +
                             " does not fit in 64 bits; header: " + Escape(t_, 200));
    }
    Eat('L');  // Python 2's numpy wrote longs as "3L"
    *d = v;
    return Status::Ok();
  }

  std::string_view t_;
  const std::string& name_;
  size_t pos_ = 0;
};

// The fixed preamble: magic, version, header length. Needs the first min(size, 12) bytes.
struct Preamble {
  int major = 0;
  int64_t header_offset = 0;  // where the dict starts
  int64_t header_len = 0;
};

Result<Preamble> ParsePreamble(std::string_view head, int64_t file_size, const std::string& name) {
  if (file_size == 0) {
    return Status::Corrupt(name +
                           ": the file is empty (0 bytes); expected a .npy file starting "
                           "with the magic \\x93NUMPY");
  }
  const size_t n = std::min(head.size(), kMagicLen);
  if (head.substr(0, n) != std::string_view(kMagic, n) || head.size() < kMagicLen) {
    if (head.substr(0, n) == std::string_view(kMagic, n)) {
      return Status::Corrupt(name + ": truncated: " + Str(file_size) +
                             " bytes end inside the magic \\x93NUMPY");
    }
    return Status::Corrupt(name +
                           ": not a .npy file: expected the magic \\x93NUMPY at byte 0, "
                           "found '" +
                           Escape(head.substr(0, 8)) + "'");
  }
  if (head.size() < 8) {
    return Status::Corrupt(name + ": truncated: " + Str(file_size) +
                           " bytes end before the format version (bytes 6-7)");
  }
  Preamble p;
  p.major = static_cast<unsigned char>(head[6]);
  const int minor = static_cast<unsigned char>(head[7]);
  if (p.major < 1 || p.major > 3 || minor != 0) {
    return Status::InvalidArgument(name + ": unsupported .npy format version " + Str(p.major) +
                                   "." + Str(minor) + "; expected 1.0, 2.0 or 3.0");
  }
  const int64_t len_bytes = p.major == 1 ? 2 : 4;
  if (static_cast<int64_t>(head.size()) < 8 + len_bytes) {
    return Status::Corrupt(name + ": truncated: " + Str(file_size) +
                           " bytes end inside the header length field (bytes 8-" +
                           Str(7 + len_bytes) + ")");
  }
  int64_t len = 0;
  for (int64_t i = len_bytes - 1; i >= 0; --i)
    len = len * 256 + static_cast<unsigned char>(head[8 + i]);
  p.header_offset = 8 + len_bytes;
  p.header_len = len;
  if (len > file_size - p.header_offset) {
    return Status::Corrupt(name + ": truncated header: the header length field says " + Str(len) +
                           " bytes but only " + Str(file_size - p.header_offset) +
                           " bytes follow it (file size " + Str(file_size) + ")");
  }
  return p;
}

// Parses the dict and checks the data size; returns the expected data size in bytes.
Result<Header> ParseHeaderAndCheckSize(std::string_view dict, const Preamble& p, int64_t file_size,
                                       const std::string& name, int64_t* data_bytes) {
  HeaderParser parser(dict, name);
  ATTNLAB_ASSIGN_OR_RETURN(Header h, parser.Parse());
  const int64_t item = ItemSizeOf(h.dtype);
  int64_t count = 1;
  for (int64_t d : h.shape) {
    if (__builtin_mul_overflow(count, d, &count)) {
      return Status::Corrupt(name + ": shape " + ShapeToString(h.shape) +
                             " has more elements than fit in 64 bits");
    }
  }
  int64_t bytes;
  if (__builtin_mul_overflow(count, item, &bytes)) {
    return Status::Corrupt(name + ": shape " + ShapeToString(h.shape) + " of " +
                           NpyDtypeName(h.dtype) + " needs more bytes than fit in 64 bits");
  }
  const int64_t have = file_size - p.header_offset - p.header_len;
  if (have != bytes) {
    return Status::Corrupt(name + ": data size mismatch: shape " + ShapeToString(h.shape) + " of " +
                           NpyDtypeName(h.dtype) + " needs " + Str(count) + " x " + Str(item) +
                           " = " + Str(bytes) + " bytes, but the file holds " + Str(have) +
                           " bytes after the header");
  }
  *data_bytes = bytes;
  return h;
}

// The header text (dict + padding + '\n') and the preamble for it.
Result<std::string> EncodeHeader(const std::string& dtype, std::span<const int64_t> shape,
                                 size_t data_bytes) {
  const int64_t item = ItemSizeOf(dtype);
  if (item == 0) {
    return Status::InvalidArgument("cannot write dtype '" + dtype + "'; expected one of " +
                                   kSupported);
  }
  int64_t count = 1;
  for (int64_t d : shape) {
    if (d < 0 || __builtin_mul_overflow(count, d, &count)) {
      return Status::InvalidArgument("cannot write shape " + ShapeToString(shape) +
                                     ": negative or overflowing dimensions");
    }
  }
  int64_t need;
  if (__builtin_mul_overflow(count, item, &need) || static_cast<uint64_t>(need) != data_bytes) {
    return Status::InvalidArgument("cannot write shape " + ShapeToString(shape) + " of " +
                                   NpyDtypeName(dtype) + ": " + Str(count) + " elements of " +
                                   Str(item) + " bytes expected, " + std::to_string(data_bytes) +
                                   " bytes given");
  }
  std::string dict = "{'descr': '" + dtype + "', 'fortran_order': False, 'shape': (";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) dict += ", ";
    dict += Str(shape[i]);
  }
  if (shape.size() == 1) dict += ",";
  dict += "), }";
  // Pad with spaces so that the data starts at a multiple of 64 bytes, then '\n'.
  int major = 1;
  size_t pre = kMagicLen + 2 + 2;
  size_t total = (pre + dict.size() + 1 + 63) / 64 * 64;
  if (total - pre > 65535) {
    major = 2;
    pre = kMagicLen + 2 + 4;
    total = (pre + dict.size() + 1 + 63) / 64 * 64;
  }
  const size_t header_len = total - pre;
  dict.append(header_len - dict.size() - 1, ' ');
  dict += '\n';
  std::string out(kMagic, kMagicLen);
  out += static_cast<char>(major);
  out += '\0';
  const int len_bytes = major == 1 ? 2 : 4;
  for (int i = 0; i < len_bytes; ++i) out += static_cast<char>((header_len >> (8 * i)) & 0xff);
  return out + dict;
}

// Writes header + data for `path` into w's temporary file and stages it (fsync, close).
Status StageRaw(const std::string& path, const std::string& dtype, std::span<const int64_t> shape,
                const void* data, size_t nbytes, AtomicFileWriter* w) {
  auto header = EncodeHeader(dtype, shape, nbytes);
  if (!header.ok()) return header.status().WithContext(path);
  ATTNLAB_RETURN_IF_ERROR(w->Open(path));
  ATTNLAB_RETURN_IF_ERROR(w->Append(*header));
  ATTNLAB_RETURN_IF_ERROR(w->Append(data, nbytes));
  return w->Stage();
}

Status WriteRaw(const std::string& path, const std::string& dtype, std::span<const int64_t> shape,
                const void* data, size_t nbytes) {
  AtomicFileWriter w;
  ATTNLAB_RETURN_IF_ERROR(StageRaw(path, dtype, shape, data, nbytes, &w));
  return w.Publish();
}

Result<int64_t> CheckedCount(std::span<const int64_t> shape, const std::string& path) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0 || __builtin_mul_overflow(n, d, &n) || n > (int64_t{1} << 60)) {
      return Status::InvalidArgument(path + ": cannot write shape " + ShapeToString(shape) +
                                     ": negative or overflowing dimensions");
    }
  }
  return n;
}

// Elements of a shape the caller vouches for (it describes a buffer that exists).
int64_t CountOf(std::span<const int64_t> shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    ATTNLAB_CHECK(d >= 0 && !__builtin_mul_overflow(n, d, &n));
  }
  return n;
}

}  // namespace

// ---- NpyArray ---------------------------------------------------------------------------------

int64_t NpyArray::NumElements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

int64_t NpyArray::ItemSize() const { return ItemSizeOf(dtype); }

std::string NpyArray::ShapeString() const { return ShapeToString(shape); }

std::string NpyDtypeName(const std::string& descr) {
  if (descr == "<f4") return "float32";
  if (descr == "<f8") return "float64";
  if (descr == "|u1") return "uint8";
  if (descr == "|b1") return "bool";
  if (descr == "<i4") return "int32";
  if (descr == "<i8") return "int64";
  return "'" + descr + "'";
}

Result<std::vector<float>> NpyArray::ToFloat(const std::string& what) const {
  const int64_t n = NumElements();
  if (static_cast<int64_t>(bytes.size()) != n * ItemSize() || ItemSize() == 0) {
    return Status::Internal(what + ": NpyArray bytes do not match its shape and dtype");
  }
  std::vector<float> out(static_cast<size_t>(n));
  if (dtype == "<f4") {
    if (n) std::memcpy(out.data(), bytes.data(), static_cast<size_t>(n) * 4);
  } else if (dtype == "<f8") {
    for (int64_t i = 0; i < n; ++i) {
      double x;
      std::memcpy(&x, bytes.data() + i * 8, 8);
      out[i] = static_cast<float>(x);
    }
  } else {
    return Status::InvalidArgument(what +
                                   ": expected dtype float32 ('<f4') or float64 ('<f8'), "
                                   "found " +
                                   NpyDtypeName(dtype));
  }
  return out;
}

Result<std::vector<uint8_t>> NpyArray::ToUint8(const std::string& what) const {
  if (dtype != "|u1" && dtype != "|b1") {
    return Status::InvalidArgument(what + ": expected dtype uint8 ('|u1') or bool ('|b1'), found " +
                                   NpyDtypeName(dtype));
  }
  std::vector<uint8_t> out(bytes.size());
  for (size_t i = 0; i < bytes.size(); ++i) {
    const uint8_t x = static_cast<uint8_t>(bytes[i]);
    out[i] = dtype == "|b1" ? (x != 0) : x;
  }
  return out;
}

Result<std::vector<int64_t>> NpyArray::ToInt64(const std::string& what) const {
  const int64_t n = NumElements();
  std::vector<int64_t> out(static_cast<size_t>(n));
  if (dtype == "<i8") {
    if (n) std::memcpy(out.data(), bytes.data(), static_cast<size_t>(n) * 8);
  } else if (dtype == "<i4") {
    for (int64_t i = 0; i < n; ++i) {
      int32_t x;
      std::memcpy(&x, bytes.data() + i * 4, 4);
      out[i] = x;
    }
  } else if (dtype == "|u1" || dtype == "|b1") {
    for (int64_t i = 0; i < n; ++i) out[i] = static_cast<uint8_t>(bytes[i]);
  } else {
    return Status::InvalidArgument(what +
                                   ": expected an integer dtype (int32, int64, uint8, bool), "
                                   "found " +
                                   NpyDtypeName(dtype));
  }
  return out;
}

// ---- Reading ----------------------------------------------------------------------------------

Result<NpyArray> ParseNpy(std::string_view file, const std::string& name) {
  const int64_t size = static_cast<int64_t>(file.size());
  ATTNLAB_ASSIGN_OR_RETURN(Preamble p, ParsePreamble(file.substr(0, 12), size, name));
  int64_t data_bytes = 0;
  ATTNLAB_ASSIGN_OR_RETURN(
      Header h, ParseHeaderAndCheckSize(file.substr(p.header_offset, p.header_len), p, size, name,
                                        &data_bytes));
  NpyArray a;
  a.dtype = std::move(h.dtype);
  a.shape = std::move(h.shape);
  const char* data = file.data() + p.header_offset + p.header_len;
  a.bytes.assign(data, data + data_bytes);
  return a;
}

Result<NpyArray> ReadNpy(const std::string& path) {
  ATTNLAB_ASSIGN_OR_RETURN(
      ReadOnlyFile file,
      ReadOnlyFile::Open(path, " (a directory or device?); expected a .npy file"));
  const int64_t size = file.size();
  // Preamble first: at most 12 bytes.
  char head[12];
  const int64_t head_n = std::min<int64_t>(size, sizeof(head));
  ATTNLAB_RETURN_IF_ERROR(file.ReadAt(0, head, head_n, "the preamble"));
  ATTNLAB_ASSIGN_OR_RETURN(Preamble p, ParsePreamble(std::string_view(head, head_n), size, path));
  // The header length was checked against the file size, so this allocation is bounded by it.
  std::string dict(static_cast<size_t>(p.header_len), '\0');
  ATTNLAB_RETURN_IF_ERROR(file.ReadAt(p.header_offset, dict.data(), p.header_len, "the header"));
  int64_t data_bytes = 0;
  ATTNLAB_ASSIGN_OR_RETURN(Header h, ParseHeaderAndCheckSize(dict, p, size, path, &data_bytes));
  NpyArray a;
  a.dtype = std::move(h.dtype);
  a.shape = std::move(h.shape);
  a.bytes.resize(static_cast<size_t>(data_bytes));  // == what the file holds, checked above
  ATTNLAB_RETURN_IF_ERROR(
      file.ReadAt(p.header_offset + p.header_len, a.bytes.data(), data_bytes, "the data"));
  return a;
}

// ---- Writing ----------------------------------------------------------------------------------

Result<std::string> EncodeNpy(const NpyArray& a) {
  ATTNLAB_ASSIGN_OR_RETURN(std::string out, EncodeHeader(a.dtype, a.shape, a.bytes.size()));
  out.append(a.bytes.data(), a.bytes.size());
  return out;
}

Status WriteNpy(const std::string& path, const NpyArray& a) {
  return WriteRaw(path, a.dtype, a.shape, a.bytes.data(), a.bytes.size());
}

Status WriteNpyFloat(const std::string& path, const float* data, std::span<const int64_t> shape) {
  ATTNLAB_ASSIGN_OR_RETURN(const int64_t n, CheckedCount(shape, path));
  return WriteRaw(path, "<f4", shape, data, static_cast<size_t>(n) * sizeof(float));
}

Status WriteNpyUint8(const std::string& path, const uint8_t* data, std::span<const int64_t> shape) {
  ATTNLAB_ASSIGN_OR_RETURN(const int64_t n, CheckedCount(shape, path));
  return WriteRaw(path, "|u1", shape, data, static_cast<size_t>(n));
}

NpyArray MakeNpyFloat(const float* data, std::span<const int64_t> shape) {
  NpyArray a;
  a.dtype = "<f4";
  a.shape.assign(shape.begin(), shape.end());
  const size_t n = static_cast<size_t>(CountOf(shape)) * sizeof(float);
  a.bytes.resize(n);
  if (n) std::memcpy(a.bytes.data(), data, n);
  return a;
}

NpyArray MakeNpyUint8(const uint8_t* data, std::span<const int64_t> shape) {
  NpyArray a;
  a.dtype = "|u1";
  a.shape.assign(shape.begin(), shape.end());
  const size_t n = static_cast<size_t>(CountOf(shape));
  a.bytes.resize(n);
  if (n) std::memcpy(a.bytes.data(), data, n);
  return a;
}

// ---- NpyOutputSet -----------------------------------------------------------------------------

NpyOutputSet::~NpyOutputSet() = default;  // each staged writer removes its temporary file

Status NpyOutputSet::Stage(const std::string& path, const NpyArray& a) {
  for (const AtomicFileWriter& w : staged_) {
    if (w.path() == path) {
      return Status::InvalidArgument(path + ": the same output path was given twice");
    }
  }
  AtomicFileWriter w;
  ATTNLAB_RETURN_IF_ERROR(StageRaw(path, a.dtype, a.shape, a.bytes.data(), a.bytes.size(), &w));
  staged_.push_back(std::move(w));
  return Status::Ok();
}

Status NpyOutputSet::Commit() {
  while (!staged_.empty()) {
    AtomicFileWriter w = std::move(staged_.front());
    staged_.erase(staged_.begin());
    ATTNLAB_RETURN_IF_ERROR(w.Publish());  // the destructor removes the rest
  }
  return Status::Ok();
}

}  // namespace attnlab
