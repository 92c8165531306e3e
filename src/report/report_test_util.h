// Test helpers for the report layer: a small XML well-formedness checker (for the SVGs), an
// inflater for stored-block zlib streams and a PNG chunk reader (for the embedded images).
// Header-only, used by the *_test.cc files only.
#ifndef ATTNLAB_REPORT_REPORT_TEST_UTIL_H_
#define ATTNLAB_REPORT_REPORT_TEST_UTIL_H_

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "report/png_encode.h"

namespace attnlab::report::testing {

struct XmlAttribute {
  std::string element, name, value;  // value with entities left as written
};

struct XmlCheck {
  std::string error;  // empty: well-formed
  std::string root;
  std::map<std::string, int> element_counts;
  std::vector<XmlAttribute> attributes;
  std::string text;  // all character data, entities left as written
  bool ok() const { return error.empty(); }
};

inline bool IsNameStart(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_' || c == ':';
}
inline bool IsNameChar(char c) {
  return IsNameStart(c) || (c >= '0' && c <= '9') || c == '-' || c == '.';
}

// Valid UTF-8 (strict: no overlongs, surrogates or values past U+10FFFF), written independently
// of escape.cc's decoder.
inline bool IsValidUtf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto b = static_cast<uint8_t>(s[i]);
    int n = b < 0x80 ? 1 : (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : (b >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    uint32_t cp = n == 1 ? b : n == 2 ? (b & 0x1F) : n == 3 ? (b & 0x0F) : (b & 0x07);
    for (int k = 1; k < n; ++k) {
      const auto c = static_cast<uint8_t>(s[i + k]);
      if ((c >> 6) != 2) return false;
      cp = (cp << 6) | (c & 0x3F);
    }
    const uint32_t min[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < min[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += n;
  }
  return true;
}

// Checks: one root element; properly nested, matching tags; attribute syntax, no duplicate
// attribute, no '<' in values; entity references are the five predefined or numeric; no raw
// '<' or '&' in text; valid UTF-8 without C0 controls other than tab, LF, CR. Accepts an XML
// declaration and comments. Not a validating parser; enough to catch broken markup.
inline XmlCheck CheckXml(std::string_view s) {
  XmlCheck r;
  if (!IsValidUtf8(s)) {
    r.error = "not valid UTF-8";
    return r;
  }
  for (char c : s) {
    const auto u = static_cast<uint8_t>(c);
    if (u < 0x20 && c != '\t' && c != '\n' && c != '\r') {
      r.error = "control character " + std::to_string(u);
      return r;
    }
  }
  const auto check_entities = [&](std::string_view t) -> bool {
    for (size_t i = 0; i < t.size(); ++i) {
      if (t[i] != '&') continue;
      const size_t semi = t.find(';', i);
      if (semi == std::string_view::npos) return false;
      const std::string_view name = t.substr(i + 1, semi - i - 1);
      static const std::set<std::string_view> kNamed = {"amp", "lt", "gt", "quot", "apos"};
      bool ok = kNamed.count(name) > 0;
      if (!ok && name.size() >= 2 && name[0] == '#') {
        ok = true;
        const bool hex = name[1] == 'x';
        for (size_t k = hex ? 2 : 1; k < name.size(); ++k) {
          const char c = name[k];
          ok &=
              (c >= '0' && c <= '9') || (hex && ((c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')));
        }
        ok &= name.size() > (hex ? 2u : 1u);
      }
      if (!ok) return false;
      i = semi;
    }
    return true;
  };
  std::vector<std::string> stack;
  size_t i = 0;
  bool seen_root = false;
  const auto fail = [&](const std::string& msg) {
    r.error = msg + " at offset " + std::to_string(i);
    return r;
  };
  while (i < s.size()) {
    if (s[i] != '<') {
      const size_t next = s.find('<', i);
      const std::string_view t =
          s.substr(i, next == std::string_view::npos ? s.size() - i : next - i);
      if (stack.empty() && t.find_first_not_of(" \t\r\n") != std::string_view::npos) {
        return fail("text outside the root element");
      }
      if (!check_entities(t)) return fail("bad entity reference in text");
      r.text += t;
      i += t.size();
      continue;
    }
    if (s.substr(i, 4) == "<!--") {
      const size_t end = s.find("-->", i + 4);
      if (end == std::string_view::npos) return fail("unterminated comment");
      i = end + 3;
      continue;
    }
    if (s.substr(i, 5) == "<?xml") {
      const size_t end = s.find("?>", i);
      if (end == std::string_view::npos || i != 0) return fail("bad XML declaration");
      i = end + 2;
      continue;
    }
    const bool closing = i + 1 < s.size() && s[i + 1] == '/';
    size_t k = i + (closing ? 2 : 1);
    if (k >= s.size() || !IsNameStart(s[k])) return fail("bad tag name");
    const size_t name_start = k;
    while (k < s.size() && IsNameChar(s[k])) ++k;
    const std::string name(s.substr(name_start, k - name_start));
    if (closing) {
      while (k < s.size() && (s[k] == ' ' || s[k] == '\n' || s[k] == '\t' || s[k] == '\r')) ++k;
      if (k >= s.size() || s[k] != '>') return fail("bad closing tag");
      if (stack.empty() || stack.back() != name) return fail("mismatched </" + name + ">");
      stack.pop_back();
      i = k + 1;
      continue;
    }
    if (stack.empty()) {
      if (seen_root) return fail("second root element <" + name + ">");
      seen_root = true;
      r.root = name;
    }
    ++r.element_counts[name];
    std::set<std::string> seen;
    bool self_closing = false;
    while (true) {
      const size_t before = k;
      while (k < s.size() && (s[k] == ' ' || s[k] == '\n' || s[k] == '\t' || s[k] == '\r')) ++k;
      if (k >= s.size()) return fail("unterminated tag <" + name + ">");
      if (s[k] == '>') {
        ++k;
        break;
      }
      if (s[k] == '/') {
        if (k + 1 >= s.size() || s[k + 1] != '>') return fail("bad '/' in <" + name + ">");
        self_closing = true;
        k += 2;
        break;
      }
      if (k == before) return fail("attributes of <" + name + "> need whitespace between them");
      if (!IsNameStart(s[k])) return fail("bad attribute name in <" + name + ">");
      const size_t a0 = k;
      while (k < s.size() && IsNameChar(s[k])) ++k;
      const std::string attr(s.substr(a0, k - a0));
      if (!seen.insert(attr).second) return fail("duplicate attribute " + attr);
      if (k >= s.size() || s[k] != '=') return fail("attribute " + attr + " without '='");
      ++k;
      if (k >= s.size() || (s[k] != '"' && s[k] != '\'')) return fail("unquoted attribute " + attr);
      const char q = s[k];
      const size_t end = s.find(q, k + 1);
      if (end == std::string_view::npos) return fail("unterminated attribute " + attr);
      const std::string_view value = s.substr(k + 1, end - k - 1);
      if (value.find('<') != std::string_view::npos) return fail("'<' in attribute " + attr);
      if (!check_entities(value)) return fail("bad entity in attribute " + attr);
      r.attributes.push_back({name, attr, std::string(value)});
      k = end + 1;
    }
    if (!self_closing) stack.push_back(name);
    i = k;
  }
  if (!seen_root) {
    r.error = "no root element";
  } else if (!stack.empty()) {
    r.error = "unclosed <" + stack.back() + ">";
  }
  return r;
}

// Inflates a zlib stream made only of stored deflate blocks (what ZlibStored writes); "" and
// *ok = false for anything else or on a checksum mismatch.
inline std::string InflateStored(std::string_view z, bool* ok) {
  *ok = false;
  if (z.size() < 6 || static_cast<uint8_t>(z[0]) != 0x78 ||
      ((static_cast<uint8_t>(z[0]) << 8) | static_cast<uint8_t>(z[1])) % 31 != 0) {
    return "";
  }
  std::string out;
  size_t i = 2;
  while (true) {
    if (i + 5 > z.size()) return "";
    const auto header = static_cast<uint8_t>(z[i]);
    if ((header & 6) != 0) return "";  // not a stored block
    const uint32_t len = static_cast<uint8_t>(z[i + 1]) | static_cast<uint8_t>(z[i + 2]) << 8;
    const uint32_t nlen = static_cast<uint8_t>(z[i + 3]) | static_cast<uint8_t>(z[i + 4]) << 8;
    if ((len ^ 0xFFFF) != nlen || i + 5 + len > z.size()) return "";
    out.append(z.substr(i + 5, len));
    i += 5 + len;
    if (header & 1) break;
  }
  if (i + 4 != z.size()) return "";
  uint32_t adler = 0;
  for (int k = 0; k < 4; ++k) adler = adler << 8 | static_cast<uint8_t>(z[i + k]);
  if (adler != Adler32(out)) return "";
  *ok = true;
  return out;
}

struct PngChunk {
  std::string type, data;
};

// Splits a PNG into chunks, checking the signature and every CRC; empty on any error.
inline std::vector<PngChunk> ReadPngChunks(std::string_view png) {
  std::vector<PngChunk> chunks;
  if (png.substr(0, 8) != std::string_view("\x89PNG\r\n\x1a\n", 8)) return {};
  size_t i = 8;
  const auto u32 = [&](size_t k) {
    uint32_t v = 0;
    for (int b = 0; b < 4; ++b) v = v << 8 | static_cast<uint8_t>(png[k + b]);
    return v;
  };
  while (i < png.size()) {
    if (i + 12 > png.size()) return {};
    const uint32_t len = u32(i);
    if (i + 12 + len > png.size()) return {};
    const std::string_view typed = png.substr(i + 4, 4 + len);
    if (Crc32(typed) != u32(i + 8 + len)) return {};
    chunks.push_back({std::string(typed.substr(0, 4)), std::string(typed.substr(4))});
    i += 12 + len;
  }
  return chunks;
}

// Standard base64 decoding (no whitespace); "" on invalid input.
inline std::string Base64Decode(std::string_view s) {
  const std::string_view alphabet =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  if (s.size() % 4 != 0) return "";
  std::string out;
  for (size_t i = 0; i < s.size(); i += 4) {
    uint32_t v = 0;
    int pad = 0;
    for (int k = 0; k < 4; ++k) {
      const char c = s[i + k];
      if (c == '=') {
        ++pad;
        v <<= 6;
        continue;
      }
      const size_t p = alphabet.find(c);
      if (p == std::string_view::npos || pad > 0) return "";
      v = v << 6 | static_cast<uint32_t>(p);
    }
    out += static_cast<char>(v >> 16);
    if (pad < 2) out += static_cast<char>((v >> 8) & 0xFF);
    if (pad < 1) out += static_cast<char>(v & 0xFF);
  }
  return out;
}

}  // namespace attnlab::report::testing

#endif  // ATTNLAB_REPORT_REPORT_TEST_UTIL_H_
