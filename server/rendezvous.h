// A keyed all-gather of small values among `world` ranks: workers use it
// to exchange NCCL unique ids and as a barrier, through the state service
// itself rather than a new component. Thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/node_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace zerostate::server {

class RendezvousTable {
 public:
  static constexpr size_t kMaxValueBytes = 4096;
  static constexpr uint32_t kMaxWorld = 65536;
  static constexpr size_t kMaxKeys = 100000;

  // Deposits `value` for `rank` under (ns, key) and waits until all `world`
  // ranks have; returns their values indexed by rank. A retry with the same
  // value is answered the same. Errors: INVALID_ARGUMENT (rank, world, a
  // value too large, a world or value that differs from an earlier call),
  // DEADLINE_EXCEEDED (names the missing ranks), RESOURCE_EXHAUSTED (too
  // many keys), UNAVAILABLE (shutting down).
  absl::StatusOr<std::vector<std::string>> Join(const std::string& ns, const std::string& key,
                                                uint32_t rank, uint32_t world,
                                                const std::string& value, absl::Time deadline);

  void Shutdown();

 private:
  struct Entry {
    uint32_t world = 0;
    std::vector<std::string> values;
    std::vector<bool> present;
    uint32_t count = 0;
  };

  absl::Mutex mu_;
  // node_hash_map: waiters hold references to entries across rehashes.
  absl::node_hash_map<std::string, Entry> entries_ ABSL_GUARDED_BY(mu_);
  bool shutting_down_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace zerostate::server
