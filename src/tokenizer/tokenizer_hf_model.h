// The tokenizer behind tokenizer_hf.h, described by a plain struct that both front ends fill:
// the tokenizer.json parser (tokenizer_hf.cc) and the GGUF vocabulary (tokenizer_hf_gguf.cc).
// BuildHfTokenizer validates it as a whole. Internal to src/tokenizer.
#ifndef ATTNLAB_TOKENIZER_TOKENIZER_HF_MODEL_H_
#define ATTNLAB_TOKENIZER_TOKENIZER_HF_MODEL_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "attnlab/status.h"
#include "attnlab/tokenizer.h"
#include "tokenizer/tokenizer_hf_pretokenize.h"

namespace attnlab::hf_internal {

enum class Family {
  kByteLevel,  // tokens are GPT-2-rendered bytes; merges by rank over byte symbols
  kCharBpe,    // tokens are text with ▁; merges by rank over characters; byte fallback
  kSpmScores,  // llama.cpp's SPM: merges by the highest score of the merged token
};

inline constexpr std::string_view kMetaspace = "\xE2\x96\x81";  // U+2581 '▁'

struct HfSpec {
  std::string name;    // what name() returns
  std::string source;  // prefixes every error (a file name)
  Family family = Family::kByteLevel;

  // kByteLevel: an optional Split regex, then ByteLevel (add_prefix_space, use_regex: GPT-2's).
  std::optional<HfRegex> split;
  bool add_prefix_space = false;
  bool use_regex = false;
  // kCharBpe: normalizer Prepend("▁") (non-empty text) and Replace(" ", "▁").
  bool prepend_metaspace = false;
  bool replace_spaces = false;
  // kCharBpe: pre_tokenizer Metaspace.
  bool metaspace = false;
  bool metaspace_prepend = false;  // prepend ▁ unless the text starts with one
  bool metaspace_split = false;    // cut before every ▁
  // kSpmScores: " " is prepended to non-empty text (llama.cpp's add_space_prefix).

  bool ignore_merges = false;
  bool byte_fallback = false;  // kCharBpe (kSpmScores always falls back)
  bool fuse_unk = false;
  std::optional<std::string> unk_token;
  bool strip_leading_space = false;  // Decode drops one leading " "

  std::vector<std::string> tokens;  // id -> text as in the file (special: its text)
  std::vector<bool> special;        // id -> an added / control token
  std::vector<std::pair<std::string, std::string>> merges;  // rank order (kByteLevel, kCharBpe)
  std::vector<float> scores;                                // kSpmScores: one per id
  std::optional<int32_t> bos, eos;
  bool adds_bos = false;
};

Result<std::unique_ptr<Tokenizer>> BuildHfTokenizer(HfSpec spec);

// "<0x0A>" for 10: the byte-fallback token of a byte (upper-case hex, as SentencePiece).
std::string ByteFallbackToken(uint8_t byte);

// A string for an error message: at most 60 bytes of it, quoted.
std::string QuoteForError(std::string_view s);

}  // namespace attnlab::hf_internal

#endif  // ATTNLAB_TOKENIZER_TOKENIZER_HF_MODEL_H_
