// A minimal PNG encoder for images embedded in reports (heatmaps too large for one SVG element
// per cell). The zlib stream uses stored (uncompressed) deflate blocks: no compressor to get
// wrong, and the bytes depend only on the pixels. A 512 x 512 indexed image is ~257 KiB, ~343
// KiB as base64. Formats: PNG (ISO/IEC 15948), zlib (RFC 1950), deflate stored blocks (RFC
// 1951 3.2.4).
#ifndef ATTNLAB_REPORT_PNG_ENCODE_H_
#define ATTNLAB_REPORT_PNG_ENCODE_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "report/colormap.h"

namespace attnlab::report {

// CRC-32 as PNG and zlib's crc32() define it (reflected, polynomial 0xEDB88320), continuing
// from `crc` (0 to start).
uint32_t Crc32(std::string_view data, uint32_t crc = 0);

// Adler-32 (RFC 1950), starting value 1.
uint32_t Adler32(std::string_view data);

// A zlib stream holding `data` in stored deflate blocks of at most 65535 bytes.
std::string ZlibStored(std::string_view data);

// An 8-bit palette PNG: pixels[y * width + x] indexes `palette`.
// REQUIRES: width, height >= 1; pixels.size() == width * height; 1 <= palette.size() <= 256;
// every index < palette.size().
std::string EncodePngIndexed(int width, int height, const std::vector<uint8_t>& pixels,
                             const std::vector<Rgb>& palette);

// Standard base64 (RFC 4648 section 4) with padding.
std::string Base64Encode(std::string_view data);

// "data:image/png;base64,...".
std::string PngDataUri(std::string_view png);

}  // namespace attnlab::report

#endif  // ATTNLAB_REPORT_PNG_ENCODE_H_
