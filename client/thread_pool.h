// Threads that run scheduled tasks in FIFO order: the client's own pools
// for streams and the fan-out of async calls. A pool starts `threads`
// threads; one made with a larger `max_threads` starts another whenever a
// task is scheduled while none of its threads is free, up to that many
// (the gather pool: a gather waiting for its version holds its thread for
// as long as the step that brings it takes, and a gather still queued
// behind it reaches the server too late to have the pass write its copy
// in place). Threads, once started, stay until the pool is destroyed.
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
  // Starts `threads` threads, and may grow to `max_threads` (0: threads).
  // REQUIRES: threads >= 1, max_threads == 0 or max_threads >= threads.
  explicit ThreadPool(int threads, int max_threads = 0);
  // Runs every task already scheduled, then joins the threads.
  ~ThreadPool();

  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  // Queues `task`; it runs on one of the pool's threads (a new one where
  // none is free and the pool may grow).
  // REQUIRES: the destructor has not started.
  void Schedule(absl::AnyInvocable<void() &&> task);

  int size() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  void Start() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Loop();

  const int max_threads_;
  absl::Mutex mu_;
  std::deque<absl::AnyInvocable<void() &&>> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  int free_ ABSL_GUARDED_BY(mu_) = 0;  // threads waiting for a task
  std::vector<std::thread> threads_ ABSL_GUARDED_BY(mu_);
};

}  // namespace zerostate::client
