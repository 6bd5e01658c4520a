#include "server/core/job_registry.h"

#include <algorithm>
#include <iostream>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/field_limits.h"
#include "common/job_spec.h"
#include "server/core/aligned_buffer.h"
#include "server/core/checkpoint/checkpoint_reader.h"
#include "server/core/optimizer/optimizer.h"
#include "server/core/optimizer/state_convert.h"
#include "server/core/tier/slot_format.h"

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
  const uint64_t payload = StateLayoutOf(spec).total_floats() * sizeof(float);
  return shard_blocks * 2 * SlotLayout(payload).slot_bytes;
}

// The copies of a job one server holds: its own shard (first), then the
// shards it backs up (JobSpec.replicas), and their RAM and disk.
struct Copies {
  std::vector<uint32_t> shards;
  uint64_t ram = 0;
  uint64_t disk = 0;
};

Copies CopiesOf(const v1::JobSpec& spec, uint32_t num_servers, uint32_t shard,
                const TierOptions& tiers, bool weight_copy) {
  Copies c;
  c.shards.push_back(shard);
  for (uint32_t b : BackedUpShards(num_servers, shard, spec.replicas())) c.shards.push_back(b);
  const uint64_t num_blocks = LayoutOf(spec).num_blocks();
  for (uint32_t s : c.shards) {
    const uint64_t blocks = ShardBlocks(num_blocks, num_servers, s).size();
    c.ram += Job::EstimateBytes(spec, blocks, tiers, weight_copy);
    c.disk += DiskBytes(spec, blocks);
  }
  return c;
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
  const size_t held = jobs_.size() + reserved_.size();  // registrations in flight count
  if (quotas_.max_jobs != 0 && !replacing && held >= quotas_.max_jobs) {
    return absl::ResourceExhaustedError(absl::StrCat("max_jobs: job '", job_id, "' would be job ",
                                                     held + 1, " on this server, which allows ",
                                                     quotas_.max_jobs, " (--max_jobs)"));
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
  if (auto s = CheckReplicas(*spec, req.servers_size()); !s.ok()) return s;
  const Copies copies = CopiesOf(*spec, req.servers_size(), req.shard_index(), tiers_, true);
  const uint64_t without =
      CopiesOf(*spec, req.servers_size(), req.shard_index(), tiers_, false).ram;
  const std::string id = spec->job_id();
  uint64_t bytes = 0;
  bool weight_copy = true;
  {
    absl::MutexLock lock(&mu_);
    AwaitUnreservedLocked(id);
    if (shutting_down_) return absl::UnavailableError("server is shutting down");
    if (auto it = jobs_.find(id); it != jobs_.end()) {
      if (auto s = CheckTakenLocked(id, HashToken(token)); !s.ok()) return s;
      if (auto s = CheckSameJob(*it->second, *spec, req); !s.ok()) return s;
      return Registered{it->second, false, ""};
    }
    auto admitted =
        AdmitLocked(absl::StrCat("job '", id, "'"), id, copies.ram, without, copies.disk, false);
    if (!admitted.ok()) return admitted.status();
    weight_copy = *admitted;
    bytes = weight_copy ? copies.ram : without;
    // The id and the bytes are this call's until it publishes or gives up.
    reserved_.insert(id);
    ram_used_ += bytes;
  }
  // Creation (seeded initialisation, an NVMe shard's file) outside the lock.
  std::string generated;
  absl::StatusOr<std::vector<std::shared_ptr<Job>>> created =
      CreateJob(req, *std::move(spec), copies.shards, token, &generated, weight_copy);
  absl::MutexLock lock(&mu_);
  reserved_.erase(id);
  reserved_cv_.SignalAll();
  if (created.ok() && shutting_down_) {
    created = absl::UnavailableError("server is shutting down");
  }
  if (!created.ok()) {
    ram_used_ -= bytes;
    return created.status();
  }
  std::vector<std::shared_ptr<Job>> made = *std::move(created);
  std::shared_ptr<Job> job = made[0];
  jobs_[id] = job;
  if (made.size() > 1) backups_[id].assign(made.begin() + 1, made.end());
  SetTokenLocked(id, HashToken(generated.empty() ? token : generated));
  return Registered{std::move(job), true, generated};
}

absl::StatusOr<std::vector<std::shared_ptr<Job>>> JobRegistry::CreateJob(
    const v1::RegisterJobRequest& req, const v1::JobSpec& spec,
    const std::vector<uint32_t>& shards, const std::string& token, std::string* generated,
    bool weight_copy) {
  auto job_token = TokenOrNew(token, generated);
  if (!job_token.ok()) return job_token.status();
  std::vector<std::string> servers(req.servers().begin(), req.servers().end());
  std::vector<std::shared_ptr<Job>> made;
  for (uint32_t shard : shards) {
    auto created =
        Job::Create(spec, servers, shard, /*initialize=*/true, tiers_, staging_, weight_copy);
    if (!created.ok()) return created.status();
    made.push_back(*std::move(created));
  }
  return made;
}

void JobRegistry::AwaitUnreservedLocked(const std::string& job_id) {
  while (reserved_.contains(job_id)) reserved_cv_.Wait(&mu_);
}

uint64_t JobRegistry::FreeFor(const std::string& job_id) const {
  return ram_budget_ - ram_used_ - lent_ + BytesOfLocked(job_id);
}

bool JobRegistry::MakeRoomLocked(uint64_t bytes, const std::string& job_id) {
  if (bytes <= FreeFor(job_id)) return true;
  if (bytes > FreeFor(job_id) + lent_ || borrower_ == nullptr) return false;
  const uint64_t dropped = borrower_->DropIdle();
  lent_ -= std::min(dropped, lent_);
  return bytes <= FreeFor(job_id);
}

absl::StatusOr<bool> JobRegistry::AdmitLocked(const std::string& what, const std::string& job_id,
                                              uint64_t ram, uint64_t ram_without, uint64_t disk,
                                              bool replacing) {
  if (CheckQuotasLocked(job_id, ram, disk, replacing).ok() && MakeRoomLocked(ram, job_id)) {
    return true;
  }
  const uint64_t least = std::min(ram, ram_without);
  if (auto s = CheckQuotasLocked(job_id, least, disk, replacing); !s.ok()) return s;
  if (least < ram && MakeRoomLocked(least, job_id)) {
    std::cerr << "zerostate-server: " << what << " admitted without weight copies (no room in "
              << "the RAM budget for their " << ram - least
              << " bytes): its gathers convert the master\n";
    return false;
  }
  return NoRoomLocked(what, least, job_id);
}

absl::Status JobRegistry::NoRoomLocked(const std::string& what, uint64_t bytes,
                                       const std::string& job_id) const {
  std::string lent =
      lent_ == 0
          ? ""
          : absl::StrCat(" (", lent_, " more are backups' sum buffers in use, not yet idle)");
  return absl::ResourceExhaustedError(
      absl::StrCat(what, " needs ", bytes, " bytes of the RAM budget ", ram_budget_,
                   " on this server but only ", FreeFor(job_id), " are free", lent));
}

bool JobRegistry::Lend(uint64_t bytes) {
  absl::MutexLock lock(&mu_);
  if (bytes > ram_budget_ - ram_used_ - lent_) return false;
  lent_ += bytes;
  return true;
}

void JobRegistry::Return(uint64_t bytes) {
  absl::MutexLock lock(&mu_);
  lent_ -= std::min(bytes, lent_);
}

uint64_t JobRegistry::lent() const {
  absl::MutexLock lock(&mu_);
  return lent_;
}

void JobRegistry::SetBorrower(LentRam* borrower) {
  absl::MutexLock lock(&mu_);
  borrower_ = borrower;
}

uint64_t JobRegistry::BytesOfLocked(const std::string& job_id) const {
  uint64_t bytes = 0;
  if (auto it = jobs_.find(job_id); it != jobs_.end()) bytes += it->second->state_bytes();
  if (auto it = backups_.find(job_id); it != backups_.end()) {
    for (const auto& backup : it->second) bytes += backup->state_bytes();
  }
  return bytes;
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
  if (req.has_moment_format()) spec.set_moment_format(req.moment_format());
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
  const StateLayout from = reader.state_layout(), to = job.shard().tier_shape().layout();
  const bool convert = from.format != to.format;
  if (convert) {
    std::cerr << "zerostate-server: restoring job '" << job.spec().job_id() << "' shard "
              << job.shard_index() << ": converting its optimizer moments from "
              << v1::MomentFormat_Name(reader.spec().moment_format()) << " to "
              << v1::MomentFormat_Name(job.spec().moment_format()) << std::endl;
  }
  AlignedBuffer<float> state(reader.block_floats()), converted(convert ? to.total_floats() : 0);
  for (uint64_t local = 0; local < job.blocks().size(); ++local) {
    if (auto s = reader.ReadBlock(job.blocks().begin + local, state.data()); !s.ok()) return s;
    if (convert) ConvertState(from, state.data(), to, converted.data());
    const float* in = convert ? converted.data() : state.data();
    if (auto s = job.snapshots().RestoreBlock(local, in, reader.version()); !s.ok()) return s;
  }
  const v1::ShardManifest& first = reader.manifests()[0];
  job.snapshots().RestoreAppliedSteps(
      reader.version(), first.has_applied_steps() ? first.applied_steps() : reader.version());
  return job.snapshots().RestoreTrainerState(reader.version(), first.trainer_state());
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
  if (auto s = CheckReplicas(*spec, req.servers_size()); !s.ok()) return s;
  const Copies copies = CopiesOf(*spec, req.servers_size(), req.shard_index(), tiers_, true);
  const uint64_t without =
      CopiesOf(*spec, req.servers_size(), req.shard_index(), tiers_, false).ram;
  const uint64_t disk = copies.disk;
  const std::string& id = spec->job_id();
  // Checked before loading and again before the swap (then without a
  // choice of weight copies: the job is made): the job may have been
  // registered or deleted meanwhile.
  auto admit = [&](uint64_t ram, uint64_t ram_without)
                   ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> absl::StatusOr<bool> {
    AwaitUnreservedLocked(id);
    auto it = jobs_.find(id);
    if (it != jobs_.end()) {
      if (auto s = AuthorizeLocked(id, HashToken(token)); !s.ok()) return s;
      if (auto s = CheckSameLayout(it->second->spec(), *spec); !s.ok()) return s;
    }
    return AdmitLocked(absl::StrCat("restoring job '", id, "'"), id, ram, ram_without, disk,
                       it != jobs_.end());
  };
  bool weight_copy = true;
  {
    absl::MutexLock lock(&mu_);
    auto admitted = admit(copies.ram, without);
    if (!admitted.ok()) return admitted.status();
    weight_copy = *admitted;
  }
  const uint64_t bytes = weight_copy ? copies.ram : without;
  std::string generated;
  auto job_token = TokenOrNew(token, &generated);
  if (!job_token.ok()) return job_token.status();
  std::vector<std::string> servers(req.servers().begin(), req.servers().end());
  std::vector<std::shared_ptr<Job>> made;  // the shard, then its backups' copies
  for (uint32_t shard : copies.shards) {
    auto job =
        Job::Create(*spec, servers, shard, /*initialize=*/false, tiers_, staging_, weight_copy);
    if (!job.ok()) return job.status();
    if (auto s = LoadShard(**reader, **job); !s.ok()) return s;
    made.push_back(*std::move(job));
  }
  std::shared_ptr<Job> loaded = made[0];
  std::vector<std::shared_ptr<Job>> replaced;
  {
    absl::MutexLock lock(&mu_);
    if (shutting_down_) return absl::UnavailableError("server is shutting down");
    if (auto s = admit(bytes, bytes); !s.ok()) return s.status();
    ram_used_ -= BytesOfLocked(id);
    if (auto it = jobs_.find(id); it != jobs_.end()) replaced.push_back(it->second);
    if (auto it = backups_.find(id); it != backups_.end()) {
      replaced.insert(replaced.end(), it->second.begin(), it->second.end());
      backups_.erase(it);
    }
    jobs_[id] = loaded;
    if (made.size() > 1) backups_[id].assign(made.begin() + 1, made.end());
    ram_used_ += bytes;
    SetTokenLocked(id, HashToken(*job_token));
  }
  for (auto& job : replaced) {
    job->shard().Shutdown();
    job->pushes().ReleaseStaging();
  }
  return Registered{loaded, true, generated};
}

absl::StatusOr<std::shared_ptr<Job>> JobRegistry::Authorize(const std::string& job_id,
                                                            const std::string& token) const {
  absl::MutexLock lock(&mu_);
  if (auto s = AuthorizeLocked(job_id, HashToken(token)); !s.ok()) return s;
  return jobs_.at(job_id);
}

absl::StatusOr<std::shared_ptr<Job>> JobRegistry::Shard(const std::string& job_id,
                                                        const std::string& token,
                                                        uint32_t shard) const {
  absl::MutexLock lock(&mu_);
  if (auto s = AuthorizeLocked(job_id, HashToken(token)); !s.ok()) return s;
  return ShardOfLocked(jobs_.at(job_id), shard);
}

absl::StatusOr<std::shared_ptr<Job>> JobRegistry::GetShard(const std::string& job_id,
                                                           uint32_t shard) const {
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) {
    return absl::NotFoundError(absl::StrCat("job '", job_id, "' is not registered here"));
  }
  return ShardOfLocked(it->second, shard);
}

