// The barrier and the node-wide "did any rank fail?" vote of a LocalGroup,
// on memory the local ranks share (the heap for threads, POSIX shared
// memory for processes). Waits sleep on a futex and end after a timeout,
// naming the local ranks that did not arrive, so a dead peer process never
// hangs the others forever.
// Thread safety: each rank calls with its own `rank`; the state is shared.
#pragma once

#include <atomic>
#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace zerostate::worker {

inline constexpr uint32_t kMaxLocalRanks = 64;

// Lives in shared memory: all zeros is the initial state.
struct LocalBarrierState {
  std::atomic<uint32_t> generation;
  std::atomic<uint32_t> count;
  std::atomic<uint32_t> arrived[kMaxLocalRanks];  // the generation each rank waits to end
  std::atomic<uint32_t> votes[kMaxLocalRanks];
};
static_assert(std::atomic<uint32_t>::is_always_lock_free);

// Returns once all `ranks` ranks have called it. `shared`: the state is in
// memory shared between processes. Errors: DEADLINE_EXCEEDED after
// `timeout` (absl::InfiniteDuration(): never), naming the missing local
// ranks; the barrier is unusable afterwards.
[[nodiscard]] absl::Status LocalBarrierWait(LocalBarrierState* state, uint32_t ranks, uint32_t rank,
                                            bool shared, absl::Duration timeout);

// Collective: true on every rank if any rank passed `failed` true.
[[nodiscard]] absl::StatusOr<bool> LocalVote(LocalBarrierState* state, uint32_t ranks,
                                             uint32_t rank, bool shared, absl::Duration timeout,
                                             bool failed);

}  // namespace zerostate::worker
