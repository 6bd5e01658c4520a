// Blocks waiting for a pool thread, taken lowest index first.
//
// A job's layout follows its model's forward (the client lays out the
// parameters in the order the forward uses them), so the lowest block is
// the one the next forward needs first. A speculative job's backward
// completes its blocks last layer first: taken in the order they complete,
// the first layer, whose gradient leaves the GPU last, would be stepped
// last, behind every block of the layers after it, and the next forward
// would wait for the whole pass before it could start. Taken lowest first,
// a block that completes late still goes ahead of those queued before it.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <queue>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace zerostate::server {

class NeededFirstQueue {
 public:
  void Push(uint64_t local) {
    absl::MutexLock lock(&mu_);
    heap_.push(local);
  }

  // The lowest block queued, taken off the queue; nullopt when it is empty.
  std::optional<uint64_t> Pop() {
    absl::MutexLock lock(&mu_);
    if (heap_.empty()) return std::nullopt;
    const uint64_t local = heap_.top();
    heap_.pop();
    return local;
  }

 private:
  absl::Mutex mu_;
  std::priority_queue<uint64_t, std::vector<uint64_t>, std::greater<>> heap_ ABSL_GUARDED_BY(mu_);
};

}  // namespace zerostate::server
