#include "server/core/push_handler.h"

#include <algorithm>
#include <utility>

#include "absl/time/clock.h"
#include "common/job_spec.h"
#include "server/core/answer_deadline.h"
#include "server/core/routing.h"

namespace zerostate::server {

absl::StatusOr<PushHandler::Push> PushHandler::Begin(const ChunkFields& fields,
                                                     const std::string& token, size_t data_bytes,
                                                     absl::Time caller_deadline, Payload payload,
                                                     std::shared_ptr<Job>* stream_job) const {
  Push push;
  auto job = JobFor(fields.job_id, token, fields.block, /*serve=*/true, stream_job);
  if (!job.ok()) return job.status();
  push.job_ = *std::move(job);
  push.deadline_ = AnswerDeadline(absl::Now(), caller_deadline, max_wait_);
  if (payload == Payload::kToRead) {
    push.claim_ = push.job_->pushes().ClaimPush(fields, data_bytes);
    // Node 0 is always its blocks' head (or done): it never waits for staging.
    if (push.claim_.data() == nullptr && fields.node != 0) {
      push.job_->pushes().AwaitStagingRoom(fields, data_bytes, push.deadline_);
    }
  }
  return push;
}

absl::StatusOr<std::shared_ptr<Job>> PushHandler::JobFor(const std::string& job_id,
                                                         const std::string& token,
                                                         uint64_t block, bool serve,
                                                         std::shared_ptr<Job>* stream_job) const {
  if (stream_job != nullptr && *stream_job != nullptr &&
      (*stream_job)->spec().job_id() == job_id && block >= (*stream_job)->blocks().begin &&
      block < (*stream_job)->blocks().end) {
    return *stream_job;
  }
  auto job = CopyForBlock(jobs_, primaries_, job_id, token, block, serve);
  if (!job.ok()) return job.status();
  if (stream_job != nullptr) *stream_job = *job;
  return job;
}

absl::StatusOr<PushOutcome> PushHandler::Apply(Push& push, const ChunkView& chunk,
                                               bool may_wait) const {
  absl::StatusOr<PushOutcome> outcome =
      push.claim_.data() != nullptr
          ? push.claim_.Commit()
          : push.job_->pushes().Push(chunk, may_wait ? push.deadline_ : absl::InfinitePast());
  if (outcome.ok() && metrics_ != nullptr) {
    const ChunkFields& f = chunk.fields;
    const uint64_t elems =
        f.dtype == v1::DTYPE_INT8 ? f.elems : chunk.data_bytes / std::max<size_t>(1, DTypeSize(f.dtype));
    metrics_->RecordWire(f.job_id, /*push=*/true, f.dtype, chunk.data_bytes, elems);
  }
  return outcome;
}

}  // namespace zerostate::server
