// JobClient::Loss and EndIfLost: whether a job can go on after a failed
// step, and ending it on the servers that answer when it cannot.
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/client.h"

namespace zerostate::client {
namespace {

// A new incarnation (ABORTED), no job (NOT_FOUND), or a token the server
// accepted before and knows no more (UNAUTHENTICATED: a server does not say
// whether a job exists): the server lost its shard of the job.
bool ShardLost(const absl::Status& s) {
  return absl::IsAborted(s) || absl::IsNotFound(s) || absl::IsUnauthenticated(s);
}

bool Silent(const absl::Status& s) {
  return absl::IsUnavailable(s) || absl::IsDeadlineExceeded(s);
}

}  // namespace

absl::StatusOr<JobLoss> JobClient::Loss(absl::Duration wait) {
  const absl::Time deadline = absl::Now() + wait;
  while (true) {
    auto version = Version();
    if (version.ok()) return JobLoss{};
    const absl::Status& s = version.status();
    if (ShardLost(s)) return JobLoss{JobLoss::Cause::kShardLost, std::string(s.message())};
    if (!Silent(s)) return s;
    if (absl::Now() > deadline) {
      return JobLoss{JobLoss::Cause::kServerSilent,
                     absl::StrCat("a server did not answer within the server wait (",
                                  absl::FormatDuration(wait), "): ", s.ToString())};
    }
    absl::SleepFor(absl::Milliseconds(200));
  }
}

absl::StatusOr<JobLoss> JobClient::EndIfLost(absl::Duration wait) {
  auto loss = Loss(wait);
  if (!loss.ok() || loss->cause == JobLoss::Cause::kNone) return loss;
  // The restarted server has nothing to delete, the silent one does not
  // answer: both expected.
  absl::Status deleted = Delete();
  if (!deleted.ok() && !ShardLost(deleted) && !Silent(deleted)) {
    return absl::Status(deleted.code(), absl::StrCat(loss->account, "; deleting job ",
                                                     spec().job_id(), ": ", deleted.message()));
  }
  return loss;
}

}  // namespace zerostate::client
