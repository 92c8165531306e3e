// attnlab's BPE vocabulary file (attnlab/tokenizer.h: ParseBpeVocabulary). What parses
// serialises back to a file that parses to the same vocabulary, and builds a lossless tokenizer.
#include "attnlab/tokenizer.h"
#include "fuzz_target.h"

using namespace attnlab;

ATTNLAB_FUZZ_TARGET(bpe_vocab) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  Result<BpeVocabulary> v = ParseBpeVocabulary(input, "fuzz.json");
  if (!v.ok()) {
    ATTNLAB_FUZZ_EXPECT(!v.status().message().empty(), "an error without a message");
    return 0;
  }
  Result<std::string> text = SerializeBpeVocabulary(*v);
  ATTNLAB_FUZZ_EXPECT(text.ok(), "a parsed vocabulary does not serialise: " +
                                     text.status().ToString());
  Result<BpeVocabulary> again = ParseBpeVocabulary(*text, "again.json");
  ATTNLAB_FUZZ_EXPECT(again.ok(), "a serialised vocabulary does not parse: " +
                                      again.status().ToString());
  ATTNLAB_FUZZ_EXPECT(again->merges == v->merges && again->special_tokens == v->special_tokens,
                      "the vocabulary changed in a serialise/parse round trip");
  Result<std::unique_ptr<Tokenizer>> tok = MakeBpeTokenizer(v->ToModel());
  if (!tok.ok()) return 0;
  for (std::string_view s : {std::string_view("Hello world"), std::string_view("aaaa bbbb\n\n"),
                             input.substr(0, 256)}) {
    Result<std::vector<int32_t>> ids = (*tok)->Encode(s);
    ATTNLAB_FUZZ_EXPECT(ids.ok(), "Encode failed");
    Result<std::string> back = (*tok)->Decode(*ids);
    ATTNLAB_FUZZ_EXPECT(back.ok() && *back == s, "Decode(Encode(s)) != s");
  }
  return 0;
}
