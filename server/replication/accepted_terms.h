// A backup's memory of its shards' primaries (docs/reliability.md,
// "Replicated shards"): for each (job, shard) this server holds a copy of,
// the newest primary term it accepted a replication message from (a step,
// a step's sum, a catch-up). Every message a primary sends carries its
// term (v1::SenderTerm: its address and its claim's fencing epoch); a
// message of a term older than the one accepted comes from a primary that
// was deposed (a newer primary's message reached this copy first) and is
// refused, so with k >= 2 a deposed primary's step is refused by every
// backup that heard of its successor, not only by the successor itself
// (ReplicaServiceImpl::CheckNotPrimary). A newer term is accepted and
// remembered at once, before the message is applied: that a primary holds
// that epoch is a fact about the cluster, whatever becomes of the message.
//
// Epochs order claims as the membership makes them: in etcd the create
// revision of primaries/<job>/<shard>, larger for every new claim;
// StaticMembership's claim times (one host's clock).
//
// Thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "server/membership/membership.h"

namespace zerostate::server {

class AcceptedTerms {
 public:
  // Admits a message (`what`: "step", "step's sum", "catch-up") to this
  // server's copy of shard `shard` of `job`, sent under `term`: OK when
  // term.epoch is at least the newest epoch accepted for the shard (a
  // newer one is remembered: every older term is refused from now on).
  // Errors, nothing remembered: INVALID_ARGUMENT when term.epoch is not
  // positive or term.primary is empty; ABORTED naming both terms when
  // term.epoch is older than the accepted one (the sender was deposed), or
  // equal to it under another primary's name (one claim, one holder).
  [[nodiscard]] absl::Status Admit(const std::string& job, uint32_t shard, const PrimaryTerm& term,
                                   const char* what) ABSL_LOCKS_EXCLUDED(mu_);

  // The newest term accepted for (job, shard); nullopt when none was.
  std::optional<PrimaryTerm> Accepted(const std::string& job, uint32_t shard) const
      ABSL_LOCKS_EXCLUDED(mu_);

  // Forgets the job's terms (it was deleted; a job registered again under
  // its id starts anew, and its primaries' claims are newer anyway).
  void Forget(const std::string& job) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::pair<std::string, uint32_t>, PrimaryTerm> accepted_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace zerostate::server
