// .npy parsing (core/npy.h): the in-memory parser and the file reader agree; what parses
// converts to the element types its dtype allows and re-encodes to a file that parses the same.
#include <cstring>

#include "core/npy.h"
#include "fuzz_target.h"

using namespace attnlab;

ATTNLAB_FUZZ_TARGET(npy) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  Result<NpyArray> a = ParseNpy(bytes, "fuzz.npy");
  Result<NpyArray> b = ReadNpy(fuzz::WriteScratchFile("fuzz.npy", bytes));
  ATTNLAB_FUZZ_EXPECT(a.ok() == b.ok(), "ParseNpy and ReadNpy disagree");
  if (!a.ok()) {
    ATTNLAB_FUZZ_EXPECT(!a.status().message().empty(), "an error without a message");
    return 0;
  }
  ATTNLAB_FUZZ_EXPECT(a->dtype == b->dtype && a->shape == b->shape && a->bytes == b->bytes,
                      "ParseNpy and ReadNpy read different arrays");
  ATTNLAB_FUZZ_EXPECT(static_cast<int64_t>(a->bytes.size()) == a->NumElements() * a->ItemSize(),
                      "data size disagrees with shape and dtype");
  const bool is_float = a->dtype == "<f4" || a->dtype == "<f8";
  const bool is_byte = a->dtype == "|u1" || a->dtype == "|b1";
  ATTNLAB_FUZZ_EXPECT(a->ToFloat("x").ok() == is_float, "ToFloat accepts exactly float dtypes");
  ATTNLAB_FUZZ_EXPECT(a->ToUint8("x").ok() == is_byte, "ToUint8 accepts exactly byte dtypes");
  ATTNLAB_FUZZ_EXPECT(a->ToInt64("x").ok() == !is_float, "ToInt64 accepts exactly int dtypes");
  Result<std::string> enc = EncodeNpy(*a);
  ATTNLAB_FUZZ_EXPECT(enc.ok(), "a parsed array does not encode: " + enc.status().ToString());
  Result<NpyArray> c = ParseNpy(*enc, "again.npy");
  ATTNLAB_FUZZ_EXPECT(c.ok() && c->dtype == a->dtype && c->shape == a->shape &&
                          c->bytes == a->bytes,
                      "the array changed in an encode/parse round trip");
  return 0;
}
