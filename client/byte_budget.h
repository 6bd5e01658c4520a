// A cap on payload bytes in flight: a counting semaphore of bytes.
// Acquire blocks while the bytes held would exceed the cap; a single
// acquisition larger than the cap is let through when nothing else is held,
// so an oversized chunk cannot deadlock. Thread-safe.
#pragma once

#include <cstddef>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace zerostate::client {

class ByteBudget {
 public:
  // REQUIRES: cap >= 1.
  explicit ByteBudget(size_t cap) : cap_(cap) {}

  // Blocks until `bytes` fit under the cap, then holds them.
  void Acquire(size_t bytes);
  // Returns bytes taken by Acquire. REQUIRES: bytes <= held().
  void Release(size_t bytes);

  size_t held();
  size_t cap() const { return cap_; }

 private:
  const size_t cap_;
  absl::Mutex mu_;
  size_t held_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace zerostate::client
