// Hugging Face tokenizers: `tokenizer.json` (+ `tokenizer_config.json`) files, and the vocabulary
// a GGUF file embeds (tokenizer.ggml.*), behind attnlab's Tokenizer interface (attnlab/tokenizer.h).
//
// Supported tokenizer.json files: `model.type == "BPE"` in two families.
//
//  (a) Byte-level BPE (GPT-2, Llama-3, Qwen2/2.5/3): the pre_tokenizer is ByteLevel, alone or as
//      the last step of a Sequence after one Split whose Regex pattern is, byte for byte, one of
//        GPT-2    's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//        Llama-3  (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
//                  ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+      (one line in the file)
//        Qwen2    the same with \p{N} instead of \p{N}{1,3} (single digits)
//      (behavior "Isolated", invert false). The regular expressions are implemented by hand
//      (tokenizer_hf_pretokenize.cc, as Gpt2PreTokenizer is), with the character classes of
//      attnlab/tokenizer.h (\s is Unicode White_Space, as in Oniguruma, which Hugging Face's
//      Rust tokenizers use; (?i) folds ASCII only, as Tokenizers.js and llama.cpp do, where
//      Oniguruma would also let U+017F 'ſ' match s). Any other pattern is an InvalidArgument error ("... is not
//      supported by attnlab") that quotes it.
//      ByteLevel's use_regex (default true: GPT-2's regex) and add_prefix_space (a space is
//      prepended to each piece that does not start with one: with it, Decode(Encode(s)) has an
//      extra leading space) are honoured. Every token of model.vocab is GPT-2's bytes_to_unicode
//      rendering of its bytes, and the 256 one-byte tokens must all be there. The decoder, if
//      any, is ByteLevel. Lossless: Decode(Encode(s)) == s for every byte string s (without
//      add_prefix_space), valid UTF-8 or not (bytes that are not UTF-8 are characters of class
//      "other", as for gpt2).
//  (b) SentencePiece-style BPE (Llama-2, Mistral, TinyLlama): merges over Unicode characters,
//      with the `▁` (U+2581) metaspace: either the normalizer Sequence [Prepend("▁"),
//      Replace(" " -> "▁")] (either order, or one of them alone) or the pre_tokenizer Metaspace
//      (replacement "▁"; prepend_scheme "always"/"first"/"never", or the older add_prefix_space;
//      split, default true: the text is cut before every ▁). `byte_fallback: true` needs all 256
//      tokens "<0x00>".."<0xFF>"; a character without a token becomes the byte tokens of its
//      UTF-8 bytes (a byte that is not UTF-8: its byte token); without byte_fallback it becomes
//      `unk_token` (consecutive ones fused with fuse_unk), and with no unk_token Encode fails.
//      Decoding: ▁ -> " ", "<0xNN>" -> the byte NN, and one leading space is stripped when the
//      decoder says so (Strip(" ", 1, 0) or a Metaspace decoder that prepends). Lossless, with
//      byte_fallback, for valid or invalid UTF-8 that holds no "▁" when the text is given a ▁
//      prefix and the decoder strips it (Prepend, or
//      Metaspace with prepend_scheme always/first on text not starting with a space; Metaspace
//      turns " x" and "x" into the same "▁x").
// Common to both: merges are strings "a b" or 2-element arrays ["a", "b"]; each side and their
// concatenation must be ordinary tokens of model.vocab and no pair may repeat. `ignore_merges`
// (Llama-3) emits a pre-token that is itself an ordinary token as that token, unmerged. `dropout`
// must be null (or 0), continuing_subword_prefix and end_of_word_suffix null or empty.
// `added_tokens` are special tokens, with ids inside model.vocab (then with the same text) or
// after it; together the ids must be exactly 0..n-1. Following attnlab's contract Encode never
// emits them, not even for text that spells one (Hugging Face's encode splits them out of the
// text); the one exception is unk_token for an unknown character (above). Decode gives their
// text. normalizer "NFC" (Qwen2) is accepted but NOT applied: text not in NFC may tokenize
// differently from Hugging Face's. truncation, padding and offsets are ignored. Other
// normalizers, pre-tokenizers, decoders and model types are InvalidArgument errors naming them
// ("... is not supported by attnlab"). post_processors other than TemplateProcessing and
// ByteLevel are ignored (they only matter for bos, below).
//
// bos/eos and adds_bos(): tokenizer_config.json's bos_token / eos_token (a string or
// {"content": ...}; null: none) and add_bos_token; without add_bos_token, the post_processor
// TemplateProcessing decides (a special token before $A in "single": that is bos and adds_bos()
// is true); when neither tokenizer_config.json nor a template names bos or eos, an added token
// "<|endoftext|>" is eos (and bos, as for gpt2). Llama-2/3 and TinyLlama add bos; GPT-2 and Qwen2 do not.
//
// Nothing is trusted: malformed JSON, duplicate keys, wrong types, unknown model types, ids out of
// range, duplicated or leaving gaps, tokens repeated, merges naming unknown tokens or producing
// special ones, missing byte tokens, vocabularies above kMaxBpeVocabSize are Corrupt (or
// InvalidArgument for valid but unsupported features) errors, one line naming the file and
// entry (docs/BAD_INPUTS.md lists them).
#ifndef ATTNLAB_TOKENIZER_TOKENIZER_HF_H_
#define ATTNLAB_TOKENIZER_TOKENIZER_HF_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "attnlab/status.h"
#include "attnlab/tokenizer.h"
#include "tokenizer/tokenizer_hf_pretokenize.h"  // HfRegex, HfPreTokenize

