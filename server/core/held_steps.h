// The steps a backup's copy holds: its primary's steps (request and every
// block's summed gradient, ReplicaService.ApplyStep) that the copy
// acknowledged once it held them, and applies behind the primary
// (JobPushes::ApplyReplicatedStep), oldest first (docs/reliability.md,
// "Replicated shards"). The primary's Step waits for that acknowledgement,
// not for the backup's pass.
//
// The lag is bounded: a copy holds at most `max_held` steps; a step that
// comes beyond that applies the oldest first, on its caller's thread. The
// held steps are applied (ApplyAll) before the copy answers anything as
// primary (a failover replays them: routing.h) or serves its state
// (ReplicaService.ReadShard); a catch-up that replaces the copy's state
// drops them (Drop). A held step the copy fails to apply (its tier's error)
// deposes the copy (JobStep::MarkDeposed: it needs a catch-up) and drops
// the rest.
//
// Thread-safe. Lock order: apply_mu_, then mu_ is never held while a step
// applies (ApplyReplicatedStep takes the job's replica, pass and block
// mutexes under apply_mu_ alone).
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "server/core/job_pushes.h"
#include "server/core/replica_sums.h"
#include "server/core/job_step.h"
#include "server/core/thread_pool.h"
#include "zerostate/v1/state_service.pb.h"

namespace zerostate::server {

class HeldSteps {
 public:
  // How a server's copies apply the steps they hold: at most `max_held`
  // held (>= 1; one more applies the oldest first), applied on the pool as
  // they come, or with `lazy_apply` only when the bound is reached, the
  // copy is read or answers as primary (replication_bench's step's-path
  // figure).
  struct Options {
    size_t max_held = 2;
    bool lazy_apply = false;
  };

  // Both outlive this object (Job owns all three).
  HeldSteps(JobPushes& pushes, JobStep& step) : pushes_(pushes), step_(step) {}
  HeldSteps(const HeldSteps&) = delete;
  HeldSteps& operator=(const HeldSteps&) = delete;

  // Holds step req.step() with `grads` (every block's summed gradient),
  // to apply on `pool` (which outlives the job) later; once applied, the
  // sums go back to `recycle` (null: freed; it outlives the job). First, while
  // `max_held` (>= 1) steps are held, applies the oldest. Returns true when
  // held, false when the copy holds or applied the step already (a
  // primary's retry: acknowledged again). Checked first, nothing changes
  // on an error: INVALID_ARGUMENT (a block outside the shard, missing, of
  // the wrong size, twice), FAILED_PRECONDITION (not the step after the
  // copy's last: it needs a catch-up; or an earlier held step failed to
  // apply).
  [[nodiscard]] absl::StatusOr<bool> Hold(const v1::StepRequest& req,
                                          JobPushes::ReplicatedGrads grads, ThreadPool& pool,
                                          size_t max_held, SumBuffers* recycle = nullptr)
      ABSL_LOCKS_EXCLUDED(apply_mu_, mu_);

  // Applies the oldest held step, if any (a pool task queued per held
  // step, or Hold's bound). Errors: the apply's (the copy is deposed).
  [[nodiscard]] absl::Status ApplyOne() ABSL_LOCKS_EXCLUDED(apply_mu_, mu_);
  // Applies every held step, oldest first: before the copy answers as
  // primary or serves its state. Errors: ApplyOne's.
  [[nodiscard]] absl::Status ApplyAll() ABSL_LOCKS_EXCLUDED(apply_mu_, mu_);
  // Forgets every held step (a catch-up replaces the copy's state), once
  // none applies.
  void Drop() ABSL_LOCKS_EXCLUDED(apply_mu_, mu_);

  // Steps held and not yet applied (read without a lock: a hint).
  size_t count() const { return count_.load(std::memory_order_acquire); }

 private:
  struct Held {
    v1::StepRequest req;
    JobPushes::ReplicatedGrads grads;
    ThreadPool* pool = nullptr;
    SumBuffers* recycle = nullptr;
  };
  // The checks of Hold under mu_: true to hold, false when held or
  // applied already.
  [[nodiscard]] absl::StatusOr<bool> CheckLocked(const v1::StepRequest& req,
                                                 const JobPushes::ReplicatedGrads& grads)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  JobPushes& pushes_;
  JobStep& step_;
  // One apply at a time, oldest first; the held step it applies stays at
  // the front of held_ until it is applied (only holders of apply_mu_
  // remove steps, so it stays put).
  absl::Mutex apply_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  absl::Mutex mu_;
  std::deque<Held> held_ ABSL_GUARDED_BY(mu_);
  absl::Status failed_ ABSL_GUARDED_BY(mu_);  // a held step that did not apply
  std::atomic<size_t> count_{0};
};

}  // namespace zerostate::server
