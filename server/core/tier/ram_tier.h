// The RAM tier: every block's state in one aligned heap array. Update runs
// the blocks in parallel on the pool, in place.
#pragma once

#include <vector>

#include "server/core/aligned_buffer.h"
#include "server/core/tier/state_tier.h"

namespace zerostate::server {

class RamTier final : public StateTier {
 public:
  explicit RamTier(TierShape shape);

  [[nodiscard]] absl::Status Load(uint64_t b, float* out) override;
  [[nodiscard]] absl::Status Store(uint64_t b, const float* in) override;
  [[nodiscard]] absl::Status Update(const std::vector<uint64_t>& blocks, ThreadPool& pool,
                                    const std::function<bool(uint64_t b, float* state)>& compute,
                                    const std::function<void(uint64_t b)>& commit) override;
  bool in_place() const override { return true; }
  uint64_t ram_bytes() const override;
  const float* Resident(uint64_t b) override { return blocks_[b].data(); }
  [[nodiscard]] absl::Status Exchange(uint64_t b, AlignedBuffer<float>& next) override;

 private:
  std::vector<AlignedBuffer<float>> blocks_;
};

}  // namespace zerostate::server
