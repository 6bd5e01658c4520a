#include "client/ticket_state.h"

namespace zerostate::client {

void Ticket::State::Add(int n) {
  absl::MutexLock lock(&mu_);
  pending_ += n;
}

void Ticket::State::Done(const absl::Status& status) {
  absl::AnyInvocable<void() &&> on_done;
  {
    absl::MutexLock lock(&mu_);
    if (status_.ok() && !status.ok()) status_ = status;
    if (--pending_ == 0) on_done = std::move(on_done_);
  }
  if (on_done) std::move(on_done)();
}

absl::Status Ticket::State::Wait() {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](int* pending) { return *pending <= 0; }, &pending_));
  return status_;
}

bool Ticket::State::WaitFor(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  return mu_.AwaitWithTimeout(
      absl::Condition(+[](int* pending) { return *pending <= 0; }, &pending_), timeout);
}

bool Ticket::State::IsDone() {
  absl::MutexLock lock(&mu_);
  return pending_ <= 0;
}

Ticket CompletedTicket(absl::Status status) {
  auto state = std::make_shared<Ticket::State>(1);
  state->Done(status);
  return Ticket(std::move(state));
}

absl::Status Ticket::Wait() const { return state_ ? state_->Wait() : absl::OkStatus(); }

bool Ticket::Done() const { return !state_ || state_->IsDone(); }

void Ticket::Cancel(absl::string_view why) const {
  if (state_) state_->cancel().Cancel(why);
}

bool Ticket::WaitFor(absl::Duration timeout) const { return !state_ || state_->WaitFor(timeout); }

}  // namespace zerostate::client
