#include "formats/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

#include "core/atomic_file.h"
#include "core/files.h"
#include "core/printable.h"

namespace attnlab {

static_assert(std::endian::native == std::endian::little,
              "safetensors.cc reads little-endian data in place; port it for big-endian hosts");

namespace {

using nlohmann::json;

struct DtypeInfo {
  SafetensorsDtype dtype;
  const char* name;
  int64_t size;
};
constexpr DtypeInfo kDtypes[] = {
    {SafetensorsDtype::kBool, "BOOL", 1},      {SafetensorsDtype::kU8, "U8", 1},
    {SafetensorsDtype::kI8, "I8", 1},          {SafetensorsDtype::kU16, "U16", 2},
    {SafetensorsDtype::kI16, "I16", 2},        {SafetensorsDtype::kF16, "F16", 2},
    {SafetensorsDtype::kBF16, "BF16", 2},      {SafetensorsDtype::kU32, "U32", 4},
    {SafetensorsDtype::kI32, "I32", 4},        {SafetensorsDtype::kF32, "F32", 4},
    {SafetensorsDtype::kU64, "U64", 8},        {SafetensorsDtype::kI64, "I64", 8},
    {SafetensorsDtype::kF64, "F64", 8},        {SafetensorsDtype::kF8E4M3, "F8_E4M3", 1},
    {SafetensorsDtype::kF8E5M2, "F8_E5M2", 1},
};

std::string U64(uint64_t x) { return std::to_string(x); }

// Printable excerpt of an untrusted string, in quotes.
std::string Quote(std::string_view s) {
  std::string r = "'";  // appended piecewise: GCC 12's false -Wrestrict (bug 105329) on "'" + x
  r += PrintableExcerpt(s);
  r += '\'';
  return r;
}

std::string JsonKind(const json& j) {
  if (j.is_null()) return "null";
  if (j.is_boolean()) return "a boolean";
  if (j.is_number_integer())
    return j.is_number_unsigned() ? "a non-negative integer" : "a negative integer";
  if (j.is_number()) return "a non-integer number";
  if (j.is_string()) return "a string";
  if (j.is_array()) return "an array";
  return "an object";
}

// A JSON value that must be a non-negative integer fitting uint64.
bool GetU64(const json& j, uint64_t* out) {
  if (!j.is_number_unsigned()) return false;
  *out = j.get<uint64_t>();
  return true;
}

float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1f;
  const uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;  // +-0
    } else {
      // Subnormal: mant * 2^-24, exact in float.
      const float f = std::ldexp(static_cast<float>(mant), -24);
      return sign ? -f : f;
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (mant << 13);  // inf or nan (payload kept)
  } else {
    bits = sign | ((exp - 15 + 127) << 23) | (mant << 13);
  }
  return std::bit_cast<float>(bits);
}

float Bf16ToFloat(uint16_t b) { return std::bit_cast<float>(static_cast<uint32_t>(b) << 16); }

}  // namespace

const char* SafetensorsDtypeName(SafetensorsDtype d) {
  for (const DtypeInfo& i : kDtypes) {
    if (i.dtype == d) return i.name;
  }
  return "?";
}

int64_t SafetensorsDtypeSize(SafetensorsDtype d) {
  for (const DtypeInfo& i : kDtypes) {
    if (i.dtype == d) return i.size;
  }
  return 0;
}

bool ParseSafetensorsDtype(std::string_view s, SafetensorsDtype* out) {
  for (const DtypeInfo& i : kDtypes) {
    if (s == i.name) {
      *out = i.dtype;
      return true;
    }
  }
  return false;
}

std::string TensorShapeString(std::span<const int64_t> shape) {
  std::string r = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) r += ", ";
    r += std::to_string(shape[i]);
  }
  return r + "]";
}

int64_t SafetensorsTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;  // validated not to overflow when parsed
  return n;
}

// ---------------------------------------------------------------------------------------------
// Storage: a read-only mapping of the file, or bytes held in memory.

