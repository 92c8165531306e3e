#include "core/printable.h"

namespace attnlab {

std::string PrintableExcerpt(std::string_view s, size_t max) {
  std::string r;
  for (size_t i = 0; i < s.size() && i < max; ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c == '\\') {
      r += "\\\\";
    } else if (c >= 0x20 && c < 0x7f) {
      r += static_cast<char>(c);
    } else if (c == '\n') {
      r += "\\n";
    } else {
      static const char kHex[] = "0123456789abcdef";
      r += "\\x";
      r += kHex[c >> 4];
      r += kHex[c & 15];
    }
  }
  if (s.size() > max) r += "...";
  return r;
}

}  // namespace attnlab
