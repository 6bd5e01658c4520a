// How many of a job's steps applied the optimizer: the count Adam's bias
// correction uses (StepParams::t = applied steps before this one + 1).
//
// A skipped step (StepRequest.skip: an fp16 overflow) moves the version on
// but does not count, as torch's GradScaler (optimizer.step() not called)
// and DeepSpeed's overflow skip leave the optimizer's step count where it
// was. The count of a checkpoint's version travels in its manifest
// (ShardManifest.applied_steps) and comes back with Restore.
//
// Thread-safe.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/synchronization/mutex.h"

namespace zerostate::server {

class AppliedSteps {
 public:
  // Steps among [0, version) that applied the optimizer. REQUIRES:
  // version at or past the last Restore's.
  uint64_t Before(uint64_t version) const;
  // Step `step` was skipped. Idempotent.
  void RecordSkip(uint64_t step);
  // Forgets what was recorded: `applied` of the steps before `version`
  // applied the optimizer (a restored checkpoint's count).
  // REQUIRES: applied <= version.
  void Restore(uint64_t version, uint64_t applied);

 private:
  mutable absl::Mutex mu_;
  uint64_t skipped_before_restore_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<uint64_t> skipped_ ABSL_GUARDED_BY(mu_);  // ascending, after the restore
};

}  // namespace zerostate::server
