#include "trainer/engine/in_flight.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace zerostate::trainer {

InFlightStep::~InFlightStep() { Drop(); }

absl::Status InFlightStep::CheckIdle() const {
  if (state_ == State::kIdle) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat("step ", verdict_.step, " is in flight still (take its verdict first)"));
}

absl::Status InFlightStep::Start(uint64_t step, const Policy& policy, CoordinateFn coordinate,
                                 FailureFn on_failure) {
  {
    absl::MutexLock lock(&mu_);
    if (absl::Status s = CheckIdle(); !s.ok()) return s;
    state_ = State::kRunning;
    ended_ = gathers_out_ = false;
    verdict_ = Verdict{};
    verdict_.step = step;
    verdict_.coordinated = true;
  }
  thread_ = std::thread([this, policy, coordinate = std::move(coordinate),
                         on_failure = std::move(on_failure)] { Run(policy, coordinate, on_failure); });
  return absl::OkStatus();
}

void InFlightStep::Run(Policy policy, const CoordinateFn& coordinate, const FailureFn& on_failure) {
  Coordinated done = coordinate(&policy);
  if (!done.status.ok() && on_failure) on_failure(done.status);
  absl::MutexLock lock(&mu_);
  verdict_.outcome = std::move(done);
  verdict_.policy = std::move(policy);
  ended_ = true;
}

absl::Status InFlightStep::Follow(uint64_t step) {
  absl::MutexLock lock(&mu_);
  if (absl::Status s = CheckIdle(); !s.ok()) return s;
  state_ = State::kJoined;
  gathers_out_ = false;
  verdict_ = Verdict{};
  verdict_.step = step;
  return absl::OkStatus();
}

absl::Status InFlightStep::Fail(uint64_t step, Coordinated outcome) {
  if (outcome.status.ok()) {
    return absl::InvalidArgumentError("outcome: a failed step's status must not be OK");
  }
  absl::MutexLock lock(&mu_);
  if (absl::Status s = CheckIdle(); !s.ok()) return s;
  state_ = State::kJoined;
  gathers_out_ = false;
  verdict_ = Verdict{};
  verdict_.step = step;
  verdict_.outcome = std::move(outcome);
  return absl::OkStatus();
}

bool InFlightStep::active() const {
  absl::MutexLock lock(&mu_);
  return state_ != State::kIdle;
}

bool InFlightStep::running() const {
  absl::MutexLock lock(&mu_);
  return state_ == State::kRunning;
}

std::optional<uint64_t> InFlightStep::step() const {
  absl::MutexLock lock(&mu_);
  if (state_ == State::kIdle) return std::nullopt;
  return verdict_.step;
}

void InFlightStep::JoinThread(bool wait) {
  {
    absl::MutexLock lock(&mu_);
    if (state_ != State::kRunning || (!wait && !ended_)) return;
  }
  thread_.join();  // outside the lock: the thread takes it to record its verdict
  absl::MutexLock lock(&mu_);
  state_ = State::kJoined;
}

absl::Status InFlightStep::Join() {
  JoinThread(/*wait=*/true);
  absl::MutexLock lock(&mu_);
  return state_ == State::kIdle ? absl::OkStatus() : verdict_.outcome.status;
}

bool InFlightStep::Poll() {
  JoinThread(/*wait=*/false);
  return !running();
}

std::optional<Verdict> InFlightStep::Take() {
  JoinThread(/*wait=*/true);
  absl::MutexLock lock(&mu_);
  if (state_ == State::kIdle) return std::nullopt;
  state_ = State::kIdle;
  return std::exchange(verdict_, Verdict{});
}

void InFlightStep::Drop() { Take(); }

void InFlightStep::MarkGathersOut(uint64_t step) {
  absl::MutexLock lock(&mu_);
  if (state_ != State::kIdle && verdict_.step == step) gathers_out_ = true;
}

bool InFlightStep::WaitGathersOut(uint64_t step) {
  absl::MutexLock lock(&mu_);
  auto settled = [this, step]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return state_ != State::kRunning || verdict_.step != step || ended_ || gathers_out_;
  };
  mu_.Await(absl::Condition(&settled));
  return state_ != State::kIdle && verdict_.step == step && gathers_out_;
}

void AbandonInFlight(InFlightStep* step, Pusher* pusher, absl::Span<GatherSlot* const> slots) {
  if (step != nullptr) step->Drop();
  std::vector<client::Ticket> dropped;
  for (GatherSlot* slot : slots) {
    absl::StatusOr<client::Ticket> ticket = slot->Drop();
    if (ticket.ok()) dropped.push_back(*std::move(ticket));
  }
  if (pusher != nullptr) pusher->Drain().IgnoreError();  // the failed step reported its error
  for (const client::Ticket& ticket : dropped) ticket.Wait().IgnoreError();
}

}  // namespace zerostate::trainer
