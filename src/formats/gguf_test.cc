// GGUF container (gguf.h) and its Hugging Face view (gguf_model.h): round trips through a test
// writer (gguf_test_util.h), dequantization against hand-computed blocks, llama.cpp's row
// reorderings undone, every corruption refused with its message, the Python writer
// (tests/gguf_writer.py) read back, and the committed fuzz corpus (docs/BAD_INPUTS.md rows).
#include "formats/gguf.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include "formats/gguf_model.h"
#include "formats/gguf_test_util.h"

namespace attnlab {
namespace {

namespace fs = std::filesystem;
using gguf_test::GgufBuilder;

const fs::path kSource = fs::path(ATTNLAB_SOURCE_DIR);

std::string Slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  EXPECT_TRUE(in) << "missing file " << p;
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

class TempDir {
 public:
  TempDir() {
    std::string templ = (fs::temp_directory_path() / "attnlab_gguf_XXXXXX").string();
    ATTNLAB_CHECK(::mkdtemp(templ.data()) != nullptr);
    path_ = templ;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  std::string File(const std::string& name, const std::string& bytes) const {
    const std::string p = path_ + "/" + name;
    std::ofstream(p, std::ios::binary) << bytes;
    return p;
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

void ExpectError(const Status& st, const std::string& needle, const std::string& what = "") {
  ASSERT_FALSE(st.ok()) << what << ": accepted";
  EXPECT_NE(st.message().find(needle), std::string::npos)
      << what << ": expected \"" << needle << "\" in: " << st.ToString();
  EXPECT_EQ(st.message().find('\n'), std::string::npos) << "not one line: " << st.message();
}

Status ParseStatus(const std::string& bytes, const std::string& name = "t.gguf") {
  return ParseGguf(bytes, name).status();
}

std::vector<float> Read(const GgufFile& f, const std::string& name) {
  const GgufTensorInfo* t = f.FindTensor(name);
  EXPECT_NE(t, nullptr) << name;
  if (t == nullptr) return {};
  std::vector<float> out(static_cast<size_t>(t->numel()));
  const Status st = f.ReadFloat(*t, out);
  EXPECT_TRUE(st.ok()) << st.ToString();
  return out;
}

std::vector<float> ReadHf(const TensorSource& s, const std::string& name) {
  const SourceTensorInfo* i = s.Find(name);
  EXPECT_NE(i, nullptr) << name;
  if (i == nullptr) return {};
  std::vector<float> out(static_cast<size_t>(i->numel()));
  const Status st = s.ReadFloat(name, out);
  EXPECT_TRUE(st.ok()) << st.ToString();
  return out;
}

std::vector<float> Iota(size_t n, float scale, float offset = 0) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<float>(i) * scale + offset;
  return v;
}

// ---- the container ------------------------------------------------------------------------------

TEST(GgufParse, MetadataOfEveryTypeAndTensorsRoundTrip) {
  GgufBuilder b;
  b.U8("u8", 200).I8("i8", -100).U16("u16", 60000).I16("i16", -30000).U32("u32", 4000000000u);
  b.I32("i32", -2000000000).F32("f32", 0.5f).Bool("bool", true).Str("str", "llama");
  b.U64("u64", 1ull << 40).I64("i64", -(1ll << 40)).F64("f64", 0.1);
  b.StrArray("strs", {"a", "bc", ""}).F32Array("floats", {0.5f, -1.5f}).I32Array("ints", {1, -2});
  b.Alignment(64);
  const std::vector<float> w = Iota(6, 0.5f, -1.0f);
  b.F32Tensor("w", {2, 3}, w);
  b.TypedTensor("h", GgmlType::kF16, {4}, {1.0f, -2.0f, 0.5f, 65504.0f});
  b.TypedTensor("bf", GgmlType::kBF16, {3}, {1.0f, -3.0f, 1.01171875f});
  b.Tensor("scalar", GgmlType::kF32, {}, gguf_test::F32Bytes({7.0f}));
  Result<GgufFile> f = ParseGguf(b.Build(), "rt.gguf");
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(f->version(), 3u);
  EXPECT_EQ(f->alignment(), 64u);
  EXPECT_EQ(f->data_offset() % 64, 0u);
  EXPECT_EQ(*f->GetUint("u8"), 200u);
  EXPECT_EQ(*f->GetInt("i8"), -100);
  EXPECT_EQ(*f->GetUint("u16"), 60000u);
  EXPECT_EQ(*f->GetInt("i16"), -30000);
  EXPECT_EQ(*f->GetUint("u32"), 4000000000u);
  EXPECT_EQ(*f->GetInt("i32"), -2000000000);
  EXPECT_EQ(*f->GetFloat("f32"), 0.5);
  EXPECT_EQ(*f->GetBool("bool"), true);
  EXPECT_EQ(*f->GetString("str"), "llama");
  EXPECT_EQ(*f->GetUint("u64"), 1ull << 40);
  EXPECT_EQ(*f->GetInt("i64"), -(1ll << 40));
  EXPECT_EQ(*f->GetFloat("f64"), 0.1);
  EXPECT_EQ(*f->GetStringArray("strs"), (std::vector<std::string>{"a", "bc", ""}));
  EXPECT_EQ(*f->GetFloatArray("floats"), (std::vector<double>{0.5, -1.5}));
  EXPECT_EQ(*f->GetIntArray("ints"), (std::vector<int64_t>{1, -2}));
  EXPECT_EQ(*f->GetUint("general.alignment"), 64u);
  EXPECT_EQ(f->metadata().size(), 16u);
  EXPECT_EQ(f->metadata()[0].first, "u8");  // file order
  // Typed getters refuse the wrong type with the key's name; absent keys are NotFound.
  ExpectError(f->GetString("u8").status(), "metadata key 'u8' is uint8 200, expected a string");
  ExpectError(f->GetUint("i8").status(), "'i8' is int8 -100, expected a non-negative integer");
  ExpectError(f->GetBool("str").status(), "expected a bool");
  ExpectError(f->GetStringArray("ints").status(),
              "an array of 2 int32, expected an array of strings");
  EXPECT_EQ(f->GetString("nope").status().code(), StatusCode::kNotFound);
  ExpectError(f->GetString("nope").status(), "rt.gguf: no metadata key 'nope'");

  ASSERT_EQ(f->tensors().size(), 4u);
  const GgufTensorInfo* t = f->FindTensor("w");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->dims, (std::vector<int64_t>{3, 2}));  // ggml order
  EXPECT_EQ(t->rows(), 2);
  EXPECT_EQ(t->nbytes, 24u);
  EXPECT_EQ(Read(*f, "w"), w);
  EXPECT_EQ(Read(*f, "h"), (std::vector<float>{1.0f, -2.0f, 0.5f, 65504.0f}));
  EXPECT_EQ(Read(*f, "bf"), (std::vector<float>{1.0f, -3.0f, 1.015625f}));  // ties to even
  EXPECT_EQ(Read(*f, "scalar"), (std::vector<float>{7.0f}));
  std::vector<float> row(3);
  ASSERT_TRUE(f->ReadRowsFloat(*t, 1, 1, row).ok());
  EXPECT_EQ(row, (std::vector<float>{0.5f, 1.0f, 1.5f}));
  std::vector<float> small(5);
  ExpectError(f->ReadFloat(*t, small),
              "rt.gguf: tensor 'w' has 6 elements, the destination holds 5");

  // The mmap reader agrees.
  TempDir dir;
  Result<GgufFile> g = ReadGguf(dir.File("rt.gguf", b.Build()));
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_EQ(Read(*g, "w"), w);
  EXPECT_EQ(ReadGguf(dir.path() + "/missing.gguf").status().code(), StatusCode::kNotFound);
}

TEST(GgufParse, VersionTwoReadsLikeThree) {
  GgufBuilder b;
  b.version = 2;
  b.Str("general.architecture", "llama").F32Tensor("a", {2}, {1.0f, 2.0f});
  Result<GgufFile> f = ParseGguf(b.Build(), "v2.gguf");
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(f->version(), 2u);
  EXPECT_EQ(Read(*f, "a"), (std::vector<float>{1.0f, 2.0f}));
}

// ---- dequantization against hand-computed blocks ------------------------------------------------

TEST(GgufDequant, Q8_0Block) {
  // d = 0.5 (f16 0x3800); qs = -128, -1, 0, 1, 127, then j - 16.
  std::string blk;
  gguf_test::PutU16(&blk, 0x3800);
  std::vector<int8_t> q(32);
  for (int j = 0; j < 32; ++j) q[j] = static_cast<int8_t>(j - 16);
  q[0] = -128;
  q[1] = 127;
  for (int8_t x : q) blk.push_back(static_cast<char>(x));
  std::vector<float> out(32);
  ASSERT_TRUE(DequantizeGgml(GgmlType::kQ8_0, reinterpret_cast<const uint8_t*>(blk.data()), 32,
                             out.data(), "q8")
                  .ok());
  EXPECT_EQ(out[0], -64.0f);
  EXPECT_EQ(out[1], 63.5f);
  for (int j = 2; j < 32; ++j) EXPECT_EQ(out[j], 0.5f * static_cast<float>(j - 16)) << j;
}

TEST(GgufDequant, Q8_0QuantizerRoundTrip) {
  // The test writer quantizes like ggml: the largest magnitude maps to +-127 exactly.
  std::vector<float> v = Iota(64, 0.125f, -4.0f);
  GgufBuilder b;
  b.TypedTensor("q", GgmlType::kQ8_0, {2, 32}, v);
  Result<GgufFile> f = ParseGguf(b.Build(), "q.gguf");
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(f->FindTensor("q")->nbytes, 68u);
  const std::vector<float> r = Read(*f, "q");
  const float d0 = GgufHalfToFloat(gguf_test::FloatToHalf(4.0f / 127.0f));
  EXPECT_EQ(r[0], -127.0f * d0);
  for (size_t i = 0; i < v.size(); ++i) EXPECT_NEAR(r[i], v[i], 0.02f) << i;
}

TEST(GgufDequant, Q4_0Block) {
  // d = 2 (f16 0x4000); qs[j] = j | (15 - j) << 4: element j = 2 (j - 8), element j + 16 =
  // 2 (15 - j - 8).
  std::string blk;
  gguf_test::PutU16(&blk, 0x4000);
  for (int j = 0; j < 16; ++j) blk.push_back(static_cast<char>(j | ((15 - j) << 4)));
  std::vector<float> out(32);
  ASSERT_TRUE(DequantizeGgml(GgmlType::kQ4_0, reinterpret_cast<const uint8_t*>(blk.data()), 32,
                             out.data(), "q4")
                  .ok());
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(out[j], 2.0f * static_cast<float>(j - 8)) << j;
    EXPECT_EQ(out[j + 16], 2.0f * static_cast<float>(7 - j)) << j;
  }
}

TEST(GgufDequant, Q4_KBlock) {
  // d = 1, dmin = 0.5; sub-block s (32 elements) has 6-bit scale sc[s] and min m[s], packed:
  // bytes 0-3: sc[0..3] | top 2 bits of sc[4..7] << 6; bytes 4-7: m[0..3] | top bits of
  // m[4..7] << 6; bytes 8-11: low 4 bits of sc[4..7] | low 4 bits of m[4..7] << 4.
  const int sc[8] = {1, 2, 3, 63, 17, 33, 50, 63};
  const int m[8] = {0, 5, 9, 62, 20, 40, 60, 5};
  std::string blk;
  gguf_test::PutU16(&blk, 0x3C00);
  gguf_test::PutU16(&blk, 0x3800);
  uint8_t scales[12];
  for (int s = 0; s < 4; ++s) {
    scales[s] = static_cast<uint8_t>(sc[s] | ((sc[s + 4] >> 4) << 6));
    scales[s + 4] = static_cast<uint8_t>(m[s] | ((m[s + 4] >> 4) << 6));
    scales[s + 8] = static_cast<uint8_t>((sc[s + 4] & 0xF) | ((m[s + 4] & 0xF) << 4));
  }
  blk.append(reinterpret_cast<const char*>(scales), 12);
  // 64 elements per 32 bytes: low nibbles are sub-block 2k, high nibbles sub-block 2k + 1.
  auto lo = [](int k, int l) { return (l + 3 * k) % 16; };
  auto hi = [](int k, int l) { return (5 * l + k) % 16; };
  for (int k = 0; k < 4; ++k) {
    for (int l = 0; l < 32; ++l) blk.push_back(static_cast<char>(lo(k, l) | (hi(k, l) << 4)));
  }
  ASSERT_EQ(blk.size(), 144u);
  std::vector<float> out(256);
  ASSERT_TRUE(DequantizeGgml(GgmlType::kQ4_K, reinterpret_cast<const uint8_t*>(blk.data()), 256,
                             out.data(), "q4k")
                  .ok());
  for (int k = 0; k < 4; ++k) {
    for (int l = 0; l < 32; ++l) {
      EXPECT_EQ(out[64 * k + l], static_cast<float>(sc[2 * k] * lo(k, l)) - 0.5f * m[2 * k])
          << k << " " << l;
      EXPECT_EQ(out[64 * k + 32 + l],
                static_cast<float>(sc[2 * k + 1] * hi(k, l)) - 0.5f * m[2 * k + 1])
          << k << " " << l;
    }
  }
}

TEST(GgufDequant, Q6_KBlock) {
  // d = 0.25 (f16 0x3400); element e has 6-bit q(e) and int8 scale[e / 16]; x = d scale (q - 32).
  // Half h of 128 elements, l < 32: element 128h + l: low nibble of ql[64h + l], bits 0-1 of
  // qh[32h + l]; +32: low nibble of ql[64h + l + 32], bits 2-3; +64: high nibble of ql[64h + l],
  // bits 4-5; +96: high nibble of ql[64h + l + 32], bits 6-7.
  auto q = [](int e) { return (7 * e + 3) % 64; };
  uint8_t ql[128] = {}, qh[64] = {};
  for (int h = 0; h < 2; ++h) {
    for (int l = 0; l < 32; ++l) {
      const int e = 128 * h + l;
      ql[64 * h + l] = static_cast<uint8_t>((q(e) & 0xF) | ((q(e + 64) & 0xF) << 4));
      ql[64 * h + l + 32] = static_cast<uint8_t>((q(e + 32) & 0xF) | ((q(e + 96) & 0xF) << 4));
      qh[32 * h + l] = static_cast<uint8_t>((q(e) >> 4) | ((q(e + 32) >> 4) << 2) |
                                            ((q(e + 64) >> 4) << 4) | ((q(e + 96) >> 4) << 6));
    }
  }
  int8_t scales[16];
  for (int i = 0; i < 16; ++i) scales[i] = static_cast<int8_t>(i * 9 - 70);
  std::string blk(reinterpret_cast<const char*>(ql), 128);
  blk.append(reinterpret_cast<const char*>(qh), 64);
  blk.append(reinterpret_cast<const char*>(scales), 16);
  gguf_test::PutU16(&blk, 0x3400);
  ASSERT_EQ(blk.size(), 210u);
  std::vector<float> out(256);
  ASSERT_TRUE(DequantizeGgml(GgmlType::kQ6_K, reinterpret_cast<const uint8_t*>(blk.data()), 256,
                             out.data(), "q6k")
                  .ok());
  for (int e = 0; e < 256; ++e) {
    EXPECT_EQ(out[e], 0.25f * static_cast<float>(scales[e / 16] * (q(e) - 32))) << e;
  }
}

TEST(GgufDequant, HalfConversionsAreExact) {
  EXPECT_EQ(GgufHalfToFloat(0x0001), std::ldexp(1.0f, -24));  // smallest subnormal
  EXPECT_EQ(GgufHalfToFloat(0x7bff), 65504.0f);
  EXPECT_TRUE(std::isinf(GgufHalfToFloat(0xfc00)));
  EXPECT_EQ(GgufBf16ToFloat(0x3f80), 1.0f);
  for (uint32_t h = 0; h < 0x7c00; ++h) {
    EXPECT_EQ(gguf_test::FloatToHalf(GgufHalfToFloat(static_cast<uint16_t>(h))), h);
  }
}

TEST(GgufDequant, UnsupportedTypeNamesTensorAndType) {
  GgufBuilder b;
  b.Tensor("blk.0.attn_q.weight", GgmlType::kQ5_K, {256}, std::string(176, '\0'));
  b.Tensor("i", GgmlType::kI32, {2}, std::string(8, '\0'));
  Result<GgufFile> f = ParseGguf(b.Build(), "q5.gguf");
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  std::vector<float> out(256);
  const Status st = f->ReadFloat(*f->FindTensor("blk.0.attn_q.weight"), out);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  ExpectError(st, "q5.gguf: unsupported GGUF tensor type Q5_K in blk.0.attn_q.weight");
  std::vector<float> two(2);
  ExpectError(f->ReadFloat(*f->FindTensor("i"), two), "unsupported GGUF tensor type I32 in i");
}

// ---- corruption
// ----------------------------------------------------------------------------------

std::string SmallFile() {
  GgufBuilder b;
  b.Str("general.architecture", "llama").StrArray("tokens", {"a", "bc"}).F32("eps", 1e-5f);
  b.TypedTensor("q", GgmlType::kQ8_0, {1, 32}, Iota(32, 0.25f));
  b.F32Tensor("v", {8}, Iota(8, 1.0f));  // 32 bytes: ends exactly at the file's end
  return b.Build();
}

TEST(GgufCorrupt, EveryTruncationIsAnErrorNeverACrash) {
  const std::string full = SmallFile();
  ASSERT_TRUE(ParseGguf(full, "full").ok());
  TempDir dir;
  for (size_t n = 0; n < full.size(); ++n) {
    const Status st = ParseStatus(full.substr(0, n), "cut");
    EXPECT_FALSE(st.ok()) << "a file cut to " << n << " of " << full.size() << " bytes parsed";
    EXPECT_EQ(st.code(), StatusCode::kCorrupt) << n << ": " << st.ToString();
    EXPECT_FALSE(st.message().empty());
    if (n % 17 == 0) {
      EXPECT_FALSE(ReadGguf(dir.File("cut.gguf", full.substr(0, n))).ok()) << n;
    }
  }
}

TEST(GgufCorrupt, HeaderFieldsAreCheckedBeforeAllocation) {
  const std::string full = SmallFile();
  auto patch = [&](size_t at, const std::string& bytes) {
    std::string s = full;
    s.replace(at, bytes.size(), bytes);
    return s;
  };
  auto u64 = [](uint64_t v) { return GgufBuilder::Pod(v); };
  auto u32 = [](uint32_t v) { return GgufBuilder::Pod(v); };
  ExpectError(ParseStatus(""),
              "t.gguf: the file is 0 bytes; a GGUF file starts with the 4-byte magic 'GGUF'");
  ExpectError(ParseStatus(patch(0, "GGML")), "not a GGUF file: the first 4 bytes are 'GGML'");
  ExpectError(ParseStatus(patch(4, u32(1))), "GGUF version 1 is not supported");
  EXPECT_EQ(ParseStatus(patch(4, u32(1))).code(), StatusCode::kInvalidArgument);
  ExpectError(ParseStatus(patch(4, u32(3u << 24))), "a big-endian GGUF file");
  ExpectError(ParseStatus(patch(4, u32(4))), "GGUF version 4 is not supported");
  ExpectError(ParseStatus(patch(8, u64(1ull << 60))),
              "the header declares 1152921504606846976 tensors");
  ExpectError(ParseStatus(patch(16, u64(~0ull))),
              "the header declares 18446744073709551615 metadata");
  ExpectError(ParseStatus(patch(24, u64(1ull << 62))),
              "a string of 4611686018427387904 bytes is declared but only");
  // The first key is general.architecture (20 bytes): its type id follows.
  ExpectError(ParseStatus(patch(52, u32(13))),
              "metadata key 'general.architecture': unknown value type id 13");
}

TEST(GgufCorrupt, ValuesAndTensorInfos) {
  auto one_tensor = [](uint32_t type, std::vector<uint64_t> dims, std::string data,
                       std::optional<uint64_t> offset = std::nullopt) {
    GgufBuilder b;
    b.TensorId("blk.0.attn_q.weight", type, std::move(dims), std::move(data), offset);
    return b.Build();
  };
  std::string arr;
  gguf_test::PutU32(&arr, static_cast<uint32_t>(GgufValueType::kUint32));
  gguf_test::PutU64(&arr, 1ull << 61);
  ExpectError(ParseStatus(GgufBuilder().Raw("a", GgufValueType::kArray, arr).Build()),
              "metadata key 'a': an array of 2305843009213693952 uint32 needs at least");
  std::string nested;
  gguf_test::PutU32(&nested, static_cast<uint32_t>(GgufValueType::kArray));
  gguf_test::PutU64(&nested, 0);
  const Status ns = ParseStatus(GgufBuilder().Raw("n", GgufValueType::kArray, nested).Build());
  ExpectError(ns, "metadata key 'n': arrays of arrays are not supported");
  EXPECT_EQ(ns.code(), StatusCode::kInvalidArgument);
  ExpectError(ParseStatus(GgufBuilder().Raw("b", GgufValueType::kBool, "\x05").Build()),
              "metadata key 'b': a bool must be 0 or 1, found 5");
  ExpectError(ParseStatus(GgufBuilder().U32("a", 1).U32("a", 2).Build()),
              "metadata key 'a' appears twice");
  ExpectError(ParseStatus(GgufBuilder().U32("general.alignment", 24).Build()),
              "'general.alignment' is 24; it must be a power of two");
  ExpectError(ParseStatus(GgufBuilder().U64("general.alignment", 32).Build()),
              "'general.alignment' is uint64 32, expected a uint32");
  ExpectError(ParseStatus(one_tensor(0, {1, 1, 1, 1, 1}, std::string(4, '\0'))),
              "tensor 'blk.0.attn_q.weight': n_dims is 5; GGUF allows at most 4");
  ExpectError(ParseStatus(one_tensor(0, {1ull << 32, 1ull << 32, 16}, "")),
              "dimensions [4294967296, 4294967296, 16] have more elements than fit 63 bits");
  ExpectError(ParseStatus(one_tensor(0, {~0ull}, "")), "have more elements than fit 63 bits");
  ExpectError(ParseStatus(one_tensor(0, {1ull << 62}, "")),
              "elements of F32 need more bytes than fit 64 bits");
  ExpectError(ParseStatus(one_tensor(77, {4}, std::string(16, '\0'))),
              "tensor 'blk.0.attn_q.weight': unknown ggml type id 77");
  ExpectError(ParseStatus(one_tensor(4, {32}, std::string(32, '\0'))), "unknown ggml type id 4");
  ExpectError(ParseStatus(one_tensor(8, {33}, std::string(34, '\0'))),
              "rows of 33 elements are not a multiple of the Q8_0 block size 32");
  ExpectError(ParseStatus(one_tensor(0, {4}, std::string(16, '\0'), 8)),
              "data offset 8 is not a multiple of the alignment 32");
  std::string past = one_tensor(0, {4}, std::string(16, '\0'), 64);  // data section: 96 bytes
  past.resize(past.size() - 64);
  ExpectError(ParseStatus(past),
              "its 16 bytes at offset 64 reach past the end of the 32-byte data section");
  GgufBuilder over;
  over.Tensor("a", GgmlType::kF32, {16}, std::string(64, '\0'));
  over.Tensor("b", GgmlType::kF32, {8}, std::string(32, '\0'), 32);
  ExpectError(ParseStatus(over.Build()), "tensor 'b' [32, 64) overlaps tensor 'a' [0, 64)");
  GgufBuilder dup;
  dup.F32Tensor("a", {1}, {1.0f}).F32Tensor("a", {1}, {2.0f});
  ExpectError(ParseStatus(dup.Build()), "tensor 'a' appears twice");
  // Empty tensors occupy no bytes and may share an offset.
  GgufBuilder empty;
  empty.Tensor("e", GgmlType::kF32, {0, 4}, "").Tensor("f", GgmlType::kQ8_0, {32, 0}, "");
  ASSERT_TRUE(ParseGguf(empty.Build(), "e").ok());
}

// ---- the Hugging Face view ----------------------------------------------------------------------

// convert_hf_to_gguf.py's LlamaModel.permute on rows: W.reshape(n, 2, D/2, C).swapaxes(1, 2).
std::vector<float> ConverterPermute(const std::vector<float>& w, int64_t rows, int64_t cols,
                                    int64_t n_head) {
  const int64_t d = rows / n_head, half = d / 2;
  std::vector<float> out(w.size());
  for (int64_t h = 0; h < n_head; ++h)
    for (int64_t i = 0; i < 2; ++i)
      for (int64_t j = 0; j < half; ++j)
        for (int64_t c = 0; c < cols; ++c)
          out[((h * half + j) * 2 + i) * cols + c] = w[((h * 2 + i) * half + j) * cols + c];
  return out;
}

struct TinyLlama {
  int64_t V = 5, C = 32, H = 4, KV = 2, D = 8, F = 64;
  std::map<std::string, std::vector<float>> hf;  // HF tensors, HF layout
};

GgufBuilder LlamaBuilder(const std::string& arch, TinyLlama* m, bool permute, bool qkv_bias) {
  GgufBuilder b;
  b.Str("general.architecture", arch).U32(arch + ".context_length", 128);
  b.U32(arch + ".embedding_length", static_cast<uint32_t>(m->C));
  b.U32(arch + ".block_count", 2).U32(arch + ".feed_forward_length", static_cast<uint32_t>(m->F));
  b.U32(arch + ".attention.head_count", static_cast<uint32_t>(m->H));
  b.U32(arch + ".attention.head_count_kv", static_cast<uint32_t>(m->KV));
  b.F32(arch + ".rope.freq_base", 500000.0f).F32(arch + ".attention.layer_norm_rms_epsilon", 1e-6f);
  b.Str(arch + ".rope.scaling.type", "linear").F32(arch + ".rope.scaling.factor", 2.0f);
  b.Str("tokenizer.ggml.model", "gpt2").Str("tokenizer.ggml.pre", "llama-bpe");
  b.StrArray("tokenizer.ggml.tokens", {"a", "b", "ab", "<s>", "</s>"});
  b.F32Array("tokenizer.ggml.scores", {0, -1, -2, 0, 0});
  b.I32Array("tokenizer.ggml.token_type", {1, 1, 1, 3, 3});
  b.StrArray("tokenizer.ggml.merges", {"a b"});
  b.U32("tokenizer.ggml.bos_token_id", 3).U32("tokenizer.ggml.eos_token_id", 4);
  b.Bool("tokenizer.ggml.add_bos_token", true);
  float seed = 0.01f;
  auto add = [&](const std::string& gguf, const std::string& hf, std::vector<uint64_t> shape,
                 int64_t perm_heads, GgmlType type = GgmlType::kF32) {
    uint64_t n = 1;
    for (uint64_t s : shape) n *= s;
    std::vector<float> v(n);
    for (uint64_t i = 0; i < n; ++i) v[i] = std::sin(seed * static_cast<float>(i + 1)) * 2.0f;
    seed += 0.013f;
    if (type == GgmlType::kF16) {  // keep values exact in f16
      for (float& x : v) x = GgufHalfToFloat(gguf_test::FloatToHalf(x));
    }
    m->hf[hf] = v;
    std::vector<float> stored = v;
    if (perm_heads > 0) {
      stored = ConverterPermute(v, static_cast<int64_t>(shape[0]),
                                shape.size() > 1 ? static_cast<int64_t>(shape[1]) : 1, perm_heads);
    }
    b.TypedTensor(gguf, type, shape, stored);
  };
  const uint64_t C = static_cast<uint64_t>(m->C), F = static_cast<uint64_t>(m->F);
  const uint64_t QD = static_cast<uint64_t>(m->H * m->D), KD = static_cast<uint64_t>(m->KV * m->D);
  add("token_embd.weight", "model.embed_tokens.weight", {5, C}, 0);
  for (int l = 0; l < 2; ++l) {
    const std::string g = "blk." + std::to_string(l) + ".",
                      h = "model.layers." + std::to_string(l) + ".";
    add(g + "attn_norm.weight", h + "input_layernorm.weight", {C}, 0);
    add(g + "attn_q.weight", h + "self_attn.q_proj.weight", {QD, C}, permute ? m->H : 0,
        GgmlType::kF16);
    add(g + "attn_k.weight", h + "self_attn.k_proj.weight", {KD, C}, permute ? m->KV : 0);
    add(g + "attn_v.weight", h + "self_attn.v_proj.weight", {KD, C}, 0);
    if (qkv_bias) {
      add(g + "attn_q.bias", h + "self_attn.q_proj.bias", {QD}, permute ? m->H : 0);
      add(g + "attn_k.bias", h + "self_attn.k_proj.bias", {KD}, permute ? m->KV : 0);
      add(g + "attn_v.bias", h + "self_attn.v_proj.bias", {KD}, 0);
    }
    add(g + "attn_output.weight", h + "self_attn.o_proj.weight", {C, QD}, 0);
    add(g + "ffn_norm.weight", h + "post_attention_layernorm.weight", {C}, 0);
    add(g + "ffn_gate.weight", h + "mlp.gate_proj.weight", {F, C}, 0);
    add(g + "ffn_up.weight", h + "mlp.up_proj.weight", {F, C}, 0);
    add(g + "ffn_down.weight", h + "mlp.down_proj.weight", {C, F}, 0);
  }
  add("output_norm.weight", "model.norm.weight", {C}, 0);
  return b;
}

void ExpectSameTensors(const TinyLlama& m, const TensorSource& s) {
  std::vector<std::string> names;
  for (const auto& [name, v] : m.hf) names.push_back(name);
  EXPECT_EQ(s.Names(), names);
  for (const auto& [name, v] : m.hf) EXPECT_EQ(ReadHf(s, name), v) << name;
}

TEST(GgufModel, LlamaUndoesTheConvertersQkPermutation) {
  TinyLlama m;
  GgufBuilder b = LlamaBuilder("llama", &m, /*permute=*/true, /*qkv_bias=*/true);
  Result<GgufFile> f = ParseGguf(b.Build(), "llama.gguf");
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  Result<GgufAsHf> r = GgufFileAsHf(*f);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ExpectSameTensors(m, *r->tensors);
  const SourceTensorInfo* q = r->tensors->Find("model.layers.0.self_attn.q_proj.weight");
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->shape, (std::vector<int64_t>{32, 32}));
  EXPECT_EQ(q->dtype, "F16");
  EXPECT_EQ(q->file, "llama.gguf");
  EXPECT_EQ(r->tensors->Find("model.layers.1.self_attn.k_proj.weight")->shape,
            (std::vector<int64_t>{16, 32}));
  // Without undoing the permutation the rows would differ.
  EXPECT_NE(ConverterPermute(m.hf["model.layers.0.self_attn.k_proj.weight"], 16, 32, 2),
            m.hf["model.layers.0.self_attn.k_proj.weight"]);
  const nlohmann::json& c = r->hf_config;
  EXPECT_EQ(c["model_type"], "llama");
  EXPECT_EQ(c["architectures"][0], "LlamaForCausalLM");
  EXPECT_EQ(c["hidden_size"], 32);
  EXPECT_EQ(c["intermediate_size"], 64);
  EXPECT_EQ(c["num_hidden_layers"], 2);
  EXPECT_EQ(c["num_attention_heads"], 4);
  EXPECT_EQ(c["num_key_value_heads"], 2);
  EXPECT_EQ(c["head_dim"], 8);
  EXPECT_EQ(c["rms_norm_eps"], 1e-6);  // the float32 printed shortest, as config.json has it
  EXPECT_EQ(c["rope_theta"], 500000.0);
  EXPECT_EQ(c["max_position_embeddings"], 128);
  EXPECT_EQ(c["vocab_size"], 5);
  EXPECT_EQ(c["tie_word_embeddings"], true);
  EXPECT_EQ(c["attention_bias"], true);
  EXPECT_EQ(c["rope_scaling"]["rope_type"], "linear");
  EXPECT_EQ(c["rope_scaling"]["factor"], 2.0);
  EXPECT_EQ(c["bos_token_id"], 3);
  EXPECT_EQ(c["eos_token_id"], 4);
  const GgufVocabulary& v = r->vocabulary;
  EXPECT_EQ(v.model, "gpt2");
  EXPECT_EQ(v.pre, "llama-bpe");
  EXPECT_EQ(v.tokens, (std::vector<std::string>{"a", "b", "ab", "<s>", "</s>"}));
  EXPECT_EQ(v.scores, (std::vector<float>{0, -1, -2, 0, 0}));
  EXPECT_EQ(v.token_type, (std::vector<int32_t>{1, 1, 1, 3, 3}));
  EXPECT_EQ(v.merges, (std::vector<std::string>{"a b"}));
  EXPECT_EQ(v.bos_token_id, 3);
  EXPECT_EQ(v.eos_token_id, 4);
  EXPECT_EQ(v.add_bos_token, true);
  // The file route gives the same.
  TempDir dir;
  Result<GgufAsHf> o = OpenGgufAsHf(dir.File("m.gguf", b.Build()));
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  ExpectSameTensors(m, *o->tensors);
  std::vector<float> wrong(3);
  ExpectError(o->tensors->ReadFloat("model.norm.weight", wrong),
              "tensor 'model.norm.weight' (GGUF 'output_norm.weight') has 32 elements");
  ExpectError(o->tensors->ReadFloat("nope", wrong), "no tensor 'nope'");
}

TEST(GgufModel, PermutationRowRuleMatchesTheConverter) {
  // For every head size and head count: reading row r at LlamaCppUnpermutedRow(r) of the
  // permuted matrix gives back row r.
  for (int64_t heads : {1, 2, 3, 8}) {
    for (int64_t d : {2, 4, 8, 64}) {
      const int64_t rows = heads * d;
      std::vector<float> w = Iota(static_cast<size_t>(rows), 1.0f);
      const std::vector<float> p = ConverterPermute(w, rows, 1, heads);
      for (int64_t r = 0; r < rows; ++r)
        ASSERT_EQ(p[static_cast<size_t>(LlamaCppUnpermutedRow(r, d))], w[static_cast<size_t>(r)]);
    }
  }
}

TEST(GgufModel, Qwen2AndQwen3AreNotPermuted) {
  for (const std::string arch : {"qwen2", "qwen3"}) {
    TinyLlama m;
    GgufBuilder b = LlamaBuilder(arch, &m, /*permute=*/false, /*qkv_bias=*/arch == "qwen2");
    b.U32(arch + ".attention.key_length", 8).U32(arch + ".attention.sliding_window", 64);
    std::vector<float> qn = Iota(8, 0.5f), lm = Iota(5 * 32, 0.01f);
    if (arch == "qwen3") {
      b.F32Tensor("blk.0.attn_q_norm.weight", {8}, qn);
      m.hf["model.layers.0.self_attn.q_norm.weight"] = qn;
    }
    b.F32Tensor("output.weight", {5, 32}, lm);
    m.hf["lm_head.weight"] = lm;
    Result<GgufFile> f = ParseGguf(b.Build(), arch + ".gguf");
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    Result<GgufAsHf> r = GgufFileAsHf(*f);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    ExpectSameTensors(m, *r->tensors);
    EXPECT_EQ(r->hf_config["model_type"], arch);
    EXPECT_EQ(r->hf_config["head_dim"], 8);
    EXPECT_EQ(r->hf_config["tie_word_embeddings"], false);
    EXPECT_EQ(r->hf_config["sliding_window"], 64);
    EXPECT_EQ(r->hf_config["attention_bias"], arch == "qwen2");
  }
}

TEST(GgufModel, LlamaWithASlidingWindowIsMistral) {
  TinyLlama m;
  GgufBuilder b = LlamaBuilder("llama", &m, /*permute=*/true, /*qkv_bias=*/false);
  b.U32("llama.attention.sliding_window", 4096);
  Result<GgufFile> f = ParseGguf(b.Build(), "mistral.gguf");
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  Result<GgufAsHf> r = GgufFileAsHf(*f);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->hf_config["model_type"], "mistral");
  EXPECT_EQ(r->hf_config["architectures"][0], "MistralForCausalLM");
  EXPECT_EQ(r->hf_config["sliding_window"], 4096);
  EXPECT_EQ(r->hf_config["attention_bias"], false);
  ExpectSameTensors(m, *r->tensors);  // permuted like llama
}

