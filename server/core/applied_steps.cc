#include "server/core/applied_steps.h"

#include <algorithm>

namespace zerostate::server {

uint64_t AppliedSteps::Before(uint64_t version) const {
  absl::MutexLock lock(&mu_);
  const auto later = std::lower_bound(skipped_.begin(), skipped_.end(), version);
  const uint64_t skipped = skipped_before_restore_ + (later - skipped_.begin());
  return version > skipped ? version - skipped : 0;
}

void AppliedSteps::RecordSkip(uint64_t step) {
  absl::MutexLock lock(&mu_);
  auto at = std::lower_bound(skipped_.begin(), skipped_.end(), step);
  if (at == skipped_.end() || *at != step) skipped_.insert(at, step);
}

void AppliedSteps::Restore(uint64_t version, uint64_t applied) {
  absl::MutexLock lock(&mu_);
  skipped_before_restore_ = version - applied;
  skipped_.clear();
}

}  // namespace zerostate::server
