#include "server/core/routing.h"

#include "common/shard_map.h"

namespace zerostate::server {

absl::StatusOr<std::shared_ptr<Job>> CopyForShard(JobRegistry& jobs, Primaries* primaries,
                                                  const std::string& job_id,
                                                  const std::string& token,
                                                  std::optional<uint32_t> shard) {
  auto own = jobs.Authorize(job_id, token);
  if (!own.ok()) return own.status();
  std::shared_ptr<Job> copy = *std::move(own);
  if (shard.has_value() && *shard != copy->shard_index()) {
    auto other = jobs.Shard(job_id, token, *shard);
    if (!other.ok()) return other.status();
    copy = *std::move(other);
  }
  if (copy->spec().replicas() > 0 && primaries != nullptr) {
    if (auto s = primaries->Serve(*copy); !s.ok()) return s;
    // A failover replays the steps the copy acknowledged as a backup.
    if (copy->held().count() > 0) {
      if (auto s = copy->held().ApplyAll(); !s.ok()) return s;
    }
  }
  return copy;
}

absl::StatusOr<std::shared_ptr<Job>> CopyForBlock(JobRegistry& jobs, Primaries* primaries,
                                                  const std::string& job_id,
                                                  const std::string& token, uint64_t block,
                                                  bool serve) {
  auto own = jobs.Authorize(job_id, token);
  if (!own.ok()) return own.status();
  const Job& job = **own;
  std::optional<uint32_t> shard;
  const uint64_t num_blocks = job.layout().num_blocks();
  if (job.spec().replicas() > 0 && block < num_blocks &&
      (block < job.blocks().begin || block >= job.blocks().end)) {
    shard = ShardOfBlock(num_blocks, job.servers().size(), block);
  }
  return CopyForShard(jobs, serve ? primaries : nullptr, job_id, token, shard);
}

absl::StatusOr<std::shared_ptr<Job>> CopyForGather(JobRegistry& jobs, Primaries* primaries,
                                                   const std::string& token,
                                                   const v1::GatherRequest& req) {
  if (req.begin() == 0 && req.end() == 0) {
    return CopyForShard(jobs, primaries, req.job_id(), token, std::nullopt);
  }
  auto own = jobs.Authorize(req.job_id(), token);
  if (!own.ok()) return own.status();
  return CopyForBlock(jobs, primaries, req.job_id(), token,
                      req.begin() / (*own)->layout().block_elems);
}

}  // namespace zerostate::server
