// How the flat gradient space is cut for overlap and split inside a node:
// the bucket plan both drivers (zerostate-worker, zerostate.torch through
// trainer/engine/zerostate_engine_c.h) push and gather by.
//
// Buckets are block-aligned ranges of the flat space in the order backward
// finishes them (last layer first): bucket k becomes final when backward
// reports everything from its begin on ready. Inside a node, each bucket is
// split among the L local ranks (LocalShare): rank r reduces, pushes and
// gathers only its share, and the all-gather gives every rank the rest.
// Thread-safe: pure functions.
#pragma once

#include <cstdint>
#include <vector>

#include "common/job_spec.h"
#include "common/shard_map.h"

namespace zerostate::trainer {

// The engine's cap on a bucket (BackwardBuckets' max_elems) unless
// TrainConfig.bucket_elems sets one: 16 MiB of
// fp32, about 0.3 ms of a device-to-host copy at 55 GB/s, so the first
// push of a layer leaves that soon after its backward, not after the
// whole layer's copy (a 8192 x 8192 layer: 268 MB, about 5 ms).
inline constexpr uint64_t kMaxBucketElems = uint64_t{1} << 22;

// Cuts [0, layout.used_elems) at the block boundaries at or after each of
// `ready_points` (the flat offsets backward reports, any order) into
// pieces, then, from the top down, joins consecutive pieces into one
// bucket while it stays within `max_elems` (rounded up to whole blocks),
// so that small parameters share a bucket: each bucket costs an event, a
// device-to-host copy and a push per step, and each parameter cut by a
// bucket's edge an extra add per micro-batch. A piece longer than the cap
// is cut into pieces of that length from its begin, the last one shorter,
// so that a large layer's gradient leaves in parts while the rest of it
// is still copied off the device, and its weights land in parts.
// max_elems 0: no cap and no joining (a bucket per piece). Returns
// non-empty ranges in descending order of offset, covering the used space
// (the padding after the last tensor is never pushed nor gathered: it is
// zero on both sides).
std::vector<Range> BackwardBuckets(const Layout& layout, std::vector<uint64_t> ready_points,
                                   uint64_t max_elems = 0);

// Local rank `rank`'s share of `bucket` among `ranks`: in rank order,
// contiguous chunks of LocalChunk(bucket, ranks) elements (the last ones
// shorter or empty), so that NCCL's equal-count reduce-scatter and
// all-gather map onto them with padding.
// REQUIRES: ranks >= 1, rank < ranks.
Range LocalShare(Range bucket, uint32_t ranks, uint32_t rank);

// The chunk length of LocalShare: ceil(bucket / ranks) rounded up to
// kTensorAlignElems.
uint64_t LocalChunk(Range bucket, uint32_t ranks);

// One bucket of a rank's plan: its range of the flat space, the rank's
// share of it (LocalShare), and where that share lies in the rank's
// staging (the sum of the shares of the buckets before it).
struct PlannedBucket {
  Range elems;
  Range share;
  uint64_t staging = 0;
  bool operator==(const PlannedBucket&) const = default;
};

// BackwardBuckets(layout, ready_points, max_elems), each bucket with local
// rank `rank`'s share among `ranks` and its staging offset; the staging a
// rank needs is the last bucket's staging plus its share's size.
// REQUIRES: ranks >= 1, rank < ranks.
std::vector<PlannedBucket> PlanBuckets(const Layout& layout, std::vector<uint64_t> ready_points,
                                       uint64_t max_elems, uint32_t ranks, uint32_t rank);

}  // namespace zerostate::trainer
