// What a path names, and opening and reading a regular file: the checks every parser makes
// before it trusts a single byte (parsers never trust sizes from the file; they do trust the
// size the kernel reports for it).
#ifndef ATTNLAB_CORE_FILES_H_
#define ATTNLAB_CORE_FILES_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "attnlab/status.h"

namespace attnlab {

enum class PathKind { kMissing, kDirectory, kFile, kOther };

// stat(2) of `path` (links followed): missing (or unreadable), a directory, a regular file, or
// anything else (device, FIFO, socket).
PathKind KindOf(const std::string& path);

// "a/b/c" -> "c", "c" -> "c", "a/b/" -> "" (no trailing-slash folding).
std::string BaseName(const std::string& path);

// A regular file opened read-only (O_CLOEXEC) with its size at opening; closed on destruction.
// Move-only.
class ReadOnlyFile {
 public:
  // Errors name the file as `label` (default: the path):
  //   NotFound "<label>: no such file", IoError "<label>: cannot open: <errno text>",
  //   IoError "<label>: cannot stat: ...", InvalidArgument "<label>: not a regular file<hint>"
  //   (a directory, a FIFO, a device: reading one could block or never end).
  static Result<ReadOnlyFile> Open(const std::string& path, std::string_view not_regular_hint = "",
                                   const std::string& label = "");

  ReadOnlyFile(ReadOnlyFile&& o) noexcept
      : fd_(o.fd_), size_(o.size_), label_(std::move(o.label_)) {
    o.fd_ = -1;
  }
  ReadOnlyFile& operator=(ReadOnlyFile&& o) noexcept;
  ReadOnlyFile(const ReadOnlyFile&) = delete;
  ReadOnlyFile& operator=(const ReadOnlyFile&) = delete;
  ~ReadOnlyFile();

  int fd() const { return fd_; }
  int64_t size() const { return size_; }

  // Reads exactly n bytes at `offset` into dst (pread, restarted on EINTR, in chunks of at most
  // 1 GiB). IoError "<label>: reading <what> failed: ..." on an error, or "<label>: the file
  // ended inside <what> (it shrank while being read?)" when it ends early.
  Status ReadAt(int64_t offset, void* dst, int64_t n, std::string_view what) const;

 private:
  ReadOnlyFile(int fd, int64_t size, std::string label)
      : fd_(fd), size_(size), label_(std::move(label)) {}
  int fd_ = -1;
  int64_t size_ = 0;
  std::string label_;
};

// Reads a whole regular file. NotFound if it does not exist, OutOfRange if it is larger than
// max_bytes (checked before reading), IoError otherwise.
Result<std::string> ReadFileToString(const std::string& path, int64_t max_bytes);

// strerror(err) with the number, thread-safe.
std::string ErrnoMessage(int err);

}  // namespace attnlab

#endif  // ATTNLAB_CORE_FILES_H_
