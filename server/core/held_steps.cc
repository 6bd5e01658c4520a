#include "server/core/held_steps.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace zerostate::server {

absl::StatusOr<bool> HeldSteps::Hold(const v1::StepRequest& req, JobPushes::ReplicatedGrads grads,
                                     ThreadPool& pool, size_t max_held,
                                     SumBuffers* recycle) {
  // The bound on the lag: the oldest steps apply here, on the primary's call.
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      if (held_.size() < std::max<size_t>(1, max_held)) break;
    }
    if (auto s = ApplyOne(); !s.ok()) return s;
  }
  absl::MutexLock lock(&mu_);
  auto hold = CheckLocked(req, grads);
  if (!hold.ok() || !*hold) return hold;
  held_.push_back(Held{req, std::move(grads), &pool, recycle});
  count_.store(held_.size(), std::memory_order_release);
  return true;
}

absl::StatusOr<bool> HeldSteps::CheckLocked(const v1::StepRequest& req,
                                            const JobPushes::ReplicatedGrads& grads) {
  if (!failed_.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "step ", req.step(), ": this copy needs a catch-up (", failed_.message(), ")"));
  }
  const uint64_t step = req.step();
  if (held_.empty()) {  // nothing applies now: the blocks' versions say
    auto applied = pushes_.CheckReplicatedStep(req, grads, /*behind_held=*/false);
    if (!applied.ok()) return applied.status();
    return !*applied;
  }
  // The blocks are at the oldest held step's version (or move past it).
  const uint64_t first = held_.front().req.step();
  const uint64_t next = held_.back().req.step() + 1;
  if (step + 1 >= first && step < next) return false;  // applied, or held
  if (step != next) {
    return absl::FailedPreconditionError(absl::StrCat(
        "this copy holds steps ", first, " to ", next - 1, " and applied ", first,
        " before them, not step ", step, ": the copy needs a catch-up before it can apply step ",
        step));
  }
  auto applied = pushes_.CheckReplicatedStep(req, grads, /*behind_held=*/true);
  if (!applied.ok()) return applied.status();
  return true;
}

absl::Status HeldSteps::ApplyOne() {
  absl::MutexLock apply_lock(&apply_mu_);
  const Held* oldest = nullptr;
  {
    absl::MutexLock lock(&mu_);
    if (held_.empty()) return absl::OkStatus();
    oldest = &held_.front();  // stays put: only apply_mu_'s holder removes steps
  }
  auto out = pushes_.ApplyReplicatedStep(oldest->req, oldest->grads, *oldest->pool);
  if (out.ok()) {
    Held applied;
    {
      absl::MutexLock lock(&mu_);
      applied = std::move(held_.front());
      held_.pop_front();
      count_.store(held_.size(), std::memory_order_release);
    }
    if (applied.recycle != nullptr) applied.recycle->Recycle(std::move(applied.grads));
    return absl::OkStatus();
  }
  absl::MutexLock lock(&mu_);
  failed_ = absl::FailedPreconditionError(
      absl::StrCat("it acknowledged step ", oldest->req.step(),
                   " but could not apply it: ", out.status().message()));
  held_.clear();
  count_.store(0, std::memory_order_release);
  step_.MarkDeposed(std::string(failed_.message()));
  return failed_;
}

absl::Status HeldSteps::ApplyAll() {
  while (count() > 0) {
    if (auto s = ApplyOne(); !s.ok()) return s;
  }
  absl::MutexLock lock(&mu_);
  return failed_;
}

void HeldSteps::Drop() {
  absl::MutexLock apply_lock(&apply_mu_);
  absl::MutexLock lock(&mu_);
  held_.clear();
  failed_ = absl::OkStatus();
  count_.store(0, std::memory_order_release);
}

}  // namespace zerostate::server
