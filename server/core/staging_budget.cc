#include "server/core/staging_budget.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "server/core/metrics.h"

namespace zerostate::server {

StagingBudget::StagingBudget(uint64_t budget_bytes, ServerMetrics* metrics)
    : budget_(budget_bytes), metrics_(metrics) {
  absl::MutexLock lock(&mu_);
  Publish();
}

void StagingBudget::Publish() {
  if (metrics_ != nullptr) metrics_->SetStaging(used_, budget_);
}

namespace {

uint64_t BytesOf(size_t floats) { return uint64_t{floats} * sizeof(float); }

}  // namespace

std::optional<AlignedBuffer<float>> StagingBudget::TryTake(size_t floats) {
  const uint64_t bytes = BytesOf(floats);
  std::vector<AlignedBuffer<float>> freed;  // freed once mu_ is let go
  std::optional<AlignedBuffer<float>> reused;
  {
    absl::MutexLock lock(&mu_);
    if (bytes > budget_ - used_) return std::nullopt;
    used_ += bytes;
    peak_ = std::max(peak_, used_);
    for (auto it = idle_.begin(); it != idle_.end(); ++it) {
      if (it->size() != floats) continue;
      reused = std::move(*it);
      idle_.erase(it);
      idle_bytes_ -= bytes;
      break;
    }
    // A new buffer: the memory held stays within the budget.
    if (!reused.has_value()) TrimIdleLocked(budget_ - used_, freed);
    Publish();
  }
  if (reused.has_value()) return reused;
  return AlignedBuffer<float>(floats);
}

void StagingBudget::Give(AlignedBuffer<float> buffer) {
  std::vector<AlignedBuffer<float>> freed;
  absl::MutexLock lock(&mu_);
  used_ -= BytesOf(buffer.size());
  idle_bytes_ += BytesOf(buffer.size());
  idle_.push_back(std::move(buffer));
  if (used_ == 0) {  // a period of staging ended: keep what it used at most
    last_peak_ = peak_;
    peak_ = 0;
  }
  TrimIdleLocked(std::max(peak_, last_peak_), freed);
  ++generation_;
  Publish();
  // `freed` goes after the lock (declared before it).
}

void StagingBudget::TrimIdleLocked(uint64_t keep, std::vector<AlignedBuffer<float>>& freed) {
  while (idle_bytes_ > keep) {
    idle_bytes_ -= BytesOf(idle_.front().size());
    freed.push_back(std::move(idle_.front()));
    idle_.erase(idle_.begin());
  }
}

void StagingBudget::Notify() {
  absl::MutexLock lock(&mu_);
  ++generation_;
}

uint64_t StagingBudget::generation() const {
  absl::MutexLock lock(&mu_);
  return generation_;
}

bool StagingBudget::AwaitChange(uint64_t seen, absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  if (metrics_ != nullptr) metrics_->RecordStagingWait();
  ++waiters_;
  struct Args {
    const uint64_t* generation;
    uint64_t seen;
  } args{&generation_, seen};
  bool changed = mu_.AwaitWithDeadline(
      absl::Condition(+[](Args* a) { return *a->generation != a->seen; }, &args), deadline);
  --waiters_;
  return changed;
}

absl::Status StagingBudget::Exhausted(const std::string& what, uint64_t bytes) const {
  absl::MutexLock lock(&mu_);
  return absl::UnavailableError(absl::StrCat(
      what, " arrived before its turn and needs ", bytes,
      " bytes of gradient staging, but the staging budget of ", budget_,
      " bytes (--staging_budget_bytes) has ", used_,
      " in use, and none came free before the deadline; retry (it goes in once the nodes "
      "before it have pushed)"));
}

uint64_t StagingBudget::used() const {
  absl::MutexLock lock(&mu_);
  return used_;
}

uint64_t StagingBudget::idle() const {
  absl::MutexLock lock(&mu_);
  return idle_bytes_;
}

uint64_t StagingBudget::free() const {
  absl::MutexLock lock(&mu_);
  return budget_ - used_;
}

int StagingBudget::waiters() const {
  absl::MutexLock lock(&mu_);
  return waiters_;
}

}  // namespace zerostate::server
