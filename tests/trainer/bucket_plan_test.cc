#include "trainer/bucket_plan.h"

#include <gtest/gtest.h>

namespace zerostate::trainer {
namespace {

Layout MakeLayout(uint64_t used, uint32_t block) {
  Layout l;
  l.block_elems = block;
  l.used_elems = used;
  l.total_elems = (used + block - 1) / block * block;
  return l;
}

TEST(BucketPlanTest, BlockAlignedDescendingAndCovering) {
  Layout l = MakeLayout(1000, 128);
  auto b = BackwardBuckets(l, {0, 300, 640, 700});
  ASSERT_EQ(b.size(), 4u);
  EXPECT_EQ(b[0], (Range{768, 1000}));  // 700 rounds up to 768
  EXPECT_EQ(b[1], (Range{640, 768}));
  EXPECT_EQ(b[2], (Range{384, 640}));   // 300 rounds up to 384
  EXPECT_EQ(b[3], (Range{0, 384}));
}

TEST(BucketPlanTest, PointsInsideOneBlockGiveOneBucket) {
  Layout l = MakeLayout(100, 128);
  auto b = BackwardBuckets(l, {0, 10, 50});
  ASSERT_EQ(b.size(), 1u);
  EXPECT_EQ(b[0], (Range{0, 100}));
}

// A cap cuts each layer's bucket into whole-block pieces from the layer's
// begin, the last (highest) piece shorter; buckets under it stay whole.
TEST(BucketPlanTest, CapCutsLongBucketsInWholeBlocksFromTheirBegin) {
  Layout l = MakeLayout(1000, 128);
  auto b = BackwardBuckets(l, {0, 300, 640, 700}, 200);  // cap 256: two blocks
  EXPECT_EQ(b, (std::vector<Range>{{768, 1000}, {640, 768}, {384, 640}, {256, 384}, {0, 256}}));
  // A cap of less than a block is one block; no cap is the uncapped cut.
  b = BackwardBuckets(l, {0}, 1);
  ASSERT_EQ(b.size(), 8u);
  EXPECT_EQ(b.front(), (Range{896, 1000}));
  EXPECT_EQ(b.back(), (Range{0, 128}));
  for (size_t i = 1; i < b.size(); ++i) EXPECT_EQ(b[i].end, b[i - 1].begin);
  EXPECT_EQ(BackwardBuckets(l, {0, 300}, 0), BackwardBuckets(l, {0, 300}));
}

// Under a cap, consecutive pieces join from the top down while the bucket
// stays within it: few buckets, each cut at a ready point's block.
TEST(BucketPlanTest, CapJoinsPiecesFromTheTopWhileWithinIt) {
  Layout l = MakeLayout(1000, 128);
  EXPECT_EQ(BackwardBuckets(l, {0, 300, 640, 700}, 512),
            (std::vector<Range>{{640, 1000}, {384, 640}, {0, 384}}));
  EXPECT_EQ(BackwardBuckets(l, {0, 300, 640, 700}, 1000), (std::vector<Range>{{0, 1000}}));
  // A piece over the cap is cut; the piece under it starts a new bucket.
  EXPECT_EQ(BackwardBuckets(l, {0, 100, 130}, 256),
            (std::vector<Range>{{768, 1000}, {512, 768}, {256, 512}, {0, 256}}));
}

TEST(BucketPlanTest, LocalSharesPartitionTheBucketInAlignedUnits) {
  for (uint32_t ranks : {1u, 2u, 3u, 4u, 7u}) {
    Range bucket{256, 256 + 64 * 10 + 5};
    uint64_t pos = bucket.begin;
    for (uint32_t r = 0; r < ranks; ++r) {
      Range s = LocalShare(bucket, ranks, r);
      EXPECT_EQ(s.begin, pos) << ranks << " ranks, rank " << r;
      if (s.end != bucket.end) { EXPECT_EQ(s.end % kTensorAlignElems, 0u); }
      pos = s.end;
    }
    EXPECT_EQ(pos, bucket.end);
  }
}

TEST(BucketPlanTest, MoreRanksThanUnitsLeavesSomeEmpty) {
  Range bucket{0, 64};
  EXPECT_EQ(LocalShare(bucket, 3, 0), (Range{0, 64}));
  EXPECT_TRUE(LocalShare(bucket, 3, 1).empty());
  EXPECT_TRUE(LocalShare(bucket, 3, 2).empty());
}

TEST(BucketPlanTest, PlanGivesEachBucketTheRanksShareAndItsStagingOffset) {
  Layout l = MakeLayout(1000, 128);
  for (uint32_t ranks : {1u, 2u, 3u}) {
    for (uint32_t r = 0; r < ranks; ++r) {
      const auto buckets = BackwardBuckets(l, {0, 300, 640, 700}, 200);
      const auto plan = PlanBuckets(l, {0, 300, 640, 700}, 200, ranks, r);
      ASSERT_EQ(plan.size(), buckets.size());
      uint64_t staging = 0;
      for (size_t i = 0; i < plan.size(); ++i) {
        EXPECT_EQ(plan[i].elems, buckets[i]) << i;
        EXPECT_EQ(plan[i].share, LocalShare(buckets[i], ranks, r)) << i;
        EXPECT_EQ(plan[i].staging, staging) << i;
        staging += plan[i].share.size();
      }
    }
  }
}

}  // namespace
}  // namespace zerostate::trainer
