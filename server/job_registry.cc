#include "server/job_registry.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "common/field_limits.h"
#include "common/job_spec.h"
#include "server/aligned_buffer.h"
#include "server/checkpoint/checkpoint_reader.h"
#include "server/optimizer/optimizer.h"
#include "server/tier/slot_format.h"

namespace zerostate::server {
namespace {

template <typename Request>
absl::Status CheckServers(const Request& req) {
  if (req.servers_size() == 0) {
    return absl::InvalidArgumentError("servers: the job's server list is empty");
  }
  for (int i = 0; i < req.servers_size(); ++i) {
    if (req.servers(i).empty()) {
      return absl::InvalidArgumentError(absl::StrCat("servers[", i, "]: empty address"));
    }
    auto s = CheckLength(absl::StrCat("servers[", i, "]"), req.servers(i), kMaxAddressBytes);
    if (!s.ok()) return s;
  }
  if (req.shard_index() >= static_cast<uint32_t>(req.servers_size())) {
    return absl::InvalidArgumentError(absl::StrCat("shard_index: ", req.shard_index(),
                                                   " is not below the number of servers ",
                                                   req.servers_size()));
  }
  return absl::OkStatus();
}

absl::Status CheckSameJob(const Job& job, const v1::JobSpec& spec,
                          const v1::RegisterJobRequest& req) {
  std::string diff = FirstDifference(job.spec(), spec);
  if (!diff.empty()) {
    return absl::AlreadyExistsError(absl::StrCat("job '", spec.job_id(),
                                                 "' exists with a different spec: ", diff));
  }
  std::vector<std::string> servers(req.servers().begin(), req.servers().end());
  if (servers != job.servers() || req.shard_index() != job.shard_index()) {
    return absl::AlreadyExistsError(absl::StrCat(
        "job '", spec.job_id(), "' exists with a different server list or shard_index (",
        job.shard_index(), " of ", job.servers().size(), ")"));
  }
  return absl::OkStatus();
}

// Bytes a job's shard occupies under --nvme_dir: two slots per block.
uint64_t DiskBytes(const v1::JobSpec& spec, uint64_t shard_blocks) {
  if (spec.tier() != v1::TIER_NVME) return 0;
  uint64_t payload = uint64_t{spec.block_elems()} * 4 * (1 + MomentCount(spec.optimizer().kind()));
  return shard_blocks * 2 * SlotLayout(payload).slot_bytes;
}

// The caller's token, or a new one when it sent none.
absl::StatusOr<std::string> TokenOrNew(const std::string& token, std::string* generated) {
  if (!token.empty()) return token;
  auto made = GenerateToken();
  if (!made.ok()) return made.status();
  *generated = *made;
  return *made;
}

}  // namespace

absl::Status JobRegistry::AuthorizeLocked(const std::string& job_id, const TokenHash& hash) const {
  if (job_id.empty()) {
    return absl::InvalidArgumentError("job_id: missing; every call (and every pushed chunk) "
                                      "names the job it is for");
  }
  // Before the token: a bad id is refused alike whoever asks, and never echoed.
  if (auto s = ValidateJobId(job_id); !s.ok()) return s;
  if (hash.empty()) {
    return absl::UnauthenticatedError(absl::StrCat(
        "the call carries no job token (metadata '", kJobTokenMetadata, "')"));
  }
  auto it = token_of_.find(job_id);
  if (it != token_of_.end() && SameToken(it->second, hash)) return absl::OkStatus();
  if (jobs_with_token_.contains(hash)) {
    return absl::PermissionDeniedError(
        absl::StrCat("the job token does not grant access to job '", job_id, "'"));
  }
  return absl::UnauthenticatedError("the job token is not valid on this server");
}

absl::Status JobRegistry::CheckTakenLocked(const std::string& job_id, const TokenHash& hash) const {
  auto s = AuthorizeLocked(job_id, hash);
  if (s.ok() || hash.empty()) return s;
  // Ids are unique per server: registering one says that it is taken,
  // whatever the caller's token (docs/operations.md, "Job tokens").
  return absl::AlreadyExistsError(absl::StrCat(
      "job '", job_id, "' is taken: it was registered with another token; choose another job_id"));
}

absl::Status JobRegistry::CheckQuotasLocked(const std::string& job_id, uint64_t ram,
                                            uint64_t disk, bool replacing) const {
  if (quotas_.max_jobs != 0 && !replacing && jobs_.size() >= quotas_.max_jobs) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "max_jobs: job '", job_id, "' would be job ", jobs_.size() + 1,
        " on this server, which allows ", quotas_.max_jobs, " (--max_jobs)"));
  }
  if (quotas_.job_ram_bytes != 0 && ram > quotas_.job_ram_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "job_ram_quota_bytes: job '", job_id, "' needs ", ram,
        " bytes of RAM on this server, over the per-job quota of ", quotas_.job_ram_bytes,
        " (--job_ram_quota_bytes)"));
  }
  if (quotas_.job_disk_bytes != 0 && disk > quotas_.job_disk_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "job_disk_quota_bytes: job '", job_id, "' needs ", disk,
        " bytes of disk on this server, over the per-job quota of ", quotas_.job_disk_bytes,
        " (--job_disk_quota_bytes)"));
  }
  return absl::OkStatus();
}

