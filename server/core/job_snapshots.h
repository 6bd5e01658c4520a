// Checkpoints and restore of one job's shard (a part of Job,
// server/core/job.h). A checkpoint (server/core/checkpoint/) of version v
// begins with BeginCheckpoint(v): from then on a step keeps each block's
// state at v before it moves the block past (copy-on-write, through
// JobShard::cow_version), so training goes on while SnapshotBlock copies
// each block's state at v out. Restore (JobRegistry::Restore) loads a
// checkpoint's blocks, applied-step count and trainer state into a job no
// caller sees yet.
//
// Thread-safe. Lock order: the step's pass mutex, then a block's mutex;
// the checkpoint mutex (one checkpoint at a time) is held alone.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/core/job_shard.h"
#include "server/core/job_step.h"

namespace zerostate::server {

class JobSnapshots;

// Ends the checkpoint (stops copy-on-write, frees snapshots) when destroyed.
// May be destroyed on another thread than the one that began the checkpoint.
class CheckpointGuard {
 public:
  // Waits until no other checkpoint of the job runs, then marks one running.
  explicit CheckpointGuard(JobSnapshots* snapshots);
  ~CheckpointGuard();
  CheckpointGuard(const CheckpointGuard&) = delete;
  CheckpointGuard& operator=(const CheckpointGuard&) = delete;

 private:
  JobSnapshots* snapshots_;
};

class JobSnapshots {
 public:
  // Both outlive the JobSnapshots (Job owns all three).
  JobSnapshots(JobShard& shard, JobStep& step) : shard_(shard), step_(step) {}
  JobSnapshots(const JobSnapshots&) = delete;
  JobSnapshots& operator=(const JobSnapshots&) = delete;

  // Starts a checkpoint of `version`: from now on each block keeps a copy
  // of its state at `version` before a step moves it past (copy-on-write),
  // so training goes on while the checkpoint is written. One checkpoint
  // per job at a time: a second waits; so does one begun during a step's
  // optimizer pass, until the pass ends. Errors: FAILED_PRECONDITION when a
  // block is already past `version`.
  [[nodiscard]] absl::StatusOr<std::unique_ptr<CheckpointGuard>> BeginCheckpoint(uint64_t version);

  // Copies block `local`'s state at the checkpoint's version into `out`
  // (tier shape().block_floats() floats), waiting until the block reaches
  // it. Errors: DEADLINE_EXCEEDED, UNAVAILABLE, the tier's I/O errors.
  [[nodiscard]] absl::Status SnapshotBlock(uint64_t local, uint64_t version, absl::Time deadline,
                                           float* out);

  // Loads block `local`'s state (from a checkpoint) and sets its version.
  // Only for a job not yet visible to callers (JobRegistry::Restore).
  [[nodiscard]] absl::Status RestoreBlock(uint64_t local, const float* state, uint64_t version);
  // Of the steps before `version`, `applied` applied the optimizer (the
  // checkpoint's ShardManifest.applied_steps). Same restriction.
  void RestoreAppliedSteps(uint64_t version, uint64_t applied) {
    step_.applied_steps().Restore(version, applied);
  }
  // Keeps a restored checkpoint's trainer state as version `version`'s.
  // Errors: DATA_LOSS (too large to have come from a Step).
  [[nodiscard]] absl::Status RestoreTrainerState(uint64_t version, const std::string& state);

 private:
  friend class CheckpointGuard;

  JobShard& shard_;
  JobStep& step_;
  absl::Mutex checkpoint_mu_;
  bool checkpoint_running_ ABSL_GUARDED_BY(checkpoint_mu_) = false;  // one at a time
};

}  // namespace zerostate::server
