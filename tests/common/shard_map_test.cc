#include "common/shard_map.h"

#include <gtest/gtest.h>

namespace zerostate {
namespace {

TEST(ShardMapTest, ShardsCoverBlocksContiguouslyAndBalanced) {
  for (uint64_t blocks : {1ull, 2ull, 7ull, 64ull, 1000ull}) {
    for (uint32_t shards = 1; shards <= 9; ++shards) {
      uint64_t next = 0, lo = blocks, hi = 0;
      for (uint32_t s = 0; s < shards; ++s) {
        Range r = ShardBlocks(blocks, shards, s);
        EXPECT_EQ(r.begin, next) << blocks << " blocks, shard " << s << "/" << shards;
        next = r.end;
        lo = std::min(lo, r.size());
        hi = std::max(hi, r.size());
      }
      EXPECT_EQ(next, blocks);
      EXPECT_LE(hi - lo, 1u);
    }
  }
}

TEST(ShardMapTest, ShardOfBlockInvertsShardBlocks) {
  for (uint64_t blocks : {1ull, 3ull, 10ull, 257ull}) {
    for (uint32_t shards = 1; shards <= 8; ++shards) {
      for (uint32_t s = 0; s < shards; ++s) {
        Range r = ShardBlocks(blocks, shards, s);
        for (uint64_t b = r.begin; b < r.end; ++b) {
          ASSERT_EQ(ShardOfBlock(blocks, shards, b), s) << blocks << " " << shards << " " << b;
        }
      }
    }
  }
}

TEST(ShardMapTest, SplitByBlockCutsAtBlockEdgesAndPieceSize) {
  auto pieces = SplitByBlock(Range{100, 350}, 128, 64);
  uint64_t pos = 100;
  for (const auto& p : pieces) {
    EXPECT_EQ(p.block * 128 + p.offset, pos);
    EXPECT_LE(p.offset + p.count, 128u);
    EXPECT_LE(p.count, 64u);
    pos += p.count;
  }
  EXPECT_EQ(pos, 350u);
  EXPECT_EQ(pieces.front().block, 0u);
  EXPECT_EQ(pieces.back().block, 2u);
}

TEST(ShardMapTest, SplitByShardFollowsOwnership) {
  // 10 blocks of 64 over 3 shards: blocks [0,3) [3,6) [6,10).
  auto slices = SplitByShard(Range{150, 450}, 64, 10, 3);
  ASSERT_EQ(slices.size(), 3u);
  EXPECT_EQ(slices[0].elems, (Range{150, 192}));
  EXPECT_EQ(slices[1].elems, (Range{192, 384}));
  EXPECT_EQ(slices[2].elems, (Range{384, 450}));
  EXPECT_EQ(slices[2].shard, 2u);
  EXPECT_TRUE(SplitByShard(Range{5, 5}, 64, 10, 3).empty());
}

}  // namespace
}  // namespace zerostate
