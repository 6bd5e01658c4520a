// One job's shard on this server: the owner of its parts, each in its own
// file with its own contract.
//
//   JobShard      (job_shard.h)     what the parts share: spec, placement,
//                                   the blocks, their tier and waits;
//                                   progress, shutdown, deletion
//   JobPushes     (job_pushes.h)    gradient pushes, in-place claims,
//                                   staging waits, streamed initial weights,
//                                   a backup's replicated step
//   JobStep       (job_step.h)      GradStats, Step (and the Step sent
//                                   ahead), the optimizer pass
//   JobGathers    (job_gathers.h)   Gather and a block's whole state
//   JobSnapshots  (job_snapshots.h) checkpoints' copy-on-write snapshots,
//                                   and restore from a checkpoint
//   HeldSteps     (held_steps.h)    a backup's steps acknowledged to its
//                                   primary, applied behind it
//
// Job creates them and gives access to them; callers call the part they
// need (job.pushes().Push(...), job.step().Step(...)). The core returns
// plain results (ShardProgress); the edges fill the protos.
//
// Thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/job_spec.h"
#include "common/shard_map.h"
#include "server/core/job_gathers.h"
#include "server/core/job_pushes.h"
#include "server/core/job_shard.h"
#include "server/core/job_snapshots.h"
#include "server/core/held_steps.h"
#include "server/core/job_step.h"
#include "server/core/staging_budget.h"
#include "server/core/tier/tier_factory.h"

namespace zerostate::server {

class Job {
 public:
  // Allocates the shard's blocks and initializes the weights (seeded, or
  // zero awaiting JobPushes::InitWeights). The state lives in the tier
  // spec.tier() chooses, built with `tiers` (tier_factory.h). REQUIRES:
  // spec normalized, shard_index < servers.size(). Errors: those of
  // MakeTier, the tier's I/O. With initialize=false the weights stay zero
  // for JobSnapshots::RestoreBlock. Early nodes' staging buffers come from
  // `staging` (null: unbounded; the server's --staging_budget_bytes
  // otherwise). `weight_copy`: whether a RAM-tier job keeps a weight_dtype
  // copy for gathers (KeepsLowpCopy, core/job_shard.h).
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<Job>> Create(
      v1::JobSpec spec, std::vector<std::string> servers, uint32_t shard_index,
      bool initialize = true, const TierOptions& tiers = TierOptions(),
      std::shared_ptr<StagingBudget> staging = nullptr, bool weight_copy = true);

  // RAM a job with this spec and shard would hold, before any staging: on
  // TIER_NVME only the low-precision copy, the gradient accumulator and the
  // tier's cache budget. The spec counts too (3x its size: names are kept
  // thrice), so that long tensor names are charged to the budget.
  static uint64_t EstimateBytes(const v1::JobSpec& spec, uint64_t shard_blocks,
                                const TierOptions& tiers = TierOptions(),
                                bool weight_copy = true);

  Job(const Job&) = delete;
  Job& operator=(const Job&) = delete;

  // The job's identity (its shard's).
  const v1::JobSpec& spec() const { return shard_.spec(); }
  const Layout& layout() const { return shard_.layout(); }
  const std::vector<std::string>& servers() const { return shard_.servers(); }
  uint32_t shard_index() const { return shard_.shard_index(); }
  Range blocks() const { return shard_.blocks(); }
  // EstimateBytes of this job, as it was created.
  uint64_t state_bytes() const { return state_bytes_; }

  // The parts.
  JobShard& shard() { return shard_; }
  const JobShard& shard() const { return shard_; }
  JobPushes& pushes() { return pushes_; }
  JobStep& step() { return step_; }
  const JobStep& step() const { return step_; }
  JobGathers& gathers() { return gathers_; }
  JobSnapshots& snapshots() { return snapshots_; }
  // A backup copy's steps acknowledged to its primary, not yet applied.
  HeldSteps& held() { return held_; }

 private:
  Job(v1::JobSpec spec, std::vector<std::string> servers, uint32_t shard_index,
      std::shared_ptr<StagingBudget> staging, bool weight_copy);

  // First: the other parts hold references to it and use it until they are
  // gone (the step's speculation tasks, which ~JobStep waits for, use its
  // blocks and tier).
  JobShard shard_;
  uint64_t state_bytes_ = 0;  // constant after Create
  JobStep step_{shard_.StepEnv()};
  JobPushes pushes_{shard_, step_};
  JobGathers gathers_{shard_, step_};
  JobSnapshots snapshots_{shard_, step_};
  HeldSteps held_{pushes_, step_};
};

}  // namespace zerostate::server