namespace attnlab {

// `path`: a directory holding tokenizer.json (and optionally tokenizer_config.json), or the
// tokenizer.json file itself (then tokenizer_config.json is looked for next to it). NotFound if
// tokenizer.json is missing. Files are read with a 256 MiB cap.
Result<std::unique_ptr<Tokenizer>> LoadHfTokenizer(const std::string& path);

// The same from the files' contents; `config_json` may be empty (no tokenizer_config.json).
// `name` (a path, usually) prefixes every error.
Result<std::unique_ptr<Tokenizer>> ParseHfTokenizer(std::string_view tokenizer_json,
                                                    std::string_view config_json,
                                                    const std::string& name);

// A GGUF file's tokenizer.ggml.* arrays (read by src/formats; given here as plain values).
struct EmbeddedVocabulary {
  std::string model;  // tokenizer.ggml.model: "gpt2" or "llama"
  std::string pre;    // tokenizer.ggml.pre, e.g. "llama-bpe", "qwen2", "default"
  std::vector<std::string> tokens;
  std::vector<float> scores;         // llama: one per token (finite); gpt2: ignored
  std::vector<int32_t> token_types;  // empty (all normal) or one per token, 0..6
  std::vector<std::string> merges;   // gpt2: "left right", rendered
  std::optional<int32_t> bos, eos;
  bool add_bos = false;
};

// GGUF token types (llama.cpp's llama_token_type).
inline constexpr int32_t kGgufTokenNormal = 1, kGgufTokenUnknown = 2, kGgufTokenControl = 3,
                         kGgufTokenUserDefined = 4, kGgufTokenUnused = 5, kGgufTokenByte = 6;

// model "gpt2": byte-level BPE over the merges (tokens rendered as GPT-2's bytes_to_unicode),
// pre-tokenizer from `pre`: "gpt-2"/"default" GPT-2's regex, "llama-bpe"/"llama3" Llama-3's (with
// ignore_merges, as llama.cpp), "qwen2" Qwen2's; any other is InvalidArgument.
// model "llama": SentencePiece as llama.cpp's SPM tokenizer: the text gets a " " prefix, spaces
// become "▁", the characters are symbols, and repeatedly the adjacent pair whose concatenation is
// the ordinary token with the highest score is merged (ties: the leftmost); symbols left without
// a token become the byte tokens "<0xNN>" of their bytes (all 256 must exist). Decode maps "▁" to
// " ", byte tokens to their byte and strips one leading space.
// Both: token types 2 (unknown), 3 (control), 4 (user defined) and 5 (unused) are special tokens
// (never emitted by Encode); the rest are ordinary and must be distinct.
Result<std::unique_ptr<Tokenizer>> MakeTokenizerFromEmbeddedVocabulary(
    const EmbeddedVocabulary& vocab);

}  // namespace attnlab

#endif  // ATTNLAB_TOKENIZER_TOKENIZER_HF_H_
