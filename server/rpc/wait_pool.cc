#include "server/rpc/wait_pool.h"

#include <utility>

namespace zerostate::server {

WaitPool::~WaitPool() {
  std::vector<std::thread> threads;
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    threads = std::move(threads_);
  }
  for (auto& t : threads) t.join();
}

void WaitPool::Run(absl::AnyInvocable<void() &&> task) {
  absl::MutexLock lock(&mu_);
  queue_.push_back(std::move(task));
  if (idle_ >= static_cast<int>(queue_.size())) return;  // an idle thread takes it
  if (static_cast<int>(threads_.size()) < max_threads_) threads_.emplace_back([this] { Loop(); });
}

int WaitPool::threads() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(threads_.size());
}

void WaitPool::Loop() {
  while (true) {
    absl::AnyInvocable<void() &&> task;
    {
      absl::MutexLock lock(&mu_);
      ++idle_;
      mu_.Await(absl::Condition(this, &WaitPool::HasWork));
      --idle_;
      if (queue_.empty()) return;  // stopping, nothing left
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    std::move(task)();
  }
}

}  // namespace zerostate::server
