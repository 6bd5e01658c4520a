// Where a shard's optimizer state lives: the fp32 master weights and the
// optimizer moments of every block. The RAM tier (ram_tier.h) keeps them in
// memory; the NVMe tier keeps them in O_DIRECT files behind a RAM cache.
//
// A block's state is block_floats() floats laid out by StateLayout
// (server/core/optimizer/state_layout.h): the fp32 master weights, then
// the arrays - 1 moments in the shape's moment format (fp32: [param, m,
// v][0 .. arrays) arrays of block_elems floats). The tiers move it as
// opaque bytes. Blocks are addressed by their index within
// the shard (0 .. num_blocks).
//
// Thread safety: calls for different blocks may run concurrently. Calls
// for the same block are serialized by the caller (the Job holds that
// block's mutex, and runs at most one pass per job at a time; a
// speculative step, TIER_RAM only, also steps single blocks in Updates of
// their own, concurrently with a pass, each block under its mutex).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/status.h"
#include "server/core/aligned_buffer.h"
#include "server/core/optimizer/state_layout.h"
#include "server/core/thread_pool.h"

namespace zerostate::server {

struct TierShape {
  uint64_t num_blocks = 0;
  uint32_t block_elems = 0;
  int arrays = 1;  // 1 + number of optimizer moments
  MomentFormat format = MomentFormat::kFp32;
  StateLayout layout() const { return {block_elems, arrays - 1, format}; }
  size_t block_floats() const { return layout().total_floats(); }
};

class StateTier {
 public:
  virtual ~StateTier() = default;

  const TierShape& shape() const { return shape_; }

  // Copies block `b`'s state into `out` (shape().block_floats() floats,
  // 64-byte aligned). Returns the state as of the last commit.
  // Errors: the tier's I/O errors (INTERNAL, DATA_LOSS for a checksum).
  [[nodiscard]] virtual absl::Status Load(uint64_t b, float* out) = 0;

  // Replaces block `b`'s state durably enough for the tier (the NVMe tier
  // has written it when this returns). The previous state stays intact if
  // this fails.
  [[nodiscard]] virtual absl::Status Store(uint64_t b, const float* in) = 0;

  // The optimizer step over `blocks`: for each, calls compute(b, state) with
  // the block's state in memory (modifiable in place); compute returns false
  // to leave the block as it was. Once the new state is stored, calls
  // commit(b). A block whose new state could not be stored is never
  // committed and keeps its previous state; the first such error is
  // returned after the remaining blocks were processed or abandoned.
  // compute and commit for one block run on one thread, in that order.
  [[nodiscard]] virtual absl::Status Update(
      const std::vector<uint64_t>& blocks, ThreadPool& pool,
      const std::function<bool(uint64_t b, float* state)>& compute,
      const std::function<void(uint64_t b)>& commit) = 0;

  // True when Update hands compute the block's only copy, so a failed store
  // is impossible and compute may write derived data (the low-precision
  // copy) directly.
  virtual bool in_place() const = 0;

  // RAM the tier holds (state, cache, bounce buffers).
  virtual uint64_t ram_bytes() const = 0;

  // Block `b`'s state where the tier keeps it in RAM, to read in place
  // instead of Load-ing a copy; nullptr when the tier has no resident copy.
  // REQUIRES: the block's mutex held while the state is read.
  virtual const float* Resident(uint64_t b) { return nullptr; }

  // Makes `next` (shape().block_floats() floats) block `b`'s state and
  // hands the previous state back in it, without copying: a state computed
  // aside (a confirmed speculative step) takes the block's place. Only a
  // tier that keeps the state resident can (RAM): others answer
  // FAILED_PRECONDITION and change nothing. REQUIRES: the block's mutex
  // held; may be called from Update's compute for `b` (the state compute
  // got is then the previous one, now in `next`).
  [[nodiscard]] virtual absl::Status Exchange(uint64_t b, AlignedBuffer<float>& next) {
    return absl::FailedPreconditionError("the tier keeps no resident state to exchange");
  }

 protected:
  explicit StateTier(TierShape shape) : shape_(shape) {}

 private:
  const TierShape shape_;
};

}  // namespace zerostate::server
