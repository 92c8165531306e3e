// Atomic writes: contents land whole, failures leave the target and the directory as they were.
#include "core/atomic_file.h"

#include <dirent.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

namespace attnlab {
namespace {

class AtomicFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = ::testing::TempDir() + "attnlab_atomic_XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::vector<std::string> Entries() const {
    std::vector<std::string> out;
    for (const auto& e : std::filesystem::directory_iterator(dir_))
      out.push_back(e.path().filename());
    std::sort(out.begin(), out.end());
    return out;
  }
  std::string Slurp(const std::string& p) const {
    std::ifstream f(p, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  }
  std::string dir_;
};

TEST_F(AtomicFileTest, WritesAndReplacesWithoutLeftovers) {
  const std::string p = dir_ + "/a.bin";
  ASSERT_TRUE(WriteFileAtomically(p, "first").ok());
  EXPECT_EQ(Slurp(p), "first");
  std::string big(3 << 20, 'x');
  big[12345] = '\0';
  ASSERT_TRUE(WriteFileAtomically(p, big).ok());
  EXPECT_EQ(Slurp(p), big);
  ASSERT_TRUE(WriteFileAtomically(p, "").ok());
  EXPECT_EQ(Slurp(p), "");
  EXPECT_EQ(Entries(), std::vector<std::string>{"a.bin"});
}

TEST_F(AtomicFileTest, StreamingWriterAndAbort) {
  const std::string p = dir_ + "/s.txt";
  {
    AtomicFileWriter w;
    ASSERT_TRUE(w.Open(p).ok());
    ASSERT_TRUE(w.Append("hello ").ok());
    ASSERT_TRUE(w.Append(std::string_view("world")).ok());
    EXPECT_EQ(w.bytes_written(), 11u);
    EXPECT_EQ(w.temp_path().rfind(p + ".tmp.", 0), 0u);
    // Not visible under the final name before Commit.
    EXPECT_FALSE(std::filesystem::exists(p));
    ASSERT_TRUE(w.Commit().ok());
  }
  EXPECT_EQ(Slurp(p), "hello world");
  {
    AtomicFileWriter w;
    ASSERT_TRUE(w.Open(p).ok());
    ASSERT_TRUE(w.Append("half-written").ok());
    // Destroyed without Commit: as if the write failed half-way.
  }
  EXPECT_EQ(Slurp(p), "hello world");
  {
    AtomicFileWriter w;
    ASSERT_TRUE(w.Open(p).ok());
    AtomicFileWriter moved = std::move(w);
    EXPECT_FALSE(w.is_open());
    ASSERT_TRUE(moved.Append("moved").ok());
    moved.Abort();
    EXPECT_FALSE(moved.is_open());
  }
  EXPECT_EQ(Entries(), std::vector<std::string>{"s.txt"});
}

TEST_F(AtomicFileTest, MissingDirectoryIsAnErrorAndCreatesNothing) {
  const Status st = WriteFileAtomically(dir_ + "/no/such/dir/f.txt", "x");
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), StatusCode::kIoError);
  EXPECT_NE(st.message().find("f.txt"), std::string::npos) << st.ToString();
  EXPECT_NE(st.message().find("Hint"), std::string::npos) << st.ToString();
  EXPECT_TRUE(Entries().empty());
}

TEST_F(AtomicFileTest, FailedRenameRemovesTheTemporaryFile) {
  // The target is a non-empty directory: rename(2) refuses to replace it.
  const std::string target = dir_ + "/target";
  ASSERT_EQ(::mkdir(target.c_str(), 0755), 0);
  ASSERT_TRUE(WriteFileAtomically(target + "/inside", "keep").ok());
  const Status st = WriteFileAtomically(target, "data");
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), StatusCode::kIoError);
  EXPECT_EQ(Entries(), std::vector<std::string>{"target"});
  EXPECT_EQ(Slurp(target + "/inside"), "keep");
}

TEST_F(AtomicFileTest, TempNamesAreUniqueAndSiblings) {
  std::set<std::string> names;
  for (int i = 0; i < 100; ++i) names.insert(AtomicTempPath("d/x.json"));
  EXPECT_EQ(names.size(), 100u);
  const std::string t = *names.begin();
  EXPECT_EQ(t.rfind("d/x.json.tmp." + std::to_string(::getpid()) + ".", 0), 0u) << t;
}

TEST_F(AtomicFileTest, ParentDirectory) {
  EXPECT_EQ(ParentDirectory("a.txt"), ".");
  EXPECT_EQ(ParentDirectory("/a.txt"), "/");
  EXPECT_EQ(ParentDirectory("x/y/a.txt"), "x/y");
  EXPECT_EQ(ParentDirectory("x/y/"), "x");
  EXPECT_EQ(ParentDirectory("/x/y"), "/x");
}

TEST_F(AtomicFileTest, ReadFileToString) {
  const std::string p = dir_ + "/r.txt";
  ASSERT_TRUE(WriteFileAtomically(p, "0123456789").ok());
  auto r = ReadFileToString(p, 100);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, "0123456789");
  auto big = ReadFileToString(p, 9);
  ASSERT_FALSE(big.ok());
  EXPECT_EQ(big.status().code(), StatusCode::kOutOfRange);
  auto missing = ReadFileToString(dir_ + "/nope", 100);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  auto dir = ReadFileToString(dir_, 100);
  ASSERT_FALSE(dir.ok());
  EXPECT_EQ(dir.status().code(), StatusCode::kInvalidArgument);
}

TEST_F(AtomicFileTest, SyncDirectory) {
  EXPECT_TRUE(SyncDirectory(dir_).ok());
  EXPECT_FALSE(SyncDirectory(dir_ + "/missing").ok());
}

}  // namespace
}  // namespace attnlab
