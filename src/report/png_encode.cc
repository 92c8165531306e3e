#include "report/png_encode.h"

#include <algorithm>
#include <array>

#include "attnlab/status.h"

namespace attnlab::report {
namespace {

const std::array<uint32_t, 256>& CrcTable() {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t n = 0; n < 256; ++n) {
      uint32_t c = n;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      t[n] = c;
    }
    return t;
  }();
  return table;
}

void PutU32(std::string& out, uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) out += static_cast<char>((v >> shift) & 0xFF);
}

// length, type, data, CRC over type + data.
void AppendChunk(std::string& png, const char type[4], std::string_view data) {
  PutU32(png, static_cast<uint32_t>(data.size()));
  const std::string typed = std::string(type, 4) + std::string(data);
  png += typed;
  PutU32(png, Crc32(typed));
}

}  // namespace

uint32_t Crc32(std::string_view data, uint32_t crc) {
  const auto& table = CrcTable();
  uint32_t c = crc ^ 0xFFFFFFFFu;
  for (char ch : data) c = table[(c ^ static_cast<uint8_t>(ch)) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

uint32_t Adler32(std::string_view data) {
  constexpr uint32_t kMod = 65521;
  uint32_t a = 1, b = 0;
  size_t i = 0;
  while (i < data.size()) {
    // 5552 bytes is the most that cannot overflow b before the reduction (zlib's NMAX).
    const size_t end = std::min(data.size(), i + 5552);
    for (; i < end; ++i) {
      a += static_cast<uint8_t>(data[i]);
      b += a;
    }
    a %= kMod;
    b %= kMod;
  }
  return (b << 16) | a;
}

std::string ZlibStored(std::string_view data) {
  std::string out;
  out.reserve(data.size() + data.size() / 65535 * 5 + 16);
  out += static_cast<char>(0x78);  // CM = 8 (deflate), CINFO = 7 (32 KiB window)
  out += static_cast<char>(0x01);  // FLEVEL 0, no dictionary; 0x7801 % 31 == 0
  size_t pos = 0;
  do {
    const size_t n = std::min<size_t>(65535, data.size() - pos);
    const bool last = pos + n == data.size();
    out += static_cast<char>(last ? 1 : 0);  // BFINAL, BTYPE = 00 (stored); byte-aligned
    out += static_cast<char>(n & 0xFF);
    out += static_cast<char>(n >> 8);
    out += static_cast<char>(~n & 0xFF);
    out += static_cast<char>((~n >> 8) & 0xFF);
    out.append(data.substr(pos, n));
    pos += n;
  } while (pos < data.size());
  PutU32(out, Adler32(data));
  return out;
}

std::string EncodePngIndexed(int width, int height, const std::vector<uint8_t>& pixels,
                             const std::vector<Rgb>& palette) {
  ATTNLAB_CHECK(width >= 1 && height >= 1);
  ATTNLAB_CHECK(pixels.size() == static_cast<size_t>(width) * static_cast<size_t>(height));
  ATTNLAB_CHECK(!palette.empty() && palette.size() <= 256);
  std::string png = "\x89PNG\r\n\x1a\n";
  std::string ihdr;
  PutU32(ihdr, static_cast<uint32_t>(width));
  PutU32(ihdr, static_cast<uint32_t>(height));
  ihdr += static_cast<char>(8);  // bit depth
  ihdr += static_cast<char>(3);  // colour type: palette
  ihdr += std::string(3, '\0');  // compression, filter, interlace: defaults
  AppendChunk(png, "IHDR", ihdr);
  std::string plte;
  for (const Rgb& c : palette) {
    plte += static_cast<char>(c.r);
    plte += static_cast<char>(c.g);
    plte += static_cast<char>(c.b);
  }
  AppendChunk(png, "PLTE", plte);
  std::string raw;  // each row: filter type 0 (None), then the indices
  raw.reserve(static_cast<size_t>(height) * (static_cast<size_t>(width) + 1));
  for (int y = 0; y < height; ++y) {
    raw += '\0';
    for (int x = 0; x < width; ++x) {
      const uint8_t v = pixels[static_cast<size_t>(y) * width + x];
      ATTNLAB_CHECK(v < palette.size());
      raw += static_cast<char>(v);
    }
  }
  AppendChunk(png, "IDAT", ZlibStored(raw));
  AppendChunk(png, "IEND", "");
  return png;
}

std::string Base64Encode(std::string_view data) {
  static const char* kAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((data.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 3 <= data.size(); i += 3) {
    const uint32_t v = static_cast<uint8_t>(data[i]) << 16 |
                       static_cast<uint8_t>(data[i + 1]) << 8 | static_cast<uint8_t>(data[i + 2]);
    for (int shift = 18; shift >= 0; shift -= 6) out += kAlphabet[(v >> shift) & 63];
  }
  const size_t rest = data.size() - i;
  if (rest > 0) {
    uint32_t v = static_cast<uint8_t>(data[i]) << 16;
    if (rest == 2) v |= static_cast<uint8_t>(data[i + 1]) << 8;
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += rest == 2 ? kAlphabet[(v >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

std::string PngDataUri(std::string_view png) {
  return "data:image/png;base64," + Base64Encode(png);
}

}  // namespace attnlab::report
