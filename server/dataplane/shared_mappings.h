// The shared buffers of same-host clients (SHM_BUFFER, client/shared_buffer.h)
// mapped once per server process, not once per connection: a client hands
// the same memfd to each of its connections, and each mapping of it is
// made whole at once (MAP_POPULATE, so that gathers do not fault page by
// page), which for a trainer's staging (hundreds of MB) costs tens of
// milliseconds of page-table work. Connections that name the same file
// (its device and inode) share one mapping, which lives while any of them
// holds it.
// Thread-safe.
#pragma once

#include <sys/types.h>

#include <memory>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/shm_segment.h"

namespace zerostate::server {

class SharedMappings {
 public:
  // The mapping of memfd `fd` (owned from now on, closed in every case): the
  // one a live holder has of the same file, else a new one
  // (ShmSegment::Attach, populated). Errors: ShmSegment::Attach's
  // (FAILED_PRECONDITION: not sealed against shrinking and growing, or
  // empty; UNAVAILABLE: cannot map), UNAVAILABLE when `fd` cannot be
  // examined (fstat).
  [[nodiscard]] absl::StatusOr<std::shared_ptr<const ShmSegment>> Attach(int fd);

  // Files mapped now (their mappings held by someone).
  size_t live() const;

 private:
  using FileId = std::pair<dev_t, ino_t>;
  mutable absl::Mutex mu_;
  // Held elsewhere; expired entries are dropped by the next Attach.
  absl::flat_hash_map<FileId, std::weak_ptr<const ShmSegment>> mapped_ ABSL_GUARDED_BY(mu_);
};

}  // namespace zerostate::server
