// One lost copy's catch-up, in the background (docs/reliability.md,
// "Catch-up"). The Step that finds the copy's server reachable again reads
// the primary's shard state at its step's version (SnapshotOf, before its
// pass) and starts a CatchUp with it and that step. A thread of the
// CatchUp's own sends the state (ReplicaService.Seed), then the steps of
// its backlog, in order, each as a live copy's: its sums on the copy's
// data plane lanes, then its request (ReplicaService.ApplyStep; whole on
// ApplyStep until the copy's data port is known), while the
// later Steps go on without the copy and hand it their steps (Offer). A
// step leaves the backlog only once the copy acknowledged it, so the copy
// holds every step before the first one still in the backlog; the backup's
// version check refuses a step out of order. Once the seed is
// acknowledged and the backlog holds at most the step in flight, or the
// copy did not gain on the primary since the step before, the next step's
// Offer says so (kCaughtUp): that step goes to the copy as a live copy's
// once the backlog is acknowledged (Drain: the Step waits for that, not
// for the seed), and its acknowledgement makes the copy live again
// (ShardReplicator). Without the second rule a copy that applies steps
// no faster than the primary decides them would chase the primary for
// ever: on the GPU machine's 16 cores (replication_bench
// --params=16777216, 40 ms steps), with the steps whole on ApplyStep, it
// never rejoined in 50 steps. A failed call, or a step that would
// take the backlog past its bound, drops the catch-up (kDropped, the
// backlog freed); the copy stays lost.
//
// Thread-safe. Lock order: this object's mutex, then the Replicator's.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "server/core/job.h"
#include "server/replication/replicator.h"

namespace zerostate::server {

// The shard's state as a lost copy gets it (Replicator::Seed).
struct ShardSnapshot {
  v1::SeedPart first;  // job, shard, version, applied steps, trainer state
  std::vector<v1::ShardBlock> blocks;
  uint64_t bytes = 0;  // of the blocks' states
};

// Reads every block of `job`'s shard at the shard's version (JobGathers::
// ReadBlockAt: called by the Step before its pass). Errors:
// FAILED_PRECONDITION when the blocks are at different versions; the
// tier's.
[[nodiscard]] absl::StatusOr<std::shared_ptr<const ShardSnapshot>> SnapshotOf(Job& job);

class CatchUp {
 public:
  using Payload = StepReplicator::Payload;
  // The copy caught up: server `server` at `address`, a copy of `shard` of
  // job `job_id`, whose calls carry `token`.
  struct Copy {
    std::string job_id;
    uint32_t shard = 0;
    uint32_t server = 0;
    std::string address;
    std::string token;
  };
  // What Offer did with a step.
  enum class Outcome {
    kKept,      // in the backlog (or held already: a resent step)
    kCaughtUp,  // after Drain the copy holds every step before it: it takes it as a live copy
    kDropped,   // the catch-up failed (failure() says why)
  };

  // Starts the thread that seeds `copy` with `snapshot`; the steps from
  // the snapshot's version on come by Offer. `owner` must outlive this.
  CatchUp(Replicator& owner, Copy copy, std::shared_ptr<const ShardSnapshot> snapshot);
  // Cancels the call in flight, frees the backlog and joins the thread.
  ~CatchUp();
  CatchUp(const CatchUp&) = delete;
  CatchUp& operator=(const CatchUp&) = delete;

  // Step `payload` (whole), decided by the primary, steps coming in order
  // (a resent one again): kept in the backlog for the copy; kCaughtUp once
  // the seed was acknowledged and the backlog is down to the step in
  // flight or did not shrink since the last Offer (this step is not kept;
  // no Offer may follow; Drain waits for the backlog);
  // kDropped (and the backlog freed) once a call failed, or when the step
  // would take the backlog past Replicator::catchup_backlog_bytes()
  // (RESOURCE_EXHAUSTED), or it is not the step that comes next
  // (FAILED_PRECONDITION: a step was missed).
  Outcome Offer(std::shared_ptr<const Payload> payload);
  // Why the catch-up was dropped (OK while it was not). A copy that
  // answered ABORTED keeps that code (it serves the shard as primary now).
  absl::Status failure() const;
  // After kCaughtUp: waits until the copy acknowledged every step kept
  // (at once when none is). Errors: failure()'s.
  [[nodiscard]] absl::Status Drain();
  const Copy& copy() const { return copy_; }
  uint64_t seed_bytes() const { return seed_bytes_; }

 private:
  // The thread: the seed, then the backlog's steps as they come.
  void Run(std::shared_ptr<const ShardSnapshot> snapshot);
  // Waits for the backlog's first step (false: stopped or failed).
  bool Next(std::shared_ptr<const Payload>* next);
  // One backlog step: its sums on Replicator::lanes() connections to the
  // copy's data plane (REPLICA_SUM frames under a transfer of its own),
  // then its request on ApplyStep; whole on ApplyStep when no lane can be
  // had (the copy's data port is learned from its first ApplyStep answer)
  // or one failed.
  [[nodiscard]] absl::Status SendStep(const Payload& step);
  // Sends `step`'s sums whose index is `first` modulo `stride` on `lane`.
  [[nodiscard]] absl::Status SendSums(client::DataConn& lane, const Payload& step,
                                      uint64_t transfer, size_t first, size_t stride) const;
  // Dropped: `why` kept (the first), the backlog freed.
  void FailLocked(absl::Status why) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ClearLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  Replicator& owner_;
  const Copy copy_;
  const uint64_t seed_bytes_;
  const uint64_t bound_;
  CallCanceller cancel_;

  mutable absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  bool seeded_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t next_step_ ABSL_GUARDED_BY(mu_);  // the step the backlog takes next
  // Steps not acknowledged by the copy yet, oldest first, and their bytes.
  std::deque<std::shared_ptr<const Payload>> backlog_ ABSL_GUARDED_BY(mu_);
  std::vector<int> lane_fds_ ABSL_GUARDED_BY(mu_);  // of the step in flight, to cancel it
  uint64_t next_transfer_ = 0;                      // the thread's
  uint64_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
  // The backlog's steps after the last Offer kept one, and whether the
  // seed was across then: whether the copy gains on the primary.
  size_t left_after_offer_ ABSL_GUARDED_BY(mu_) = 0;
  bool seeded_at_offer_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status failure_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

}  // namespace zerostate::server
