// A fixed set of threads that run scheduled tasks in FIFO order: the
// client's own pool for streams and the fan-out of async calls.
// Thread-safe.
#pragma once

#include <deque>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/synchronization/mutex.h"

namespace zerostate::client {

class ThreadPool {
 public:
  // Starts `threads` threads. REQUIRES: threads >= 1.
  explicit ThreadPool(int threads);
  // Runs every task already scheduled, then joins the threads.
  ~ThreadPool();

  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  // Queues `task`; it runs on one of the pool's threads.
  // REQUIRES: the destructor has not started.
  void Schedule(absl::AnyInvocable<void() &&> task);

  int size() const { return static_cast<int>(threads_.size()); }

 private:
  void Loop();

  absl::Mutex mu_;
  std::deque<absl::AnyInvocable<void() &&>> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace zerostate::client