absl::StatusOr<std::shared_ptr<Job>> JobRegistry::ShardOfLocked(const std::shared_ptr<Job>& own,
                                                                uint32_t shard) const {
  const std::string& job_id = own->spec().job_id();
  if (own->shard_index() == shard) return own;
  if (auto it = backups_.find(job_id); it != backups_.end()) {
    for (const auto& backup : it->second) {
      if (backup->shard_index() == shard) return backup;
    }
  }
  return absl::NotFoundError(absl::StrCat("shard ", shard, " of job '", job_id,
                                          "': this server holds no copy of it (its shard is ",
                                          own->shard_index(), ", with ",
                                          own->spec().replicas(), " backups per shard)"));
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
  std::vector<std::shared_ptr<Job>> deleted;
  absl::StatusOr<bool> result = Unregister(job_id, token, &deleted);
  // Calls still holding the job keep it alive, not its staging memory
  // (outside the registry's lock: it takes every block's mutex).
  for (auto& job : deleted) {
    job->shard().MarkDeleted();  // waiting calls end now, not at their deadline
    job->pushes().ReleaseStaging();
  }
  return result;
}

absl::StatusOr<bool> JobRegistry::Unregister(const std::string& job_id,
                                               const std::string& token,
                                               std::vector<std::shared_ptr<Job>>* deleted) {
  const TokenHash hash = HashToken(token);
  absl::MutexLock lock(&mu_);
  if (auto s = AuthorizeLocked(job_id, hash); !s.ok()) {
    auto dead = tombstones_.find(job_id);
    if (!hash.empty() && dead != tombstones_.end() && SameToken(dead->second, hash)) return false;
    return s;
  }
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return false;
  ram_used_ -= BytesOfLocked(job_id);
  deleted->push_back(std::move(it->second));
  jobs_.erase(it);
  if (auto b = backups_.find(job_id); b != backups_.end()) {
    deleted->insert(deleted->end(), b->second.begin(), b->second.end());
    backups_.erase(b);
  }
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
    for (auto& [id, copies] : backups_) jobs.insert(jobs.end(), copies.begin(), copies.end());
  }
  for (auto& job : jobs) job->shard().Shutdown();
}

}  // namespace zerostate::server