TEST(GgufModel, GptNeoXFusedQkvIsReorderedBack) {
  const int64_t C = 32, H = 4, D = 8, F = 64;
  GgufBuilder b;
  b.Str("general.architecture", "gptneox").U32("gptneox.context_length", 64);
  b.U32("gptneox.embedding_length", C).U32("gptneox.block_count", 1);
  b.U32("gptneox.feed_forward_length", F).U32("gptneox.attention.head_count", H);
  b.U32("gptneox.rope.dimension_count", 2).Bool("gptneox.use_parallel_residual", false);
  b.F32("gptneox.attention.layer_norm_epsilon", 1e-5f);
  // HF rows per head [q; k; v]; the converter stores [all q; all k; all v].
  const std::vector<float> qkv = Iota(3 * C * C, 0.001f), bias = Iota(3 * C, 1.0f);
  std::vector<float> g(qkv.size()), gb(bias.size());
  for (int64_t h = 0; h < H; ++h)
    for (int64_t s = 0; s < 3; ++s)
      for (int64_t d = 0; d < D; ++d) {
        const int64_t hf_row = (h * 3 + s) * D + d, gg_row = s * C + h * D + d;
        for (int64_t c = 0; c < C; ++c) g[gg_row * C + c] = qkv[hf_row * C + c];
        gb[gg_row] = bias[hf_row];
      }
  const std::vector<float> e = Iota(5 * C, 0.5f), dense = Iota(C * C, -0.25f);
  b.F32Tensor("token_embd.weight", {5, C}, e);
  b.F32Tensor("blk.0.attn_qkv.weight", {3 * C, C}, g).F32Tensor("blk.0.attn_qkv.bias", {3 * C}, gb);
  b.F32Tensor("blk.0.attn_output.weight", {C, C}, dense)
      .F32Tensor("blk.0.attn_norm.bias", {C}, Iota(C, 1));
  b.F32Tensor("blk.0.ffn_up.weight", {F, C}, Iota(F * C, 1))
      .F32Tensor("output_norm.weight", {C}, Iota(C, 1));
  b.F32Tensor("output.weight", {5, C}, e);
  Result<GgufFile> f = ParseGguf(b.Build(), "neox.gguf");
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  Result<GgufAsHf> r = GgufFileAsHf(*f);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(
      r->tensors->Names(),
      (std::vector<std::string>{
          "embed_out.weight", "gpt_neox.embed_in.weight", "gpt_neox.final_layer_norm.weight",
          "gpt_neox.layers.0.attention.dense.weight",
          "gpt_neox.layers.0.attention.query_key_value.bias",
          "gpt_neox.layers.0.attention.query_key_value.weight",
          "gpt_neox.layers.0.input_layernorm.bias", "gpt_neox.layers.0.mlp.dense_h_to_4h.weight"}));
  EXPECT_EQ(ReadHf(*r->tensors, "gpt_neox.layers.0.attention.query_key_value.weight"), qkv);
  EXPECT_EQ(ReadHf(*r->tensors, "gpt_neox.layers.0.attention.query_key_value.bias"), bias);
  EXPECT_EQ(ReadHf(*r->tensors, "gpt_neox.layers.0.attention.dense.weight"), dense);
  const nlohmann::json& c = r->hf_config;
  EXPECT_EQ(c["model_type"], "gpt_neox");
  EXPECT_EQ(c["rotary_pct"], 0.25);
  EXPECT_EQ(c["use_parallel_residual"], false);
  EXPECT_EQ(c["layer_norm_eps"], 1e-5);
  EXPECT_EQ(c["tie_word_embeddings"], false);
  EXPECT_EQ(c["hidden_act"], "gelu");
}

