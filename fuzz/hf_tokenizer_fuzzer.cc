// Hugging Face tokenizers (src/tokenizer/tokenizer_hf.h): tokenizer.json kSplit
// tokenizer_config.json kSplit a token list. The first two go to ParseHfTokenizer; the third, one
// token per line, becomes a GGUF "llama" vocabulary (scores falling with the line number, "<0xNN>"
// lines byte tokens, "<...>" lines control tokens) for MakeTokenizerFromEmbeddedVocabulary.
// What loads encodes fixed strings and the input without failing, every id in range and never a
// special token (but unk); byte-level tokenizers without add_prefix_space, and the SPM vocabulary
// on text without "▁" or "<", are lossless: Decode(Encode(s)) == s.
#include <nlohmann/json.hpp>
#include <string>

#include "fuzz_target.h"
#include "tokenizer/tokenizer_hf.h"

using namespace attnlab;

namespace {

// True if any object in the document has "add_prefix_space": true.
bool AnyAddPrefixSpace(const nlohmann::json& j, int depth = 0) {
  if (depth > 64) return true;
  if (j.is_object()) {
    for (const auto& [k, v] : j.items()) {
      if (k == "add_prefix_space" && v.is_boolean() && v.get<bool>()) return true;
      if (AnyAddPrefixSpace(v, depth + 1)) return true;
    }
  } else if (j.is_array()) {
    for (const auto& v : j) {
      if (AnyAddPrefixSpace(v, depth + 1)) return true;
    }
  }
  return false;
}

void Check(const Tokenizer& tok, std::string_view text, bool lossless, bool no_specials) {
  Result<std::vector<int32_t>> ids = tok.Encode(text);
  if (!ids.ok()) {  // only a tokenizer without byte fallback or unk_token may refuse a character
    ATTNLAB_FUZZ_EXPECT(ids.status().message().find("has no token") != std::string::npos,
                        "Encode failed: " + ids.status().ToString());
    return;
  }
  std::vector<int32_t> again = *tok.Encode(text);
  ATTNLAB_FUZZ_EXPECT(again == *ids, "Encode is not deterministic");
  for (const int32_t id : *ids) {
    ATTNLAB_FUZZ_EXPECT(id >= 0 && id < tok.vocab_size(), "Encode emitted an id out of range");
    if (!no_specials) continue;
    for (const SpecialToken& sp : tok.special_tokens()) {
      ATTNLAB_FUZZ_EXPECT(sp.id != id, "Encode emitted the special token " + sp.text);
    }
  }
  Result<std::string> back = tok.Decode(*ids);
  ATTNLAB_FUZZ_EXPECT(back.ok(), "Decode failed: " + back.status().ToString());
  if (lossless) ATTNLAB_FUZZ_EXPECT(*back == text, "Decode(Encode(s)) != s");
}

void CheckTokenizer(const Tokenizer& t, std::string_view input, bool lossless_family,
                    bool spm) {
  for (std::string_view s :
       {std::string_view("Hello world"), std::string_view(" 's  \n\n x1 2345 DON'T"),
        std::string_view("<|endoftext|>\xff\xfe caf\xc3\xa9 \xe4\xb8\xad"),
        std::string_view("\xe2\x96\x81 x"), input.substr(0, 256)}) {
    const bool clean = s.find("\xe2\x96\x81") == std::string_view::npos &&
                       s.find('<') == std::string_view::npos;
    Check(t, s, lossless_family && (!spm || clean), lossless_family);
  }
  for (int32_t id = 0; id < t.vocab_size() && id < 2048; ++id) {
    ATTNLAB_FUZZ_EXPECT(t.TokenBytes(id).ok(), "a valid id does not decode");
  }
  ATTNLAB_FUZZ_EXPECT(!t.TokenBytes(t.vocab_size()).ok(), "an id past the end decodes");
  if (t.bos_id()) ATTNLAB_FUZZ_EXPECT(*t.bos_id() < t.vocab_size(), "bos out of range");
}

EmbeddedVocabulary SpmFromLines(std::string_view text) {
  EmbeddedVocabulary v;
  v.model = "llama";
  size_t pos = 0;
  while (pos < text.size() && v.tokens.size() < 4096) {
    size_t eol = text.find('\n', pos);
    if (eol == std::string_view::npos) eol = text.size();
    const std::string line(text.substr(pos, eol - pos));
    pos = eol + 1;
    int32_t type = kGgufTokenNormal;
    if (line.size() == 6 && line.rfind("<0x", 0) == 0) {
      type = kGgufTokenByte;
    } else if (!line.empty() && line.front() == '<' && line.back() == '>') {
      type = kGgufTokenControl;
    }
    v.scores.push_back(-static_cast<float>(v.tokens.size()) / 8.0f);
    v.tokens.push_back(line);
    v.token_types.push_back(type);
  }
  v.bos = 0;
  v.add_bos = true;
  return v;
}

}  // namespace

ATTNLAB_FUZZ_TARGET(hf_tokenizer) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const std::vector<std::string_view> parts = fuzz::SplitInput(input, 3);
  const std::string_view config = parts.size() > 1 ? parts[1] : std::string_view();
  Result<std::unique_ptr<Tokenizer>> tok = ParseHfTokenizer(parts[0], config, "fuzz/tokenizer.json");
  if (!tok.ok()) {
    const std::string& m = tok.status().message();
    ATTNLAB_FUZZ_EXPECT(!m.empty() && m.find('\n') == std::string::npos,
                        "an error that is not one line: " + m);
  } else {
    const nlohmann::json j = nlohmann::json::parse(parts[0], nullptr, false);
    const bool byte_level = (*tok)->name().rfind("hf-bpe-bytelevel", 0) == 0;
    CheckTokenizer(**tok, input, byte_level && !AnyAddPrefixSpace(j), false);
  }
  if (parts.size() > 2) {
    Result<std::unique_ptr<Tokenizer>> spm = MakeTokenizerFromEmbeddedVocabulary(SpmFromLines(parts[2]));
    if (spm.ok()) CheckTokenizer(**spm, input, true, true);
  }
  return 0;
}
