#include "core/files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace attnlab {

std::string ErrnoMessage(int err) {
  char buf[256];
  // GNU strerror_r returns the message (possibly not in buf).
  const char* msg = ::strerror_r(err, buf, sizeof(buf));
  return std::string(msg) + " (errno " + std::to_string(err) + ")";
}

PathKind KindOf(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return PathKind::kMissing;
  if (S_ISDIR(st.st_mode)) return PathKind::kDirectory;
  if (S_ISREG(st.st_mode)) return PathKind::kFile;
  return PathKind::kOther;
}

std::string BaseName(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

Result<ReadOnlyFile> ReadOnlyFile::Open(const std::string& path, std::string_view not_regular_hint,
                                        const std::string& label_in) {
  const std::string& label = label_in.empty() ? path : label_in;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    if (err == ENOENT) return Status::NotFound(label + ": no such file");
    return Status::IoError(label + ": cannot open: " + ErrnoMessage(err));
  }
  ReadOnlyFile file(fd, 0, label);
  struct stat st;
  if (::fstat(fd, &st) != 0) return Status::IoError(label + ": cannot stat: " + ErrnoMessage(errno));
  if (!S_ISREG(st.st_mode)) {
    return Status::InvalidArgument(label + ": not a regular file" + std::string(not_regular_hint));
  }
  file.size_ = st.st_size;
  return file;
}

ReadOnlyFile& ReadOnlyFile::operator=(ReadOnlyFile&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = o.fd_;
    size_ = o.size_;
    label_ = std::move(o.label_);
    o.fd_ = -1;
  }
  return *this;
}

Status ReadOnlyFile::ReadAt(int64_t offset, void* dst, int64_t n, std::string_view what) const {
  char* out = static_cast<char*>(dst);
  int64_t done = 0;
  while (done < n) {
    const ssize_t r = ::pread(fd_, out + done,
                              static_cast<size_t>(std::min<int64_t>(n - done, int64_t{1} << 30)),
                              static_cast<off_t>(offset + done));
    if (r < 0) {
      if (errno == EINTR) continue;
      return Status::IoError(label_ + ": reading " + std::string(what) +
                             " failed: " + ErrnoMessage(errno));
    }
    if (r == 0) {
      return Status::IoError(label_ + ": the file ended inside " + std::string(what) +
                             " (it shrank while being read?)");
    }
    done += r;
  }
  return Status::Ok();
}

ReadOnlyFile::~ReadOnlyFile() {
  if (fd_ >= 0) ::close(fd_);
}

Result<std::string> ReadFileToString(const std::string& path, int64_t max_bytes) {
  ATTNLAB_ASSIGN_OR_RETURN(ReadOnlyFile file, ReadOnlyFile::Open(path));
  if (file.size() > max_bytes) {
    return Status::OutOfRange(path + ": " + std::to_string(file.size()) +
                              " bytes is more than the " + std::to_string(max_bytes) +
                              " bytes expected for this file");
  }
  std::string out(static_cast<size_t>(file.size()), '\0');
  size_t done = 0;
  while (done < out.size()) {
    const ssize_t r = ::read(file.fd(), out.data() + done, out.size() - done);
    if (r < 0) {
      if (errno == EINTR) continue;
      return Status::IoError(path + ": read failed: " + ErrnoMessage(errno));
    }
    if (r == 0) break;  // the file shrank while we read it
    done += static_cast<size_t>(r);
  }
  out.resize(done);
  return out;
}

}  // namespace attnlab
