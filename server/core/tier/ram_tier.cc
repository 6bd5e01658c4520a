#include "server/core/tier/ram_tier.h"

#include <cstring>
#include <utility>

namespace zerostate::server {

RamTier::RamTier(TierShape shape) : StateTier(shape) {
  blocks_.reserve(shape.num_blocks);
  for (uint64_t b = 0; b < shape.num_blocks; ++b) blocks_.emplace_back(shape.block_floats());
}

absl::Status RamTier::Load(uint64_t b, float* out) {
  std::memcpy(out, blocks_[b].data(), shape().block_floats() * sizeof(float));
  return absl::OkStatus();
}

absl::Status RamTier::Store(uint64_t b, const float* in) {
  std::memcpy(blocks_[b].data(), in, shape().block_floats() * sizeof(float));
  return absl::OkStatus();
}

absl::Status RamTier::Update(const std::vector<uint64_t>& blocks, ThreadPool& pool,
                             const std::function<bool(uint64_t b, float* state)>& compute,
                             const std::function<void(uint64_t b)>& commit) {
  pool.ParallelFor(blocks.size(), [&](size_t i) {
    uint64_t b = blocks[i];
    if (compute(b, blocks_[b].data())) commit(b);
  });
  return absl::OkStatus();
}

absl::Status RamTier::Exchange(uint64_t b, AlignedBuffer<float>& next) {
  if (next.size() != shape().block_floats()) {
    return absl::InvalidArgumentError("exchange: the buffer is not one block's state");
  }
  std::swap(blocks_[b], next);
  return absl::OkStatus();
}

uint64_t RamTier::ram_bytes() const {
  return shape().num_blocks * shape().block_floats() * sizeof(float);
}

}  // namespace zerostate::server
