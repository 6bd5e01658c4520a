#include "client/plan.h"

#include <algorithm>

namespace zerostate::client {
namespace {

// Splits `r` into at most `parts` ranges with inner edges on multiples of
// `align`, as even as the alignment allows.
void SplitAligned(uint32_t shard, Range r, int parts, uint64_t align,
                  std::vector<StreamPlan>* out) {
  uint64_t units = (r.size() + align - 1) / align;
  uint64_t n = std::min<uint64_t>(parts, std::max<uint64_t>(units, 1));
  uint64_t begin = r.begin;
  for (uint64_t i = 1; i <= n; ++i) {
    uint64_t end = i == n ? r.end : std::min(r.end, r.begin + units * i / n * align);
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
