// .npy reading and writing: round trips, the header variants numpy (and hand-written files)
// produce, and every malformed file we could think of: each must come back as a Status naming
// the file, never a crash, a huge allocation or a silent misread.
#include "core/npy.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

namespace attnlab {
namespace {

namespace fs = std::filesystem;

// A fresh directory under $TMPDIR (or /tmp), removed with its contents at the end of the test.
class TempDir {
 public:
  TempDir() {
    const char* base = std::getenv("TMPDIR");
    std::string templ = std::string(base && *base ? base : "/tmp") + "/attnlab_npy_XXXXXX";
    ATTNLAB_CHECK(::mkdtemp(templ.data()) != nullptr);
    path_ = templ;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  std::string File(const std::string& name) const { return path_ + "/" + name; }
  // Names of the files in the directory (to check that nothing was left behind).
  std::vector<std::string> List() const {
    std::vector<std::string> r;
    for (const auto& e : fs::directory_iterator(path_)) r.push_back(e.path().filename().string());
    std::sort(r.begin(), r.end());
    return r;
  }

 private:
  std::string path_;
};

void WriteBytes(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string ReadBytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

// A .npy file with the given header dict (padded like numpy's: data at a multiple of 64) and
// raw data bytes. `major` picks the format version (2 and 3 use a 4-byte length).
std::string MakeFile(const std::string& dict, const std::string& data, int major = 1) {
  const size_t pre = major == 1 ? 10 : 12;
  std::string header = dict;
  const size_t total = (pre + header.size() + 1 + 63) / 64 * 64;
  header.append(total - pre - header.size() - 1, ' ');
  header += '\n';
  std::string out = "\x93NUMPY";
  out += static_cast<char>(major);
  out += '\0';
  const int len_bytes = major == 1 ? 2 : 4;
  for (int i = 0; i < len_bytes; ++i) out += static_cast<char>((header.size() >> (8 * i)) & 0xff);
  return out + header + data;
}

std::string FloatBytes(const std::vector<float>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
}

// ---- Round trips ------------------------------------------------------------------------------

TEST(NpyTest, FloatRoundTripManyShapes) {
  TempDir dir;
  const std::vector<std::vector<int64_t>> shapes = {
      {}, {1}, {5}, {2, 3}, {2, 3, 4, 5}, {0}, {3, 0, 2}, {1, 1, 1, 1, 1, 1, 1}};
  int idx = 0;
  for (const auto& shape : shapes) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    std::vector<float> data(n);
    for (int64_t i = 0; i < n; ++i) data[i] = 0.5f * static_cast<float>(i) - 3.25f;
    std::string name = std::to_string(idx++);
    name += ".npy";
    const std::string path = dir.File(name);
    ASSERT_TRUE(WriteNpyFloat(path, data.data(), shape).ok());
    auto r = ReadNpy(path);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->dtype, "<f4");
    EXPECT_EQ(r->shape, shape);
    auto f = r->ToFloat(path);
    ASSERT_TRUE(f.ok());
    EXPECT_EQ(*f, data);
    // numpy aligns the data to 64 bytes; so do we.
    const std::string bytes = ReadBytes(path);
    EXPECT_EQ((bytes.size() - n * sizeof(float)) % 64, 0u);
  }
}

TEST(NpyTest, WritesExactlyWhatNumpyWrites) {
  // numpy.save(f, numpy.arange(6, dtype='<f4').reshape(2, 3)) with numpy 1.24: a 128-byte
  // preamble + header, the dict padded with spaces and ended by '\n'.
  std::vector<float> v = {0, 1, 2, 3, 4, 5};
  const int64_t shape[] = {2, 3};
  auto enc = EncodeNpy(MakeNpyFloat(v.data(), shape));
  ASSERT_TRUE(enc.ok());
  std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
  dict.append(128 - 10 - dict.size() - 1, ' ');
  dict += '\n';
  const std::string expected = std::string("\x93NUMPY\x01\x00\x76\x00", 10) + dict + FloatBytes(v);
  EXPECT_EQ(*enc, expected);
  // 1-D: "(5,)" as Python writes a 1-tuple; scalar: "()".
  const int64_t s1[] = {5};
  std::vector<float> five(5, 1.0f);
  auto e1 = EncodeNpy(MakeNpyFloat(five.data(), s1));
  ASSERT_TRUE(e1.ok());
  EXPECT_NE(e1->find("'shape': (5,), }"), std::string::npos);
  auto e0 = EncodeNpy(MakeNpyFloat(five.data(), std::span<const int64_t>()));
  ASSERT_TRUE(e0.ok());
  EXPECT_NE(e0->find("'shape': (), }"), std::string::npos);
}

TEST(NpyTest, Uint8RoundTripAndBoolRead) {
  TempDir dir;
  std::vector<uint8_t> m = {1, 0, 1, 1, 0, 0};
  const int64_t shape[] = {2, 3};
  const std::string path = dir.File("m.npy");
  ASSERT_TRUE(WriteNpyUint8(path, m.data(), shape).ok());
  auto r = ReadNpy(path);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->dtype, "|u1");
  EXPECT_EQ(*r->ToUint8(path), m);
  // A numpy bool array; nonzero bytes read as 1.
  const std::string b = MakeFile("{'descr': '|b1', 'fortran_order': False, 'shape': (3,), }",
                                 std::string("\x01\x00\x02", 3));
  auto rb = ParseNpy(b, "b.npy");
  ASSERT_TRUE(rb.ok()) << rb.status().ToString();
  EXPECT_EQ(rb->dtype, "|b1");
  EXPECT_EQ(*rb->ToUint8("b.npy"), (std::vector<uint8_t>{1, 0, 1}));
  // Floats are not a mask.
  std::vector<float> f = {1};
  auto rf = ParseNpy(*EncodeNpy(MakeNpyFloat(f.data(), std::span<const int64_t>())), "f.npy");
  ASSERT_TRUE(rf.ok());
  auto bad = rf->ToUint8("f.npy");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("found float32"), std::string::npos);
}

