// The memory and barrier that the local ranks of one node share on the CPU:
// every rank's parameter and gradient buffers, visible to all of them, and
// a barrier. Two kinds: threads of one process (heap memory) and processes
// of one node (POSIX shared memory; no GPU needed); both use the futex
// barrier of worker/local_barrier.h on that memory.
// Thread safety: buffers are raw memory, ordered by Barrier(); Barrier and
// Vote are called by each rank's thread.
// Waits end after the group's peer timeout (worker/local_barrier.h) with
// DEADLINE_EXCEEDED naming the local ranks that did not arrive.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "worker/local_barrier.h"

namespace zerostate::worker {

class LocalGroup {
 public:
  virtual ~LocalGroup() = default;
  virtual uint32_t size() const = 0;
  virtual uint64_t elems() const = 0;
  // Rank `rank`'s buffers, elems() floats each, 64-byte aligned, zeroed at
  // creation. REQUIRES: rank < size().
  virtual float* params(uint32_t rank) = 0;
  virtual float* grads(uint32_t rank) = 0;
  // Returns once every rank of the group has called it.
  [[nodiscard]] virtual absl::Status Barrier(uint32_t rank) = 0;
  // Collective: true on every rank if any rank passed `failed` true.
  [[nodiscard]] virtual absl::StatusOr<bool> Vote(uint32_t rank, bool failed) = 0;
};

// A group for `ranks` threads of this process (at most kMaxLocalRanks).
std::unique_ptr<LocalGroup> MakeThreadGroup(uint32_t ranks, uint64_t elems,
                                            absl::Duration timeout = absl::InfiniteDuration());

// A group for `ranks` processes of this node in the shared-memory object
// `name` ("/zerostate-..."). Rank 0 creates it (replacing a stale one) and
// must have returned before the others open it (the caller orders this,
// e.g. with a rendezvous); the object is unlinked when rank 0's group is
// destroyed. Errors: INTERNAL naming the system call and errno text,
// INVALID_ARGUMENT for a size mismatch with an existing object.
[[nodiscard]] absl::StatusOr<std::unique_ptr<LocalGroup>> OpenShmGroup(
    const std::string& name, uint32_t ranks, uint32_t rank, uint64_t elems,
    absl::Duration timeout = absl::InfiniteDuration());

}  // namespace zerostate::worker
