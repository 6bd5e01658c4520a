// Waiting for a block's progress: under the block's mutex, until a
// condition on it holds, the job shuts down, the deadline passes or the
// caller gives up. One wait for every operation that waits on a block
// (Step and GradStats for gradients, Gather and checkpoints for a version).
#pragma once

#include <atomic>
#include <functional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "server/core/block.h"

namespace zerostate::server {

// How often a wait that may be cancelled asks whether it was.
inline constexpr absl::Duration kCancelPoll = absl::Milliseconds(20);

// REQUIRES: b.mu held. Waits under it until pred() holds. Errors:
// UNAVAILABLE once `shutting_down`, DEADLINE_EXCEEDED with what() at
// `deadline`, CANCELLED once `cancelled` (null: never; polled every
// kCancelPoll with b.mu released, as it may ask the network) says so.
[[nodiscard]] absl::Status AwaitBlock(Block& b, const std::atomic<bool>& shutting_down,
                                      absl::Time deadline, const std::function<bool()>& pred,
                                      const std::function<std::string()>& what,
                                      const std::function<bool()>& cancelled = nullptr)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(b.mu);

}  // namespace zerostate::server
