#include "server/core/staging_budget.h"

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

bool StagingBudget::TryTake(uint64_t bytes) {
  absl::MutexLock lock(&mu_);
  if (bytes > budget_ - used_) return false;
  used_ += bytes;
  Publish();
  return true;
}

void StagingBudget::Give(uint64_t bytes) {
  absl::MutexLock lock(&mu_);
  used_ -= bytes;
  ++generation_;
  Publish();
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

uint64_t StagingBudget::free() const {
  absl::MutexLock lock(&mu_);
  return budget_ - used_;
}

int StagingBudget::waiters() const {
  absl::MutexLock lock(&mu_);
  return waiters_;
}

}  // namespace zerostate::server
