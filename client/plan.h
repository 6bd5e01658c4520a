// Routing: which server receives which part of an element range, and how a
// server's part is split over its streams. Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <vector>

#include "common/job_spec.h"
#include "common/shard_map.h"

namespace zerostate::client {

// One stream's work: a contiguous element range inside one server's shard.
struct StreamPlan {
  uint32_t shard = 0;
  Range elems;
  bool operator==(const StreamPlan&) const = default;
};

// Splits `elems` by owning shard (common/shard_map.h), then each shard's
// part into at most `streams_per_server` contiguous, non-empty ranges whose
// inner boundaries lie on multiples of `align` elements (of the element
// space: with `align` a multiple of the block, no block is cut between two
// streams, whose server then sees every piece of it in one call). Streams of
// one shard are adjacent, in order.
// REQUIRES: elems inside the layout, num_servers >= 1, streams_per_server >= 1, align >= 1.
std::vector<StreamPlan> PlanStreams(const Layout& layout, uint32_t num_servers, Range elems,
                                    int streams_per_server, uint64_t align);

// Elements per chunk for `chunk_bytes` of payload in a dtype of
// `elem_bytes`, rounded down to a multiple of 64 and capped at one block.
uint32_t ChunkElems(size_t chunk_bytes, size_t elem_bytes, uint32_t block_elems);

}  // namespace zerostate::client
