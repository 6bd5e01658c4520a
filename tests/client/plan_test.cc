#include "client/plan.h"

#include <gtest/gtest.h>

namespace zerostate::client {
namespace {

Layout FlatLayout(uint32_t block_elems, uint64_t blocks) {
  Layout l;
  l.block_elems = block_elems;
  l.used_elems = l.total_elems = block_elems * blocks;
  return l;
}

// The plans tile `elems` exactly, in order, each inside its shard.
void ExpectTiles(const Layout& l, uint32_t servers, Range elems,
                 const std::vector<StreamPlan>& plans) {
  uint64_t pos = elems.begin;
  for (const StreamPlan& p : plans) {
    EXPECT_EQ(p.elems.begin, pos);
    EXPECT_FALSE(p.elems.empty());
    Range blocks = ShardBlocks(l.num_blocks(), servers, p.shard);
    EXPECT_GE(p.elems.begin, blocks.begin * l.block_elems);
    EXPECT_LE(p.elems.end, blocks.end * l.block_elems);
    pos = p.elems.end;
  }
  EXPECT_EQ(pos, elems.end);
}

TEST(PlanTest, OneServerSplitsIntoAlignedStreams) {
  Layout l = FlatLayout(1024, 8);
  auto plans = PlanStreams(l, 1, {0, 8192}, 4, 1024);
  ASSERT_EQ(plans.size(), 4u);
  EXPECT_EQ(plans[0], (StreamPlan{0, {0, 2048}}));
  EXPECT_EQ(plans[3], (StreamPlan{0, {6144, 8192}}));
  ExpectTiles(l, 1, {0, 8192}, plans);
}

TEST(PlanTest, RangeSpanningThreeServers) {
  Layout l = FlatLayout(100, 10);  // shards: [0,3) [3,6) [6,10) blocks
  Range r{250, 720};
  auto plans = PlanStreams(l, 3, r, 2, 64);
  ExpectTiles(l, 3, r, plans);
  EXPECT_EQ(plans.front().shard, 0u);
  EXPECT_EQ(plans.back().shard, 2u);
  for (const StreamPlan& p : plans) {
    // Inner edges sit on multiples of 64 of the element space.
    Range blocks = ShardBlocks(10, 3, p.shard);
    uint64_t part_begin = std::max<uint64_t>(r.begin, blocks.begin * 100);
    if (p.elems.begin != part_begin) { EXPECT_EQ(p.elems.begin % 64, 0u); }
  }
}

// A range that starts inside a block is cut only at block edges, so no
// block is split between two streams (a server's direct copy and a held
// push need the whole block in one call).
TEST(PlanTest, StreamsOfARangeStartingInsideABlockCutAtBlockEdges) {
  Layout l = FlatLayout(1024, 16);
  Range r{1500, 9000};  // blocks 1 (from 476 in) to 8 (to 808 in)
  auto plans = PlanStreams(l, 1, r, 4, 1024);
  ExpectTiles(l, 1, r, plans);
  ASSERT_EQ(plans.size(), 4u);
  EXPECT_EQ(plans[0], (StreamPlan{0, {1500, 3072}}));
  EXPECT_EQ(plans[1], (StreamPlan{0, {3072, 5120}}));
  EXPECT_EQ(plans[2], (StreamPlan{0, {5120, 7168}}));
  EXPECT_EQ(plans[3], (StreamPlan{0, {7168, 9000}}));
  // Fewer edges inside the range than streams: one stream per piece
  // between them; a range smaller than `align` stays whole.
  auto two = PlanStreams(l, 1, {1000, 2100}, 4, 1024);
  ASSERT_EQ(two.size(), 2u);
  EXPECT_EQ(two[0], (StreamPlan{0, {1000, 1024}}));
  EXPECT_EQ(two[1], (StreamPlan{0, {1024, 2100}}));
  EXPECT_EQ(PlanStreams(l, 1, {1000, 1100}, 4, 1024).size(), 1u);
}

TEST(PlanTest, SmallRangeIsOneStream) {
  Layout l = FlatLayout(1024, 4);
  auto plans = PlanStreams(l, 2, {10, 20}, 8, 512);
  ASSERT_EQ(plans.size(), 1u);
  EXPECT_EQ(plans[0], (StreamPlan{0, {10, 20}}));
}

TEST(PlanTest, EmptyRangeHasNoStreams) {
  EXPECT_TRUE(PlanStreams(FlatLayout(64, 4), 2, {5, 5}, 4, 64).empty());
}

TEST(PlanTest, ChunkElems) {
  EXPECT_EQ(ChunkElems(1 << 20, 4, 262144), 262144u);
  EXPECT_EQ(ChunkElems(1 << 20, 2, 262144), 262144u);  // capped by the block
  EXPECT_EQ(ChunkElems(1 << 20, 4, 1 << 20), 262144u);
  EXPECT_EQ(ChunkElems(1000, 4, 4096), 192u);  // multiple of 64
  EXPECT_EQ(ChunkElems(10, 4, 4096), 64u);     // at least 64
}

}  // namespace
}  // namespace zerostate::client
