#include "client/plan.h"

#include <algorithm>

namespace zerostate::client {
namespace {

// Splits `r` into at most `parts` ranges whose inner edges lie on
// multiples of `align` (of the whole element space, not of r.begin: with
// `align` a multiple of the block, no two streams share a block), as even
// as those edges allow, and no more than r's size in `align`s (a small
// range stays whole).
void SplitAligned(uint32_t shard, Range r, int parts, uint64_t align,
                  std::vector<StreamPlan>* out) {
  // r is cut into `segments` pieces by the multiples of align inside it;
  // edge i of n (0 < i < n) is the start of piece segments * i / n.
  const uint64_t first = (r.begin / align + 1) * align;  // the first multiple past r.begin
  const uint64_t inner = first < r.end ? (r.end - 1 - first) / align + 1 : 0;
  const uint64_t segments = inner + 1;
  const uint64_t n = std::min<uint64_t>({static_cast<uint64_t>(parts), segments,
                                         (r.size() + align - 1) / align});
  uint64_t begin = r.begin;
  for (uint64_t i = 1; i <= n; ++i) {
    const uint64_t end = i == n ? r.end : first + (segments * i / n - 1) * align;
    if (end > begin) out->push_back(StreamPlan{shard, Range{begin, end}});
    begin = std::max(begin, end);
  }
}

}  // namespace

std::vector<StreamPlan> PlanStreams(const Layout& layout, uint32_t num_servers, Range elems,
                                    int streams_per_server, uint64_t align) {
  std::vector<StreamPlan> plans;
  for (const ShardSlice& slice :
       SplitByShard(elems, layout.block_elems, layout.num_blocks(), num_servers)) {
    SplitAligned(slice.shard, slice.elems, streams_per_server, align, &plans);
  }
  return plans;
}

uint32_t ChunkElems(size_t chunk_bytes, size_t elem_bytes, uint32_t block_elems) {
  uint64_t n = chunk_bytes / elem_bytes / 64 * 64;
  return static_cast<uint32_t>(std::clamp<uint64_t>(n, 64, block_elems));
}

}  // namespace zerostate::client
