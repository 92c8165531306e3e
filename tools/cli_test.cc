// The `attnlab` command line, run as a user runs it: .npy files in a fresh temporary directory,
// the binary from $ATTNLAB_BIN (set by CMake for this test binary; else the `attnlab` next to
// it), results compared against the engine called directly.
//
// Lives in tools/test/ rather than tools/: the CLI target globs tools/*.cc (non-recursively)
// and would otherwise link this gtest file into the `attnlab` executable.
//
// Numerical tolerances here only need to separate plumbing bugs (a wrong mask, stride, head
// mapping or file) from rounding: the reference kernel accumulates in double and must match the
// library call bit for bit; the flash kernel is fp32 and, for these sizes (len <= 40,
// head_dim <= 24, N(0,1) inputs), stays within kRel = 1e-4 of max|reference| on every element,
// which is ~100x its measured error and ~1000x below what a wrong mask produces.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "attnlab/attention.h"
#include "attnlab/thread_pool.h"
#include "core/npy.h"
#include "cli_test_util.h"
#include "engine/attention_flash_common.h"

namespace attnlab {
namespace {

namespace fs = std::filesystem;

constexpr double kRel = 1e-4;

using cli_test::CliPath;
using cli_test::RunCli;
using cli_test::RunResult;
using cli_test::Slurp;
using cli_test::TempDir;

std::vector<float> RandomVec(size_t n, std::mt19937_64& rng, float scale = 1.0f) {
  std::normal_distribution<float> nd(0, 1);
  std::vector<float> v(n);
  for (float& x : v) x = nd(rng) * scale;
  return v;
}

void Save(const std::string& path, const std::vector<float>& v, std::vector<int64_t> shape) {
  ASSERT_TRUE(WriteNpyFloat(path, v.data(), shape).ok()) << path;
}

std::vector<float> Load(const std::string& path, std::vector<int64_t> expected_shape) {
  auto a = ReadNpy(path);
  EXPECT_TRUE(a.ok()) << a.status().ToString();
  if (!a.ok()) return {};
  EXPECT_EQ(a->shape, expected_shape) << path;
  EXPECT_EQ(a->dtype, "<f4") << path;
  return *a->ToFloat(path);
}

double MaxAbs(const std::vector<float>& v) {
  double m = 0;
  for (float x : v) m = std::max(m, std::abs(static_cast<double>(x)));
  return m;
}

// Every element within kRel * max(1, max|want|); NaN fails.
void ExpectClose(const std::vector<float>& got, const std::vector<float>& want, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  const double tol = kRel * std::max(1.0, MaxAbs(want));
  for (size_t i = 0; i < got.size(); ++i) {
    const double e = std::abs(static_cast<double>(got[i]) - want[i]);
    if (!(e <= tol)) {
      ADD_FAILURE() << what << "[" << i << "]: got " << got[i] << ", want " << want[i];
      return;
    }
  }
}

// A problem written to disk plus the same problem for direct engine calls.
struct Problem {
  AttentionShape s;
  std::vector<float> q, k, v, dout;
  std::vector<int64_t> qshape, kshape;
  std::string args;  // --q --k --v --dout-less input flags

  Problem(const TempDir& dir, int64_t B, int64_t Hq, int64_t Hkv, int64_t Lq, int64_t Lk, int64_t D,
          uint64_t seed) {
    std::mt19937_64 rng(seed);
    s.batch = B, s.heads_q = Hq, s.heads_kv = Hkv, s.len_q = Lq, s.len_k = Lk, s.head_dim = D;
    qshape = {B, Hq, Lq, D};
    kshape = {B, Hkv, Lk, D};
    q = RandomVec(B * Hq * Lq * D, rng, 1.5f);
    k = RandomVec(B * Hkv * Lk * D, rng);
    v = RandomVec(B * Hkv * Lk * D, rng);
    dout = RandomVec(q.size(), rng);
    Save(dir.File("q.npy"), q, qshape);
    Save(dir.File("k.npy"), k, kshape);
    Save(dir.File("v.npy"), v, kshape);
    Save(dir.File("do.npy"), dout, qshape);
    args = "attention --q " + dir.File("q.npy") + " --k " + dir.File("k.npy") + " --v " +
           dir.File("v.npy");
  }

