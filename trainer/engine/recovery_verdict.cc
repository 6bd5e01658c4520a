#include "trainer/engine/recovery_verdict.h"

#include "absl/strings/str_cat.h"

namespace zerostate::trainer {

RecoveryVerdict DecideRecovery(const client::JobLoss& loss, absl::string_view job_id,
                               absl::string_view last_checkpoint, const CheckpointNames& names) {
  RecoveryVerdict v;
  switch (loss.cause) {
    case client::JobLoss::Cause::kNone:
      v.why = "every server still holds the job";
      return v;
    case client::JobLoss::Cause::kServerSilent:
      v.lost = true;
      v.why = absl::StrCat(
          loss.account, "; job ", job_id,
          " was deleted on the servers that answer, so no rank waits on them: bring the server "
          "back and restore the job from ",
          last_checkpoint.empty() ? "a checkpoint of yours"
                                  : absl::StrCat("the checkpoint ", last_checkpoint),
          " (RestoreJob), or start the run again");
      return v;
    case client::JobLoss::Cause::kShardLost:
      break;
  }
  if (last_checkpoint.empty()) {
    v.lost = true;
    v.why = absl::StrCat(loss.account, "; there is no checkpoint to roll back to (", names.off,
                         "), so job ", job_id,
                         " was deleted on every server: restore it from a checkpoint of yours "
                         "(RestoreJob) or start the run again, with ",
                         names.enable, " to roll back by itself next time");
    return v;
  }
  v.roll_back = true;
  return v;
}

}  // namespace zerostate::trainer