struct SafetensorsFile::Storage {
  const uint8_t* data = nullptr;
  uint64_t size = 0;
  void* map = nullptr;  // mmap'ed region (size bytes) or null
  std::string owned;    // in-memory bytes (ParseSafetensors)
  Storage() = default;
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  ~Storage() {
    if (map != nullptr) ::munmap(map, size);
  }
};

const SafetensorsTensor* SafetensorsFile::Find(std::string_view name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

std::span<const uint8_t> SafetensorsFile::Bytes(const SafetensorsTensor& t) const {
  ATTNLAB_CHECK(t.begin <= t.end && t.end <= buffer_size_);
  return {buffer_ + t.begin, static_cast<size_t>(t.end - t.begin)};
}

Status SafetensorsFile::ReadFloat(const SafetensorsTensor& t, float* out, int64_t out_size) const {
  const int64_t n = t.numel();
  if (out_size != n) {
    return Status::InvalidArgument(
        path_ + ": tensor " + Quote(t.name) + " has " + std::to_string(n) + " elements (shape " +
        TensorShapeString(t.shape) + "), the destination holds " + std::to_string(out_size));
  }
  const std::span<const uint8_t> b = Bytes(t);
  const uint8_t* p = b.data();
  switch (t.dtype) {
    case SafetensorsDtype::kF32:
      if (n > 0) std::memcpy(out, p, static_cast<size_t>(n) * 4);
      return Status::Ok();
    case SafetensorsDtype::kF64:
      for (int64_t i = 0; i < n; ++i) {
        double d;
        std::memcpy(&d, p + 8 * i, 8);
        out[i] = static_cast<float>(d);
      }
      return Status::Ok();
    case SafetensorsDtype::kF16:
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, p + 2 * i, 2);
        out[i] = HalfToFloat(h);
      }
      return Status::Ok();
    case SafetensorsDtype::kBF16:
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, p + 2 * i, 2);
        out[i] = Bf16ToFloat(h);
      }
      return Status::Ok();
    default:
      return Status::InvalidArgument(path_ + ": tensor " + Quote(t.name) + " has dtype " +
                                     SafetensorsDtypeName(t.dtype) +
                                     "; expected a floating-point dtype (F32, F16, BF16 or F64)");
  }
}

Result<std::vector<float>> SafetensorsFile::ToFloat(const SafetensorsTensor& t) const {
  std::vector<float> out(static_cast<size_t>(t.numel()));
  ATTNLAB_RETURN_IF_ERROR(ReadFloat(t, out.data(), t.numel()));
  return out;
}

// ---------------------------------------------------------------------------------------------
// Parsing.