TEST(GgufModel, RefusesWhatItCannotMap) {
  TinyLlama m;
  auto status = [&](GgufBuilder b) {
    Result<GgufFile> f = ParseGguf(b.Build(), "m.gguf");
    return f.ok() ? GgufFileAsHf(*f).status() : f.status();
  };
  ExpectError(
      status(LlamaBuilder("mamba", &m, false, false)),
      "m.gguf: architecture 'mamba' is not supported (llama, qwen2, qwen3 and gptneox are)");
  ExpectError(status(GgufBuilder().U32("a", 1)), "m.gguf: no metadata key 'general.architecture'");
  GgufBuilder extra = LlamaBuilder("llama", &m, true, false);
  extra.F32Tensor("blk.0.attn_sinks.weight", {4}, Iota(4, 1));
  ExpectError(status(extra),
              "tensor 'blk.0.attn_sinks.weight' has no Hugging Face name under architecture llama");
  GgufBuilder rope = LlamaBuilder("llama", &m, true, false);
  rope.F32Tensor("rope_freqs.weight", {4}, Iota(4, 1));
  ExpectError(status(rope),
              "tensor 'rope_freqs.weight' and llama.rope.scaling.type both scale RoPE");
  GgufBuilder layer = LlamaBuilder("llama", &m, true, false);
  layer.F32Tensor("blk.2.ffn_norm.weight", {32}, Iota(32, 1));
  ExpectError(status(layer),
              "tensor 'blk.2.ffn_norm.weight' is in layer 2 but llama.block_count is 2");
  GgufBuilder qnorm = LlamaBuilder("llama", &m, true, false);
  qnorm.F32Tensor("blk.0.attn_q_norm.weight", {8}, Iota(8, 1));
  ExpectError(status(qnorm), "tensor 'blk.0.attn_q_norm.weight' has no Hugging Face name");
  GgufBuilder odd = LlamaBuilder("llama", &m, false, false);
  odd.U32("llama.attention.head_count", 3);  // a second key: refused by the parser
  ExpectError(status(std::move(odd)), "appears twice");
  GgufBuilder typed;
  typed.Str("general.architecture", "llama").Str("llama.embedding_length", "32");
  ExpectError(
      status(typed),
      "metadata key 'llama.embedding_length' is string '32', expected a non-negative integer");
}

