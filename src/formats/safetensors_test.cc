// safetensors: files built byte by byte (independently of the writer) read back exactly; every
// way a file can contradict the format is an error naming the file and the tensor, never a
// crash; the writer's output is read back exactly.
#include "formats/safetensors.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <string>
#include <vector>

namespace attnlab {
namespace {

// A file from its header text and data buffer.
std::string Raw(const std::string& header, const std::string& buffer) {
  std::string out(8, '\0');
  const uint64_t n = header.size();
  std::memcpy(out.data(), &n, 8);
  return out + header + buffer;
}

template <typename T>
std::string Bytes(const std::vector<T>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

class SafetensorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = ::testing::TempDir() + "attnlab_st_XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string Write(const std::string& name, const std::string& bytes) {
    const std::string p = dir_ + "/" + name;
    std::ofstream(p, std::ios::binary) << bytes;
    return p;
  }
  std::string dir_;
};

TEST_F(SafetensorsTest, ReadsAHandBuiltFile) {
  const std::vector<float> a = {1.5f, -2.0f, 3.25f, 0.0f, 1e-30f, -7.0f};  // [2, 3]
  const std::vector<int32_t> b = {7, -8};                                  // [2]
  const std::string header =
      R"({"__metadata__": {"format": "pt", "note": "x"},)"
      R"( "b": {"dtype": "I32", "shape": [2], "data_offsets": [24, 32]},)"
      R"( "a": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]},)"
      R"( "empty": {"dtype": "F32", "shape": [0, 4], "data_offsets": [32, 32]},)"
      R"( "scalar": {"dtype": "F64", "shape": [], "data_offsets": [32, 40]}}   )";
  const std::vector<double> s = {0.1};
  const std::string path = Write("hand.safetensors", Raw(header, Bytes(a) + Bytes(b) + Bytes(s)));
  auto f = ReadSafetensors(path);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(f->path(), path);
  ASSERT_EQ(f->tensors().size(), 4u);
  EXPECT_EQ(f->metadata().at("format"), "pt");
  EXPECT_EQ(f->metadata().at("note"), "x");
  const SafetensorsTensor* ta = f->Find("a");
  ASSERT_NE(ta, nullptr);
  EXPECT_EQ(ta->dtype, SafetensorsDtype::kF32);
  EXPECT_EQ(ta->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(ta->numel(), 6);
  auto fa = f->ToFloat(*ta);
  ASSERT_TRUE(fa.ok());
  EXPECT_EQ(*fa, a);
  const SafetensorsTensor* tb = f->Find("b");
  ASSERT_NE(tb, nullptr);
  EXPECT_EQ(tb->dtype, SafetensorsDtype::kI32);
  auto raw = f->Bytes(*tb);
  ASSERT_EQ(raw.size(), 8u);
  int32_t got[2];
  std::memcpy(got, raw.data(), 8);
  EXPECT_EQ(got[0], 7);
  EXPECT_EQ(got[1], -8);
  // Integers are not silently converted.
  auto fb = f->ToFloat(*tb);
  ASSERT_FALSE(fb.ok());
  EXPECT_NE(fb.status().message().find("'b'"), std::string::npos) << fb.status().ToString();
  EXPECT_NE(fb.status().message().find("I32"), std::string::npos);
  const SafetensorsTensor* te = f->Find("empty");
  ASSERT_NE(te, nullptr);
  EXPECT_EQ(te->numel(), 0);
  EXPECT_TRUE(f->ToFloat(*te)->empty());
  const SafetensorsTensor* ts = f->Find("scalar");
  ASSERT_NE(ts, nullptr);
  EXPECT_TRUE(ts->shape.empty());
  EXPECT_EQ((*f->ToFloat(*ts))[0], 0.1f);  // F64 rounded to nearest float
  EXPECT_EQ(f->Find("c"), nullptr);
  // Wrong destination size.
  float dst[5];
  EXPECT_EQ(f->ReadFloat(*ta, dst, 5).code(), StatusCode::kInvalidArgument);
}

TEST_F(SafetensorsTest, ConvertsF16AndBF16Exactly) {
  // F16 bit patterns and their exact values.
  const std::vector<uint16_t> h = {0x3c00, 0xc100, 0x7bff, 0x0001, 0x0400,
                                   0x8000, 0x7c00, 0xfc00, 0x7e00, 0x3555};
  const std::vector<float> h_want = {
      1.0f,     -2.5f,     65504.0f, std::ldexp(1.0f, -24), std::ldexp(1.0f, -14), -0.0f,
      INFINITY, -INFINITY, NAN,      0.333251953125f};
  // BF16: the top 16 bits of a float.
  const std::vector<float> b_want = {1.0f, -3.0f, 1.5f * std::ldexp(1.0f, 100), 0.0078125f};
  std::vector<uint16_t> b;
  for (float x : b_want) {
    uint32_t u;
    std::memcpy(&u, &x, 4);
    b.push_back(static_cast<uint16_t>(u >> 16));
  }
  const std::string header =
      R"({"h": {"dtype": "F16", "shape": [10], "data_offsets": [0, 20]},)"
      R"( "b": {"dtype": "BF16", "shape": [2, 2], "data_offsets": [20, 28]}})";
  auto f = ParseSafetensors(Raw(header, Bytes(h) + Bytes(b)), "mem");
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  auto fh = f->ToFloat(*f->Find("h"));
  ASSERT_TRUE(fh.ok());
  for (size_t i = 0; i < h.size(); ++i) {
    if (std::isnan(h_want[i])) {
      EXPECT_TRUE(std::isnan((*fh)[i]));
    } else {
      EXPECT_EQ((*fh)[i], h_want[i]) << i;
      EXPECT_EQ(std::signbit((*fh)[i]), std::signbit(h_want[i])) << i;
    }
  }
  EXPECT_EQ(*f->ToFloat(*f->Find("b")), b_want);
}

TEST_F(SafetensorsTest, WriterRoundTripsAndAlignsTheBuffer) {
  std::mt19937 rng(1);
  std::normal_distribution<float> nd;
  std::vector<float> x(3 * 5), y(7), z(1);
  for (float& v : x) v = nd(rng);
  for (float& v : y) v = nd(rng);
  z[0] = 42.0f;
  const std::vector<int64_t> ints = {1, -2, 3};
  const std::vector<NamedTensor> t = {
      NamedTensor::F32("h.0.attn.qkv.weight", {3, 5}, x.data()),
      NamedTensor::F32("y", {7}, y.data()), NamedTensor::F32("scalar", {}, z.data()),
      NamedTensor::F32("empty", {0}, nullptr),
      NamedTensor{"ints", {3}, ints.data(), SafetensorsDtype::kI64}};
  const std::string path = dir_ + "/w.safetensors";
  ASSERT_TRUE(WriteSafetensors(path, t, {{"step", "12"}, {"name", "unicode \xc3\xa9"}}).ok());
  auto f = ReadSafetensors(path);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(*f->ToFloat(*f->Find("h.0.attn.qkv.weight")), x);
  EXPECT_EQ(f->Find("h.0.attn.qkv.weight")->shape, (std::vector<int64_t>{3, 5}));
  EXPECT_EQ(*f->ToFloat(*f->Find("y")), y);
  EXPECT_EQ(*f->ToFloat(*f->Find("scalar")), z);
  EXPECT_TRUE(f->Find("scalar")->shape.empty());
  EXPECT_EQ(f->Find("empty")->numel(), 0);
  EXPECT_EQ(f->Find("ints")->dtype, SafetensorsDtype::kI64);
  EXPECT_EQ(std::memcmp(f->Bytes(*f->Find("ints")).data(), ints.data(), 24), 0);
  EXPECT_EQ(f->metadata().at("step"), "12");
  EXPECT_EQ(f->metadata().at("name"), "unicode \xc3\xa9");
  // Header padded so the buffer starts 8-byte aligned, with spaces.
  std::ifstream in(path, std::ios::binary);
  uint64_t n = 0;
  in.read(reinterpret_cast<char*>(&n), 8);
  EXPECT_EQ((8 + n) % 8, 0u);
  EXPECT_EQ(std::filesystem::file_size(path), 8 + n + (15 + 7 + 1 + 0) * 4 + 24);
  // No temporary files left.
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir_), {}), 1);
}