TEST(NpyTest, Float64ConvertsAndIntegersRead) {
  const std::vector<double> d = {1.0, -2.5, 1e-3, 3.0000001};
  const std::string f8 = MakeFile("{'descr': '<f8', 'fortran_order': False, 'shape': (4,), }",
                                  std::string(reinterpret_cast<const char*>(d.data()), 32));
  auto r = ParseNpy(f8, "d.npy");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  auto f = r->ToFloat("d.npy");
  ASSERT_TRUE(f.ok());
  for (int i = 0; i < 4; ++i) EXPECT_EQ((*f)[i], static_cast<float>(d[i]));

  const std::vector<int32_t> i4 = {7, -3};
  auto r4 = ParseNpy(MakeFile("{'descr': '<i4', 'fortran_order': False, 'shape': (2,), }",
                              std::string(reinterpret_cast<const char*>(i4.data()), 8)),
                     "i.npy");
  ASSERT_TRUE(r4.ok());
  EXPECT_EQ(*r4->ToInt64("i.npy"), (std::vector<int64_t>{7, -3}));
  const std::vector<int64_t> i8 = {int64_t{1} << 40, -1};
  auto r8 = ParseNpy(MakeFile("{'descr': '<i8', 'fortran_order': False, 'shape': (1, 2), }",
                              std::string(reinterpret_cast<const char*>(i8.data()), 16)),
                     "l.npy");
  ASSERT_TRUE(r8.ok());
  EXPECT_EQ(*r8->ToInt64("l.npy"), i8);
  auto asf = r8->ToFloat("l.npy");
  ASSERT_FALSE(asf.ok());
  EXPECT_NE(asf.status().message().find("l.npy"), std::string::npos);
  EXPECT_NE(asf.status().message().find("int64"), std::string::npos);
}