// ---- the Python writer
// ----------------------------------------------------------------------------

TEST(GgufPythonWriter, SelftestFileReadsBack) {
  if (::access("/usr/bin/python3", X_OK) != 0) GTEST_SKIP() << "no /usr/bin/python3";
  if (std::system("/usr/bin/python3 -c 'import numpy' 2>/dev/null") != 0)
    GTEST_SKIP() << "no numpy for /usr/bin/python3";
  TempDir dir;
  const std::string out = dir.path() + "/selftest.gguf";
  const std::string cmd =
      "/usr/bin/python3 " + (kSource / "tests" / "gguf_writer.py").string() + " --selftest " + out;
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  Result<GgufFile> f = ReadGguf(out);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(f->version(), 3u);
  EXPECT_EQ(f->alignment(), 64u);
  EXPECT_EQ(*f->GetString("general.architecture"), "selftest");
  EXPECT_EQ(f->Find("u8")->type, GgufValueType::kUint8);
  EXPECT_EQ(*f->GetUint("u8"), 200u);
  EXPECT_EQ(*f->GetInt("i8"), -100);
  EXPECT_EQ(*f->GetUint("u16"), 60000u);
  EXPECT_EQ(*f->GetInt("i16"), -30000);
  EXPECT_EQ(f->Find("u32")->type, GgufValueType::kUint32);
  EXPECT_EQ(*f->GetUint("u32"), 4000000000u);
  EXPECT_EQ(f->Find("i32")->type, GgufValueType::kInt32);
  EXPECT_EQ(*f->GetInt("i32"), -2000000000);
  EXPECT_EQ(f->Find("f32")->type, GgufValueType::kFloat32);
  EXPECT_EQ(*f->GetFloat("f32"), 0.5);
  EXPECT_EQ(*f->GetBool("bool"), true);
  EXPECT_EQ(*f->GetString("str"), "h\xc3\xa9llo");
  EXPECT_EQ(f->Find("u64")->type, GgufValueType::kUint64);
  EXPECT_EQ(*f->GetUint("u64"), 1ull << 40);
  EXPECT_EQ(f->Find("i64")->type, GgufValueType::kInt64);
  EXPECT_EQ(*f->GetInt("i64"), -(1ll << 40));
  EXPECT_EQ(f->Find("f64")->type, GgufValueType::kFloat64);
  EXPECT_EQ(*f->GetFloat("f64"), 0.1);
  EXPECT_EQ(*f->GetStringArray("strs"), (std::vector<std::string>{"a", "bc", ""}));
  EXPECT_EQ(*f->GetIntArray("ints"), (std::vector<int64_t>{1, -2, 3}));
  EXPECT_EQ(*f->GetFloatArray("floats"), (std::vector<double>{0.5, -1.5}));
  EXPECT_EQ(f->Find("bools")->array_type, GgufValueType::kBool);
  EXPECT_EQ(*f->GetIntArray("bools"), (std::vector<int64_t>{1, 0}));
  EXPECT_EQ(f->Find("u16s")->array_type, GgufValueType::kUint16);
  EXPECT_EQ(*f->GetIntArray("u16s"), (std::vector<int64_t>{7, 8}));
  EXPECT_EQ(f->FindTensor("f32")->dims, (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(Read(*f, "f32"), Iota(6, 0.5f, -1.0f));
  EXPECT_EQ(Read(*f, "f16"), (std::vector<float>{1, -2, 0.5f, 65504}));
  EXPECT_EQ(Read(*f, "bf16"), (std::vector<float>{1.0f, -3.0f, 1.015625f}));
  // numpy's Q8_0 quantizer and the C++ test writer's agree byte for byte.
  const GgufTensorInfo* q = f->FindTensor("q8");
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->type, GgmlType::kQ8_0);
  EXPECT_EQ(q->dims, (std::vector<int64_t>{32, 2}));
  const std::span<const uint8_t> bytes = f->Bytes(*q);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size()),
            gguf_test::Q8_0Bytes(Iota(64, 0.125f, -4.0f)));
}

