// The C API of the verdict after a failed step (zerostate_engine_c.h's
// zs_recovery_verdict) over trainer::DecideRecovery. Built into
// libzerostate_client.so (client/CMakeLists.txt).
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "client/c_api_handles.h"
#include "trainer/engine/c_api_args.h"
#include "trainer/engine/recovery_verdict.h"
#include "trainer/engine/zerostate_engine_c.h"

namespace {

namespace zc = ::zerostate::client;
namespace zt = ::zerostate::trainer;
using zt::capi::Null;

absl::Status CheckArgs(const zs_job* job, int64_t wait_ms, const char* off, const char* enable,
                       const int* roll_back, const int* lost, char** why) {
  if (job == nullptr) return Null("job");
  if (off == nullptr) return Null("off");
  if (enable == nullptr) return Null("enable");
  if (roll_back == nullptr) return Null("roll_back");
  if (lost == nullptr) return Null("lost");
  if (why == nullptr) return Null("why");
  if (wait_ms < 0) {
    return absl::InvalidArgumentError(absl::StrCat("wait_ms: ", wait_ms, " is negative"));
  }
  return absl::OkStatus();
}

}  // namespace

extern "C" int zs_recovery_verdict(zs_job* job, int64_t wait_ms, const char* last_checkpoint,
                                   const char* off, const char* enable, int* roll_back, int* lost,
                                   char** why, char** error) {
  absl::Status s = CheckArgs(job, wait_ms, off, enable, roll_back, lost, why);
  if (!s.ok()) return zc::ReportStatus(s, error);
  auto loss = job->job->EndIfLost(absl::Milliseconds(wait_ms));
  if (!loss.ok()) return zc::ReportStatus(loss.status(), error);
  const zt::RecoveryVerdict v =
      zt::DecideRecovery(*loss, job->job->spec().job_id(),
                         last_checkpoint != nullptr ? last_checkpoint : "", {off, enable});
  *roll_back = v.roll_back ? 1 : 0;
  *lost = v.lost ? 1 : 0;
  *why = v.why.empty() ? nullptr : zc::CopyCString(v.why);
  return zc::ReportStatus(absl::OkStatus(), error);
}