TEST_F(SafetensorsTest, WriterRejectsBadInput) {
  const float x = 1.0f;
  struct Case {
    std::vector<NamedTensor> t;
    const char* want;
  };
  const std::vector<Case> cases = {
      {{NamedTensor::F32("", {1}, &x)}, "invalid tensor name"},
      {{NamedTensor::F32("__metadata__", {1}, &x)}, "invalid tensor name"},
      {{NamedTensor::F32("a", {1}, &x), NamedTensor::F32("a", {1}, &x)}, "given twice"},
      {{NamedTensor::F32("a", {-1}, &x)}, "invalid shape"},
      {{NamedTensor::F32("a", {2}, nullptr)}, "no data"},
      {{NamedTensor::F32("bad\xff", {1}, &x)}, "UTF-8"},
  };
  for (const Case& c : cases) {
    const Status st = WriteSafetensors(dir_ + "/bad.safetensors", c.t);
    ASSERT_FALSE(st.ok()) << c.want;
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(st.message().find(c.want), std::string::npos) << st.ToString();
  }
  EXPECT_TRUE(std::filesystem::is_empty(dir_));
  EXPECT_FALSE(
      WriteSafetensors(dir_ + "/missing/x.safetensors", {NamedTensor::F32("a", {1}, &x)}).ok());
}

