// A heap array of floats (or bytes) aligned for the widest vector loads.
// Move-only. Memory is zero-filled on allocation: padding elements of a
// block must read as zero forever.
//
// A buffer of a huge page (2 MiB) or more is a mapping of its own that
// starts on a huge-page boundary, with transparent huge pages asked for
// (MADV_HUGEPAGE; the kernel's setting decides): the optimizer's pass
// streams through a block's state, and on 4 KiB pages each stream misses
// the TLB every 4 KiB (on a VM a nested page walk) and faults once per 4
// KiB when first written. The tail past the last whole huge page stays on
// small pages, so nothing past the buffer is faulted in. One mapping per
// buffer, advised whole: the advice does not split it.
#pragma once

#include <sys/mman.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <utility>

namespace zerostate::server {

inline constexpr size_t kBufferAlign = 64;
inline constexpr size_t kHugePage = size_t{2} << 20;

// `bytes` (a multiple of 4 KiB, at least kHugePage) of fresh zero memory
// at a kHugePage boundary, huge pages asked for; throws std::bad_alloc.
inline void* MapHugeAligned(size_t bytes) {
  const size_t span = bytes + kHugePage;
  void* m = mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) throw std::bad_alloc();
  const uintptr_t at = reinterpret_cast<uintptr_t>(m);
  const uintptr_t begin = (at + kHugePage - 1) / kHugePage * kHugePage;
  if (begin > at) munmap(m, begin - at);  // the head before the boundary
  munmap(reinterpret_cast<void*>(begin + bytes), at + span - (begin + bytes));  // the tail
  void* p = reinterpret_cast<void*>(begin);
  madvise(p, bytes, MADV_HUGEPAGE);  // EINVAL without THP: small pages, as before
  return p;
}

template <typename T>
class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  explicit AlignedBuffer(size_t n) : n_(n) {
    if (n == 0) return;
    if (n * sizeof(T) >= kHugePage) {  // fresh mapped memory reads as zero
      mapped_ = (n * sizeof(T) + 4095) / 4096 * 4096;
      data_ = static_cast<T*>(MapHugeAligned(mapped_));
      return;
    }
    size_t bytes = (n * sizeof(T) + kBufferAlign - 1) / kBufferAlign * kBufferAlign;
    data_ = static_cast<T*>(std::aligned_alloc(kBufferAlign, bytes));
    if (data_ == nullptr) throw std::bad_alloc();
    std::memset(static_cast<void*>(data_), 0, bytes);
  }
  AlignedBuffer(AlignedBuffer&& o) noexcept
      : data_(std::exchange(o.data_, nullptr)), n_(o.n_), mapped_(std::exchange(o.mapped_, 0)) {}
  AlignedBuffer& operator=(AlignedBuffer&& o) noexcept {
    std::swap(data_, o.data_);
    std::swap(n_, o.n_);
    std::swap(mapped_, o.mapped_);
    return *this;
  }
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;
  ~AlignedBuffer() {
    if (mapped_ != 0) {
      munmap(data_, mapped_);
    } else {
      std::free(data_);
    }
  }

  T* data() { return data_; }
  const T* data() const { return data_; }
  size_t size() const { return n_; }
  bool empty() const { return data_ == nullptr; }

 private:
  T* data_ = nullptr;
  size_t n_ = 0;
  size_t mapped_ = 0;  // the mapping's bytes (MapHugeAligned), 0: from malloc
};

}  // namespace zerostate::server
