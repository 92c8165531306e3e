// safetensors parsing (formats/safetensors.h): in memory and through the mmap reader, which must
// agree; every accessor of a parsed file stays in bounds; a parsed file re-encodes to one that
// parses to the same tensors; the Hugging Face GPT-2 mapping on top never misbehaves.
#include <cstring>
#include <set>

#include "fuzz_target.h"
#include "formats/hf_gpt2.h"
#include "formats/safetensors.h"

using namespace attnlab;

ATTNLAB_FUZZ_TARGET(safetensors) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  Result<SafetensorsFile> f = ParseSafetensors(bytes, "fuzz.safetensors");
  Result<SafetensorsFile> g = ReadSafetensors(fuzz::WriteScratchFile("fuzz.safetensors", bytes));
  ATTNLAB_FUZZ_EXPECT(f.ok() == g.ok(), "the in-memory and mmap readers disagree");
  if (!f.ok()) {
    ATTNLAB_FUZZ_EXPECT(!f.status().message().empty(), "an error without a message");
    return 0;
  }
  // Every tensor's bytes are inside the file and exactly numel * itemsize.
  uint64_t total = 0;
  std::vector<NamedTensor> again;
  for (const SafetensorsTensor& t : f->tensors()) {
    const std::span<const uint8_t> b = f->Bytes(t);
    ATTNLAB_FUZZ_EXPECT(static_cast<uint64_t>(b.size()) ==
                            static_cast<uint64_t>(t.numel()) *
                                static_cast<uint64_t>(SafetensorsDtypeSize(t.dtype)),
                        "tensor size disagrees with its shape");
    total += b.size();
    std::vector<float> out(static_cast<size_t>(t.numel()));
    const Status st = f->ReadFloat(t, out.data(), t.numel());
    const bool is_float = t.dtype == SafetensorsDtype::kF32 || t.dtype == SafetensorsDtype::kF64 ||
                          t.dtype == SafetensorsDtype::kF16 || t.dtype == SafetensorsDtype::kBF16;
    ATTNLAB_FUZZ_EXPECT(st.ok() == is_float, "ReadFloat accepts exactly the float dtypes");
    const SafetensorsTensor* found = f->Find(t.name);
    ATTNLAB_FUZZ_EXPECT(found != nullptr && found->name == t.name, "Find misses a tensor");
    again.push_back(NamedTensor{t.name, t.shape, b.data(), t.dtype});
  }
  ATTNLAB_FUZZ_EXPECT(total <= size, "tensors claim more bytes than the file has");
  // The writer refuses empty tensor names, which the format (and so the reader) allows.
  for (const NamedTensor& t : again) {
    if (t.name.empty()) return 0;
  }
  // Re-encode and parse again: the same tensors, bytes and metadata.
  Result<std::string> header = EncodeSafetensorsHeader(again, f->metadata());
  ATTNLAB_FUZZ_EXPECT(header.ok(), "a parsed file does not re-encode: " + header.status().ToString());
  std::string file = *header;
  for (const NamedTensor& t : again) {
    const SafetensorsTensor* src = f->Find(t.name);
    const std::span<const uint8_t> b = f->Bytes(*src);
    file.append(reinterpret_cast<const char*>(b.data()), b.size());
  }
  Result<SafetensorsFile> h = ParseSafetensors(file, "again");
  ATTNLAB_FUZZ_EXPECT(h.ok(), "the re-encoded file does not parse: " + h.status().ToString());
  ATTNLAB_FUZZ_EXPECT(h->tensors().size() == f->tensors().size(), "tensor count changed");
  ATTNLAB_FUZZ_EXPECT(h->metadata() == f->metadata(), "metadata changed");
  for (const SafetensorsTensor& t : h->tensors()) {
    const SafetensorsTensor* src = f->Find(t.name);
    ATTNLAB_FUZZ_EXPECT(src != nullptr && src->dtype == t.dtype && src->shape == t.shape,
                        "a tensor changed");
    const std::span<const uint8_t> a = f->Bytes(*src), b = h->Bytes(t);
    ATTNLAB_FUZZ_EXPECT(a.size() == b.size() &&
                            (a.empty() || std::memcmp(a.data(), b.data(), a.size()) == 0),
                        "tensor bytes changed");
  }
  // The GPT-2 mapping on top (allocations are bounded by the tensors in the file).
  (void)LoadHfGpt2FromFile(*f, nullptr, "");
  return 0;
}