Result<SafetensorsFile> SafetensorsFile::Parse(std::shared_ptr<const Storage> storage,
                                               const std::string& name) {
  const uint8_t* data = storage->data;
  const uint64_t size = storage->size;
  auto corrupt = [&](const std::string& msg) { return Status::Corrupt(name + ": " + msg); };
  if (size < 8) {
    return corrupt("the file is " + U64(size) +
                   " bytes; a safetensors file starts with an 8-byte header length");
  }
  uint64_t n = 0;
  std::memcpy(&n, data, 8);
  if (n > size - 8) {
    return corrupt("the header length field says " + U64(n) + " bytes but only " + U64(size - 8) +
                   " bytes follow it (the file is truncated, or not a safetensors file)");
  }
  if (n > kSafetensorsMaxHeaderBytes) {
    return Status::OutOfRange(name + ": the header is " + U64(n) + " bytes, more than the " +
                              U64(kSafetensorsMaxHeaderBytes) + " bytes attnlab accepts");
  }
  const char* hbegin = reinterpret_cast<const char*>(data + 8);
  const char* hend = hbegin + n;
  if (n < 2 || hbegin[0] != '{') {
    return corrupt("the header must be a JSON object starting with '{', found " +
                   Quote(std::string_view(hbegin, std::min<uint64_t>(n, 16))));
  }

  // JSON text has no NUL bytes, and nlohmann's parser would stop at one and ignore the rest.
  if (const void* nul = std::memchr(hbegin, '\0', n)) {
    return corrupt("the header has a NUL byte at offset " +
                   U64(static_cast<uint64_t>(static_cast<const char*>(nul) - hbegin)) +
                   "; it must be JSON text (padded with spaces, if at all)");
  }
  // Parse without exceptions; a callback notes duplicate top-level names (JSON parsers keep the
  // last one silently, which would hide a tensor).
  std::set<std::string> seen;
  std::string duplicate;
  auto cb = [&](int depth, json::parse_event_t ev, json& parsed) {
    if (ev == json::parse_event_t::key && depth == 1 && parsed.is_string()) {
      std::string k = parsed.get<std::string>();
      if (!seen.insert(k).second && duplicate.empty()) duplicate = std::move(k);
    }
    return true;
  };
  const json header = json::parse(hbegin, hend, cb, /*allow_exceptions=*/false);
  if (header.is_discarded()) {
    return corrupt("the " + U64(n) + "-byte header is not valid JSON (or not UTF-8)");
  }
  if (!header.is_object())
    return corrupt("the header must be a JSON object, found " + JsonKind(header));
  if (!duplicate.empty()) return corrupt("the header names " + Quote(duplicate) + " twice");

  SafetensorsFile f;
  f.path_ = name;
  f.storage_ = storage;
  f.buffer_ = data + 8 + n;
  f.buffer_size_ = size - 8 - n;

  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& key = it.key();
    const json& v = it.value();
    if (key == "__metadata__") {
      if (!v.is_object()) return corrupt("__metadata__ must be an object, found " + JsonKind(v));
      for (auto m = v.begin(); m != v.end(); ++m) {
        if (!m.value().is_string()) {
          return corrupt("__metadata__ value of " + Quote(m.key()) + " must be a string, found " +
                         JsonKind(m.value()));
        }
        f.metadata_[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    const std::string what = "tensor " + Quote(key);
    if (!v.is_object())
      return corrupt(what + ": expected an object {dtype, shape, data_offsets}, found " +
                     JsonKind(v));
    for (auto k = v.begin(); k != v.end(); ++k) {
      if (k.key() != "dtype" && k.key() != "shape" && k.key() != "data_offsets") {
        return corrupt(what + ": unexpected field " + Quote(k.key()) +
                       " (expected only dtype, shape, data_offsets)");
      }
    }
    SafetensorsTensor t;
    t.name = key;
    // dtype
    auto d = v.find("dtype");
    if (d == v.end()) return corrupt(what + ": no dtype");
    if (!d->is_string()) return corrupt(what + ": dtype must be a string, found " + JsonKind(*d));
    if (!ParseSafetensorsDtype(d->get<std::string>(), &t.dtype)) {
      return Status::InvalidArgument(
          name + ": " + what + ": unknown dtype " + Quote(d->get<std::string>()) +
          " (known: BOOL, U8, I8, U16, I16, F16, BF16, U32, I32, F32, U64, I64, F64, F8_E4M3, "
          "F8_E5M2)");
    }
    const uint64_t item = static_cast<uint64_t>(SafetensorsDtypeSize(t.dtype));
    // shape
    auto s = v.find("shape");
    if (s == v.end()) return corrupt(what + ": no shape");
    if (!s->is_array()) return corrupt(what + ": shape must be an array, found " + JsonKind(*s));
    if (s->size() > 64) return corrupt(what + ": shape has " + U64(s->size()) + " dimensions");
    uint64_t numel = 1, nbytes = 0;
    for (const json& dim : *s) {
      uint64_t x;
      if (!GetU64(dim, &x)) {
        return corrupt(what + ": shape entries must be non-negative integers, found " +
                       JsonKind(dim) + " " + Quote(dim.dump()));
      }
      if (x > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
          __builtin_mul_overflow(numel, x, &numel) ||
          numel > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return corrupt(what + ": shape " + Quote(s->dump()) +
                       " has more elements than fit 63 bits");
      }
      t.shape.push_back(static_cast<int64_t>(x));
    }
    if (__builtin_mul_overflow(numel, item, &nbytes)) {
      return corrupt(what + ": shape " + Quote(s->dump()) + " of " + SafetensorsDtypeName(t.dtype) +
                     " needs more bytes than fit 64 bits");
    }
    // data_offsets
    auto o = v.find("data_offsets");
    if (o == v.end()) return corrupt(what + ": no data_offsets");
    if (!o->is_array() || o->size() != 2 || !GetU64((*o)[0], &t.begin) ||
        !GetU64((*o)[1], &t.end)) {
      return corrupt(what +
                     ": data_offsets must be [begin, end] (two non-negative integers), found " +
                     Quote(o->dump()));
    }
    if (t.begin > t.end) {
      return corrupt(what + ": data_offsets [" + U64(t.begin) + ", " + U64(t.end) +
                     "] end before they begin");
    }
    if (t.end > f.buffer_size_) {
      return corrupt(what + ": data_offsets [" + U64(t.begin) + ", " + U64(t.end) +
                     "] reach past the end of the " + U64(f.buffer_size_) +
                     "-byte data buffer (the file is truncated?)");
    }
    if (t.end - t.begin != nbytes) {
      return corrupt(what + ": shape " + TensorShapeString(t.shape) + " of " +
                     SafetensorsDtypeName(t.dtype) + " needs " + U64(nbytes) +
                     " bytes, data_offsets [" + U64(t.begin) + ", " + U64(t.end) + "] hold " +
                     U64(t.end - t.begin));
    }
    f.tensors_.push_back(std::move(t));
  }

  // The tensors must tile the buffer: sorted by offset, each begins where the previous ended.
  std::sort(f.tensors_.begin(), f.tensors_.end(),
            [](const SafetensorsTensor& a, const SafetensorsTensor& b) {
              return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
            });
  uint64_t pos = 0;
  const SafetensorsTensor* prev = nullptr;
  for (const SafetensorsTensor& t : f.tensors_) {
    if (t.begin == t.end) continue;  // empty tensors occupy no bytes
    if (t.begin < pos) {
      return corrupt("tensor " + Quote(t.name) + " [" + U64(t.begin) + ", " + U64(t.end) +
                     ") overlaps tensor " + Quote(prev->name) + " [" + U64(prev->begin) + ", " +
                     U64(prev->end) + ")");
    }
    if (t.begin > pos) {
      return corrupt("bytes [" + U64(pos) + ", " + U64(t.begin) +
                     ") of the data buffer belong to no tensor (a hole before tensor " +
                     Quote(t.name) + "); the format requires the tensors to cover the buffer");
    }
    pos = t.end;
    prev = &t;
  }
  if (pos != f.buffer_size_) {
    return corrupt("bytes [" + U64(pos) + ", " + U64(f.buffer_size_) +
                   ") at the end of the data buffer belong to no tensor (trailing garbage, or "
                   "tensors missing from the header)");
  }
  for (size_t i = 0; i < f.tensors_.size(); ++i) f.index_[f.tensors_[i].name] = i;
  return f;
}

Result<SafetensorsFile> ParseSafetensors(std::string bytes, const std::string& name) {
  auto storage = std::make_shared<SafetensorsFile::Storage>();
  storage->owned = std::move(bytes);
  storage->data = reinterpret_cast<const uint8_t*>(storage->owned.data());
  storage->size = storage->owned.size();
  return SafetensorsFile::Parse(std::move(storage), name);
}

Result<SafetensorsFile> ReadSafetensors(const std::string& path) {
  ATTNLAB_ASSIGN_OR_RETURN(ReadOnlyFile file,
                           ReadOnlyFile::Open(path, " (a safetensors file was expected)"));
  const int fd = file.fd();
  auto storage = std::make_shared<SafetensorsFile::Storage>();
  storage->size = static_cast<uint64_t>(file.size());
  if (storage->size >= 8) {
    void* m = ::mmap(nullptr, storage->size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (m == MAP_FAILED) {
      const int err = errno;
      return Status::IoError(path + ": cannot map " + U64(storage->size) +
                             " bytes: " + ErrnoMessage(err));
    }
    storage->map = m;
    storage->data = static_cast<const uint8_t*>(m);
  } else {
    // Too short to be valid; read what there is so Parse reports it.
    storage->owned.resize(storage->size);
    ATTNLAB_RETURN_IF_ERROR(file.ReadAt(0, storage->owned.data(), storage->size, "the file"));
    storage->data = reinterpret_cast<const uint8_t*>(storage->owned.data());
    storage->size = storage->owned.size();
  }
  return SafetensorsFile::Parse(std::move(storage), path);
}

// ---------------------------------------------------------------------------------------------
// Writing.

Result<std::string> EncodeSafetensorsHeader(const std::vector<NamedTensor>& tensors,
                                            const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json h = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    nlohmann::ordered_json m = nlohmann::ordered_json::object();
    for (const auto& [k, v] : metadata) m[k] = v;
    h["__metadata__"] = std::move(m);
  }
  std::set<std::string_view> names;
  uint64_t offset = 0;
  for (const NamedTensor& t : tensors) {
    if (t.name.empty() || t.name == "__metadata__") {
      return Status::InvalidArgument("safetensors: invalid tensor name " + Quote(t.name));
    }
    if (!names.insert(t.name).second) {
      return Status::InvalidArgument("safetensors: tensor " + Quote(t.name) + " given twice");
    }
    const int64_t item = SafetensorsDtypeSize(t.dtype);
    if (item == 0)
      return Status::InvalidArgument("safetensors: tensor " + Quote(t.name) + ": bad dtype");
    uint64_t bytes = static_cast<uint64_t>(item);
    for (int64_t d : t.shape) {
      if (d < 0 || __builtin_mul_overflow(bytes, static_cast<uint64_t>(d), &bytes)) {
        return Status::InvalidArgument("safetensors: tensor " + Quote(t.name) + ": invalid shape " +
                                       TensorShapeString(t.shape));
      }
    }
    if (bytes > 0 && t.data == nullptr) {
      return Status::InvalidArgument("safetensors: tensor " + Quote(t.name) + " has no data");
    }
    nlohmann::ordered_json e;
    e["dtype"] = SafetensorsDtypeName(t.dtype);
    e["shape"] = t.shape;
    e["data_offsets"] = {offset, offset + bytes};
    h[t.name] = std::move(e);
    offset += bytes;
  }
  std::string text;
  try {
    text = h.dump();
  } catch (const nlohmann::json::exception& e) {
    return Status::InvalidArgument(std::string("safetensors: a tensor name or metadata string is "
                                               "not valid UTF-8: ") +
                                   e.what());
  }
  // Pad with spaces so the data buffer starts 8-byte aligned.
  while ((8 + text.size()) % 8 != 0) text += ' ';
  std::string out(8, '\0');
  const uint64_t n = text.size();
  std::memcpy(out.data(), &n, 8);
  return out + text;
}

Status WriteSafetensors(const std::string& path, const std::vector<NamedTensor>& tensors,
                        const std::map<std::string, std::string>& metadata) {
  auto header = EncodeSafetensorsHeader(tensors, metadata);
  if (!header.ok()) return header.status().WithContext(path);
  AtomicFileWriter w;
  ATTNLAB_RETURN_IF_ERROR(w.Open(path));
  ATTNLAB_RETURN_IF_ERROR(w.Append(*header));
  for (const NamedTensor& t : tensors) {
    uint64_t bytes = static_cast<uint64_t>(SafetensorsDtypeSize(t.dtype));
    for (int64_t d : t.shape) bytes *= static_cast<uint64_t>(d);  // checked by the encoder
    if (bytes > 0) ATTNLAB_RETURN_IF_ERROR(w.Append(t.data, bytes));
  }
  return w.Commit();
}

}  // namespace attnlab
