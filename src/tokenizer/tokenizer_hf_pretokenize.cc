// Llama-3's and Qwen2's pre-tokenizer regexes, by hand (GPT-2's is Gpt2PreTokenizer):
//
//   (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|
//   \s*[\r\n]+|\s+(?!\S)|\s+                      (Qwen2: \p{N} instead of \p{N}{1,3})
//
// At each position the first alternative that matches wins, each greedy. Every character is one
// of letter, number, whitespace or other (attnlab/tokenizer.h; bytes that are not UTF-8 are
// "other"), so the pieces tile the text. A piece starting at p, whose character is c:
//   1. "'" then s, t, m, d, re, ve or ll in any ASCII case: that contraction. (Oniguruma's
//      (?i) would also let U+017F 'ſ' match s; Tokenizers.js and llama.cpp do not, nor do we.)
//   2. c a letter: the run of letters. c whitespace other than \r \n, or other, followed by a
//      letter: c plus the run of letters after it.
//   3. c a number: up to 3 numbers (Qwen2: 1).
//   4. " " followed by other, or c other: the optional space, the run of others, then any \r \n
//      that follow.
//   5. c whitespace, and the maximal whitespace run p..e holds a \r or \n: up to and including
//      the last \r or \n of the run (\s* backtracks to it).
//   6. c whitespace: the run, or the run minus its last character when the run is followed by a
//      non-whitespace character and is longer than one (as GPT-2's rule).
#include <string_view>
#include <vector>

#include "tokenizer/tokenizer_hf_pretokenize.h"

namespace attnlab {
namespace {

struct Char {
  CodePointClass cls;
  size_t length;
};

inline Char CharAt(std::string_view text, size_t pos) {
  const unsigned char b = static_cast<unsigned char>(text[pos]);
  if (b < 0x80) return {ClassifyCodePoint(b), 1};
  const Utf8Char c = DecodeUtf8Char(text.substr(pos));
  if (!c.valid) return {CodePointClass::kOther, 1};
  return {ClassifyCodePoint(c.cp), static_cast<size_t>(c.length)};
}

inline size_t RunEnd(std::string_view text, size_t pos, CodePointClass cls, size_t max_chars) {
  for (size_t n = 0; pos < text.size() && n < max_chars; ++n) {
    const Char c = CharAt(text, pos);
    if (c.cls != cls) break;
    pos += c.length;
  }
  return pos;
}

inline char Lower(char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c + 32) : c; }

// Length of the case-insensitive contraction at text[pos] == '\'', or 0.
size_t ContractionLength(std::string_view text, size_t pos) {
  if (pos + 1 >= text.size()) return 0;
  const char a = Lower(text[pos + 1]);
  const char b = pos + 2 < text.size() ? Lower(text[pos + 2]) : '\0';
  switch (a) {
    case 's':
    case 't':
    case 'm':
    case 'd':
      return 2;
    case 'r':
    case 'v':
      return b == 'e' ? 3 : 0;
    case 'l':
      return b == 'l' ? 3 : 0;
    default:
      return 0;
  }
}

inline bool IsCrLf(char c) { return c == '\r' || c == '\n'; }

// The end of the piece that starts at p (REQUIRES p < t.size()); `max_digits` 3 or 1.
size_t Llama3PieceEnd(std::string_view t, size_t p, size_t max_digits) {
  constexpr size_t kAll = static_cast<size_t>(-1);
  const Char c = CharAt(t, p);
  if (t[p] == '\'') {  // 1
    const size_t n = ContractionLength(t, p);
    if (n > 0) return p + n;
  }
  if (c.cls == CodePointClass::kLetter) return RunEnd(t, p, c.cls, kAll);  // 2
  const size_t after = p + c.length;
  const bool has_next = after < t.size();
  const Char next = has_next ? CharAt(t, after) : Char{CodePointClass::kOther, 0};
  if (c.cls != CodePointClass::kNumber && !IsCrLf(t[p]) && has_next &&
      next.cls == CodePointClass::kLetter) {
    return RunEnd(t, after, CodePointClass::kLetter, kAll);  // 2, with the optional character
  }
  if (c.cls == CodePointClass::kNumber) return RunEnd(t, p, c.cls, max_digits);  // 3
  size_t q = kAll;  // 4: where the run of others starts
  if (c.cls == CodePointClass::kOther) {
    q = p;
  } else if (t[p] == ' ' && has_next && next.cls == CodePointClass::kOther) {
    q = after;
  }
  if (q != kAll) {
    size_t end = RunEnd(t, q, CodePointClass::kOther, kAll);
    while (end < t.size() && IsCrLf(t[end])) ++end;
    return end;
  }
  // c is whitespace: 5, 6.
  size_t end = p, last = p, last_newline = kAll;
  while (end < t.size()) {
    const Char w = CharAt(t, end);
    if (w.cls != CodePointClass::kWhitespace) break;
    if (IsCrLf(t[end])) last_newline = end;
    last = end;
    end += w.length;
  }
  if (last_newline != kAll) return last_newline + 1;
  if (end < t.size() && last > p) return last;
  return end;
}

}  // namespace

std::string_view HfRegexPattern(HfRegex regex) {
  switch (regex) {
    case HfRegex::kGpt2:
      return R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
    case HfRegex::kLlama3:
      return R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
    case HfRegex::kQwen2:
      return R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  }
  return {};
}

std::vector<std::string_view> HfPreTokenize(HfRegex regex, std::string_view text) {
  if (regex == HfRegex::kGpt2) return Gpt2PreTokenize(text);
  const size_t max_digits = regex == HfRegex::kLlama3 ? 3 : 1;
  std::vector<std::string_view> pieces;
  for (size_t p = 0; p < text.size();) {
    const size_t end = Llama3PieceEnd(text, p, max_digits);
    pieces.push_back(text.substr(p, end - p));
    p = end;
  }
  return pieces;
}

}  // namespace attnlab
