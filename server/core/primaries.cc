#include "server/core/primaries.h"

#include <vector>

#include "absl/algorithm/container.h"
#include "absl/strings/str_cat.h"
#include "common/shard_map.h"

namespace zerostate::server {

absl::Status Primaries::Serve(const Job& copy) {
  const std::string& job = copy.spec().job_id();
  const uint32_t shard = copy.shard_index();
  // A deposed copy holds a step no primary acknowledged: never served
  // until a catch-up replaced it, whatever the membership says.
  if (auto s = copy.step().CheckNotDeposed(); !s.ok()) return s;
  {
    absl::MutexLock lock(&mu_);
    auto it = held_.find({job, shard});
    if (it != held_.end()) {
      if (membership_.Holds(job, static_cast<int>(shard), it->second)) return absl::OkStatus();
      held_.erase(it);
    }
  }
  const auto fenced = [&] {
    return absl::UnavailableError(absl::StrCat(
        "not primary: shard ", shard, " of job '", job, "': this server (", membership_.self(),
        ") lost its membership lease and is fenced; ask the shard's backups"));
  };
  if (!membership_.LeaseValid()) return fenced();
  if (auto s = CheckInSync(copy); !s.ok()) return s;
  auto term = membership_.Claim(job, static_cast<int>(shard));
  // FAILED_PRECONDITION: the lease lapsed since the check above.
  if (absl::IsFailedPrecondition(term.status())) return fenced();
  if (!term.ok()) return term.status();
  if (term->primary != membership_.self()) {
    return absl::UnavailableError(absl::StrCat("not primary: shard ", shard, " of job '", job,
                                               "' is served by ", term->primary, " (epoch ",
                                               term->epoch, "), not by ", membership_.self()));
  }
  absl::MutexLock lock(&mu_);
  held_[{job, shard}] = *term;
  return absl::OkStatus();
}

absl::Status Primaries::CheckInSync(const Job& copy) {
  const std::string& job = copy.spec().job_id();
  const int shard = static_cast<int>(copy.shard_index());
  auto behind = membership_.Behind(job, shard);
  if (!behind.ok()) return behind.status();
  const std::string& self = membership_.self();
  if (!absl::c_binary_search(*behind, self)) return absl::OkStatus();
  auto members = membership_.Members();
  if (!members.ok()) return members.status();
  const std::vector<std::string>& servers = copy.servers();
  for (uint32_t server : ReplicaServers(static_cast<uint32_t>(servers.size()), copy.shard_index(),
                                        copy.spec().replicas())) {
    const std::string& other = servers[server];
    if (other == self || absl::c_binary_search(*behind, other) ||
        !absl::c_binary_search(*members, other)) {
      continue;
    }
    return absl::UnavailableError(absl::StrCat(
        "not primary: shard ", shard, " of job '", job, "': this server's copy (", self,
        ") missed acknowledged steps (its primary recorded it behind), and the copy on ", other,
        " is in sync and alive: that one takes the shard"));
  }
  return absl::OkStatus();  // no copy in sync is alive: this one is the best left
}

absl::StatusOr<std::vector<std::string>> Primaries::Locate(
    const std::vector<std::string>& servers) const {
  std::vector<std::string> out;
  out.reserve(servers.size());
  for (const std::string& name : servers) {
    auto dial = membership_.Resolve(name);
    if (!dial.ok()) return dial.status();
    out.push_back(*std::move(dial));
  }
  return out;
}

absl::Status Primaries::SetBehind(const std::string& job, uint32_t shard, const std::string& copy,
                                  bool behind) {
  std::optional<PrimaryTerm> term = Serving(job, shard);
  if (!term.has_value()) {
    return absl::UnavailableError(absl::StrCat("not primary: shard ", shard, " of job '", job,
                                               "' is not served by ", membership_.self(),
                                               " now; it records no copy behind"));
  }
  absl::Status s = membership_.SetBehind(job, static_cast<int>(shard), *term, copy, behind);
  return absl::IsUnimplemented(s) ? absl::OkStatus() : s;
}

std::optional<PrimaryTerm> Primaries::Serving(const std::string& job, uint32_t shard) const {
  absl::MutexLock lock(&mu_);
  auto it = held_.find({job, shard});
  if (it == held_.end() || !membership_.Holds(job, static_cast<int>(shard), it->second)) {
    return std::nullopt;
  }
  return it->second;
}

void Primaries::Fence(const std::string& job, uint32_t shard) {
  absl::MutexLock lock(&mu_);
  held_.erase({job, shard});
}

absl::Status Primaries::Release(const std::string& job) {
  std::vector<uint32_t> shards;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [key, term] : held_) {
      if (key.first == job) shards.push_back(key.second);
    }
    absl::erase_if(held_, [&](const auto& entry) { return entry.first.first == job; });
  }
  absl::Status first;
  for (uint32_t shard : shards) {
    absl::Status s = membership_.Release(job, static_cast<int>(shard));
    if (s.ok() || absl::IsUnimplemented(s) || !first.ok()) continue;
    first = absl::Status(s.code(), absl::StrCat("releasing the claim of shard ", shard,
                                                " of job '", job, "': ", s.message()));
  }
  return first;
}

}  // namespace zerostate::server
