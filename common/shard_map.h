// The shard map: which server owns which blocks of a job. One pure function
// of (number of blocks, number of servers), shared by server and client, so
// both sides always agree without exchanging a map.
#pragma once

#include <cstdint>
#include <vector>

namespace zerostate {

// A half-open range of indices [begin, end).
struct Range {
  uint64_t begin = 0;
  uint64_t end = 0;
  uint64_t size() const { return end - begin; }
  bool empty() const { return end <= begin; }
  bool operator==(const Range&) const = default;
};

// Blocks of shard `shard` out of `num_shards`: contiguous and balanced (sizes
// differ by at most one), in shard order.
// REQUIRES: num_shards >= 1, shard < num_shards.
Range ShardBlocks(uint64_t num_blocks, uint32_t num_shards, uint32_t shard);

// The shard that owns `block`. REQUIRES: block < num_blocks, num_shards >= 1.
uint32_t ShardOfBlock(uint64_t num_blocks, uint32_t num_shards, uint64_t block);

// The servers holding a copy of `shard` with `replicas` backups:
// the shard's own server first (its primary), then the next `replicas`
// servers of the ring: shard, shard + 1, ... (mod num_shards).
// REQUIRES: shard < num_shards, replicas < num_shards.
std::vector<uint32_t> ReplicaServers(uint32_t num_shards, uint32_t shard, uint32_t replicas);

// The shards server `server` keeps a backup of: server - 1, ..., server -
// replicas (mod num_shards). REQUIRES as ReplicaServers.
std::vector<uint32_t> BackedUpShards(uint32_t num_shards, uint32_t server, uint32_t replicas);

// One piece of an element range that lies inside a single block.
struct BlockPiece {
  uint64_t block = 0;
  uint32_t offset = 0;  // element offset inside the block
  uint32_t count = 0;   // elements
};

// Splits the element range `elems` into pieces that each lie in one block
// of `block_elems` elements and are at most `max_piece` elements long.
std::vector<BlockPiece> SplitByBlock(Range elems, uint32_t block_elems, uint32_t max_piece);

// Splits the element range `elems` by owning shard: one sub-range per shard
// that holds part of it, in shard order.
struct ShardSlice {
  uint32_t shard = 0;
  Range elems;
};
std::vector<ShardSlice> SplitByShard(Range elems, uint32_t block_elems, uint64_t num_blocks,
                                     uint32_t num_shards);

}  // namespace zerostate
