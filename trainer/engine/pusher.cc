#include "trainer/engine/pusher.h"

#include "absl/strings/str_cat.h"

namespace zerostate::trainer {
namespace {

absl::Status Named(const std::string& what, const absl::Status& status) {
  return absl::Status(status.code(), absl::StrCat(what, ": ", status.message()));
}

}  // namespace

std::string PushName(uint64_t step, Range elems) {
  return absl::StrCat("push of step ", step, " [", elems.begin, ", ", elems.end, ")");
}

Pusher::Pusher() : thread_([this] { Run(); }) {}

Pusher::~Pusher() {
  Drain().IgnoreError();
  {
    absl::MutexLock lock(&mu_);
    closing_ = true;
  }
  thread_.join();
}

void Pusher::Submit(PushOrder order) {
  absl::MutexLock lock(&mu_);
  queue_.push_back(std::move(order));
}

void Pusher::Run() {
  while (true) {
    PushOrder order;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](Pusher* p)
               ABSL_EXCLUSIVE_LOCKS_REQUIRED(p->mu_) { return !p->queue_.empty() || p->closing_; },
          this));
      if (queue_.empty()) return;  // closing, nothing left
      order = std::move(queue_.front());
      queue_.pop_front();
      running_ = true;
    }
    Execute(order);
  }
}

void Pusher::Execute(PushOrder& order) {
  absl::Status status;
  for (const auto& wait : order.waits) {
    status = wait();
    if (!status.ok()) break;
  }
  // The push starts outside the lock: a lock guards memory, never I/O.
  client::Ticket ticket = status.ok() ? order.issue() : client::Ticket();
  absl::MutexLock lock(&mu_);
  if (status.ok()) {
    pushes_.emplace_back(std::move(order.what), std::move(ticket));
  } else {
    Record(order.what, status);
  }
  running_ = false;
}

void Pusher::Record(std::string what, const absl::Status& status) {
  if (!error_.ok() || status.ok()) return;
  error_ = status;
  error_what_ = std::move(what);
}

absl::Status Pusher::Drain() {
  std::string what;
  absl::Status error = Drain(&what);
  return error.ok() ? error : Named(what, error);
}

absl::Status Pusher::Drain(std::string* what) {
  std::vector<std::pair<std::string, client::Ticket>> pushes;
  absl::Status error;
  {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(
        +[](Pusher* p)
             ABSL_EXCLUSIVE_LOCKS_REQUIRED(p->mu_) { return p->queue_.empty() && !p->running_; },
        this));
    pushes.swap(pushes_);
    error = std::exchange(error_, absl::OkStatus());
    if (!error.ok()) *what = std::move(error_what_);
  }
  for (auto& [name, ticket] : pushes) {
    absl::Status s = ticket.Wait();
    if (error.ok() && !s.ok()) {
      error = s;
      *what = std::move(name);
    }
  }
  return error;
}

}  // namespace zerostate::trainer
