// The jobs this server holds, by id, and the RAM budget they share.
// Thread-safe; the registry's lock is held only to look up, insert or
// erase, never during a job's data path.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "server/job.h"
#include "zerostate/v1/state_service.pb.h"

namespace zerostate::server {

class JobRegistry {
 public:
  // Jobs' tiers are built with `tiers` (the server's --nvme_* flags).
  explicit JobRegistry(uint64_t ram_budget_bytes, TierOptions tiers = TierOptions())
      : ram_budget_(ram_budget_bytes), tiers_(std::move(tiers)) {}

  struct Registered {
    std::shared_ptr<Job> job;
    bool created = false;
  };

  // Creates the job's shard, or returns the existing one if its spec,
  // server list and shard index are the same. Errors: INVALID_ARGUMENT
  // (spec, servers, shard_index; names the field), FAILED_PRECONDITION (a
  // tier this server does not offer; names the flag), ALREADY_EXISTS (names
  // the first differing field), RESOURCE_EXHAUSTED (RAM budget), UNAVAILABLE
  // (shutting down). Nothing is allocated on error.
  absl::StatusOr<Registered> Register(const v1::RegisterJobRequest& req);

  // Loads a checkpoint (written by any number of servers) as this server's
  // shard of the job on the cluster req.servers(), replacing the job if it
  // exists (its waiting calls fail with UNAVAILABLE). Everything is read
  // and verified before the job is swapped in: on error nothing changes.
  // Errors: as CheckpointReader::Open and ReadBlock, INVALID_ARGUMENT
  // (servers, shard_index, job_id other than the checkpoint's, num_nodes),
  // RESOURCE_EXHAUSTED (RAM budget).
  absl::StatusOr<Registered> Restore(const v1::RestoreRequest& req);

  // NOT_FOUND names the job id.
  absl::StatusOr<std::shared_ptr<Job>> Get(const std::string& job_id) const;

  // Drops the job; in-flight calls keep their reference until they finish.
  bool Delete(const std::string& job_id);

  uint64_t ram_used() const;
  uint64_t ram_budget() const { return ram_budget_; }
  size_t size() const;

  // Fails waiting calls of every job with UNAVAILABLE and refuses new jobs.
  void Shutdown();

 private:
  const uint64_t ram_budget_;
  const TierOptions tiers_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<Job>> jobs_ ABSL_GUARDED_BY(mu_);
  uint64_t ram_used_ ABSL_GUARDED_BY(mu_) = 0;
  // Bytes free for a job that would replace `replacing` (may be null).
  uint64_t FreeFor(const std::string& job_id) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool shutting_down_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace zerostate::server
