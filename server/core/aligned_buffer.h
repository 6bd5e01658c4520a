// A heap array of floats (or bytes) aligned for the widest vector loads.
// Move-only. Memory is zero-filled on allocation: padding elements of a
// block must read as zero forever.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <new>
#include <utility>

namespace zerostate::server {

inline constexpr size_t kBufferAlign = 64;

template <typename T>
class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  explicit AlignedBuffer(size_t n) : n_(n) {
    if (n == 0) return;
    size_t bytes = (n * sizeof(T) + kBufferAlign - 1) / kBufferAlign * kBufferAlign;
    data_ = static_cast<T*>(std::aligned_alloc(kBufferAlign, bytes));
    if (data_ == nullptr) throw std::bad_alloc();
    std::memset(static_cast<void*>(data_), 0, bytes);
  }
  AlignedBuffer(AlignedBuffer&& o) noexcept : data_(std::exchange(o.data_, nullptr)), n_(o.n_) {}
  AlignedBuffer& operator=(AlignedBuffer&& o) noexcept {
    std::swap(data_, o.data_);
    std::swap(n_, o.n_);
    return *this;
  }
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;
  ~AlignedBuffer() { std::free(data_); }

  T* data() { return data_; }
  const T* data() const { return data_; }
  size_t size() const { return n_; }
  bool empty() const { return data_ == nullptr; }

 private:
  T* data_ = nullptr;
  size_t n_ = 0;
};

}  // namespace zerostate::server
