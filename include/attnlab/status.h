// attnlab/status.h: the error type every public function returns.
//
// LevelDB-style: a runtime failure (bad shapes, a corrupt file, a missing path) is a Status the
// caller can print; internal invariants use ATTNLAB_CHECK, which aborts with file:line because a
// broken invariant is a bug in attnlab, not in the caller's input.
#ifndef ATTNLAB_STATUS_H_
#define ATTNLAB_STATUS_H_

#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <utility>

namespace attnlab {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,  // the caller passed something impossible (shapes, flags, values)
  kNotFound,         // a file or named entry does not exist
  kIoError,          // the OS refused a read or write
  kCorrupt,          // a file's contents contradict its own format
  kOutOfRange,       // a value is outside what is supported (e.g. sizes past limits)
  kInternal,         // a bug in attnlab
  kUnavailable,      // another process of a distributed run did not answer in time
};

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  static Status Ok() { return Status(); }
  static Status InvalidArgument(std::string msg) {
    return Status(StatusCode::kInvalidArgument, std::move(msg));
  }
  static Status NotFound(std::string msg) { return Status(StatusCode::kNotFound, std::move(msg)); }
  static Status IoError(std::string msg) { return Status(StatusCode::kIoError, std::move(msg)); }
  static Status Corrupt(std::string msg) { return Status(StatusCode::kCorrupt, std::move(msg)); }
  static Status OutOfRange(std::string msg) {
    return Status(StatusCode::kOutOfRange, std::move(msg));
  }
  static Status Internal(std::string msg) { return Status(StatusCode::kInternal, std::move(msg)); }
  static Status Unavailable(std::string msg) {
    return Status(StatusCode::kUnavailable, std::move(msg));
  }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "invalid argument: heads_q (6) is not a multiple of heads_kv (4)".
  std::string ToString() const;

  // Prefixes the message with context: "loading model.safetensors: " + message.
  Status WithContext(const std::string& context) const {
    if (ok()) return *this;
    return Status(code_, context + ": " + message_);
  }

 private:
  Status(StatusCode code, std::string msg) : code_(code), message_(std::move(msg)) {}
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

// A value or the Status explaining why there is none.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Status status) : status_(std::move(status)) {  // NOLINT
    if (status_.ok()) status_ = Status::Internal("Result constructed from an OK status");
  }
  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }
  T& value() & { return *value_; }
  const T& value() const& { return *value_; }
  T&& value() && { return std::move(*value_); }
  T* operator->() { return &*value_; }
  const T* operator->() const { return &*value_; }
  T& operator*() { return *value_; }

 private:
  Status status_;
  std::optional<T> value_;
};

}  // namespace attnlab

#define ATTNLAB_RETURN_IF_ERROR(expr)            \
  do {                                           \
    ::attnlab::Status _attnlab_st = (expr);      \
    if (!_attnlab_st.ok()) return _attnlab_st;   \
  } while (0)

#define ATTNLAB_CONCAT_INNER_(a, b) a##b
#define ATTNLAB_CONCAT_(a, b) ATTNLAB_CONCAT_INNER_(a, b)
// ATTNLAB_ASSIGN_OR_RETURN(auto x, MakeX()); returns the Status if MakeX failed.
#define ATTNLAB_ASSIGN_OR_RETURN(lhs, expr)                                  \
  auto ATTNLAB_CONCAT_(_attnlab_r, __LINE__) = (expr);                       \
  if (!ATTNLAB_CONCAT_(_attnlab_r, __LINE__).ok())                           \
    return ATTNLAB_CONCAT_(_attnlab_r, __LINE__).status();                   \
  lhs = std::move(ATTNLAB_CONCAT_(_attnlab_r, __LINE__)).value()

// Always-on invariant check (not for user input: that gets a Status).
#define ATTNLAB_CHECK(cond)                                                          \
  do {                                                                               \
    if (!(cond)) {                                                                   \
      std::fprintf(stderr, "%s:%d: internal invariant failed: %s\n", __FILE__, __LINE__, \
                   #cond);                                                           \
      std::abort();                                                                  \
    }                                                                                \
  } while (0)

#endif  // ATTNLAB_STATUS_H_
