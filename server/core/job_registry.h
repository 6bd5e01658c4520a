// The jobs this server holds, by id, and the RAM budget they share.
// Thread-safe; the registry's lock guards its maps and figures only: it is
// held to look up, reserve, insert or erase, never across a job's creation,
// a restore's reading, any I/O or a job's data path (a slow NVMe job's
// creation does not hold up another job's calls).
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "server/core/auth_token.h"
#include "server/core/job.h"
#include "server/core/lent_ram.h"
#include "zerostate/v1/state_service.pb.h"

namespace zerostate::server {

// Per-job and per-server limits (the server's --max_jobs,
// --job_ram_quota_bytes, --job_disk_quota_bytes); 0 = unlimited.
struct JobQuotas {
  uint64_t max_jobs = 0;
  uint64_t job_ram_bytes = 0;   // Job::EstimateBytes of one job's shard
  uint64_t job_disk_bytes = 0;  // bytes of one job's shard under --nvme_dir
};

// Every job is registered with a token (server/core/auth_token.h); the registry
// keeps its SHA-256 and answers who may act on which job. Beside the jobs,
// the budget holds memory lent to a LentRam (a backup's recycled sum
// buffers): only room the jobs leave, taken back when a Register or
// Restore needs it.
class JobRegistry final : public RamLender {
 public:
  // Jobs' tiers are built with `tiers` (the server's --nvme_* flags); their
  // gradient staging comes from `staging` (--staging_budget_bytes; null:
  // unbounded), outside the RAM budget.
  explicit JobRegistry(uint64_t ram_budget_bytes, TierOptions tiers = TierOptions(),
                       JobQuotas quotas = JobQuotas(),
                       std::shared_ptr<StagingBudget> staging = nullptr)
      : ram_budget_(ram_budget_bytes),
        tiers_(std::move(tiers)),
        quotas_(quotas),
        staging_(std::move(staging)) {}

  struct Registered {
    std::shared_ptr<Job> job;
    bool created = false;
    std::string token;  // generated for a caller that sent none; else ""
  };

  // Creates the job's shard with `token` (generated when ""), or returns
  // the existing one if its spec, server list and shard index are the same
  // and `token` is its token. Errors: INVALID_ARGUMENT (spec, servers,
  // shard_index; names the field), FAILED_PRECONDITION (a tier this server
  // does not offer; names the flag), UNAUTHENTICATED (no token, and the id
  // is taken), ALREADY_EXISTS (the id is taken by a job of another token:
  // says so, whatever the caller's token; or the job differs: names the
  // first differing field), RESOURCE_EXHAUSTED (a quota or the RAM budget;
  // names it and the figures), UNAVAILABLE (shutting down). Nothing is
  // allocated on error. The id and its bytes are reserved under the lock,
  // the job is created outside it and published under it; a Register or
  // Restore of the same id meanwhile waits for that outcome and is then
  // answered as if it had come after it.
  [[nodiscard]] absl::StatusOr<Registered> Register(const v1::RegisterJobRequest& req,
                                                    const std::string& token = "");

  // Loads a checkpoint (written by any number of servers) as this server's
  // shard of the job on the cluster req.servers(), replacing the job if it
  // exists (its waiting calls fail with UNAVAILABLE; `token` must be its
  // token). A new job takes `token` (generated when ""). Everything is read
  // and verified before the job is swapped in: on error nothing changes.
  // Errors: as CheckpointReader::Open and ReadBlock, INVALID_ARGUMENT
  // (servers, shard_index, job_id other than the checkpoint's, num_nodes),
  // UNAUTHENTICATED / PERMISSION_DENIED (as Authorize), RESOURCE_EXHAUSTED
  // (a quota or the RAM budget).
  [[nodiscard]] absl::StatusOr<Registered> Restore(const v1::RestoreRequest& req,
                                                   const std::string& token = "");