TEST(NpyTest, HeaderVariantsParse) {
  const std::string data = FloatBytes({1, 2, 3, 4, 5, 6});
  const std::vector<std::string> dicts = {
      "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }",
      "{'shape': (2, 3), 'fortran_order': False, 'descr': '<f4'}",
      "{\"descr\":\"<f4\",\"fortran_order\":False,\"shape\":(2,3)}",
      "  {  'fortran_order' :  False ,'descr':'<f4' ,  'shape' : ( 2 , 3 , ) , }  ",
      "{'descr': '<f4', 'fortran_order': False, 'shape': (2L, 3L), }",  // Python 2 numpy
  };
  for (const std::string& d : dicts) {
    for (int major : {1, 2, 3}) {
      auto r = ParseNpy(MakeFile(d, data, major), "x.npy");
      ASSERT_TRUE(r.ok()) << d << " v" << major << ": " << r.status().ToString();
      EXPECT_EQ(r->shape, (std::vector<int64_t>{2, 3}));
      EXPECT_EQ(*r->ToFloat("x"), (std::vector<float>{1, 2, 3, 4, 5, 6}));
    }
  }
  auto scalar = ParseNpy(
      MakeFile("{'descr': '<f4', 'fortran_order': False, 'shape': ()}", FloatBytes({42})), "s.npy");
  ASSERT_TRUE(scalar.ok());
  EXPECT_TRUE(scalar->shape.empty());
  EXPECT_EQ(scalar->NumElements(), 1);
  auto one = ParseNpy(
      MakeFile("{'descr': '<f4', 'fortran_order': False, 'shape': (1,)}", FloatBytes({42})),
      "o.npy");
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(one->shape, (std::vector<int64_t>{1}));
  // One-byte types may carry any byte-order character.
  for (const char* d : {"'|u1'", "'<u1'", "'=u1'", "'>b1'"}) {
    auto r = ParseNpy(
        MakeFile(std::string("{'descr': ") + d + ", 'fortran_order': False, 'shape': (2,)}",
                 std::string("\x01\x00", 2)),
        "u.npy");
    ASSERT_TRUE(r.ok()) << d << ": " << r.status().ToString();
  }
}

// ---- Malformed files --------------------------------------------------------------------------

// Expects ParseNpy (and ReadNpy on the same bytes written to disk) to fail with a message
// naming the file and containing `needle`.
void ExpectError(const std::string& bytes, const std::string& needle,
                 StatusCode code = StatusCode::kCorrupt) {
  auto r = ParseNpy(bytes, "bad.npy");
  ASSERT_FALSE(r.ok()) << "accepted: " << needle;
  EXPECT_EQ(r.status().code(), code) << r.status().ToString();
  EXPECT_NE(r.status().message().find("bad.npy"), std::string::npos) << r.status().ToString();
  EXPECT_NE(r.status().message().find(needle), std::string::npos)
      << "message '" << r.status().message() << "' lacks '" << needle << "'";
  TempDir dir;
  const std::string path = dir.File("bad.npy");
  WriteBytes(path, bytes);
  auto rr = ReadNpy(path);
  ASSERT_FALSE(rr.ok());
  EXPECT_EQ(rr.status().code(), code) << rr.status().ToString();
  EXPECT_NE(rr.status().message().find(path), std::string::npos) << rr.status().ToString();
  EXPECT_NE(rr.status().message().find(needle), std::string::npos) << rr.status().ToString();
}

const char kGoodDict[] = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";

TEST(NpyTest, RejectsEmptyAndBadMagic) {
  ExpectError("", "empty");
  ExpectError("PK\x03\x04 this is a zip", "expected the magic");
  ExpectError("\x93NUM", "inside the magic");
  ExpectError(std::string("\x93NUMPY\x01", 7), "format version");
  ExpectError(std::string("\x93NUMPY\x04\x00\x10\x00", 10), "version 4.0",
              StatusCode::kInvalidArgument);
  ExpectError(std::string("\x93NUMPY\x01\x01\x10\x00", 10), "version 1.1",
              StatusCode::kInvalidArgument);
}

