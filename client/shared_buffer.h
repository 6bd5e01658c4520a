// Shared buffers (docs/architecture.md, "a same-host data plane through
// shared memory"): memory the caller's data lives in that a state server
// on this host reads and writes in place. Each is a sealed memfd
// (common/shm_segment.h) the client registers under a small id; a
// same-host connection has the server map it once (a SHM_BUFFER frame,
// client/shm_conn.h), and from then on a push whose source, or a gather
// whose destination, lies inside it moves no byte through the client: the
// frames only name (id, offset). Anywhere else (TCP, TLS, gRPC) a shared
// buffer is ordinary memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/shm_segment.h"

namespace zerostate::client {

// One buffer: page-aligned, zeroed and allocated whole at allocation
// (so that the server can map it populated), `size()` bytes (the request
// rounded up to whole pages), mapped until the last reference to
// it goes (Client::AllocateShared's caller, the client's registry, and
// each connection that had the server map it hold one). Thread-safe (the
// mapping does not change; what is in it is the caller's business).
class SharedBuffer {
 public:
  SharedBuffer(uint32_t id, std::unique_ptr<ShmSegment> segment)
      : id_(id), segment_(std::move(segment)) {}
  SharedBuffer(const SharedBuffer&) = delete;
  SharedBuffer& operator=(const SharedBuffer&) = delete;

  // The id frames name it by (shm_buffer; never 0), unique in its client.
  uint32_t id() const { return id_; }
  uint8_t* data() const { return segment_->data(); }
  size_t size() const { return segment_->size(); }
  const ShmSegment& segment() const { return *segment_; }
  // Whether [p, p + bytes) lies inside the buffer.
  bool Holds(const void* p, size_t bytes) const;

 private:
  const uint32_t id_;
  const std::unique_ptr<ShmSegment> segment_;
};

// A client's shared buffers, by id. Thread-safe.
class SharedBuffers {
 public:
  // A new buffer of at least `bytes`, registered under the next id.
  // Errors: INVALID_ARGUMENT (0 bytes), UNAVAILABLE (the kernel refused
  // the memfd or its mapping; with the reason).
  [[nodiscard]] absl::StatusOr<std::shared_ptr<SharedBuffer>> Allocate(size_t bytes)
      ABSL_LOCKS_EXCLUDED(mu_);
  // The buffer [p, p + bytes) lies inside, or null.
  std::shared_ptr<const SharedBuffer> Find(const void* p, size_t bytes) const
      ABSL_LOCKS_EXCLUDED(mu_);

 private:
  mutable absl::Mutex mu_;
  std::vector<std::shared_ptr<SharedBuffer>> buffers_ ABSL_GUARDED_BY(mu_);  // id i + 1 at [i]
};

}  // namespace zerostate::client
