#include "report/escape.h"

#include <cstdint>

namespace attnlab::report {
namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

// Decodes the well-formed sequence starting at s[i] (Unicode Table 3-7). On success stores the
// code point and length; on failure stores in `length` the size of the maximal subpart (>= 1)
// that one U+FFFD replaces.
bool DecodeOne(std::string_view s, size_t i, uint32_t* cp, size_t* length) {
  const auto byte = [&](size_t k) { return static_cast<uint8_t>(s[k]); };
  const uint8_t b0 = byte(i);
  if (b0 < 0x80) {
    *cp = b0;
    *length = 1;
    return true;
  }
  size_t need;
  uint8_t lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 3;
    if (b0 == 0xE0) lo = 0xA0;  // overlong
    if (b0 == 0xED) hi = 0x9F;  // surrogates
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 4;
    if (b0 == 0xF0) lo = 0x90;  // overlong
    if (b0 == 0xF4) hi = 0x8F;  // past U+10FFFF
  } else {
    *length = 1;  // C0, C1 (overlong 2-byte), F5..FF, or a stray continuation byte
    return false;
  }
  uint32_t v = b0 & (need == 2 ? 0x1F : need == 3 ? 0x0F : 0x07);
  for (size_t k = 1; k < need; ++k) {
    const uint8_t lo_k = k == 1 ? lo : 0x80, hi_k = k == 1 ? hi : 0xBF;
    if (i + k >= s.size() || byte(i + k) < lo_k || byte(i + k) > hi_k) {
      *length = k;
      return false;
    }
    v = (v << 6) | (byte(i + k) & 0x3F);
  }
  *cp = v;
  *length = need;
  return true;
}

bool IsForbiddenInMarkup(uint32_t cp) {
  if (cp < 0x20) return cp != '\t' && cp != '\n' && cp != '\r';
  if (cp >= 0x7F && cp <= 0x9F) return true;
  return cp == 0xFFFE || cp == 0xFFFF;
}

}  // namespace

std::string SanitizeUtf8(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  size_t i = 0;
  while (i < text.size()) {
    uint32_t cp;
    size_t n;
    if (DecodeOne(text, i, &cp, &n)) {
      out.append(text.substr(i, n));
    } else {
      out.append(kReplacement);
    }
    i += n;
  }
  return out;
}

std::string EscapeHtml(std::string_view text) {
  std::string out;
  out.reserve(text.size() + text.size() / 8);
  size_t i = 0;
  while (i < text.size()) {
    uint32_t cp;
    size_t n;
    if (!DecodeOne(text, i, &cp, &n) || IsForbiddenInMarkup(cp)) {
      out.append(kReplacement);
    } else {
      switch (cp) {
        case '&':
          out.append("&amp;");
          break;
        case '<':
          out.append("&lt;");
          break;
        case '>':
          out.append("&gt;");
          break;
        case '"':
          out.append("&quot;");
          break;
        case '\'':
          out.append("&#39;");
          break;
        default:
          out.append(text.substr(i, n));
      }
    }
    i += n;
  }
  return out;
}

std::string VisibleToken(std::string_view token) {
  if (token.empty()) return "\u2205";
  std::string out;
  for (char c : token) {
    switch (c) {
      case ' ':
        out += "\u2423";
        break;
      case '\n':
        out += "\u21B5";
        break;
      case '\t':
        out += "\u21E5";
        break;
      case '\r':
        out += "\u240D";
        break;
      default:
        out += c;
    }
  }
  return out;
}

size_t Utf8Length(std::string_view valid_utf8) {
  size_t n = 0;
  for (char c : valid_utf8) n += (static_cast<uint8_t>(c) & 0xC0) != 0x80;
  return n;
}

}  // namespace attnlab::report