TEST(NpyTest, RejectsTruncatedHeader) {
  ExpectError(std::string("\x93NUMPY\x01\x00\x10", 9), "header length field");
  ExpectError(std::string("\x93NUMPY\x02\x00\x10\x00\x00", 11), "header length field");
  const std::string good = MakeFile(kGoodDict, FloatBytes({1, 2, 3, 4, 5, 6}));
  ExpectError(good.substr(0, 40), "truncated header");
  // Header length past the end of the file (v1: 0xffff; v2: 4 GiB - 1).
  ExpectError(std::string("\x93NUMPY\x01\x00\xff\xff{}", 12), "says 65535 bytes");
  ExpectError(std::string("\x93NUMPY\x02\x00\xff\xff\xff\xff{}", 14), "says 4294967295 bytes");
  // Every strict prefix of a valid file is an error, never a crash.
  for (size_t n = 0; n < good.size(); ++n) {
    EXPECT_FALSE(ParseNpy(good.substr(0, n), "p.npy").ok()) << n;
  }
}

TEST(NpyTest, RejectsMalformedDicts) {
  const std::string data = FloatBytes({1, 2, 3, 4, 5, 6});
  ExpectError(MakeFile("{'descr': '<f4', 'shape': (2, 3), }", data),
              "lacks the key 'fortran_order'");
  ExpectError(MakeFile("{'fortran_order': False, 'shape': (2, 3)}", data), "lacks the key 'descr'");
  ExpectError(MakeFile("{'descr': '<f4', 'fortran_order': False}", data), "lacks the key 'shape'");
  ExpectError(MakeFile("{}", data), "lacks the key");
  ExpectError(MakeFile("", data), "expected '{'");
  ExpectError(MakeFile("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), 'x': 1}", data),
              "unexpected key 'x'");
  ExpectError(
      MakeFile("{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (6,)}", data),
      "duplicate key 'descr'");
  ExpectError(MakeFile("{'descr': '<f4' 'fortran_order': False, 'shape': (2, 3)}", data),
              "expected ',' or '}'");
  ExpectError(MakeFile("{'descr' '<f4', 'fortran_order': False, 'shape': (2, 3)}", data),
              "expected ':'");
  ExpectError(MakeFile("{'descr': '<f4, 'fortran_order': False, 'shape': (2, 3)}", data),
              "expected ',' or '}'");
  ExpectError(MakeFile("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), 'oops}", data),
              "unterminated string");
  ExpectError(MakeFile("{'descr': '<f4', 'fortran_order': false, 'shape': (2, 3)}", data),
              "True or False");
  ExpectError(MakeFile("{'descr': '<f4', 'fortran_order': False, 'shape': [2, 3]}", data),
              "expected a tuple");
  ExpectError(MakeFile("{'descr': '<f4', 'fortran_order': False, 'shape': (6)}", data),
              "one-element shape");
  ExpectError(MakeFile("{'descr': '<f4', 'fortran_order': False, 'shape': (2 3)}", data),
              "expected ',' or ')'");
  ExpectError(MakeFile("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3.0)}", data),
              "expected ',' or ')'");
  ExpectError(MakeFile("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3)} trailing", data),
              "after the closing '}'");
  ExpectError(MakeFile("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3)", data),
              "expected ',' or '}'");
  ExpectError(MakeFile("{'descr': 42, 'fortran_order': False, 'shape': (2, 3)}", data),
              "quoted dtype");
  ExpectError(
      MakeFile(std::string("{'descr': '<f4', 'fortran_order': False, 'shape': (2,") + '\0' + " 3)}",
               data),
      "malformed header");
}

