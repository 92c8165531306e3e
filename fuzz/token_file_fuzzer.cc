// Token files (train/token_data.h): the header's count is checked against the file size before
// allocating; what reads has every token inside its vocabulary, writes back to a file that reads
// the same, and batches from it stay in bounds.
#include "fuzz_target.h"
#include "train/token_data.h"

using namespace attnlab;

ATTNLAB_FUZZ_TARGET(token_file) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  Result<TokenFile> f = ReadTokenFile(fuzz::WriteScratchFile("fuzz.tok", bytes));
  if (!f.ok()) {
    ATTNLAB_FUZZ_EXPECT(!f.status().message().empty(), "an error without a message");
    return 0;
  }
  ATTNLAB_FUZZ_EXPECT(f->vocab_size >= 1 && f->vocab_size <= (int64_t{1} << 31),
                      "vocabulary size out of range");
  for (int32_t t : f->tokens) {
    ATTNLAB_FUZZ_EXPECT(t >= 0 && t < f->vocab_size, "a token outside the vocabulary");
  }
  if (fuzz::Sometimes(data, size, 8)) {  // the write fsyncs
    const std::string again = fuzz::ScratchDir() + "/again.tok";
    const Status w = WriteTokenFile(again, f->tokens, f->vocab_size);
    ATTNLAB_FUZZ_EXPECT(w.ok(), "a token file that reads does not write: " + w.ToString());
    Result<TokenFile> g = ReadTokenFile(again);
    ATTNLAB_FUZZ_EXPECT(g.ok() && g->tokens == f->tokens && g->vocab_size == f->vocab_size,
                        "tokens changed in a write/read round trip");
  }
  const int64_t B = 2, T = 3;
  if (static_cast<int64_t>(f->tokens.size()) > T + 1) {
    std::vector<int32_t> x(B * T), y(B * T);
    SampleBatch(f->tokens, 1, 0, B, T, -1, x.data(), y.data());
    SampleBatch(f->tokens, 1, 1, B, T, 0, x.data(), y.data());
    for (int64_t i = 0; EvalBatch(f->tokens, i, B, T, -1, x.data(), y.data()) && i < 8; ++i) {
    }
  }
  return 0;
}
