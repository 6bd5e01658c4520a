// Threads for the gRPC edge's calls that wait (a Gather for a version, a
// push chunk for staging memory), so that no wait holds one of gRPC's
// callback threads and no call starts a thread of its own. A thread is
// started when a task finds every thread busy, up to `max_threads`, and then
// kept for the next task; beyond that tasks queue. StateServiceImpl caps its
// chunk streams at max_threads and each stream has at most one task here at
// a time, so no task ever queues behind another's wait.
// Thread-safe.
#pragma once

#include <deque>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/synchronization/mutex.h"

namespace zerostate::server {

class WaitPool {
 public:
  // REQUIRES: max_threads >= 1.
  explicit WaitPool(int max_threads) : max_threads_(max_threads) {}
  ~WaitPool();  // runs the queued tasks, then joins

  WaitPool(const WaitPool&) = delete;
  WaitPool& operator=(const WaitPool&) = delete;

  // Runs `task` on a thread of the pool.
  void Run(absl::AnyInvocable<void() &&> task);

  // Threads started so far (at most max_threads).
  int threads() const;

 private:
  void Loop();
  bool HasWork() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_ || !queue_.empty(); }

  const int max_threads_;
  mutable absl::Mutex mu_;
  std::deque<absl::AnyInvocable<void() &&>> queue_ ABSL_GUARDED_BY(mu_);
  int idle_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_ ABSL_GUARDED_BY(mu_);
};

}  // namespace zerostate::server