struct Bad {
  const char* name;
  std::string bytes;
  StatusCode code;
  const char* want;  // substring of the message
};

std::vector<Bad> BadFiles() {
  const std::string f8 = Bytes(std::vector<float>{1, 2});  // 8 bytes of data
  auto one = [&](const std::string& entry, const std::string& buf) {
    return Raw("{\"t\": " + entry + "}", buf);
  };
  std::string huge(8, '\0');
  const uint64_t big = uint64_t{1} << 63;
  std::memcpy(huge.data(), &big, 8);
  return {
      {"empty", "", StatusCode::kCorrupt, "8-byte header length"},
      {"seven_bytes", std::string(7, '\0'), StatusCode::kCorrupt, "8-byte header length"},
      {"header_past_eof", Raw("{}", "").substr(0, 9), StatusCode::kCorrupt, "truncated"},
      {"header_length_2^63", huge + "{}", StatusCode::kCorrupt, "truncated"},
      {"zero_header", Raw("", ""), StatusCode::kCorrupt, "JSON object"},
      {"not_brace", Raw(" {}", ""), StatusCode::kCorrupt, "starting with '{'"},
      {"bad_json", Raw("{\"t\": ", ""), StatusCode::kCorrupt, "not valid JSON"},
      {"bad_utf8", Raw("{\"\xff\": 1}", ""), StatusCode::kCorrupt, "not valid JSON"},
      {"json_nul_padding", Raw(std::string("{}\0\0", 4), ""), StatusCode::kCorrupt,
       "NUL byte at offset 2"},
      {"json_nul_then_more", Raw(std::string("{}\0{\"t\": 1}", 11), ""), StatusCode::kCorrupt,
       "NUL byte"},
      {"duplicate",
       Raw(R"({"t": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},)"
           R"( "t": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})",
           f8),
       StatusCode::kCorrupt, "'t' twice"},
      {"metadata_not_object", Raw(R"({"__metadata__": [1]})", ""), StatusCode::kCorrupt,
       "__metadata__"},
      {"metadata_value", Raw(R"({"__metadata__": {"k": 1}})", ""), StatusCode::kCorrupt,
       "'k' must be a string"},
      {"entry_not_object", one("[1]", ""), StatusCode::kCorrupt, "tensor 't'"},
      {"unknown_field",
       one(R"({"dtype": "F32", "shape": [2], "data_offsets": [0, 8], "x": 1})", f8),
       StatusCode::kCorrupt, "unexpected field 'x'"},
      {"no_dtype", one(R"({"shape": [2], "data_offsets": [0, 8]})", f8), StatusCode::kCorrupt,
       "no dtype"},
      {"dtype_not_string", one(R"({"dtype": 4, "shape": [2], "data_offsets": [0, 8]})", f8),
       StatusCode::kCorrupt, "dtype must be a string"},
      {"unknown_dtype", one(R"({"dtype": "F128", "shape": [2], "data_offsets": [0, 8]})", f8),
       StatusCode::kInvalidArgument, "unknown dtype 'F128'"},
      {"no_shape", one(R"({"dtype": "F32", "data_offsets": [0, 8]})", f8), StatusCode::kCorrupt,
       "no shape"},
      {"negative_dim", one(R"({"dtype": "F32", "shape": [-2], "data_offsets": [0, 8]})", f8),
       StatusCode::kCorrupt, "non-negative integers"},
      {"float_dim", one(R"({"dtype": "F32", "shape": [2.0], "data_offsets": [0, 8]})", f8),
       StatusCode::kCorrupt, "non-negative integers"},
      {"dim_past_u64",
       one(R"({"dtype": "F32", "shape": [18446744073709551616], "data_offsets": [0, 8]})", f8),
       StatusCode::kCorrupt, "non-negative integers"},
      {"numel_overflow",
       one(R"({"dtype": "F32", "shape": [4294967296, 4294967296], "data_offsets": [0, 8]})", f8),
       StatusCode::kCorrupt, "63 bits"},
      {"bytes_overflow",
       one(R"({"dtype": "F64", "shape": [4611686018427387904], "data_offsets": [0, 8]})", f8),
       StatusCode::kCorrupt, "64 bits"},
      {"no_offsets", one(R"({"dtype": "F32", "shape": [2]})", f8), StatusCode::kCorrupt,
       "no data_offsets"},
      {"offsets_len", one(R"({"dtype": "F32", "shape": [2], "data_offsets": [0]})", f8),
       StatusCode::kCorrupt, "[begin, end]"},
      {"offsets_negative", one(R"({"dtype": "F32", "shape": [2], "data_offsets": [-8, 0]})", f8),
       StatusCode::kCorrupt, "[begin, end]"},
      {"offsets_reversed", one(R"({"dtype": "F32", "shape": [2], "data_offsets": [8, 0]})", f8),
       StatusCode::kCorrupt, "end before they begin"},
      {"offsets_past_buffer", one(R"({"dtype": "F32", "shape": [4], "data_offsets": [0, 16]})", f8),
       StatusCode::kCorrupt, "past the end"},
      {"size_mismatch", one(R"({"dtype": "F32", "shape": [3], "data_offsets": [0, 8]})", f8),
       StatusCode::kCorrupt, "needs 12 bytes"},
      {"overlap",
       Raw(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},)"
           R"( "b": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})",
           f8),
       StatusCode::kCorrupt, "overlaps"},
      {"hole", Raw(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})", f8),
       StatusCode::kCorrupt, "bytes [0, 4)"},
      {"trailing", one(R"({"dtype": "F32", "shape": [1], "data_offsets": [0, 4]})", f8),
       StatusCode::kCorrupt, "bytes [4, 8)"},
      {"array_header", Raw("[1, 2]", ""), StatusCode::kCorrupt, "starting with '{'"},
  };
}

