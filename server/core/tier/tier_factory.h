// Chooses and builds a job's StateTier from its JobSpec.tier and the
// server's tier options (--nvme_dir, --nvme_cache_bytes, --nvme_queue_depth).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "server/core/io/env.h"
#include "server/core/tier/state_tier.h"
#include "server/core/tier/tier_metrics.h"
#include "zerostate/v1/state_service.pb.h"

namespace zerostate::server {

namespace v1 = ::zerostate::v1;

// What a server offers its jobs' tiers; constant after the server starts.
struct TierOptions {
  // Directory for NVMe-tier files; empty: the server refuses TIER_NVME jobs.
  std::string nvme_dir;
  // RAM cache of each NVMe job's shard, in bytes.
  uint64_t nvme_cache_bytes = 256ull << 20;
  // Blocks in flight in each NVMe job's step pipeline (>= 2).
  int nvme_queue_depth = 8;
  // I/O layer; null: io_uring. Tests pass an io::FaultEnv.
  std::shared_ptr<io::Env> env;
  // Makes the metrics sink of a job's tier; empty: no metrics.
  std::function<std::shared_ptr<TierMetricsSink>(const std::string& job_id)> metrics;
  // Tests: wraps each tier built (to observe or pause its Update between a
  // block's compute and commit); empty: the tier is used as built.
  std::function<std::unique_ptr<StateTier>(std::unique_ptr<StateTier>)> wrap;
};

// Whether this server can hold a job on `tier`. Errors: FAILED_PRECONDITION
// (TIER_NVME without --nvme_dir, naming the flag), INVALID_ARGUMENT (an
// unknown tier value, naming the field).
[[nodiscard]] absl::Status CheckTier(v1::StorageTier tier, const TierOptions& options);

// RAM the tier of a shard of `shard_bytes` bytes of state holds: all of it
// on TIER_RAM, the cache budget (at most the state) on TIER_NVME.
uint64_t TierRamBytes(v1::StorageTier tier, uint64_t shard_bytes, const TierOptions& options);

// Builds the tier. `name` names the NVMe file (unique per job shard).
// Errors: those of CheckTier and NvmeTier::Create.
[[nodiscard]] absl::StatusOr<std::unique_ptr<StateTier>> MakeTier(v1::StorageTier tier,
                                                                  TierShape shape,
                                                                  const std::string& job_id,
                                                                  const std::string& name,
                                                                  const TierOptions& options);

}  // namespace zerostate::server
