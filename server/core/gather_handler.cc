#include "server/core/gather_handler.h"

#include <utility>

#include "absl/time/clock.h"
#include "common/job_spec.h"
#include "server/core/answer_deadline.h"
#include "server/core/routing.h"

namespace zerostate::server {

absl::StatusOr<GatherHandler::Gather> GatherHandler::Begin(const v1::GatherRequest& req,
                                                           const std::string& token,
                                                           absl::Time caller_deadline) const {
  Gather gather;
  auto job = CopyForGather(jobs_, primaries_, token, req);
  if (!job.ok()) return job.status();
  gather.job = *std::move(job);
  auto range = gather.job->gathers().CheckGather(req);
  if (!range.ok()) return range.status();
  gather.request = req;
  gather.range = *range;
  gather.bytes = GatherBytes(*range, gather.job->layout().block_elems, req.dtype(), piece_elems_);
  gather.deadline = AnswerDeadline(absl::Now(), caller_deadline, max_wait_);
  return gather;
}

absl::Status GatherHandler::Serve(const Gather& gather, GatherSink& sink) const {
  const v1::GatherRequest& req = gather.request;
  if (metrics_ != nullptr) metrics_->AddGathersInProgress(1);
  uint64_t direct = 0;
  absl::Status s = gather.job->gathers().Gather(gather.range, req.min_version(), req.dtype(),
                                                piece_elems_, gather.deadline, sink, &direct);
  if (metrics_ != nullptr) metrics_->AddGathersInProgress(-1);
  if (s.ok() && metrics_ != nullptr) {
    metrics_->RecordWire(req.job_id(), /*push=*/false, req.dtype(), gather.bytes,
                         gather.range.size());
    metrics_->RecordDirectGather(req.job_id(), direct);
  }
  return s;
}

}  // namespace zerostate::server