TEST_F(SafetensorsTest, CorruptFilesAreClearErrors) {
  for (const Bad& b : BadFiles()) {
    SCOPED_TRACE(b.name);
    const std::string path = Write(std::string(b.name) + ".safetensors", b.bytes);
    auto f = ReadSafetensors(path);
    ASSERT_FALSE(f.ok());
    EXPECT_EQ(f.status().code(), b.code) << f.status().ToString();
    EXPECT_NE(f.status().message().find(b.want), std::string::npos) << f.status().ToString();
    EXPECT_EQ(f.status().message().rfind(path, 0), 0u)
        << "names the file: " << f.status().ToString();
    // The in-memory parser agrees.
    auto g = ParseSafetensors(b.bytes, "mem");
    ASSERT_FALSE(g.ok());
    EXPECT_EQ(g.status().code(), b.code);
  }
}

TEST_F(SafetensorsTest, ErrorsNameTheTensorAndTheNumbers) {
  auto f = ParseSafetensors(
      Raw(R"({"h.3.mlp.c_fc.weight": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 20]}})",
          std::string(20, '\0')),
      "model.safetensors");
  ASSERT_FALSE(f.ok());
  const std::string m = f.status().message();
  EXPECT_NE(m.find("model.safetensors"), std::string::npos) << m;
  EXPECT_NE(m.find("'h.3.mlp.c_fc.weight'"), std::string::npos) << m;
  EXPECT_NE(m.find("[2, 3]"), std::string::npos) << m;
  EXPECT_NE(m.find("needs 24 bytes"), std::string::npos) << m;
  EXPECT_NE(m.find("hold 20"), std::string::npos) << m;
}