TEST(GgufPythonWriter, HfToGgufLlamaReadsBackAsTheHfTensors) {
  // tests/gguf_writer.py's hf_to_gguf permutes q/k as llama.cpp's converter does; reading the
  // file back through the HF view must give the HF values exactly.
  if (::access("/usr/bin/python3", X_OK) != 0) GTEST_SKIP() << "no /usr/bin/python3";
  if (std::system("/usr/bin/python3 -c 'import numpy' 2>/dev/null") != 0)
    GTEST_SKIP() << "no numpy for /usr/bin/python3";
  TempDir dir;
  const std::string out = dir.path() + "/model.gguf";
  const std::string cmd = "/usr/bin/python3 " + (kSource / "tests" / "gguf_writer.py").string() +
                          " --selftest-model " + out;
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  Result<GgufAsHf> r = OpenGgufAsHf(out);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const std::vector<std::string> names = r->tensors->Names();
  ASSERT_EQ(names.size(), 21u);
  for (size_t k = 0; k < names.size(); ++k) {
    const std::vector<float> got = ReadHf(*r->tensors, names[k]);
    std::vector<float> want(got.size());
    for (size_t i = 0; i < want.size(); ++i)
      want[i] = static_cast<float>(static_cast<int>((i + 3 * k) % 17) - 8) / 16.0f;
    EXPECT_EQ(got, want) << names[k];
  }
  EXPECT_EQ(r->tensors->Find("model.layers.1.self_attn.k_proj.weight")->shape,
            (std::vector<int64_t>{8, 16}));
  const nlohmann::json& c = r->hf_config;
  EXPECT_EQ(c["model_type"], "llama");
  EXPECT_EQ(c["num_key_value_heads"], 2);
  EXPECT_EQ(c["head_dim"], 4);
  EXPECT_EQ(c["rms_norm_eps"], 1e-5);
  EXPECT_EQ(c["tie_word_embeddings"], false);
  EXPECT_EQ(c["vocab_size"], 7);
}