void JobRegistry::SetTokenLocked(const std::string& job_id, TokenHash hash) {
  DropTokenLocked(job_id);
  ++jobs_with_token_[hash];
  token_of_[job_id] = std::move(hash);
}

void JobRegistry::DropTokenLocked(const std::string& job_id) {
  auto it = token_of_.find(job_id);
  if (it == token_of_.end()) return;
  auto count = jobs_with_token_.find(it->second);
  if (--count->second == 0) jobs_with_token_.erase(count);
  token_of_.erase(it);
}

absl::StatusOr<JobRegistry::Registered> JobRegistry::Register(const v1::RegisterJobRequest& req,
                                                              const std::string& token) {
  auto spec = NormalizeJobSpec(req.spec());
  if (!spec.ok()) return spec.status();
  if (auto s = CheckServers(req); !s.ok()) return s;
  if (auto s = CheckTier(spec->tier(), tiers_); !s.ok()) return s;
  Layout layout = LayoutOf(*spec);
  Range blocks = ShardBlocks(layout.num_blocks(), req.servers_size(), req.shard_index());
  uint64_t bytes = Job::EstimateBytes(*spec, blocks.size(), tiers_);
  absl::MutexLock lock(&mu_);
  if (shutting_down_) return absl::UnavailableError("server is shutting down");
  if (auto it = jobs_.find(spec->job_id()); it != jobs_.end()) {
    if (auto s = CheckTakenLocked(spec->job_id(), HashToken(token)); !s.ok()) return s;
    if (auto s = CheckSameJob(*it->second, *spec, req); !s.ok()) return s;
    return Registered{it->second, false, ""};
  }
  if (auto s = CheckQuotasLocked(spec->job_id(), bytes, DiskBytes(*spec, blocks.size()), false);
      !s.ok()) {
    return s;
  }
  if (bytes > ram_budget_ - ram_used_) {
    return absl::ResourceExhaustedError(
        absl::StrCat("job '", spec->job_id(), "' needs ", bytes, " bytes on this server but only ",
                     ram_budget_ - ram_used_, " of the RAM budget ", ram_budget_, " are free"));
  }
  std::string generated;
  auto job_token = TokenOrNew(token, &generated);
  if (!job_token.ok()) return job_token.status();
  std::vector<std::string> servers(req.servers().begin(), req.servers().end());
  auto created = Job::Create(*std::move(spec), std::move(servers), req.shard_index(),
                             /*initialize=*/true, tiers_, staging_);
  if (!created.ok()) return created.status();
  std::shared_ptr<Job> job = *std::move(created);
  ram_used_ += bytes;
  jobs_[job->spec().job_id()] = job;
  SetTokenLocked(job->spec().job_id(), HashToken(*job_token));
  return Registered{job, true, generated};
}

