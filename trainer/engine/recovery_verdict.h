// What the coordinator does after a step failed on the servers, the one
// rule of both drivers (zerostate-worker's Recovery, worker/recovery.h;
// zerostate.torch's engine through zerostate_engine_c.h), from what the
// servers answered (client::JobClient::EndIfLost, which has already
// deleted a job that lost a server on the servers that answer, so no rank
// waits there) and the last complete checkpoint:
//   - a server lost its shard (it restarted) and there is a checkpoint:
//     roll back to it, every rank replaying from its version;
//   - a server lost its shard and there is none: the run ends, the job
//     deleted on every server, saying how to restore it;
//   - a server did not answer within the wait: the run ends, the job
//     deleted on the servers that answer;
//   - every server still holds the job: nothing was lost that a rollback
//     would bring back; the run ends with the step's own error.
// Thread-safe: a pure function.
#pragma once

#include <string>

#include "absl/strings/string_view.h"
#include "client/client.h"

namespace zerostate::trainer {

struct RecoveryVerdict {
  bool roll_back = false;
  // Not rolled back because the job is gone on some server: `why` is the
  // whole story (naming the server); else `why` follows the step's error.
  bool lost = false;
  std::string why;  // "" when rolling back
};

// How a driver names its checkpoint setting in the verdict's advice.
struct CheckpointNames {
  std::string off;     // the setting that is off, e.g. "--checkpoint_every=0"
  std::string enable;  // how to turn it on, e.g. "--checkpoint_every=N"
};

// The verdict on `loss` for job `job_id` whose last complete checkpoint
// is `last_checkpoint` ("" when none).
RecoveryVerdict DecideRecovery(const client::JobLoss& loss, absl::string_view job_id,
                               absl::string_view last_checkpoint, const CheckpointNames& names);

}  // namespace zerostate::trainer
