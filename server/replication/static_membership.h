// A Membership without an engine behind it: each server decides
// alone. Primary() knows only the claims made through this object, Claim()
// always succeeds, the lease never lapses. It gives the failover path its
// shape where no etcd runs (tests, one failure domain); it cannot fence a
// partitioned primary, which is what EtcdMembership
// (server/membership/etcd_membership.h) is for. A claim's epoch is the
// time it was made, in microseconds since the Unix epoch (and above this
// object's earlier ones), so that claims made by different servers of one
// host compare as etcd's revisions do: a later claim, a larger epoch (the
// backups refuse a term older than one they accepted: accepted_terms.h).
// Across hosts that holds only as far as their clocks agree. Thread-safe.
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "server/membership/membership.h"

namespace zerostate::server {

class StaticMembership final : public Membership {
 public:
  // `self`: this server's address; `members`: every server's.
  StaticMembership(std::string self, std::vector<std::string> members)
      : self_(std::move(self)), members_(std::move(members)) {}

  const std::string& self() const override { return self_; }
  // NOT_FOUND unless this server claimed the shard.
  [[nodiscard]] absl::StatusOr<PrimaryTerm> Primary(const std::string& job, int shard) override;
  // Takes the shard (epoch: now, in microseconds, and more than any
  // before), or returns the term held.
  [[nodiscard]] absl::StatusOr<PrimaryTerm> Claim(const std::string& job, int shard) override;
  bool LeaseValid() const override { return true; }
  // Forgets this object's claim of the shard, if any; the next Claim takes
  // it with a larger epoch.
  [[nodiscard]] absl::Status Release(const std::string& job, int shard) override;
  [[nodiscard]] absl::StatusOr<std::vector<std::string>> Members() override { return members_; }
  // Never called: nothing here learns of another server's loss.
  void OnPrimaryLost(std::function<void(const std::string&, int)>) override {}

 private:
  const std::string self_;
  const std::vector<std::string> members_;
  absl::Mutex mu_;
  absl::flat_hash_map<std::pair<std::string, int>, PrimaryTerm> claims_ ABSL_GUARDED_BY(mu_);
  int64_t epoch_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace zerostate::server
