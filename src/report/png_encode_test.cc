// The PNG encoder against published check values (CRC-32, Adler-32, base64) and by decoding
// what it writes: chunk CRCs, header fields, the stored-deflate stream and every pixel.
#include "report/png_encode.h"

#include <gtest/gtest.h>

#include <random>
#include <string>

#include "report/report_test_util.h"

namespace attnlab::report {
namespace {

TEST(ReportPng, ChecksumsMatchTheirSpecifications) {
  EXPECT_EQ(Crc32("123456789"), 0xCBF43926u);  // the CRC-32 check value
  EXPECT_EQ(Crc32(""), 0u);
  EXPECT_EQ(Crc32("6789", Crc32("12345")), 0xCBF43926u);  // continuation
  EXPECT_EQ(Adler32("Wikipedia"), 0x11E60398u);
  EXPECT_EQ(Adler32(""), 1u);
  // Long input: the deferred modulo must not overflow (255 * 100000 bytes).
  const std::string ff(100000, '\xFF');
  uint32_t a = 1, b = 0;
  for (char c : ff) {
    a = (a + static_cast<uint8_t>(c)) % 65521;
    b = (b + a) % 65521;
  }
  EXPECT_EQ(Adler32(ff), (b << 16) | a);
}

TEST(ReportPng, Base64Rfc4648Vectors) {
  EXPECT_EQ(Base64Encode(""), "");
  EXPECT_EQ(Base64Encode("f"), "Zg==");
  EXPECT_EQ(Base64Encode("fo"), "Zm8=");
  EXPECT_EQ(Base64Encode("foo"), "Zm9v");
  EXPECT_EQ(Base64Encode("foob"), "Zm9vYg==");
  EXPECT_EQ(Base64Encode("fooba"), "Zm9vYmE=");
  EXPECT_EQ(Base64Encode("foobar"), "Zm9vYmFy");
  EXPECT_EQ(Base64Encode(std::string("\xFF\xFE\x00", 3)), "//4A");
}

TEST(ReportPng, ZlibStoredRoundTripsAcrossBlockBoundaries) {
  std::mt19937 rng(3);
  for (size_t n : {0u, 1u, 65534u, 65535u, 65536u, 200000u}) {
    std::string data(n, '\0');
    for (char& c : data) c = static_cast<char>(rng());
    const std::string z = ZlibStored(data);
    EXPECT_EQ(z.size(), 2 + data.size() + 5 * std::max<size_t>(1, (n + 65534) / 65535) + 4);
    bool ok = false;
    EXPECT_EQ(testing::InflateStored(z, &ok), data);
    EXPECT_TRUE(ok) << n;
  }
}

TEST(ReportPng, IndexedImageDecodesToItsPixels) {
  const int w = 37, h = 5;
  std::vector<uint8_t> pixels(w * h);
  for (int i = 0; i < w * h; ++i) pixels[i] = static_cast<uint8_t>(i % 3);
  const std::vector<Rgb> palette = {{255, 0, 0}, {0, 255, 0}, {0, 0, 255}};
  const std::string png = EncodePngIndexed(w, h, pixels, palette);
  const auto chunks = testing::ReadPngChunks(png);
  ASSERT_EQ(chunks.size(), 4u);
  EXPECT_EQ(chunks[0].type, "IHDR");
  EXPECT_EQ(chunks[1].type, "PLTE");
  EXPECT_EQ(chunks[2].type, "IDAT");
  EXPECT_EQ(chunks[3].type, "IEND");
  const std::string& ihdr = chunks[0].data;
  ASSERT_EQ(ihdr.size(), 13u);
  EXPECT_EQ(ihdr.substr(0, 8), std::string("\0\0\0\x25\0\0\0\x05", 8));
  EXPECT_EQ(ihdr[8], 8);  // bit depth
  EXPECT_EQ(ihdr[9], 3);  // palette
  EXPECT_EQ(chunks[1].data, std::string("\xFF\0\0\0\xFF\0\0\0\xFF", 9));
  bool ok = false;
  const std::string raw = testing::InflateStored(chunks[2].data, &ok);
  ASSERT_TRUE(ok);
  ASSERT_EQ(raw.size(), static_cast<size_t>(h * (w + 1)));
  for (int y = 0; y < h; ++y) {
    EXPECT_EQ(raw[y * (w + 1)], 0);  // filter: None
    for (int x = 0; x < w; ++x)
      EXPECT_EQ(static_cast<uint8_t>(raw[y * (w + 1) + 1 + x]), pixels[y * w + x]);
  }
  EXPECT_EQ(EncodePngIndexed(w, h, pixels, palette), png);  // deterministic
  EXPECT_EQ(PngDataUri(png).substr(0, 22), "data:image/png;base64,");
  EXPECT_EQ(testing::Base64Decode(PngDataUri(png).substr(22)), png);
}

}  // namespace
}  // namespace attnlab::report