  AttentionTensor View(const std::vector<float>& x, const std::vector<int64_t>& sh) const {
    return ContiguousView(x.data(), sh[0], sh[1], sh[2], sh[3]);
  }
  AttentionTensorMut Mut(std::vector<float>& x, const std::vector<int64_t>& sh) const {
    return ContiguousView(x.data(), sh[0], sh[1], sh[2], sh[3]);
  }

  // The reference kernel's forward and backward, called directly.
  struct Expected {
    std::vector<float> out, lse, probs, dq, dk, dv, dsink;
  };
  Expected Reference(const AttentionParams& p) const {
    Expected e;
    e.out.resize(q.size());
    e.lse.resize(s.batch * s.heads_q * s.len_q);
    e.probs.resize(e.lse.size() * s.len_k);
    EXPECT_TRUE(AttentionForwardReference(s, p, View(q, qshape), View(k, kshape), View(v, kshape),
                                          Mut(e.out, qshape), e.lse, e.probs)
                    .ok());
    e.dq.resize(q.size());
    e.dk.resize(k.size());
    e.dv.resize(v.size());
    if (p.softmax == SoftmaxKind::kSinkLogit) e.dsink.resize(s.heads_q);
    EXPECT_TRUE(AttentionBackwardReference(s, p, View(q, qshape), View(k, kshape), View(v, kshape),
                                           View(dout, qshape), Mut(e.dq, qshape), Mut(e.dk, kshape),
                                           Mut(e.dv, kshape), e.dsink)
                    .ok());
    return e;
  }
};

std::string BackwardArgs(const TempDir& dir) {
  return " --dout " + dir.File("do.npy") + " --dq " + dir.File("dq.npy") + " --dk " +
         dir.File("dk.npy") + " --dv " + dir.File("dv.npy");
}

// ---- Forward and backward against the engine --------------------------------------------------

struct Variant {
  const char* name;
  std::string flags;
  AttentionParams params;
};

TEST(CliAttentionTest, MatchesEngineForEveryVariant) {
  TempDir dir;
  // GQA (4 query heads on 2 kv heads), len_q < len_k, odd sizes.
  Problem pr(dir, 2, 4, 2, 23, 37, 13, 1);
  std::vector<float> sinks = {-2.0f, 0.5f, 3.0f, 7.0f};
  Save(dir.File("sinks.npy"), sinks, {4});

  std::vector<Variant> variants;
  variants.push_back({"standard", "", {}});
  {
    Variant c{"causal", " --causal", {}};
    c.params.mask.causal = true;
    variants.push_back(c);
  }
  {
    Variant c{"window", " --causal --window-left 5 --sinks 2 --mask-first-key", {}};
    c.params.mask.causal = true;
    c.params.mask.window_left = 5;
    c.params.mask.n_sink = 2;
    c.params.mask.mask_first_key = true;
    variants.push_back(c);
  }
  {
    Variant c{"bidirectional window", " --window-left 3 --window-right 4 --scale 0.3", {}};
    c.params.mask.window_left = 3;
    c.params.mask.window_right = 4;
    c.params.scale = 0.3f;
    variants.push_back(c);
  }
  {
    Variant c{"softmax1", " --softmax softmax1 --causal", {}};
    c.params.softmax = SoftmaxKind::kSoftmax1;
    c.params.mask.causal = true;
    variants.push_back(c);
  }
  {
    Variant c{
        "sink",
        " --softmax sink --sink-logits " + dir.File("sinks.npy") + " --dsink " + dir.File("ds.npy"),
        {}};
    c.params.softmax = SoftmaxKind::kSinkLogit;
    c.params.sink_logits = sinks;
    variants.push_back(c);
  }
  {
    Variant c{"sigmoid", " --softmax sigmoid --sigmoid-bias -3.6", {}};
    c.params.softmax = SoftmaxKind::kSigmoid;
    c.params.sigmoid_bias = -3.6f;
    variants.push_back(c);
  }

  const std::vector<int64_t> lse_shape = {2, 4, 23};
  for (const Variant& var : variants) {
    SCOPED_TRACE(var.name);
    const Problem::Expected want = pr.Reference(var.params);
    for (const char* kernel : {"reference", "flash"}) {
      SCOPED_TRACE(kernel);
      const bool ref = std::string(kernel) == "reference";
      std::string args = pr.args + " --kernel " + kernel + " --o " + dir.File("o.npy") +
                         " --lse " + dir.File("l.npy") + var.flags + BackwardArgs(dir);
      if (ref) args += " --probs " + dir.File("p.npy");
      const RunResult r = RunCli(args);
      ASSERT_EQ(r.code, 0) << r.err;
      EXPECT_TRUE(r.err.empty()) << r.err;
      const auto out = Load(dir.File("o.npy"), pr.qshape);
      const auto lse = Load(dir.File("l.npy"), lse_shape);
      const auto dq = Load(dir.File("dq.npy"), pr.qshape);
      const auto dk = Load(dir.File("dk.npy"), pr.kshape);
      const auto dv = Load(dir.File("dv.npy"), pr.kshape);
      if (ref) {  // same code, same double accumulation: identical
        EXPECT_EQ(out, want.out);
        EXPECT_EQ(lse, want.lse);
        EXPECT_EQ(Load(dir.File("p.npy"), {2, 4, 23, 37}), want.probs);
        EXPECT_EQ(dq, want.dq);
        EXPECT_EQ(dk, want.dk);
        EXPECT_EQ(dv, want.dv);
      } else {
        ExpectClose(out, want.out, "out");
        ExpectClose(lse, want.lse, "lse");
        ExpectClose(dq, want.dq, "dq");
        ExpectClose(dk, want.dk, "dk");
        ExpectClose(dv, want.dv, "dv");
      }
      if (var.params.softmax == SoftmaxKind::kSinkLogit) {
        ExpectClose(Load(dir.File("ds.npy"), {4}), want.dsink, "dsink");
      }
      fs::remove(dir.File("p.npy"));
    }
  }
}

TEST(CliAttentionTest, ExplicitMaskShapesAndDtypes) {
  TempDir dir;
  Problem pr(dir, 2, 2, 1, 9, 11, 8, 2);
  std::mt19937_64 rng(3);
  std::vector<uint8_t> m2(9 * 11);
  for (auto& x : m2) x = rng() % 10 < 7;
  std::fill_n(m2.begin() + 4 * 11, 11, 0);  // a fully masked row: zero output
  // The same mask for every (batch, head), in three layouts.
  std::vector<uint8_t> m4(2 * 2 * 9 * 11);
  for (size_t i = 0; i < m4.size(); ++i) m4[i] = m2[i % m2.size()];
  ASSERT_TRUE(WriteNpyUint8(dir.File("m2.npy"), m2.data(), std::vector<int64_t>{9, 11}).ok());
  ASSERT_TRUE(WriteNpyUint8(dir.File("m4.npy"), m4.data(), std::vector<int64_t>{2, 2, 9, 11}).ok());
  ASSERT_TRUE(
      WriteNpyUint8(dir.File("m11.npy"), m2.data(), std::vector<int64_t>{1, 1, 9, 11}).ok());
  NpyArray b = MakeNpyUint8(m2.data(), std::vector<int64_t>{9, 11});
  b.dtype = "|b1";
  ASSERT_TRUE(WriteNpy(dir.File("mb.npy"), b).ok());

  AttentionParams p;
  ExplicitMask e;
  e.data = m2.data();
  e.size = static_cast<int64_t>(m2.size());
  e.stride_row = 11;
  p.mask.explicit_mask = e;
  p.mask.causal = true;
  const Problem::Expected want = pr.Reference(p);
  for (const char* m : {"m2.npy", "m4.npy", "m11.npy", "mb.npy"}) {
    SCOPED_TRACE(m);
    const RunResult r = RunCli(pr.args + " --causal --mask " + dir.File(m) + " --o " +
                               dir.File("o.npy") + BackwardArgs(dir));
    ASSERT_EQ(r.code, 0) << r.err;
    const auto out = Load(dir.File("o.npy"), pr.qshape);
    ExpectClose(out, want.out, "out");
    ExpectClose(Load(dir.File("dq.npy"), pr.qshape), want.dq, "dq");
    ExpectClose(Load(dir.File("dk.npy"), pr.kshape), want.dk, "dk");
    for (int64_t d = 0; d < 8; ++d) EXPECT_EQ(out[4 * 8 + d], 0.0f);  // masked row 4, b0 h0
  }
  // A per-head mask differs from the broadcast one where it should.
  std::vector<uint8_t> ph = m4;
  std::fill(ph.begin() + 9 * 11, ph.begin() + 2 * 9 * 11, 1);  // batch 0, head 1: all visible
  ASSERT_TRUE(WriteNpyUint8(dir.File("ph.npy"), ph.data(), std::vector<int64_t>{2, 2, 9, 11}).ok());
  const RunResult r =
      RunCli(pr.args + " --mask " + dir.File("ph.npy") + " --o " + dir.File("o.npy"));
  ASSERT_EQ(r.code, 0) << r.err;
  AttentionParams pall;
  const Problem::Expected unmasked = pr.Reference(pall);
  const auto out = Load(dir.File("o.npy"), pr.qshape);
  const size_t head = 9 * 8;
  ExpectClose(std::vector<float>(out.begin() + head, out.begin() + 2 * head),
              std::vector<float>(unmasked.out.begin() + head, unmasked.out.begin() + 2 * head),
              "unmasked head");
}

TEST(CliAttentionTest, AcceptsFloat64Inputs) {
  TempDir dir;
  Problem pr(dir, 1, 2, 2, 5, 6, 4, 4);
  for (const char* name : {"q", "k", "v"}) {
    const std::string path = dir.File(std::string(name) + ".npy");
    auto a = ReadNpy(path);
    ASSERT_TRUE(a.ok());
    const auto f = *a->ToFloat(path);
    NpyArray d;
    d.dtype = "<f8";
    d.shape = a->shape;
    d.bytes.resize(f.size() * 8);
    for (size_t i = 0; i < f.size(); ++i) {
      const double x = f[i];
      std::memcpy(d.bytes.data() + i * 8, &x, 8);
    }
    ASSERT_TRUE(WriteNpy(path, d).ok());
  }
  const RunResult r = RunCli(pr.args + " --kernel reference --o " + dir.File("o.npy"));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(Load(dir.File("o.npy"), pr.qshape), pr.Reference({}).out);
}

// ---- Errors: one line, non-zero exit, nothing written -----------------------------------------

struct BadCase {
  std::string args;    // appended to the valid base command
  std::string needle;  // must appear in the error line
};

TEST(CliAttentionTest, MalformedInputsFailCleanly) {
  TempDir dir;
  Problem pr(dir, 2, 4, 2, 6, 7, 5, 5);
  const std::string Q = dir.File("q.npy"), K = dir.File("k.npy"), V = dir.File("v.npy");
  std::mt19937_64 rng(6);
  Save(dir.File("q3.npy"), RandomVec(4 * 6 * 5, rng), {4, 6, 5});
  Save(dir.File("qb.npy"), RandomVec(3 * 4 * 6 * 5, rng), {3, 4, 6, 5});
  Save(dir.File("qd.npy"), RandomVec(2 * 4 * 6 * 6, rng), {2, 4, 6, 6});
  Save(dir.File("q3h.npy"), RandomVec(2 * 3 * 6 * 5, rng), {2, 3, 6, 5});
  Save(dir.File("vl.npy"), RandomVec(2 * 2 * 8 * 5, rng), {2, 2, 8, 5});
  Save(dir.File("q0.npy"), {}, {2, 4, 0, 5});
  Save(dir.File("s3.npy"), RandomVec(3, rng), {3});
  Save(dir.File("mf.npy"), RandomVec(6 * 7, rng), {6, 7});
  std::vector<uint8_t> mbytes(6 * 8, 1);
  ASSERT_TRUE(WriteNpyUint8(dir.File("mw.npy"), mbytes.data(), std::vector<int64_t>{6, 8}).ok());
  ASSERT_TRUE(WriteNpyUint8(dir.File("m3.npy"), mbytes.data(), std::vector<int64_t>{1, 6, 7}).ok());
  {
    std::vector<int32_t> ints(2 * 4 * 6 * 5, 1);
    NpyArray a;
    a.dtype = "<i4";
    a.shape = {2, 4, 6, 5};
    a.bytes.assign(reinterpret_cast<const char*>(ints.data()),
                   reinterpret_cast<const char*>(ints.data()) + ints.size() * 4);
    ASSERT_TRUE(WriteNpy(dir.File("qi.npy"), a).ok());
  }
  {
    std::ofstream f(dir.File("junk.npy"), std::ios::binary);
    f << "PK\x03\x04 not numpy";
  }
  fs::create_directory(dir.File("adir"));
  const auto inputs_before = dir.List();

  const std::string out = " --o " + dir.File("o.npy");
  const std::string base = pr.args + out;
  const std::string bw = BackwardArgs(dir);
  const std::vector<BadCase> cases = {
      {"attention --k " + K + " --v " + V + out, "missing --q"},
      {"attention --q " + Q + " --k " + K + " --v " + V, "missing --o"},
      {"attention --q " + dir.File("nope.npy") + " --k " + K + " --v " + V + out,
       "nope.npy: no such file"},
      {"attention --q " + dir.File("junk.npy") + " --k " + K + " --v " + V + out,
       "expected the magic"},
      {"attention --q " + dir.File("q3.npy") + " --k " + K + " --v " + V + out,
       "expected a 4-D array"},
      {"attention --q " + dir.File("qi.npy") + " --k " + K + " --v " + V + out, "found int32"},
      {"attention --q " + dir.File("qb.npy") + " --k " + K + " --v " + V + out, "q has batch 3"},
      {"attention --q " + dir.File("qd.npy") + " --k " + K + " --v " + V + out, "q has head_dim 6"},
      {"attention --q " + dir.File("q3h.npy") + " --k " + K + " --v " + V + out,
       "heads_q (3) must be a multiple of heads_kv (2)"},
      {"attention --q " + Q + " --k " + K + " --v " + dir.File("vl.npy") + out, "but v has shape"},
      {"attention --q " + dir.File("q0.npy") + " --k " + K + " --v " + V + out,
       "len_q must be >= 1"},
      {base + " --mask " + dir.File("mw.npy"), "expected shape [len_q, len_k] = [6, 7]"},
      {base + " --mask " + dir.File("m3.npy"), "found [1, 6, 7]"},
      {base + " --mask " + dir.File("mf.npy"), "expected dtype uint8"},
      {base + " --window-left -2", "--window-left must be >= 0"},
      {base + " --window-right=-1", "--window-right must be >= 0"},
      {base + " --sinks -1", "--sinks must be >= 0"},
      {base + " --softmax softmax2", "unknown --softmax 'softmax2'"},
      {base + " --kernel fast", "unknown --kernel 'fast'"},
      {base + " --probs " + dir.File("p.npy"), "flash kernel never materialises"},
      {base + " --softmax sink", "--softmax sink needs --sink-logits"},
      {base + " --sink-logits " + dir.File("s3.npy"), "only used with --softmax sink"},
      {base + " --softmax sink --sink-logits " + dir.File("s3.npy"),
       "expected one logit per query head"},
      {base + " --sigmoid-bias 1", "only used with --softmax sigmoid"},
      {base + " --scale inf", "scale must be finite"},
      {base + " --dout " + dir.File("do.npy") + " --dk " + dir.File("dk.npy") + " --dv " +
           dir.File("dv.npy"),
       "--dq is missing"},
      {base + " --dq " + dir.File("dq.npy"), "--dout is missing"},
      {base + bw + " --dsink " + dir.File("ds.npy"), "--dsink is the gradient of the sink logits"},
      {base + " --dout " + dir.File("q3.npy") + " --dq " + dir.File("dq.npy") + " --dk " +
           dir.File("dk.npy") + " --dv " + dir.File("dv.npy"),
       "expected a 4-D array"},
      {base + " --dout " + K + " --dq " + dir.File("dq.npy") + " --dk " + dir.File("dk.npy") +
           " --dv " + dir.File("dv.npy"),
       "expected the shape of q"},
      {base + " --lse " + dir.File("o.npy"), "name the same file"},
      {base + " --lse " + dir.File("nodir/l.npy"), "does not exist"},
      {base + " --lse " + dir.File("adir"), "not a regular file"},
  };
  for (const BadCase& c : cases) {
    SCOPED_TRACE(c.args);
    const RunResult r = RunCli(c.args);
    // docs/CLI.md: a wrong command line is a usage error (exit 2), a failure exit 1.
    const bool usage = r.err.rfind("attnlab attention: usage error: ", 0) == 0;
    EXPECT_TRUE(usage || r.err.rfind("attnlab attention: error: ", 0) == 0) << r.err;
    EXPECT_EQ(r.code, usage ? 2 : 1) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_NE(r.err.find(c.needle), std::string::npos) << "stderr: " << r.err;
    EXPECT_TRUE(r.out.empty()) << r.out;
    EXPECT_EQ(dir.List(), inputs_before) << "a failed run left files behind";
  }
}

// ---- memory -----------------------------------------------------------------------------------

TEST(CliMemoryTest, SpellsOutTheEightGigabyteExample) {
  // 65536 tokens, 32 heads, bf16: one head's matrix is 2^16 * 2^16 * 2 B = 8 GiB; the layer's
  // 32 heads need 256 GiB, not "8 GB".
  const RunResult r = RunCli("memory --n 65536 --heads 32 --dtype bf16");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("binary"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("N*N*bytes = 65536*65536*2"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("8.00 GiB"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("(8589934592 B)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("batch*heads*N*N*bytes = 1*32*65536*65536*2"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("256.00 GiB"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("(274877906944 B)"), std::string::npos) << r.out;
}

TEST(CliMemoryTest, JsonNumbersFollowTheFormulas) {
  const RunResult r = RunCli(
      "--threads 3 memory --n 1000 --heads 8 --kv-heads 2 --head-dim 59 --batch 2 --layers 12 "
      "--json");
  ASSERT_EQ(r.code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  const uint64_t per_head = 1000ull * 1000 * 4;
  EXPECT_EQ(j["materialised"]["per_head"].get<uint64_t>(), per_head);
  EXPECT_EQ(j["materialised"]["per_layer"].get<uint64_t>(), 2 * 8 * per_head);
  EXPECT_EQ(j["materialised"]["all_layers"].get<uint64_t>(), 12 * 2 * 8 * per_head);
  EXPECT_EQ(j["materialised"]["output_attentions"].get<uint64_t>(), 12 * 2 * 8 * per_head);
  EXPECT_EQ(j["tensors"]["q"].get<uint64_t>(), 2ull * 8 * 1000 * 59 * 4);
  EXPECT_EQ(j["tensors"]["k"].get<uint64_t>(), 2ull * 2 * 1000 * 59 * 4);
  EXPECT_EQ(j["flash"]["threads"].get<int>(), 3);
  EXPECT_EQ(j["flash"]["lse_bytes"].get<uint64_t>(), 2ull * 8 * 1000 * 4);
  // The plan the forward kernel would use with 3 threads, and its ForwardScratch sizes.
  AttentionShape s;
  s.batch = 2, s.heads_q = 8, s.heads_kv = 2, s.len_q = s.len_k = 1000, s.head_dim = 59;
  const internal::FlashPlan plan = internal::MakeFlashPlan(s, 3);
  EXPECT_EQ(j["flash"]["group"].get<int64_t>(), 4);
  EXPECT_EQ(j["flash"]["chunk"].get<int64_t>(), plan.chunk);
  EXPECT_EQ(j["flash"]["d_pad"].get<int64_t>(), 64);
  const internal::FlashForwardScratchSizes z = internal::FlashForwardScratch(s, plan);
  EXPECT_EQ(j["flash"]["scratch_floats_per_thread"].get<int64_t>(), z.Floats());
  const uint64_t per_thread = j["flash"]["scratch_bytes_per_thread"].get<uint64_t>();
  EXPECT_EQ(per_thread, static_cast<uint64_t>(z.Bytes()));
  EXPECT_EQ(j["flash"]["scratch_bytes_total"].get<uint64_t>(), 3 * per_thread);
  EXPECT_EQ(j["flash"]["extra_bytes"].get<uint64_t>(), 3 * per_thread + 2ull * 8 * 1000 * 4);
}

TEST(CliMemoryTest, BadArgumentsFailCleanly) {
  for (const auto& [args, needle] : std::vector<std::pair<std::string, std::string>>{
           {"memory", "missing --n"},
           {"memory --n 0", "--n must be >= 1"},
           {"memory --n 100 --dtype fp8", "unknown --dtype 'fp8'"},
           {"memory --n 100 --heads 6 --kv-heads 4", "--kv-heads must divide"},
           {"memory --n 2147483648 --heads 4096 --batch 4096", "exceeds 2^64 bytes"}}) {
    SCOPED_TRACE(args);
    const RunResult r = RunCli(args);
    // docs/CLI.md: a wrong command line is a usage error (exit 2), a failure exit 1.
    const bool usage = r.err.rfind("attnlab memory: usage error: ", 0) == 0;
    EXPECT_TRUE(usage || r.err.rfind("attnlab memory: error: ", 0) == 0) << r.err;
    EXPECT_EQ(r.code, usage ? 2 : 1) << r.err;
    EXPECT_NE(r.err.find(needle), std::string::npos) << r.err;
  }
}

}  // namespace
}  // namespace attnlab
