// A cap on payload bytes in flight: a counting semaphore of bytes, one per
// job, shared by both transports. A push's bytes are held until the server
// has them: over gRPC until gRPC frees the payload slice, over the data
// plane until the frame's PUSH_ACK (client/transfer.cc).
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
  // Holds `bytes` and returns true if they fit under the cap now (as
  // Acquire would without blocking); false, holding nothing, otherwise.
  bool TryAcquire(size_t bytes);
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
