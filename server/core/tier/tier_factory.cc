#include "server/core/tier/tier_factory.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "server/core/tier/nvme_tier.h"
#include "server/core/tier/ram_tier.h"

namespace zerostate::server {

absl::Status CheckTier(v1::StorageTier tier, const TierOptions& options) {
  switch (tier) {
    case v1::TIER_RAM:
      return absl::OkStatus();
    case v1::TIER_NVME:
      if (options.nvme_dir.empty()) {
        return absl::FailedPreconditionError(
            "tier: TIER_NVME needs a server started with --nvme_dir; this one has none");
      }
      return absl::OkStatus();
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("tier: ", static_cast<int>(tier), " is not a known StorageTier"));
  }
}

uint64_t TierRamBytes(v1::StorageTier tier, uint64_t shard_bytes, const TierOptions& options) {
  if (tier != v1::TIER_NVME) return shard_bytes;
  return std::min(shard_bytes, options.nvme_cache_bytes);
}

namespace {

absl::StatusOr<std::unique_ptr<StateTier>> MakeUnwrappedTier(v1::StorageTier tier, TierShape shape,
                                                             const std::string& job_id,
                                                             const std::string& name,
                                                             const TierOptions& options) {
  if (tier == v1::TIER_RAM) return std::make_unique<RamTier>(shape);
  NvmeTierOptions o;
  o.dir = options.nvme_dir;
  o.name = name;
  o.cache_bytes = options.nvme_cache_bytes;
  o.queue_depth = options.nvme_queue_depth;
  o.env = options.env;
  if (options.metrics) o.metrics = options.metrics(job_id);
  auto nvme = NvmeTier::Create(shape, std::move(o));
  if (!nvme.ok()) return nvme.status();
  return std::unique_ptr<StateTier>(*std::move(nvme));
}

}  // namespace

absl::StatusOr<std::unique_ptr<StateTier>> MakeTier(v1::StorageTier tier, TierShape shape,
                                                    const std::string& job_id,
                                                    const std::string& name,
                                                    const TierOptions& options) {
  if (auto s = CheckTier(tier, options); !s.ok()) return s;
  auto made = MakeUnwrappedTier(tier, shape, job_id, name, options);
  if (!made.ok() || !options.wrap) return made;
  return options.wrap(*std::move(made));
}

}  // namespace zerostate::server
