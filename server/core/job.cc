#include "server/core/job.h"

#include <utility>

#include "server/core/gradient_accumulator.h"
#include "server/core/optimizer/optimizer.h"

namespace zerostate::server {

Job::Job(v1::JobSpec spec, std::vector<std::string> servers, uint32_t shard_index,
         std::shared_ptr<StagingBudget> staging, bool weight_copy)
    : shard_(std::move(spec), std::move(servers), shard_index, std::move(staging), weight_copy) {}

absl::StatusOr<std::unique_ptr<Job>> Job::Create(v1::JobSpec spec,
                                                 std::vector<std::string> servers,
                                                 uint32_t shard_index, bool initialize,
                                                 const TierOptions& tiers,
                                                 std::shared_ptr<StagingBudget> staging,
                                                 bool weight_copy) {
  std::unique_ptr<Job> job(new Job(std::move(spec), std::move(servers), shard_index,
                                   std::move(staging), weight_copy));
  if (auto s = job->shard_.Open(tiers); !s.ok()) return s;
  job->state_bytes_ = EstimateBytes(job->spec(), job->blocks().size(), tiers, weight_copy);
  if (!initialize) return job;
  if (auto s = job->shard_.InitializeWeights(); !s.ok()) return s;
  return job;
}

uint64_t Job::EstimateBytes(const v1::JobSpec& spec, uint64_t shard_blocks,
                            const TierOptions& tiers, bool weight_copy) {
  const bool lowp = KeepsLowpCopy(spec, weight_copy);
  const uint64_t elems = shard_blocks * spec.block_elems();
  const uint64_t state = shard_blocks * StateLayoutOf(spec).total_floats() * sizeof(float);
  // The gradient: an fp32 sum, or one node's bf16 push where it lands.
  const uint64_t gradient = LandsGradientAsBf16(spec) ? 2 : 4;
  const uint64_t in_ram = elems * (gradient + (lowp ? 2 : 0));
  // The spec itself (tensor names above all): the job keeps it, its layout
  // a copy of every name, its info and metrics labels another.
  const uint64_t spec_bytes = 3 * spec.ByteSizeLong();
  // Speculation keeps each stepped block's previous state until its Step,
  // and the next low-precision copy aside (server/core/job_step.h).
  const uint64_t speculation = spec.speculative_step() ? state + elems * (lowp ? 2 : 0) : 0;
  return in_ram + spec_bytes + speculation + TierRamBytes(spec.tier(), state, tiers);
}

}  // namespace zerostate::server
