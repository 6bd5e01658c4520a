#include "trainer/engine/pusher.h"

#include <algorithm>
#include <utility>

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

uint64_t Pusher::Submit(PushOrder order) {
  absl::MutexLock lock(&mu_);
  queue_.push_back(std::move(order));
  return ++submitted_;
}

uint64_t Pusher::Mark() const {
  absl::MutexLock lock(&mu_);
  return submitted_;
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
    }
    Execute(order);
  }
}

void Pusher::Execute(PushOrder& order) {
  Ran ran;
  for (const auto& wait : order.waits) {
    ran.error = wait();
    if (!ran.error.ok()) break;
  }
  // The push starts outside the lock: a lock guards memory, never I/O.
  if (ran.error.ok()) ran.ticket = order.issue();
  ran.what = std::move(order.what);
  absl::MutexLock lock(&mu_);
  ran_.push_back(std::move(ran));
  ++ran_count_;
}

absl::Status Pusher::Settle(uint64_t mark, bool claim, std::vector<Ran>* ran, uint64_t* first,
                            uint64_t* claimed) {
  absl::MutexLock lock(&mu_);
  if (mark > submitted_) {
    return absl::InvalidArgumentError(
        absl::StrCat("mark: ", mark, " is past the ", submitted_, " pushes queued"));
  }
  auto ran_through = [this, mark]()
                         ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return ran_count_ >= mark; };
  mu_.Await(absl::Condition(&ran_through));
  *first = first_ran_;
  for (uint64_t i = first_ran_; i < mark; ++i) {
    const Ran& r = ran_[i - first_ran_];
    ran->push_back(Ran{r.what, r.ticket, r.error});
  }
  *claimed = std::max(claimed_, *first);
  if (claim) claimed_ = std::max(claimed_, mark);
  return absl::OkStatus();
}

void Pusher::Release(uint64_t begin, uint64_t end) {
  absl::MutexLock lock(&mu_);
  for (uint64_t i = begin; i < end; ++i) ran_[i - first_ran_].done = true;
  while (!ran_.empty() && ran_.front().done) {
    ran_.pop_front();
    ++first_ran_;
  }
}

absl::Status Pusher::Drain() { return Drain(Mark()); }

absl::Status Pusher::Drain(uint64_t mark) {
  std::string what;
  absl::Status error = Drain(mark, &what);
  return error.ok() || what.empty() ? error : Named(what, error);
}

absl::Status Pusher::Drain(uint64_t mark, std::string* what) {
  std::vector<Ran> ran;
  uint64_t first = 0;
  uint64_t claimed = 0;
  if (absl::Status s = Settle(mark, /*claim=*/true, &ran, &first, &claimed); !s.ok()) return s;
  // Every push before the mark is waited for, the ones another Drain
  // reports too; this one reports the first error of its own.
  absl::Status error;
  for (uint64_t i = first; i < first + ran.size(); ++i) {
    Ran& r = ran[i - first];
    absl::Status s = r.error.ok() ? r.ticket.Wait() : r.error;
    if (i >= claimed && error.ok() && !s.ok()) {
      error = s;
      *what = std::move(r.what);
    }
  }
  if (claimed < mark) Release(claimed, mark);
  return error;
}

absl::Status Pusher::WaitThrough(uint64_t mark) {
  std::vector<Ran> ran;
  uint64_t first = 0;
  uint64_t claimed = 0;
  if (absl::Status s = Settle(mark, /*claim=*/false, &ran, &first, &claimed); !s.ok()) return s;
  for (const Ran& r : ran) r.ticket.Wait().IgnoreError();  // a Drain reports it
  return absl::OkStatus();
}

bool Pusher::DoneThrough(uint64_t mark) {
  std::vector<client::Ticket> tickets;
  {
    absl::MutexLock lock(&mu_);
    if (mark > submitted_ || ran_count_ < mark) return false;
    for (uint64_t i = first_ran_; i < mark; ++i) tickets.push_back(ran_[i - first_ran_].ticket);
  }
  return std::all_of(tickets.begin(), tickets.end(),
                     [](const client::Ticket& t) { return t.Done(); });
}

}  // namespace zerostate::trainer