uint64_t JobRegistry::FreeFor(const std::string& job_id) const {
  uint64_t free = ram_budget_ - ram_used_;
  if (auto it = jobs_.find(job_id); it != jobs_.end()) {
    free += it->second->state_bytes();
  }
  return free;
}

namespace {

absl::StatusOr<v1::JobSpec> RestoredSpec(const CheckpointReader& reader,
                                         const v1::RestoreRequest& req) {
  v1::JobSpec spec = reader.spec();
  if (!req.job_id().empty() && req.job_id() != spec.job_id()) {
    return absl::InvalidArgumentError(absl::StrCat("job_id: the checkpoint holds job '",
                                                   spec.job_id(), "', not '", req.job_id(), "'"));
  }
  if (req.num_nodes() != 0) spec.set_num_nodes(req.num_nodes());
  return NormalizeJobSpec(spec);
}

// Restoring over a registered job keeps its layout: a checkpoint of
// another layout is refused rather than silently changing the model.
absl::Status CheckSameLayout(const v1::JobSpec& registered, const v1::JobSpec& restored) {
  v1::JobSpec a = registered, b = restored;
  a.set_num_nodes(0);
  b.set_num_nodes(0);
  std::string diff = FirstDifference(a, b);
  if (diff.empty()) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "the checkpoint's job differs from the registered job '", registered.job_id(), "': ", diff,
      "; delete the job first to restore a different one"));
}

absl::Status LoadShard(const CheckpointReader& reader, Job& job) {
  AlignedBuffer<float> state(reader.block_floats());
  for (uint64_t local = 0; local < job.blocks().size(); ++local) {
    if (auto s = reader.ReadBlock(job.blocks().begin + local, state.data()); !s.ok()) return s;
    if (auto s = job.RestoreBlock(local, state.data(), reader.version()); !s.ok()) return s;
  }
  const v1::ShardManifest& first = reader.manifests()[0];
  job.RestoreAppliedSteps(reader.version(),
                          first.has_applied_steps() ? first.applied_steps() : reader.version());
  return job.RestoreTrainerState(reader.version(), first.trainer_state());
}

}  // namespace

absl::StatusOr<JobRegistry::Registered> JobRegistry::Restore(const v1::RestoreRequest& req,
                                                             const std::string& token) {
  if (auto s = CheckLength("path", req.path(), kMaxPathBytes); !s.ok()) return s;
  if (auto s = CheckServers(req); !s.ok()) return s;
  auto reader = CheckpointReader::Open(req.path());
  if (!reader.ok()) return reader.status();
  auto spec = RestoredSpec(**reader, req);
  if (!spec.ok()) return spec.status();
  Layout layout = LayoutOf(*spec);
  Range blocks = ShardBlocks(layout.num_blocks(), req.servers_size(), req.shard_index());
  uint64_t bytes = Job::EstimateBytes(*spec, blocks.size(), tiers_);
  const uint64_t disk = DiskBytes(*spec, blocks.size());
  const std::string& id = spec->job_id();
  // Checked before loading and again before the swap: the job may have
  // been registered or deleted meanwhile.
  auto admit = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> absl::Status {
    auto it = jobs_.find(id);
    if (it != jobs_.end()) {
      if (auto s = AuthorizeLocked(id, HashToken(token)); !s.ok()) return s;
      if (auto s = CheckSameLayout(it->second->spec(), *spec); !s.ok()) return s;
    }
    if (auto s = CheckQuotasLocked(id, bytes, disk, it != jobs_.end()); !s.ok()) return s;
    if (bytes > FreeFor(id)) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "restoring job '", id, "' needs ", bytes, " bytes of the RAM budget ", ram_budget_,
          " but only ", FreeFor(id), " are free"));
    }
    return absl::OkStatus();
  };
  {
    absl::MutexLock lock(&mu_);
    if (auto s = admit(); !s.ok()) return s;
  }
  std::string generated;
  auto job_token = TokenOrNew(token, &generated);
  if (!job_token.ok()) return job_token.status();
  std::vector<std::string> servers(req.servers().begin(), req.servers().end());
  auto job = Job::Create(*spec, std::move(servers), req.shard_index(), /*initialize=*/false,
                         tiers_, staging_);
  if (!job.ok()) return job.status();
  if (auto s = LoadShard(**reader, **job); !s.ok()) return s;
  std::shared_ptr<Job> loaded = *std::move(job);
  std::shared_ptr<Job> replaced;
  {
    absl::MutexLock lock(&mu_);
    if (shutting_down_) return absl::UnavailableError("server is shutting down");
    if (auto s = admit(); !s.ok()) return s;
    auto& slot = jobs_[id];
    if (slot) {
      ram_used_ -= slot->state_bytes();
      replaced = slot;
    }
    slot = loaded;
    ram_used_ += bytes;
    SetTokenLocked(id, HashToken(*job_token));
  }
  if (replaced) {
    replaced->Shutdown();
    replaced->ReleaseStaging();
  }
  return Registered{loaded, true, generated};
}

