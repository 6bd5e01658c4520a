#include "common/shard_map.h"

#include <algorithm>

namespace zerostate {

Range ShardBlocks(uint64_t num_blocks, uint32_t num_shards, uint32_t shard) {
  // 128-bit products keep the arithmetic exact for any realistic size.
  auto edge = [&](uint64_t s) {
    return static_cast<uint64_t>(static_cast<unsigned __int128>(num_blocks) * s / num_shards);
  };
  return Range{edge(shard), edge(shard + 1)};
}

uint32_t ShardOfBlock(uint64_t num_blocks, uint32_t num_shards, uint64_t block) {
  uint64_t s = static_cast<uint64_t>(static_cast<unsigned __int128>(block) * num_shards /
                                     std::max<uint64_t>(num_blocks, 1));
  while (s > 0 && ShardBlocks(num_blocks, num_shards, s).begin > block) --s;
  while (s + 1 < num_shards && ShardBlocks(num_blocks, num_shards, s).end <= block) ++s;
  return static_cast<uint32_t>(s);
}

std::vector<uint32_t> ReplicaServers(uint32_t num_shards, uint32_t shard, uint32_t replicas) {
  std::vector<uint32_t> servers;
  for (uint32_t r = 0; r <= replicas; ++r) servers.push_back((shard + r) % num_shards);
  return servers;
}

std::vector<uint32_t> BackedUpShards(uint32_t num_shards, uint32_t server, uint32_t replicas) {
  std::vector<uint32_t> shards;
  for (uint32_t r = 1; r <= replicas; ++r) shards.push_back((server + num_shards - r) % num_shards);
  return shards;
}

std::vector<BlockPiece> SplitByBlock(Range elems, uint32_t block_elems, uint32_t max_piece) {
  std::vector<BlockPiece> pieces;
  uint64_t pos = elems.begin;
  while (pos < elems.end) {
    uint64_t block = pos / block_elems;
    uint64_t block_end = (block + 1) * block_elems;
    uint64_t end = std::min({elems.end, block_end, pos + max_piece});
    pieces.push_back(BlockPiece{block, static_cast<uint32_t>(pos - block * block_elems),
                                static_cast<uint32_t>(end - pos)});
    pos = end;
  }
  return pieces;
}

std::vector<ShardSlice> SplitByShard(Range elems, uint32_t block_elems, uint64_t num_blocks,
                                     uint32_t num_shards) {
  std::vector<ShardSlice> slices;
  if (elems.empty()) return slices;
  uint32_t first = ShardOfBlock(num_blocks, num_shards, elems.begin / block_elems);
  uint32_t last = ShardOfBlock(num_blocks, num_shards, (elems.end - 1) / block_elems);
  for (uint32_t s = first; s <= last; ++s) {
    Range blocks = ShardBlocks(num_blocks, num_shards, s);
    Range r{std::max(elems.begin, blocks.begin * block_elems),
            std::min(elems.end, blocks.end * block_elems)};
    if (!r.empty()) slices.push_back(ShardSlice{s, r});
  }
  return slices;
}

}  // namespace zerostate
