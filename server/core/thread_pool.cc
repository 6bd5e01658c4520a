#include "server/core/thread_pool.h"

#include <pthread.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <memory>


namespace zerostate::server {

ThreadPool::ThreadPool(int threads, int nice, const char* name) {
  for (int i = 0; i < threads; ++i) {
    threads_.emplace_back([this, nice, name] {
      if (name != nullptr) pthread_setname_np(pthread_self(), name);
      // This thread's own priority (Linux: a thread is a process to setpriority).
      // Lowering it always succeeds.
      if (nice > 0) setpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)), nice);
      Run();
    });
  }
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
  // The caller waits for the indices to be done, not for every helper: one
  // still queued behind other tasks (a speculation, statistics) when the
  // work is done finds no index left and ends without touching fn, which
  // may be gone by then.
  struct Work {
    const std::function<void(size_t)>* fn = nullptr;
    std::atomic<size_t> next{0};
    absl::Mutex mu;
    size_t left ABSL_GUARDED_BY(mu) = 0;
  };
  auto work = std::make_shared<Work>();
  work->fn = &fn;
  {
    absl::MutexLock lock(&work->mu);
    work->left = n;
  }
  auto drain = [work, n] {
    size_t done = 0;
    for (size_t i = work->next++; i < n; i = work->next++, ++done) (*work->fn)(i);
    if (done == 0) return;
    absl::MutexLock lock(&work->mu);
    work->left -= done;
  };
  const size_t helpers = std::min(n - 1, threads_.size());
  {
    absl::MutexLock lock(&mu_);
    for (size_t h = 0; h < helpers; ++h) queue_.push_back(drain);
  }
  drain();
  absl::MutexLock lock(&work->mu);
  work->mu.Await(absl::Condition(
      +[](Work* w) ABSL_EXCLUSIVE_LOCKS_REQUIRED(w->mu) { return w->left == 0; }, work.get()));
}

void ThreadPool::Schedule(std::function<void()> fn) {
  absl::MutexLock lock(&mu_);
  queue_.push_back(std::move(fn));
}

}  // namespace zerostate::server