  // The job, if `token` is its token. Errors: INVALID_ARGUMENT (job_id
  // empty; names the field), UNAUTHENTICATED (no token, or one no job here
  // has), PERMISSION_DENIED (the token of another job). The answer is the
  // same whether or not `job_id` exists.
  [[nodiscard]] absl::StatusOr<std::shared_ptr<Job>> Authorize(const std::string& job_id,
                                                               const std::string& token) const;

  // This server's copy of shard `shard` of the job, if `token` is its
  // token: its own shard (the primary's copy) or one it backs up
  // (JobSpec.replicas). Errors: as Authorize; NOT_FOUND naming
  // the shard when this server holds no copy of it.
  [[nodiscard]] absl::StatusOr<std::shared_ptr<Job>> Shard(const std::string& job_id,
                                                           const std::string& token,
                                                           uint32_t shard) const;

  // The job, without a credential check: for code that serves no caller
  // (tests, tools). NOT_FOUND names the job id.
  [[nodiscard]] absl::StatusOr<std::shared_ptr<Job>> Get(const std::string& job_id) const;
  // This server's copy of shard `shard` of the job, without a credential
  // check, as Get: what a server that takes over a lost primary's shard
  // on its own (no caller) looks up. NOT_FOUND as Shard.
  [[nodiscard]] absl::StatusOr<std::shared_ptr<Job>> GetShard(const std::string& job_id,
                                                              uint32_t shard) const;

  // Drops the job if `token` is its token (errors as Authorize); in-flight
  // calls keep their reference until they finish, but its staging memory
  // goes back to the budget at once (JobPushes::ReleaseStaging). A retry with the token of
  // a job this registry deleted (among the last kMaxTombstones) answers
  // false rather than an auth error.
  [[nodiscard]] absl::StatusOr<bool> Delete(const std::string& job_id, const std::string& token);
  static constexpr size_t kMaxTombstones = 4096;

  // The bytes of the jobs' copies (not what is lent).
  uint64_t ram_used() const;
  uint64_t ram_budget() const { return ram_budget_; }

  // RamLender: room in the budget the jobs leave, for memory outside them.
  [[nodiscard]] bool Lend(uint64_t bytes) override;
  void Return(uint64_t bytes) override;
  // The bytes lent now.
  uint64_t lent() const;
  // What a Register or Restore that needs the lent room asks to drop it
  // (set once, before the first Lend; it must outlive this registry's
  // Register and Restore calls).
  void SetBorrower(LentRam* borrower);
  size_t size() const;

  // Whether `token` is the token of a job on this server.
  bool HoldsJob(const std::string& token) const;

  // Fails waiting calls of every job with UNAVAILABLE and refuses new jobs.
  void Shutdown();

