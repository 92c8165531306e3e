#include "core/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <utility>

namespace attnlab {

std::string AtomicTempPath(const std::string& path) {
  static std::atomic<uint64_t> counter{0};
  return path + ".tmp." + std::to_string(static_cast<long long>(::getpid())) + "." +
         std::to_string(counter.fetch_add(1));
}

std::string ParentDirectory(const std::string& path) {
  std::string p = path;
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  const size_t slash = p.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return p.substr(0, slash);
}

Status SyncDirectory(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    return Status::IoError(dir + ": cannot open the directory to fsync it: " + ErrnoMessage(errno));
  }
  Status st;
  if (::fsync(fd) != 0) {
    const int err = errno;
    // Some file systems (e.g. some FUSE mounts) do not support fsync on directories.
    if (err != EINVAL && err != ENOTSUP) {
      st = Status::IoError(dir + ": fsync of the directory failed: " + ErrnoMessage(err));
    }
  }
  ::close(fd);
  return st;
}

AtomicFileWriter::AtomicFileWriter(AtomicFileWriter&& o) noexcept
    : fd_(std::exchange(o.fd_, -1)),
      path_(std::move(o.path_)),
      tmp_(std::move(o.tmp_)),
      written_(std::exchange(o.written_, 0)) {}

AtomicFileWriter& AtomicFileWriter::operator=(AtomicFileWriter&& o) noexcept {
  if (this != &o) {
    Abort();
    fd_ = std::exchange(o.fd_, -1);
    path_ = std::move(o.path_);
    tmp_ = std::move(o.tmp_);
    written_ = std::exchange(o.written_, 0);
  }
  return *this;
}

Status AtomicFileWriter::Open(const std::string& path) {
  ATTNLAB_CHECK(fd_ < 0);
  if (path.empty()) return Status::InvalidArgument("cannot write a file with an empty path");
  path_ = path;
  tmp_ = AtomicTempPath(path);
  written_ = 0;
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd_ < 0) {
    const int err = errno;
    const std::string tmp = std::move(tmp_);
    tmp_.clear();
    return Status::IoError(path + ": cannot create the temporary file " + tmp + ": " +
                           ErrnoMessage(err) +
                           (err == ENOENT ? ". Hint: does the directory exist?" : ""));
  }
  return Status::Ok();
}

Status AtomicFileWriter::Append(const void* data, size_t n) {
  ATTNLAB_CHECK(fd_ >= 0);
  const char* src = static_cast<const char*>(data);
  size_t done = 0;
  while (done < n) {
    const ssize_t w = ::write(fd_, src + done, std::min<size_t>(n - done, size_t{1} << 30));
    if (w < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      const std::string tmp = tmp_;
      Abort();
      return Status::IoError(path_ + ": writing " + tmp + " failed: " + ErrnoMessage(err));
    }
    done += static_cast<size_t>(w);
  }
  written_ += n;
  return Status::Ok();
}

Status AtomicFileWriter::Commit() {
  ATTNLAB_RETURN_IF_ERROR(Stage());
  return Publish();
}

Status AtomicFileWriter::Stage() {
  ATTNLAB_CHECK(fd_ >= 0);
  if (::fsync(fd_) != 0) {
    const int err = errno;
    Abort();
    return Status::IoError(path_ + ": fsync of the temporary file failed: " + ErrnoMessage(err));
  }
  const int fd = std::exchange(fd_, -1);
  if (::close(fd) != 0) {
    const int err = errno;
    ::unlink(tmp_.c_str());
    tmp_.clear();
    return Status::IoError(path_ + ": close of the temporary file failed: " + ErrnoMessage(err));
  }
  return Status::Ok();
}

Status AtomicFileWriter::Publish() {
  ATTNLAB_CHECK(is_staged());
  if (::rename(tmp_.c_str(), path_.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp_.c_str());
    const std::string tmp = std::move(tmp_);
    tmp_.clear();
    return Status::IoError(path_ + ": cannot move " + tmp + " into place: " + ErrnoMessage(err));
  }
  tmp_.clear();
  return SyncDirectory(ParentDirectory(path_)).WithContext(path_ + " was written, but");
}

void AtomicFileWriter::Abort() {
  if (fd_ >= 0) {
    ::close(fd_);
    fd_ = -1;
  }
  if (!tmp_.empty()) {
    ::unlink(tmp_.c_str());
    tmp_.clear();
  }
}

Status WriteFileAtomically(const std::string& path, std::string_view contents) {
  AtomicFileWriter w;
  ATTNLAB_RETURN_IF_ERROR(w.Open(path));
  ATTNLAB_RETURN_IF_ERROR(w.Append(contents));
  return w.Commit();
}

}  // namespace attnlab