// ---- the committed corpus (docs/BAD_INPUTS.md, "GGUF")
// --------------------------------------------

// Parses, maps and reads every tensor: the first error.
Status LoadAll(const fs::path& p) {
  Result<GgufFile> f = ReadGguf(p.string());
  Result<GgufFile> g = ParseGguf(Slurp(p), p.string());
  EXPECT_EQ(f.ok(), g.ok()) << p;
  if (!f.ok()) return f.status();
  if (!f->Has("general.architecture") || *f->GetString("general.architecture") == "none") {
    return Status::Ok();  // a container without a model
  }
  ATTNLAB_ASSIGN_OR_RETURN(GgufAsHf m, GgufFileAsHf(*f));
  for (const std::string& name : m.tensors->Names()) {
    std::vector<float> out(static_cast<size_t>(m.tensors->Find(name)->numel()));
    ATTNLAB_RETURN_IF_ERROR(m.tensors->ReadFloat(name, out));
  }
  return Status::Ok();
}

TEST(GgufCorpus, EverySeedLoadsOrIsRefusedWithItsMessage) {
  const fs::path dir = kSource / "fuzz" / "corpus" / "gguf";
  const std::map<std::string, std::string> refused = {
      {"empty", "the file is 0 bytes; a GGUF file starts with the 4-byte magic 'GGUF'"},
      {"wrong-magic", "not a GGUF file: the first 4 bytes are 'GGUG', expected 'GGUF'"},
      {"version-1", "GGUF version 1 is not supported"},
      {"version-big-endian", "a big-endian GGUF file, which attnlab does not read"},
      {"truncated-header", "the header declares 17 metadata key/values, but the 16 bytes left"},
      {"truncated-tensor-infos",
       "the name of tensor info 6: a string of 21 bytes is declared but only 4 bytes are left"},
      {"truncated-data", "reach past the end of the"},
      {"huge-kv-count", "the header declares 1152921504606846976 metadata key/values"},
      {"huge-tensor-count", "the header declares 1152921504606846976 tensors"},
      {"huge-string-length", "a string of 4611686018427387904 bytes is declared but only"},
      {"huge-array", "an array of 2305843009213693952 uint32 needs at least"},
      {"huge-dims", "have more elements than fit 63 bits"},
      {"too-many-dims", "n_dims is 5; GGUF allows at most 4"},
      {"unknown-ggml-type", "unknown ggml type id 77"},
      {"removed-ggml-type", "unknown ggml type id 4"},
      {"unknown-value-type", "unknown value type id 13"},
      {"nested-array", "arrays of arrays are not supported"},
      {"bad-bool", "a bool must be 0 or 1, found 5"},
      {"bad-alignment", "'general.alignment' is 24; it must be a power of two"},
      {"misaligned-offset", "data offset 8 is not a multiple of the alignment 32"},
      {"overlap", "tensor 'b' [0, 32) overlaps tensor 'a' [0, 32)"},
      {"data-past-end", "reach past the end of the 0-byte data section"},
      {"row-not-whole-blocks", "rows of 33 elements are not a multiple of the Q8_0 block size 32"},
      {"duplicate-key", "metadata key 'a' appears twice"},
      {"duplicate-tensor", "tensor 'a' appears twice"},
      {"unsupported-type-q5k", "unsupported GGUF tensor type Q5_K in blk.0.attn_norm.weight"},
      {"unknown-architecture", "architecture 'mamba' is not supported"},
      {"unmapped-tensor", "tensor 'blk.0.attn_sinks.weight' has no Hugging Face name"},
      {"rope-freqs", "tensor 'rope_freqs.weight' has a divisor -0.345873"},
      {"rope-freqs-not-llama3",
       "tensor 'rope_freqs.weight' holds per-frequency RoPE divisors that llama3's rule"},
      {"layer-out-of-range", "is in layer 7 but llama.block_count is 1"},
      {"missing-hyperparameter", "no metadata key 'llama.block_count'"},
  };
  int valid = 0, bad = 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("regress-", 0) == 0) continue;
    const Status st = LoadAll(e.path());
    if (name.rfind("valid", 0) == 0) {
      EXPECT_TRUE(st.ok()) << name << ": " << st.ToString();
      ++valid;
      continue;
    }
    auto it = refused.find(name);
    ASSERT_NE(it, refused.end()) << "corpus file " << name << " has no expected message here";
    ExpectError(st, it->second, name);
    ++bad;
  }
  EXPECT_EQ(valid, 6);
  EXPECT_EQ(bad, static_cast<int>(refused.size()));
}

