// GPT-2's pre-tokeniser, by hand. The regular expression it replaces (encoder.py):
//
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//
// At each position the first alternative that matches wins, and each is greedy. Every character
// is exactly one of letter, number, whitespace or other, so some alternative always matches and
// the pieces tile the text. Spelled out, a piece starting at position p is:
//   1. "'" followed by s, t, m, d, re, ve or ll (lower case only): that contraction.
//   2. " " followed by a letter, number or other character c: the space plus the maximal run of
//      characters of c's class.
//   3. a letter, number or other character: the maximal run of its class.
//   4. whitespace: let the maximal whitespace run be p..e. If it reaches the end of the text, or
//      is one character long, the whole run; otherwise the run minus its last character (the
//      lookahead (?!\S) backtracks one character, which then starts the next piece, typically
//      as the " " of case 2).
// Bytes that are not well-formed UTF-8 are single characters of class "other" (tokenizer.h).
#include <string_view>
#include <vector>

#include "attnlab/tokenizer.h"

namespace attnlab {
namespace {

struct Char {
  CodePointClass cls;
  size_t length;
};

// The character starting at text[pos]. REQUIRES: pos < text.size().
inline Char CharAt(std::string_view text, size_t pos) {
  const unsigned char b = static_cast<unsigned char>(text[pos]);
  if (b < 0x80) return {ClassifyCodePoint(b), 1};
  const Utf8Char c = DecodeUtf8Char(text.substr(pos));
  if (!c.valid) return {CodePointClass::kOther, 1};
  return {ClassifyCodePoint(c.cp), static_cast<size_t>(c.length)};
}

// The end of the maximal run of class `cls` starting at pos (which holds a character of it).
inline size_t RunEnd(std::string_view text, size_t pos, CodePointClass cls) {
  while (pos < text.size()) {
    const Char c = CharAt(text, pos);
    if (c.cls != cls) break;
    pos += c.length;
  }
  return pos;
}

// Length of the contraction at text[pos] == '\'', or 0.
inline size_t ContractionLength(std::string_view text, size_t pos) {
  const std::string_view rest = text.substr(pos + 1);
  if (rest.empty()) return 0;
  switch (rest[0]) {
    case 's':
    case 't':
    case 'm':
    case 'd':
      return 2;
    case 'r':
    case 'v':
      return rest.size() >= 2 && rest[1] == 'e' ? 3 : 0;
    case 'l':
      return rest.size() >= 2 && rest[1] == 'l' ? 3 : 0;
    default:
      return 0;
  }
}

}  // namespace

bool Gpt2PreTokenizer::Next(std::string_view* piece) {
  const std::string_view t = text_;
  const size_t p = pos_;
  if (p >= t.size()) return false;
  size_t end;
  const Char c = CharAt(t, p);
  if (t[p] == '\'' && ContractionLength(t, p) > 0) {  // 1
    end = p + ContractionLength(t, p);
  } else if (c.cls != CodePointClass::kWhitespace) {  // 3
    end = RunEnd(t, p, c.cls);
  } else {
    CodePointClass next_cls = CodePointClass::kWhitespace;
    if (t[p] == ' ' && p + 1 < t.size()) next_cls = CharAt(t, p + 1).cls;
    if (next_cls != CodePointClass::kWhitespace) {  // 2
      end = RunEnd(t, p + 1, next_cls);
    } else {
      // 4
      size_t last = p;  // start of the run's last character
      end = p;
      while (end < t.size()) {
        const Char w = CharAt(t, end);
        if (w.cls != CodePointClass::kWhitespace) break;
        last = end;
        end += w.length;
      }
      if (end < t.size() && last > p) end = last;
    }
  }
  *piece = t.substr(p, end - p);
  pos_ = end;
  return true;
}

std::vector<std::string_view> Gpt2PreTokenize(std::string_view text) {
  std::vector<std::string_view> pieces;
  Gpt2PreTokenizer pt(text);
  std::string_view piece;
  while (pt.Next(&piece)) pieces.push_back(piece);
  return pieces;
}

}  // namespace attnlab
