// Crash-safe file writes: a reader (or a process restarted after a crash or power loss) sees
// either the old contents of a path or the complete new contents, never a torn mix.
//
// Protocol (the one LevelDB and SQLite rely on for POSIX file systems):
//   1. create "path.tmp.<pid>.<counter>" in the same directory (same file system, so the rename
//      below is atomic; pid + a process-wide counter keep concurrent writers apart)
//   2. write everything, fsync the file, close it
//   3. rename(tmp, path): atomically replaces any previous file
//   4. fsync the directory so the rename itself is durable
// On any failure before step 3 the temporary file is removed and `path` is untouched.
#ifndef ATTNLAB_CORE_ATOMIC_FILE_H_
#define ATTNLAB_CORE_ATOMIC_FILE_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "attnlab/status.h"
#include "core/files.h"  // ReadFileToString, ErrnoMessage (once declared here)

namespace attnlab {

// "path.tmp.<pid>.<counter>": a fresh name next to `path` (the counter is process-wide).
std::string AtomicTempPath(const std::string& path);

// The directory holding `path` ("." for a bare file name, "/" for "/x").
std::string ParentDirectory(const std::string& path);

// fsync on a directory, so renames and creations inside it survive a power loss.
Status SyncDirectory(const std::string& dir);

// Streams a file into place. Usage:
//   AtomicFileWriter w;
//   ATTNLAB_RETURN_IF_ERROR(w.Open(path));
//   ATTNLAB_RETURN_IF_ERROR(w.Append(data, n));  // any number of times
//   ATTNLAB_RETURN_IF_ERROR(w.Commit());
// Destroying (or Abort()ing) a writer that was not committed removes its temporary file.
class AtomicFileWriter {
 public:
  AtomicFileWriter() = default;
  ~AtomicFileWriter() { Abort(); }
  AtomicFileWriter(AtomicFileWriter&& o) noexcept;
  AtomicFileWriter& operator=(AtomicFileWriter&& o) noexcept;
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;

  // Creates the temporary file (mode 0644). REQUIRES: not open.
  Status Open(const std::string& path);
  // Writes all n bytes (retries short writes and EINTR). On failure the writer is aborted.
  Status Append(const void* data, size_t n);
  Status Append(std::string_view s) { return Append(s.data(), s.size()); }
  // fsync + close + rename over the target + fsync of the directory. On failure the temporary
  // file is removed and the target keeps its old contents. The same as Stage() then Publish().
  Status Commit();
  // The two halves of Commit, for several files published together (NpyOutputSet): Stage()
  // fsyncs and closes the temporary file (REQUIRES: open); Publish() renames it over the target
  // and fsyncs the directory (REQUIRES: staged). A staged writer destroyed or aborted before
  // Publish() removes its temporary file.
  Status Stage();
  Status Publish();
  // Closes and removes the temporary file; no-op when nothing is open.
  void Abort();

  bool is_open() const { return fd_ >= 0; }
  bool is_staged() const { return fd_ < 0 && !tmp_.empty(); }
  const std::string& path() const { return path_; }
  const std::string& temp_path() const { return tmp_; }
  uint64_t bytes_written() const { return written_; }

 private:
  int fd_ = -1;
  std::string path_, tmp_;
  uint64_t written_ = 0;
};

// Writes `contents` to `path` atomically (the protocol above).
Status WriteFileAtomically(const std::string& path, std::string_view contents);

}  // namespace attnlab

#endif  // ATTNLAB_CORE_ATOMIC_FILE_H_
