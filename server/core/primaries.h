// Which shards this server answers for as primary: its own shard
// of each replicated job, and the shards it backs up once their primary is
// gone (failover). Decided by a Membership (etcd, or StaticMembership);
// the term of each claim is kept, so a call costs a look-up, not a round
// trip: Membership::Holds, which turns false when this server's lease may
// have lapsed (fencing).
// Thread-safe.
#pragma once

#include <optional>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "server/core/job.h"
#include "server/membership/membership.h"

namespace zerostate::server {

class Primaries {
 public:
  // `membership` must outlive this object.
  explicit Primaries(Membership& membership) : membership_(membership) {}

  // OK when this server may answer for `copy` (its copy of shard
  // copy.shard_index() of a job with replicas) as primary: it holds the
  // shard's claim, or claims it now (its own shard at first use; a backed-
  // up one when no live primary holds it: a failover). A copy recorded
  // behind (SetBehind) claims only while no copy in sync is a live member:
  // an in-sync copy takes the shard first. Errors:
  // UNAVAILABLE "not primary" naming the job, the shard and its primary
  // (or that this server's lease lapsed, or the copy was deposed: fenced);
  // the membership's errors.
  [[nodiscard]] absl::Status Serve(const Job& copy);

  // Where each of `servers` (a job's servers, by name) is dialled now
  // (Membership::Resolve), in order. Calls the membership (etcd): not
  // under a lock. Errors: the membership's.
  [[nodiscard]] absl::StatusOr<std::vector<std::string>> Locate(
      const std::vector<std::string>& servers) const;

  // Records in the membership that the copy of (job, shard) on server
  // `copy` (its address) is behind (it missed an acknowledged step) or in
  // sync again (Membership::SetBehind), under this server's term. Errors:
  // UNAVAILABLE "not primary" when this server does not serve the shard
  // now; the membership's (FAILED_PRECONDITION: deposed). A membership
  // that records nothing (UNIMPLEMENTED) is not an error.
  [[nodiscard]] absl::Status SetBehind(const std::string& job, uint32_t shard,
                                       const std::string& copy, bool behind);

  // This server's term of (job, shard) when it answers for it as primary
  // now (a backup copy that does must refuse its old primary's steps:
  // ReplicaService answers them ABORTED naming this term); else nullopt.
  std::optional<PrimaryTerm> Serving(const std::string& job, uint32_t shard) const;

  // Fences this server for (job, shard) at once, as a lapsed lease does
  // for every shard: its held claim is dropped, so it no longer counts as
  // Serving, and the next Serve asks the membership again (which names the
  // new primary). Called when a backup answered that it serves the shard
  // as primary now (the copy is then deposed: JobStep::MarkDeposed).
  void Fence(const std::string& job, uint32_t shard);

  // Gives up every claim this server holds of the job's shards (it was
  // deleted): Membership::Release of each, so the other members hear of
  // it at once and a job registered again under the id claims anew; the
  // claims are forgotten here whatever the membership answers. Errors: the
  // first of the membership's, naming the shard (that claim then lasts
  // until this server's lease ends); a membership that cannot release
  // (UNIMPLEMENTED) is not an error.
  [[nodiscard]] absl::Status Release(const std::string& job);

 private:
  // OK unless this server's copy is recorded behind and another copy of
  // the shard, not behind, is a live member (UNAVAILABLE "not primary"
  // naming it); the membership's errors.
  [[nodiscard]] absl::Status CheckInSync(const Job& copy);

  Membership& membership_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::pair<std::string, uint32_t>, PrimaryTerm> held_ ABSL_GUARDED_BY(mu_);
};

}  // namespace zerostate::server
