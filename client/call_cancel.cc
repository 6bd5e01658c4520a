#include "client/call_cancel.h"

#include <utility>

namespace zerostate::client {

CallCancel::Registration& CallCancel::Registration::operator=(Registration&& other) noexcept {
  if (this != &other) {
    Reset();
    cancel_ = std::exchange(other.cancel_, nullptr);
    id_ = std::exchange(other.id_, 0);
  }
  return *this;
}

void CallCancel::Registration::Reset() {
  if (cancel_ != nullptr) std::exchange(cancel_, nullptr)->Unregister(id_);
}

void CallCancel::Cancel(absl::string_view why) {
  absl::MutexLock lock(&mu_);
  if (!why_.ok()) return;
  why_ = absl::CancelledError(why.empty() ? "cancelled" : why);
  // Under the lock: a registration being reset waits, so no interrupt
  // runs on a socket its attempt has closed since.
  for (auto& [id, interrupt] : interrupts_) interrupt();
}

absl::Status CallCancel::Check() const {
  absl::MutexLock lock(&mu_);
  return why_;
}

absl::Status CallCancel::Explain(absl::Status status) const {
  if (status.ok()) return status;
  absl::MutexLock lock(&mu_);
  return why_.ok() ? status : why_;
}

CallCancel::Registration CallCancel::OnCancel(absl::AnyInvocable<void()> interrupt) {
  absl::MutexLock lock(&mu_);
  if (!why_.ok()) interrupt();
  const uint64_t id = next_id_++;
  interrupts_.emplace(id, std::move(interrupt));
  return Registration(this, id);
}

void CallCancel::Unregister(uint64_t id) {
  absl::MutexLock lock(&mu_);
  interrupts_.erase(id);
}

}  // namespace zerostate::client
