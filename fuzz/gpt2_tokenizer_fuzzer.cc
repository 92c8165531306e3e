// GPT-2's tokenizer files (attnlab/tokenizer.h: ParseGpt2Model): encoder.json kSplit vocab.bpe.
// What parses builds a tokenizer (or is refused with a message), and that tokenizer is lossless:
// Decode(Encode(s)) == s for fixed strings, for the input itself, and every id decodes.
#include "attnlab/tokenizer.h"
#include "fuzz_target.h"

using namespace attnlab;

namespace {

void CheckLossless(const Tokenizer& tok, std::string_view text) {
  Result<std::vector<int32_t>> ids = tok.Encode(text);
  ATTNLAB_FUZZ_EXPECT(ids.ok(), "Encode failed: " + ids.status().ToString());
  for (int32_t id : *ids) {
    ATTNLAB_FUZZ_EXPECT(id >= 0 && id < tok.vocab_size(), "Encode emitted an id out of range");
  }
  Result<std::string> back = tok.Decode(*ids);
  ATTNLAB_FUZZ_EXPECT(back.ok() && *back == text, "Decode(Encode(s)) != s");
}

}  // namespace

ATTNLAB_FUZZ_TARGET(gpt2_tokenizer) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const std::vector<std::string_view> parts = fuzz::SplitInput(input, 2);
  const std::string_view encoder = parts[0];
  const std::string_view vocab = parts.size() > 1 ? parts[1] : std::string_view();
  Result<BpeModel> model = ParseGpt2Model(encoder, vocab);
  if (!model.ok()) {
    ATTNLAB_FUZZ_EXPECT(!model.status().message().empty(), "an error without a message");
    return 0;
  }
  Result<std::unique_ptr<Tokenizer>> tok = MakeBpeTokenizer(std::move(model).value());
  if (!tok.ok()) return 0;  // e.g. a vocabulary without all 256 bytes: refused with a message
  const Tokenizer& t = **tok;
  for (std::string_view s : {std::string_view("Hello world"), std::string_view(" 's  \n\n x1 2"),
                             std::string_view("<|endoftext|>\xff\xfe caf\xc3\xa9")}) {
    CheckLossless(t, s);
  }
  CheckLossless(t, input.substr(0, 512));
  for (int32_t id = 0; id < t.vocab_size() && id < 4096; ++id) {
    ATTNLAB_FUZZ_EXPECT(t.TokenBytes(id).ok(), "a valid id does not decode");
  }
  ATTNLAB_FUZZ_EXPECT(!t.TokenBytes(t.vocab_size()).ok(), "an id past the end decodes");
  return 0;
}
