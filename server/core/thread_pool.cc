#include "server/core/thread_pool.h"

#include <atomic>
#include <memory>

#include "absl/synchronization/blocking_counter.h"

namespace zerostate::server {

ThreadPool::ThreadPool(int threads) {
  for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { Run(); });
}

ThreadPool::~ThreadPool() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  for (auto& t : threads_) t.join();
}

void ThreadPool::Run() {
  for (;;) {
    std::function<void()> task;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](ThreadPool* p) ABSL_EXCLUSIVE_LOCKS_REQUIRED(p->mu_) {
            return p->stopping_ || !p->queue_.empty();
          },
          this));
      if (queue_.empty()) return;  // stopping and drained
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    task();
  }
}

void ThreadPool::ParallelFor(size_t n, const std::function<void(size_t)>& fn) {
  if (n == 0) return;
  // Tasks claim indices from a shared counter, so the caller and the pool
  // threads split the work dynamically (blocks of uneven cost balance out).
  auto next = std::make_shared<std::atomic<size_t>>(0);
  size_t helpers = std::min(n - 1, threads_.size());
  absl::BlockingCounter done(static_cast<int>(helpers));
  auto drain = [next, n, &fn] {
    for (size_t i = (*next)++; i < n; i = (*next)++) fn(i);
  };
  {
    absl::MutexLock lock(&mu_);
    for (size_t h = 0; h < helpers; ++h) {
      queue_.push_back([drain, &done] {
        drain();
        done.DecrementCount();
      });
    }
  }
  drain();
  done.Wait();
}

void ThreadPool::Schedule(std::function<void()> fn) {
  absl::MutexLock lock(&mu_);
  queue_.push_back(std::move(fn));
}

}  // namespace zerostate::server