absl::StatusOr<std::shared_ptr<Job>> JobRegistry::Authorize(const std::string& job_id,
                                                            const std::string& token) const {
  absl::MutexLock lock(&mu_);
  if (auto s = AuthorizeLocked(job_id, HashToken(token)); !s.ok()) return s;
  return jobs_.at(job_id);
}

absl::StatusOr<std::shared_ptr<Job>> JobRegistry::Get(const std::string& job_id) const {
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) {
    return absl::NotFoundError(absl::StrCat("job '", job_id, "' is not registered here"));
  }
  return it->second;
}

absl::StatusOr<bool> JobRegistry::Delete(const std::string& job_id, const std::string& token) {
  std::shared_ptr<Job> deleted;
  absl::StatusOr<bool> result = Unregister(job_id, token, &deleted);
  // Calls still holding the job keep it alive, not its staging memory
  // (outside the registry's lock: it takes every block's mutex).
  if (deleted) deleted->ReleaseStaging();
  return result;
}

absl::StatusOr<bool> JobRegistry::Unregister(const std::string& job_id,
                                               const std::string& token,
                                               std::shared_ptr<Job>* deleted) {
  const TokenHash hash = HashToken(token);
  absl::MutexLock lock(&mu_);
  if (auto s = AuthorizeLocked(job_id, hash); !s.ok()) {
    auto dead = tombstones_.find(job_id);
    if (!hash.empty() && dead != tombstones_.end() && SameToken(dead->second, hash)) return false;
    return s;
  }
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return false;
  ram_used_ -= it->second->state_bytes();
  *deleted = std::move(it->second);
  jobs_.erase(it);
  if (tombstones_.insert_or_assign(job_id, token_of_[job_id]).second) {
    tombstone_order_.push_back(job_id);
  }
  if (tombstone_order_.size() > kMaxTombstones) {
    tombstones_.erase(tombstone_order_.front());
    tombstone_order_.pop_front();
  }
  DropTokenLocked(job_id);
  return true;
}

uint64_t JobRegistry::ram_used() const {
  absl::MutexLock lock(&mu_);
  return ram_used_;
}

size_t JobRegistry::size() const {
  absl::MutexLock lock(&mu_);
  return jobs_.size();
}

bool JobRegistry::HoldsJob(const std::string& token) const {
  if (token.empty()) return false;
  TokenHash hash = HashToken(token);
  absl::MutexLock lock(&mu_);
  return jobs_with_token_.contains(hash);
}

void JobRegistry::Shutdown() {
  std::vector<std::shared_ptr<Job>> jobs;
  {
    absl::MutexLock lock(&mu_);
    shutting_down_ = true;
    for (auto& [id, job] : jobs_) jobs.push_back(job);
  }
  for (auto& job : jobs) job->Shutdown();
}

}  // namespace zerostate::server
