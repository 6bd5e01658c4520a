// A backup that takes over its lost primary's shard on its own
// (docs/reliability.md, "Membership and fencing"): when the membership
// reports that a shard's primary claim vanished (its holder died, hung, or
// was cut off from etcd past its lease), each server holding a copy of
// that shard claims it (Primaries::Serve), the shard's first backup at
// once, the next ones a stagger later each (so the ring's order decides
// when every backup is alive, and etcd decides between any that race). A
// hung primary is so replaced a lease's TTL after its last keepalive, as a
// dead one is, without waiting for a client to time out and ask; when it
// wakes it is fenced (its lease lapsed) and its late steps are refused by
// the new primary's epoch (fencing, replicator.h).
//
// Claims run on a thread of this object's own, never on the membership's
// watch thread. Thread-safe.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/core/job_registry.h"
#include "server/core/primaries.h"
#include "server/membership/membership.h"

namespace zerostate::server {

class Takeover {
 public:
  struct Options {
    // How much later than the backup before it in the ring a backup
    // claims (k >= 2): long enough for an etcd round trip.
    absl::Duration stagger = absl::Milliseconds(500);
  };

  // Registers this object as `membership`'s OnPrimaryLost callback (the
  // only one: it replaces any other). `membership`, `jobs` and `primaries`
  // must outlive this object.
  Takeover(Membership& membership, JobRegistry& jobs, Primaries& primaries, Options options);
  // Unregisters the callback and stops the thread; a claim in progress
  // ends first (bounded by the membership's call timeout).
  ~Takeover();
  Takeover(const Takeover&) = delete;
  Takeover& operator=(const Takeover&) = delete;

  // The delay before this server (the job's server `self`) claims `shard`
  // of a job with `replicas` backups on `servers` servers: `stagger` times
  // its place among the shard's backups (0 for the first); nullopt when it
  // holds no copy of the shard. Pure, for tests.
  static std::optional<absl::Duration> ClaimDelay(uint32_t servers, uint32_t replicas,
                                                  uint32_t shard, uint32_t self,
                                                  absl::Duration stagger);

 private:
  struct Lost {
    std::string job;
    uint32_t shard;
    absl::Time due;  // set by the thread
  };
  // What the membership's callback and the thread share: the callback may
  // still run while this object is destroyed, so it holds the queue, not
  // the object.
  struct Queue {
    absl::Mutex mu;
    std::deque<Lost> lost ABSL_GUARDED_BY(mu);
    bool stop ABSL_GUARDED_BY(mu) = false;
  };
  // The thread: takes the lost shards the callback queued, and claims
  // each once its delay passed.
  void Run();
  // When to claim `lost` (ClaimDelay from now); nullopt: never (this
  // server holds no copy of it).
  std::optional<absl::Time> Due(const Lost& lost) const;
  // Claims `lost.shard` if this server holds a copy of it and no live
  // primary took it meanwhile.
  void Claim(const Lost& lost);

  Membership& membership_;
  JobRegistry& jobs_;
  Primaries& primaries_;
  const Options options_;
  const std::shared_ptr<Queue> queue_;
  std::thread thread_;
};

}  // namespace zerostate::server
