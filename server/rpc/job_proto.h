// The gRPC edge's answers about a job: the core's plain results (Job's
// identity, JobShard::Progress) filled into the proto's messages.
#pragma once

#include "server/core/job.h"
#include "zerostate/v1/state_service.pb.h"

namespace zerostate::server {

// The shard's placement, layout, version (the lowest of its blocks',
// `progress.min_version`) and state bytes.
v1::JobInfo JobInfoOf(const Job& job, const ShardProgress& progress);
v1::JobInfo JobInfoOf(const Job& job);

// JobStatus's answer but for what the service adds (trainer state,
// incarnation, data port): the info, the spec and the progress.
void FillJobStatus(const Job& job, v1::JobStatusResponse* out);

}  // namespace zerostate::server
