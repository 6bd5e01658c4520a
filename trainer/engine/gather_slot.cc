#include "trainer/engine/gather_slot.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"

namespace zerostate::trainer {

absl::Status GatherSlot::Refuse(const std::string& what) const {
  std::string state = state_ == State::kIdle      ? "idle"
                      : state_ == State::kFetched ? absl::StrCat("version ", version_, " is fetched")
                                                  : absl::StrCat("version ", version_, " is landing");
  return absl::FailedPreconditionError(absl::StrCat("gather slot [", range_.begin, ", ",
                                                    range_.end, "): ", what, " while ", state));
}

absl::Status GatherSlot::Fetch(uint64_t version, const IssueFn& issue) {
  ReuseFn reuse;
  {
    absl::MutexLock lock(&mu_);
    if (state_ != State::kIdle) return Refuse(absl::StrCat("fetch of version ", version));
    reuse = reuse_;
  }
  // The driver's thread alone makes transitions: the state stays idle.
  if (reuse) {
    absl::Status s = reuse();
    if (!s.ok()) return s;
  }
  client::Ticket ticket = issue ? issue() : client::Ticket();
  absl::MutexLock lock(&mu_);
  reuse_ = nullptr;
  state_ = State::kFetched;
  version_ = version;
  ticket_ = std::move(ticket);
  return absl::OkStatus();
}

absl::StatusOr<bool> GatherSlot::Land(const WatchFn& watch) {
  client::Ticket ticket;
  {
    absl::MutexLock lock(&mu_);
    if (state_ == State::kLanding) return Refuse("land");
    if (state_ == State::kIdle) return false;
    state_ = State::kLanding;
    ticket = ticket_;
  }
  if (watch) {
    while (watch() && !ticket.WaitFor(absl::Microseconds(200))) {
    }
  }
  absl::Status gathered = ticket.Wait();
  absl::MutexLock lock(&mu_);
  gathered_ = std::move(gathered);
  return true;
}

absl::Status GatherSlot::Landed(ReuseFn reuse) {
  absl::MutexLock lock(&mu_);
  if (state_ != State::kLanding) return Refuse("landed");
  state_ = State::kIdle;
  if (gathered_.ok()) {
    landed_ = version_;
  } else {
    landed_.reset();  // the driver's parameters do not hold it
  }
  ticket_ = client::Ticket();
  reuse_ = std::move(reuse);
  return std::exchange(gathered_, absl::OkStatus());
}

absl::StatusOr<client::Ticket> GatherSlot::Drop() {
  client::Ticket ticket;
  uint64_t version = 0;
  {
    absl::MutexLock lock(&mu_);
    if (state_ == State::kLanding) return Refuse("drop");
    version = version_;
    state_ = State::kIdle;
    landed_.reset();
    ticket = std::exchange(ticket_, client::Ticket());
  }
  ticket.Cancel(absl::StrCat("gather slot [", range_.begin, ", ", range_.end, "): version ",
                             version, " was dropped"));
  return ticket;
}

void GatherSlot::Cancel(absl::string_view why) const {
  client::Ticket ticket;
  {
    absl::MutexLock lock(&mu_);
    if (state_ == State::kIdle) return;
    ticket = ticket_;
  }
  ticket.Cancel(why);  // outside the lock: it interrupts the gather's streams
}

absl::Status GatherSlot::WaitGathered(uint64_t version) const {
  client::Ticket ticket;
  {
    absl::MutexLock lock(&mu_);
    if (state_ != State::kIdle && version_ >= version) {
      ticket = ticket_;
    } else if (landed_.has_value() && *landed_ >= version) {
      return absl::OkStatus();
    } else {
      return absl::AbortedError(absl::StrCat("gather slot [", range_.begin, ", ", range_.end,
                                             "): version ", version,
                                             " was not fetched (the update that brings it "
                                             "failed)"));
    }
  }
  return ticket.Wait();
}

std::optional<uint64_t> GatherSlot::pending() const {
  absl::MutexLock lock(&mu_);
  if (state_ == State::kIdle) return std::nullopt;
  return version_;
}

std::optional<uint64_t> GatherSlot::landed() const {
  absl::MutexLock lock(&mu_);
  return landed_;
}

}  // namespace zerostate::trainer
