// Which of this server's copies of a job answers a call: the
// job's own shard, as always, or a shard it backs up, which it then serves
// as primary (Primaries::Serve: a failover claims it). One function per
// way a call names its part of the job: by shard (Step, GradStats,
// JobStatus) or by block (pushed chunks, gathered ranges), on every plane.
// Thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "server/core/job_registry.h"
#include "server/core/primaries.h"

namespace zerostate::server {

// The copy of shard `shard` (unset: this server's own) of the job, checked
// as Primaries::Serve when the job has backups and `primaries` is set.
// Errors: those of JobRegistry::Shard and Primaries::Serve.
[[nodiscard]] absl::StatusOr<std::shared_ptr<Job>> CopyForShard(JobRegistry& jobs,
                                                                Primaries* primaries,
                                                                const std::string& job_id,
                                                                const std::string& token,
                                                                std::optional<uint32_t> shard);

// The copy that holds `block`: the own shard when it does (or when the job
// has no backups: its checks then name the block), else the backed-up
// shard of the block, as CopyForShard; with serve = false without the
// primary's check (InitWeights writes every copy).
[[nodiscard]] absl::StatusOr<std::shared_ptr<Job>> CopyForBlock(JobRegistry& jobs,
                                                                Primaries* primaries,
                                                                const std::string& job_id,
                                                                const std::string& token,
                                                                uint64_t block, bool serve = true);

// The copy a GatherRequest reads: the one holding the block of req.begin()
// (the own shard for a whole-shard gather, begin = end = 0), as CopyForBlock.
[[nodiscard]] absl::StatusOr<std::shared_ptr<Job>> CopyForGather(JobRegistry& jobs,
                                                                 Primaries* primaries,
                                                                 const std::string& token,
                                                                 const v1::GatherRequest& req);

}  // namespace zerostate::server