 private:
  // The copy of `shard` of the job `own` is this server's own shard of.
  [[nodiscard]] absl::StatusOr<std::shared_ptr<Job>> ShardOfLocked(const std::shared_ptr<Job>& own,
                                                                   uint32_t shard) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // OK when job `job_id` exists with token hash `hash` (see Authorize).
  [[nodiscard]] absl::Status AuthorizeLocked(const std::string& job_id, const TokenHash& hash) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // AuthorizeLocked, but ALREADY_EXISTS "taken" for a token that is not the
  // job's (what RegisterJob of an existing id answers).
  [[nodiscard]] absl::Status CheckTakenLocked(const std::string& job_id,
                                              const TokenHash& hash) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // RESOURCE_EXHAUSTED naming the quota a new job of `ram` and `disk`
  // bytes would exceed (`replacing`: it takes an existing job's place).
  [[nodiscard]] absl::Status CheckQuotasLocked(const std::string& job_id, uint64_t ram,
                                               uint64_t disk, bool replacing) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Register's creation of the job, outside mu_: the token (generated into
  // `generated` when `token` is "") and Job::Create of each copy in
  // `shards` (the own shard first, then the shards it backs up).
  // `weight_copy`: AdmitLocked's choice (Job::Create).
  [[nodiscard]] absl::StatusOr<std::vector<std::shared_ptr<Job>>> CreateJob(
      const v1::RegisterJobRequest& req, const v1::JobSpec& spec,
      const std::vector<uint32_t>& shards, const std::string& token, std::string* generated,
      bool weight_copy) ABSL_LOCKS_EXCLUDED(mu_);
  // Waits (releasing mu_) while a Register of `job_id` is creating it.
  void AwaitUnreservedLocked(const std::string& job_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SetTokenLocked(const std::string& job_id, TokenHash hash)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void DropTokenLocked(const std::string& job_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Delete's part under mu_ (which it takes); `deleted` gets the copies dropped.
  [[nodiscard]] absl::StatusOr<bool> Unregister(const std::string& job_id, const std::string& token,
                                                std::vector<std::shared_ptr<Job>>* deleted)
      ABSL_LOCKS_EXCLUDED(mu_);

  const uint64_t ram_budget_;
  const TierOptions tiers_;
  const JobQuotas quotas_;
  const std::shared_ptr<StagingBudget> staging_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<Job>> jobs_ ABSL_GUARDED_BY(mu_);
  // The backup copies this server keeps of other shards of each job
  // (JobSpec.replicas), created, restored and deleted with the job's own
  // shard; their RAM is the job's too.
  absl::flat_hash_map<std::string, std::vector<std::shared_ptr<Job>>> backups_
      ABSL_GUARDED_BY(mu_);
  // RAM of a job's copies here: its shard and its backups.
  uint64_t BytesOfLocked(const std::string& job_id) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Each job's token hash, and how many jobs have each hash.
  absl::flat_hash_map<std::string, TokenHash> token_of_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<TokenHash, int> jobs_with_token_ ABSL_GUARDED_BY(mu_);
  // Token hashes of recently deleted jobs, oldest first, for Delete retries.
  absl::flat_hash_map<std::string, TokenHash> tombstones_ ABSL_GUARDED_BY(mu_);
  std::deque<std::string> tombstone_order_ ABSL_GUARDED_BY(mu_);
  // Ids a Register is creating outside mu_ (their bytes are in ram_used_);
  // reserved_cv_ is signalled when one is published or given up.
  absl::flat_hash_set<std::string> reserved_ ABSL_GUARDED_BY(mu_);
  absl::CondVar reserved_cv_;
  uint64_t ram_used_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t lent_ ABSL_GUARDED_BY(mu_) = 0;  // ram_used_ + lent_ <= ram_budget_
  LentRam* borrower_ ABSL_GUARDED_BY(mu_) = nullptr;
  // Bytes free, lent ones not counted, for a job that would replace job
  // `job_id` (its copies' bytes count as free; none: a new job).
  uint64_t FreeFor(const std::string& job_id) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether a job of `bytes` that would replace job `job_id` fits: where
  // it fits only in the lent room, the borrower drops what it holds idle
  // first; where it does not fit even so, nothing is dropped.
  bool MakeRoomLocked(uint64_t bytes, const std::string& job_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The refusal of a job of `bytes` (`what` names the call), with the figures.
  absl::Status NoRoomLocked(const std::string& what, uint64_t bytes,
                            const std::string& job_id) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Admits a job of `job_id` whose copies need `ram` bytes of the budget
  // and `disk` of the disk with weight_dtype copies for its gathers, and
  // `ram_without` without them (less only where the copies are optional,
  // LowpCopyOptional): true where the quotas and the budget have room for
  // the copies, false where they have room only without (its gathers then
  // convert the master); else the refusal (a quota's, or NoRoomLocked's)
  // of the smaller.
  absl::StatusOr<bool> AdmitLocked(const std::string& what, const std::string& job_id,
                                   uint64_t ram, uint64_t ram_without, uint64_t disk,
                                   bool replacing) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool shutting_down_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace zerostate::server