TEST_F(SafetensorsTest, EveryTruncationAndByteFlipIsHandled) {
  std::vector<float> a(6, 1.0f), b(3, 2.0f);
  const std::vector<NamedTensor> t = {NamedTensor::F32("a", {2, 3}, a.data()),
                                      NamedTensor::F32("b", {3}, b.data())};
  const std::string path = dir_ + "/ok.safetensors";
  ASSERT_TRUE(WriteSafetensors(path, t, {{"k", "v"}}).ok());
  std::ifstream in(path, std::ios::binary);
  const std::string good((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_TRUE(ParseSafetensors(good, "good").ok());
  for (size_t len = 0; len < good.size(); ++len) {
    auto f = ParseSafetensors(good.substr(0, len), "cut");
    EXPECT_FALSE(f.ok()) << "prefix of " << len << " bytes accepted";
  }
  // One extra byte is trailing garbage.
  EXPECT_FALSE(ParseSafetensors(good + "x", "long").ok());
  // Flip every byte: must never crash; if accepted, every tensor stays inside the buffer.
  for (size_t i = 0; i < good.size(); ++i) {
    for (uint8_t mask : {uint8_t{0x01}, uint8_t{0x80}, uint8_t{0xff}}) {
      std::string bad = good;
      bad[i] = static_cast<char>(bad[i] ^ mask);
      auto f = ParseSafetensors(bad, "flip");
      if (f.ok()) {
        for (const SafetensorsTensor& x : f->tensors()) {
          auto v = f->ToFloat(x);
          if (v.ok()) {
            EXPECT_EQ(static_cast<int64_t>(v->size()), x.numel());
          }
        }
      }
    }
  }
  // Truncated on disk too.
  const std::string cut = Write("cut.safetensors", good.substr(0, good.size() - 1));
  auto f = ReadSafetensors(cut);
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.status().message().find("'b'"), std::string::npos) << f.status().ToString();
}

TEST_F(SafetensorsTest, HeaderLargerThanTheCap) {
  // A sparse file: the header length field claims more than the cap, and the file is that big.
  const std::string path = dir_ + "/huge.safetensors";
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ASSERT_GE(fd, 0);
  const uint64_t n = kSafetensorsMaxHeaderBytes + 1;
  ASSERT_EQ(::write(fd, &n, 8), 8);
  ASSERT_EQ(::write(fd, "{", 1), 1);
  ASSERT_EQ(::ftruncate(fd, static_cast<off_t>(8 + n)), 0);
  ::close(fd);
  auto f = ReadSafetensors(path);
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), StatusCode::kOutOfRange) << f.status().ToString();
}

TEST_F(SafetensorsTest, MissingFileAndDirectory) {
  auto f = ReadSafetensors(dir_ + "/nope.safetensors");
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), StatusCode::kNotFound);
  auto d = ReadSafetensors(dir_);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), StatusCode::kInvalidArgument);
}

TEST_F(SafetensorsTest, DtypeNames) {
  for (const char* n : {"BOOL", "U8", "I8", "U16", "I16", "F16", "BF16", "U32", "I32", "F32", "U64",
                        "I64", "F64", "F8_E4M3", "F8_E5M2"}) {
    SafetensorsDtype d;
    ASSERT_TRUE(ParseSafetensorsDtype(n, &d)) << n;
    EXPECT_STREQ(SafetensorsDtypeName(d), n);
    EXPECT_GT(SafetensorsDtypeSize(d), 0);
  }
  SafetensorsDtype d;
  EXPECT_FALSE(ParseSafetensorsDtype("f32", &d));
  EXPECT_EQ(SafetensorsDtypeSize(SafetensorsDtype::kBF16), 2);
  EXPECT_EQ(TensorShapeString(std::vector<int64_t>{2, 3}), "[2, 3]");
}

}  // namespace
}  // namespace attnlab
