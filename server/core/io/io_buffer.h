// A zero-filled, page-aligned heap buffer for direct I/O, locked in RAM
// (mlock) when the process may lock that much, so the kernel never pages
// out a bounce buffer a request is in flight on. Move-only.
#pragma once

#include <sys/mman.h>

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <new>
#include <utility>

#include "server/core/io/env.h"

namespace zerostate::server::io {

class IoBuffer {
 public:
  IoBuffer() = default;
  // Rounds `bytes` up to kIoAlign.
  explicit IoBuffer(size_t bytes) : size_((bytes + kIoAlign - 1) / kIoAlign * kIoAlign) {
    if (size_ == 0) return;
    data_ = static_cast<char*>(std::aligned_alloc(kIoAlign, size_));
    if (data_ == nullptr) throw std::bad_alloc();
    std::memset(data_, 0, size_);
    locked_ = mlock(data_, size_) == 0;  // best effort: RLIMIT_MEMLOCK may forbid it
  }
  IoBuffer(IoBuffer&& o) noexcept
      : data_(std::exchange(o.data_, nullptr)),
        size_(std::exchange(o.size_, 0)),
        locked_(std::exchange(o.locked_, false)) {}
  IoBuffer& operator=(IoBuffer&& o) noexcept {
    std::swap(data_, o.data_);
    std::swap(size_, o.size_);
    std::swap(locked_, o.locked_);
    return *this;
  }
  IoBuffer(const IoBuffer&) = delete;
  IoBuffer& operator=(const IoBuffer&) = delete;
  ~IoBuffer() {
    if (locked_) munlock(data_, size_);
    std::free(data_);
  }

  char* data() { return data_; }
  size_t size() const { return size_; }

 private:
  char* data_ = nullptr;
  size_t size_ = 0;
  bool locked_ = false;
};

}  // namespace zerostate::server::io