TEST(NpyTest, RejectsUnsupportedDtypesAndOrder) {
  const std::string data = FloatBytes({1, 2, 3, 4, 5, 6});
  ExpectError(MakeFile("{'descr': '>f4', 'fortran_order': False, 'shape': (2, 3), }", data),
              "big-endian", StatusCode::kInvalidArgument);
  ExpectError(MakeFile("{'descr': '<f2', 'fortran_order': False, 'shape': (2, 3), }", data),
              "unsupported dtype '<f2'", StatusCode::kInvalidArgument);
  ExpectError(MakeFile("{'descr': '<c8', 'fortran_order': False, 'shape': (3,), }", data),
              "unsupported dtype", StatusCode::kInvalidArgument);
  ExpectError(MakeFile("{'descr': 'float32', 'fortran_order': False, 'shape': (2, 3), }", data),
              "unsupported dtype", StatusCode::kInvalidArgument);
  ExpectError(MakeFile("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (6,), }", data),
              "structured", StatusCode::kInvalidArgument);
  ExpectError(MakeFile("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }", data),
              "fortran_order is True", StatusCode::kInvalidArgument);
}

TEST(NpyTest, RejectsShapeDataMismatchAndHugeShapes) {
  const std::string data = FloatBytes({1, 2, 3, 4, 5, 6});
  ExpectError(MakeFile(kGoodDict, data.substr(0, 20)),
              "needs 6 x 4 = 24 bytes, but the file holds 20");
  ExpectError(MakeFile(kGoodDict, data + "xx"), "holds 26");
  ExpectError(MakeFile("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 4), }", data),
              "data size mismatch");
  ExpectError(MakeFile("{'descr': '<f4', 'fortran_order': False, 'shape': (-2, -3), }", data),
              "negative dimension -2");
  // 2**62 * 2**62 overflows; 2**62 * 4 bytes too; neither may allocate.
  ExpectError(MakeFile("{'descr': '<f4', 'fortran_order': False, "
                       "'shape': (4611686018427387904, 4611686018427387904), }",
                       data),
              "more elements than fit in 64 bits");
  ExpectError(
      MakeFile("{'descr': '<f4', 'fortran_order': False, 'shape': (4611686018427387904,), }", data),
      "more bytes than fit in 64 bits");
  // Large but representable: a clear mismatch, no allocation of 2^40 floats.
  ExpectError(
      MakeFile("{'descr': '<f4', 'fortran_order': False, 'shape': (1048576, 1048576), }", data),
      "data size mismatch");
  ExpectError(MakeFile("{'descr': '<f4', 'fortran_order': False, "
                       "'shape': (99999999999999999999999,), }",
                       data),
              "does not fit in 64 bits");
  // A zero dimension makes everything else irrelevant: 0 bytes expected.
  ExpectError(
      MakeFile("{'descr': '<f4', 'fortran_order': False, 'shape': (0, 4611686018427387904), }",
               data),
      "holds 24");
}

TEST(NpyTest, RandomCorruptionNeverCrashes) {
  std::mt19937_64 rng(12345);
  std::vector<float> v(24);
  const int64_t shape[] = {2, 3, 4};
  const std::string good = *EncodeNpy(MakeNpyFloat(v.data(), shape));
  std::uniform_int_distribution<size_t> pos(0, good.size() - 1);
  std::uniform_int_distribution<int> byte(0, 255);
  const std::string alphabet = "{}()',: 0123456789-LTFx<>|f4u1b";
  std::uniform_int_distribution<size_t> pick(0, alphabet.size() - 1);
  int accepted = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    std::string s = good;
    const int edits = 1 + trial % 4;
    for (int e = 0; e < edits; ++e) {
      const size_t p = trial % 2 ? std::min<size_t>(pos(rng), 127) : pos(rng);  // favour the header
      s[p] = trial % 3 ? alphabet[pick(rng)] : static_cast<char>(byte(rng));
    }
    if (trial % 5 == 0) s.resize(pos(rng));
    auto r = ParseNpy(s, "fuzz.npy");
    if (r.ok()) {
      ++accepted;
      // Anything accepted must be self-consistent.
      EXPECT_EQ(static_cast<int64_t>(r->bytes.size()), r->NumElements() * r->ItemSize());
    } else {
      EXPECT_NE(r.status().message().find("fuzz.npy"), std::string::npos);
    }
  }
  EXPECT_GT(accepted, 0);  // some edits only touch data or padding
}