TEST(GgufCorpus, ValidSeedsMapToTheirHfNames) {
  const fs::path dir = kSource / "fuzz" / "corpus" / "gguf";
  Result<GgufAsHf> l = OpenGgufAsHf((dir / "valid-llama").string());
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  EXPECT_NE(l->tensors->Find("model.layers.0.self_attn.q_proj.weight"), nullptr);
  EXPECT_EQ(l->tensors->Find("model.layers.0.self_attn.q_proj.weight")->dtype, "Q8_0");
  EXPECT_EQ(l->hf_config["tie_word_embeddings"], true);
  EXPECT_EQ(l->vocabulary.tokens.size(), 6u);
  // llama.cpp's Llama 3.1-style file: the divisors give back transformers' rope_scaling.
  Result<GgufAsHf> r = OpenGgufAsHf((dir / "valid-llama3-rope-freqs").string());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->hf_config["rope_scaling"]["rope_type"], "llama3");
  EXPECT_EQ(r->hf_config["rope_scaling"]["factor"], 8.0);
  EXPECT_EQ(r->hf_config["rope_scaling"]["original_max_position_embeddings"], 16);
  EXPECT_EQ(r->tensors->Find("rope_freqs.weight"), nullptr);  // not a parameter
  Result<GgufAsHf> n = OpenGgufAsHf((dir / "valid-gptneox").string());
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(n->hf_config["rotary_pct"], 0.25);
  EXPECT_EQ(n->tensors->Find("gpt_neox.layers.0.attention.query_key_value.weight")->shape,
            (std::vector<int64_t>{96, 32}));
}

}  // namespace
}  // namespace attnlab
