// GGUF parsing (formats/gguf.h): in memory and through the mmap reader, which must agree; every
// tensor's bytes are inside the file and exactly its blocks; ReadFloat accepts exactly the
// dequantizable types; then the Hugging Face view (formats/gguf_model.h) never misbehaves and
// every tensor it names reads into exactly its HF element count, and a matrix's stored rows
// (kept as is for inference) widen to exactly the values ReadFloat gives.
#include <cmath>
#include <set>

#include "formats/gguf.h"
#include "formats/gguf_model.h"
#include "model/matrix_weights.h"
#include "fuzz_target.h"

using namespace attnlab;

ATTNLAB_FUZZ_TARGET(gguf) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  Result<GgufFile> f = ParseGguf(bytes, "fuzz.gguf");
  Result<GgufFile> g = ReadGguf(fuzz::WriteScratchFile("fuzz.gguf", bytes));
  ATTNLAB_FUZZ_EXPECT(f.ok() == g.ok(), "the in-memory and mmap readers disagree");
  if (!f.ok()) {
    ATTNLAB_FUZZ_EXPECT(!f.status().message().empty(), "an error without a message");
    ATTNLAB_FUZZ_EXPECT(f.status().message().find('\n') == std::string::npos,
                        "a multi-line error: " + f.status().message());
    return 0;
  }
  ATTNLAB_FUZZ_EXPECT(
      f->tensors().size() == g->tensors().size() && f->metadata().size() == g->metadata().size(),
      "the readers see different contents");
  // Metadata: every key is found again; getters never misbehave on any type.
  for (const auto& [key, value] : f->metadata()) {
    ATTNLAB_FUZZ_EXPECT(f->Find(key) == &value, "Find misses a key");
    (void)f->GetString(key);
    (void)f->GetUint(key);
    (void)f->GetInt(key);
    (void)f->GetFloat(key);
    (void)f->GetBool(key);
    (void)f->GetStringArray(key);
    (void)f->GetFloatArray(key);
    (void)f->GetIntArray(key);
    (void)value.Describe();
  }
  // Tensors: bytes in bounds, no overlap, sizes as the type says; dequantize every one.
  uint64_t total = 0;
  for (const GgufTensorInfo& t : f->tensors()) {
    const std::span<const uint8_t> b = f->Bytes(t);
    const int64_t block = GgmlBlockSize(t.type);
    ATTNLAB_FUZZ_EXPECT(block > 0 && t.numel() % block == 0, "a tensor of partial blocks");
    ATTNLAB_FUZZ_EXPECT(
        static_cast<uint64_t>(b.size()) ==
            static_cast<uint64_t>(t.numel() / block) * static_cast<uint64_t>(GgmlTypeSize(t.type)),
        "tensor size disagrees with its dims and type");
    ATTNLAB_FUZZ_EXPECT(t.offset % f->alignment() == 0, "a misaligned tensor");
    total += b.size();
    std::vector<float> out(static_cast<size_t>(t.numel()));
    const Status st = f->ReadFloat(t, out);
    ATTNLAB_FUZZ_EXPECT(st.ok() == GgmlTypeDequantizable(t.type),
                        "ReadFloat accepts exactly the dequantizable types: " + st.ToString());
    ATTNLAB_FUZZ_EXPECT(f->FindTensor(t.name) == &t, "FindTensor misses a tensor");
  }
  ATTNLAB_FUZZ_EXPECT(total <= size, "tensors claim more bytes than the file has");
  // The Hugging Face view: every named tensor reads into its HF shape (or fails cleanly).
  Result<GgufAsHf> m = GgufFileAsHf(*f);
  if (!m.ok()) {
    ATTNLAB_FUZZ_EXPECT(!m.status().message().empty(), "an error without a message");
    return 0;
  }
  ATTNLAB_FUZZ_EXPECT(m->hf_config.is_object(), "hf_config is not an object");
  std::set<std::string> seen;
  for (const std::string& name : m->tensors->Names()) {
    ATTNLAB_FUZZ_EXPECT(seen.insert(name).second, "a name twice");
    const SourceTensorInfo* info = m->tensors->Find(name);
    ATTNLAB_FUZZ_EXPECT(info != nullptr, "Find misses a name");
    std::vector<float> out(static_cast<size_t>(info->numel()));
    const bool read = m->tensors->ReadFloat(name, out).ok();
    // The stored rows (what inference keeps in memory) widen to exactly what ReadFloat gives.
    const TensorSource::Mapped stored = m->tensors->StoredRows(name);
    if (!stored.bytes.empty()) {
      ATTNLAB_FUZZ_EXPECT(info->shape.size() == 2 && info->shape[0] > 0,
                          "stored rows for a tensor that is not a matrix");
      internal::WeightBlock b{stored.bytes.data(), stored.dtype, info->shape[0], stored.quant};
      const int64_t cols = info->shape[1];
      ATTNLAB_FUZZ_EXPECT(!stored.quant || cols % stored.quant->block_elems == 0,
                          "quantized rows of partial blocks");
      ATTNLAB_FUZZ_EXPECT(stored.bytes.size() ==
                              static_cast<size_t>(info->shape[0] * internal::WeightRowBytes(b, cols)),
                          "stored rows of the wrong size");
      const bool aligned = stored.quant || reinterpret_cast<uintptr_t>(b.data) %
                                                   KvDtypeBytes(stored.dtype) == 0;
      if (read && aligned) {
        std::vector<float> widened(out.size());
        internal::WidenRows(b, b.data, info->numel(), widened.data());
        for (size_t i = 0; i < out.size(); ++i) {  // NaN payloads may differ
          ATTNLAB_FUZZ_EXPECT(widened[i] == out[i] || (std::isnan(widened[i]) && std::isnan(out[i])),
                              "stored rows widen to other values than ReadFloat's");
        }
      }
    }
    if (!out.empty()) {
      std::vector<float> wrong(out.size() - 1);
      ATTNLAB_FUZZ_EXPECT(!m->tensors->ReadFloat(name, wrong).ok(), "a short buffer accepted");
    }
  }
  return 0;
}
