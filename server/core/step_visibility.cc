#include "server/core/step_visibility.h"

#include <utility>

namespace zerostate::server {

void StepVisibility::ShowAll() {
  visible_through_ = UINT64_MAX;
  WakeBlocks();
}

void StepVisibility::MarkDeposed(std::string why) {
  {
    absl::MutexLock lock(&mu_);
    deposed_ = std::move(why);
    deposed_flag_ = true;
  }
  WakeBlocks();
}

absl::Status StepVisibility::CheckNotDeposed() const {
  absl::MutexLock lock(&mu_);
  if (deposed_.empty()) return absl::OkStatus();
  return absl::UnavailableError(deposed_);
}

void StepVisibility::Undepose() {
  {
    absl::MutexLock lock(&mu_);
    deposed_.clear();
    deposed_flag_ = false;
  }
  ShowAll();
}

void StepVisibility::WakeBlocks() {
  for (const auto& bp : *blocks_) absl::MutexLock wake(&bp->mu);  // gathers waiting on them
}

}  // namespace zerostate::server
