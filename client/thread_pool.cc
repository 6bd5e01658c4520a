#include "client/thread_pool.h"

#include <algorithm>
#include <utility>

namespace zerostate::client {

ThreadPool::ThreadPool(int threads, int max_threads)
    : max_threads_(std::max(threads, max_threads)) {
  absl::MutexLock lock(&mu_);
  threads_.reserve(threads);
  for (int i = 0; i < threads; ++i) Start();
}

ThreadPool::~ThreadPool() {
  std::vector<std::thread> threads;
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    threads.swap(threads_);  // none starts once stopping_ is set
  }
  for (std::thread& t : threads) t.join();
}

void ThreadPool::Start() {
  ++free_;  // free until it takes a task (Loop)
  threads_.emplace_back([this] { Loop(); });
}

void ThreadPool::Schedule(absl::AnyInvocable<void() &&> task) {
  absl::MutexLock lock(&mu_);
  queue_.push_back(std::move(task));
  // Every free thread will take one of the queued tasks; a task beyond
  // them starts a thread of its own while the pool may grow.
  if (!stopping_ && static_cast<int>(queue_.size()) > free_ &&
      static_cast<int>(threads_.size()) < max_threads_) {
    Start();
  }
}

int ThreadPool::size() {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(threads_.size());
}

void ThreadPool::Loop() {
  while (true) {
    absl::AnyInvocable<void() &&> task;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](ThreadPool* p) ABSL_EXCLUSIVE_LOCKS_REQUIRED(p->mu_) {
            return p->stopping_ || !p->queue_.empty();
          },
          this));
      if (queue_.empty()) return;  // stopping, and nothing left to run
      task = std::move(queue_.front());
      queue_.pop_front();
      --free_;
    }
    std::move(task)();
    absl::MutexLock lock(&mu_);
    ++free_;
  }
}

}  // namespace zerostate::client
