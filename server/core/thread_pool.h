// A fixed set of worker threads for the optimizer step. Several jobs'
// steps may share it; each ParallelFor waits only for its own tasks.
// Thread-safe.
#pragma once

#include <cstddef>
#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace zerostate::server {

class ThreadPool {
 public:
  // REQUIRES: threads >= 1. `nice`: the threads' nice value (0 to 19;
  // above 0 they yield their cores to the process's other threads, as a
  // speculation pool does to the pushes' folds). `name`: the threads' name
  // (at most 15 characters; /proc/PID/task/TID/comm, top -H), if any.
  explicit ThreadPool(int threads, int nice = 0, const char* name = nullptr);
  ~ThreadPool();  // finishes queued tasks, then joins

  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  // Runs fn(0) .. fn(n-1) on the pool and returns when all have finished.
  // The calling thread takes part, and waits only for calls of fn that a
  // pool thread began, so it never waits behind tasks queued before it
  // (nor deadlocks on a busy pool).
  void ParallelFor(size_t n, const std::function<void(size_t)>& fn);

  // Runs fn() on a pool thread, later; returns at once. The caller keeps
  // what fn uses alive until it ran (the destructor still runs it).
  void Schedule(std::function<void()> fn);

  int size() const { return static_cast<int>(threads_.size()); }

 private:
  void Run();

  absl::Mutex mu_;
  std::deque<std::function<void()>> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace zerostate::server