TEST(NpyTest, ReadErrorsNameThePath) {
  TempDir dir;
  auto missing = ReadNpy(dir.File("nope.npy"));
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("nope.npy"), std::string::npos);
  auto is_dir = ReadNpy(dir.File(""));
  ASSERT_FALSE(is_dir.ok());
  EXPECT_NE(is_dir.status().message().find("not a regular file"), std::string::npos);
}

// ---- Atomic writes ----------------------------------------------------------------------------

TEST(NpyTest, FailedWriteLeavesNothing) {
  TempDir dir;
  std::vector<float> v = {1, 2};
  const int64_t shape[] = {2};
  const Status st = WriteNpyFloat(dir.File("missing_dir/x.npy"), v.data(), shape);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), StatusCode::kIoError);
  EXPECT_NE(st.message().find("missing_dir/x.npy"), std::string::npos);
  EXPECT_TRUE(dir.List().empty());
  // A shape that does not describe the buffer is refused before anything is created.
  const int64_t neg[] = {-1};
  EXPECT_FALSE(WriteNpyFloat(dir.File("n.npy"), v.data(), neg).ok());
  NpyArray bad = MakeNpyFloat(v.data(), shape);
  bad.bytes.pop_back();
  EXPECT_FALSE(WriteNpy(dir.File("b.npy"), bad).ok());
  bad = MakeNpyFloat(v.data(), shape);
  bad.dtype = "<f2";
  EXPECT_FALSE(WriteNpy(dir.File("c.npy"), bad).ok());
  EXPECT_TRUE(dir.List().empty());
}

TEST(NpyTest, OverwriteReplacesAtomically) {
  TempDir dir;
  const std::string path = dir.File("o.npy");
  std::vector<float> a = {1, 2, 3}, b = {4, 5};
  const int64_t sa[] = {3}, sb[] = {2};
  ASSERT_TRUE(WriteNpyFloat(path, a.data(), sa).ok());
  ASSERT_TRUE(WriteNpyFloat(path, b.data(), sb).ok());
  EXPECT_EQ(*ReadNpy(path)->ToFloat(path), b);
  EXPECT_EQ(dir.List(), std::vector<std::string>{"o.npy"});
}

TEST(NpyTest, OutputSetIsAllOrNothing) {
  TempDir dir;
  std::vector<float> v = {1, 2, 3};
  const int64_t shape[] = {3};
  {
    NpyOutputSet set;
    ASSERT_TRUE(set.Stage(dir.File("a.npy"), MakeNpyFloat(v.data(), shape)).ok());
    ASSERT_TRUE(set.Stage(dir.File("b.npy"), MakeNpyFloat(v.data(), shape)).ok());
    EXPECT_EQ(dir.List().size(), 2u);  // temporaries only
    for (const std::string& n : dir.List()) EXPECT_NE(n.find(".tmp."), std::string::npos) << n;
    const Status dup = set.Stage(dir.File("a.npy"), MakeNpyFloat(v.data(), shape));
    EXPECT_FALSE(dup.ok());
    EXPECT_NE(dup.message().find("twice"), std::string::npos);
    // A failing stage (no such directory) and no Commit(): the destructor cleans up.
    EXPECT_FALSE(set.Stage(dir.File("nodir/c.npy"), MakeNpyFloat(v.data(), shape)).ok());
  }
  EXPECT_TRUE(dir.List().empty());
  {
    NpyOutputSet set;
    ASSERT_TRUE(set.Stage(dir.File("a.npy"), MakeNpyFloat(v.data(), shape)).ok());
    ASSERT_TRUE(set.Stage(dir.File("b.npy"), MakeNpyFloat(v.data(), shape)).ok());
    ASSERT_TRUE(set.Commit().ok());
  }
  EXPECT_EQ(dir.List(), (std::vector<std::string>{"a.npy", "b.npy"}));
  EXPECT_EQ(*ReadNpy(dir.File("b.npy"))->ToFloat("b"), v);
}

}  // namespace
}  // namespace attnlab
