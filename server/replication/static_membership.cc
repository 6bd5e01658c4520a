#include "server/replication/static_membership.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace zerostate::server {

absl::StatusOr<PrimaryTerm> StaticMembership::Primary(const std::string& job, int shard) {
  absl::MutexLock lock(&mu_);
  auto it = claims_.find({job, shard});
  if (it == claims_.end()) {
    return absl::NotFoundError(
        absl::StrCat("shard ", shard, " of job '", job, "' has not been claimed here"));
  }
  return it->second;
}

absl::StatusOr<PrimaryTerm> StaticMembership::Claim(const std::string& job, int shard) {
  absl::MutexLock lock(&mu_);
  auto [it, inserted] = claims_.try_emplace({job, shard});
  if (inserted) {
    epoch_ = std::max(epoch_ + 1, absl::ToUnixMicros(absl::Now()));
    it->second = PrimaryTerm{self_, epoch_};
  }
  return it->second;
}

absl::Status StaticMembership::Release(const std::string& job, int shard) {
  absl::MutexLock lock(&mu_);
  claims_.erase({job, shard});
  return absl::OkStatus();
}

}  // namespace zerostate::server
