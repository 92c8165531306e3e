// A 64-byte aligned, zero-initialised float buffer for kernel scratch (cache-line and
// AVX-512 friendly). Move-only.
#ifndef ATTNLAB_CORE_ALIGNED_BUFFER_H_
#define ATTNLAB_CORE_ALIGNED_BUFFER_H_

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <new>
#include <utility>

namespace attnlab {

template <typename T>
class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  explicit AlignedBuffer(size_t n) { Resize(n); }
  ~AlignedBuffer() { std::free(data_); }
  AlignedBuffer(AlignedBuffer&& o) noexcept
      : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)) {}
  AlignedBuffer& operator=(AlignedBuffer&& o) noexcept {
    std::swap(data_, o.data_);
    std::swap(size_, o.size_);
    return *this;
  }
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;

  // Reallocates (contents are zeroed) when n differs from the current size.
  void Resize(size_t n) {
    if (n == size_) return;
    std::free(data_);
    data_ = nullptr;
    size_ = 0;
    if (n == 0) return;
    const size_t bytes = (n * sizeof(T) + 63) / 64 * 64;
    data_ = static_cast<T*>(std::aligned_alloc(64, bytes));
    if (data_ == nullptr) throw std::bad_alloc();
    std::memset(static_cast<void*>(data_), 0, bytes);
    size_ = n;
  }
  void Zero() {
    if (data_) std::memset(static_cast<void*>(data_), 0, size_ * sizeof(T));
  }

  T* data() { return data_; }
  const T* data() const { return data_; }
  size_t size() const { return size_; }
  T& operator[](size_t i) { return data_[i]; }
  const T& operator[](size_t i) const { return data_[i]; }

 private:
  T* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace attnlab

#endif  // ATTNLAB_CORE_ALIGNED_BUFFER_H_
