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

void InFlightStep::Begin(State state, uint64_t step, StepPushes pushes) {
  state_ = state;
  ended_ = gathers_out_ = false;
  verdict_ = Verdict{};
  verdict_.step = step;
  pushes_ = pushes;
}

absl::Status InFlightStep::Start(uint64_t step, const Policy& policy, CoordinateFn coordinate,
                                 FailureFn on_failure, StepPushes pushes) {
  {
    absl::MutexLock lock(&mu_);
    if (absl::Status s = CheckIdle(); !s.ok()) return s;
    Begin(State::kRunning, step, StepPushes{});  // its thread drains them
    verdict_.coordinated = true;
  }
  thread_ = std::thread([this, policy, coordinate = std::move(coordinate),
                         on_failure = std::move(on_failure),
                         pushes] { Run(policy, coordinate, on_failure, pushes); });
  return absl::OkStatus();
}

void InFlightStep::Run(Policy policy, const CoordinateFn& coordinate, const FailureFn& on_failure,
                       StepPushes pushes) {
  Coordinated done = DrainPushes(pushes);
  if (done.status.ok()) done = coordinate(&policy);
  if (!done.status.ok() && on_failure) on_failure(done.status);
  absl::MutexLock lock(&mu_);
  verdict_.outcome = std::move(done);
  verdict_.policy = std::move(policy);
  ended_ = true;
}

absl::Status InFlightStep::Follow(uint64_t step, StepPushes pushes) {
  absl::MutexLock lock(&mu_);
  if (absl::Status s = CheckIdle(); !s.ok()) return s;
  Begin(State::kJoined, step, pushes);
  return absl::OkStatus();
}

absl::Status InFlightStep::Fail(uint64_t step, Coordinated outcome, StepPushes pushes) {
  if (outcome.status.ok()) {
    return absl::InvalidArgumentError("outcome: a failed step's status must not be OK");
  }
  absl::MutexLock lock(&mu_);
  if (absl::Status s = CheckIdle(); !s.ok()) return s;
  Begin(State::kJoined, step, pushes);
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

void InFlightStep::DrainJoined() {
  StepPushes pushes;
  {
    absl::MutexLock lock(&mu_);
    if (state_ != State::kJoined) return;
    pushes = std::exchange(pushes_, StepPushes{});
  }
  if (pushes.pusher == nullptr) return;
  Coordinated drained = DrainPushes(pushes);  // outside the lock: it waits for pushes
  absl::MutexLock lock(&mu_);
  if (verdict_.outcome.status.ok() && !drained.status.ok()) verdict_.outcome = std::move(drained);
}

absl::Status InFlightStep::Join() {
  JoinThread(/*wait=*/true);
  DrainJoined();
  absl::MutexLock lock(&mu_);
  return state_ == State::kIdle ? absl::OkStatus() : verdict_.outcome.status;
}

bool InFlightStep::Poll() {
  JoinThread(/*wait=*/false);
  return !running();
}

std::optional<Verdict> InFlightStep::Take() {
  JoinThread(/*wait=*/true);
  DrainJoined();
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

Coordinated DrainPushes(StepPushes pushes) {
  Coordinated out;
  if (pushes.pusher != nullptr) out.status = pushes.pusher->Drain(pushes.mark, &out.stage);
  return out;
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
