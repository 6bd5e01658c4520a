#include "server/gradient_accumulator.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <random>
#include <vector>

#include "common/job_spec.h"

namespace zerostate::server {
namespace {

using Outcome = GradientAccumulator::Outcome;

struct Piece {
  uint32_t node, offset, count;
};

std::vector<float> RandomGrad(uint32_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-1e3f, 1e3f);
  std::vector<float> g(n);
  for (auto& x : g) x = d(rng);
  return g;
}

TEST(GradientAccumulatorTest, SumIsBitIdenticalForEveryArrivalOrder) {
  constexpr uint32_t kNodes = 3, kElems = 96;
  std::vector<std::vector<float>> grads;
  for (uint32_t k = 0; k < kNodes; ++k) grads.push_back(RandomGrad(kElems, k + 1));
  std::vector<float> expected(kElems);
  for (uint32_t i = 0; i < kElems; ++i) expected[i] = (grads[0][i] + grads[1][i]) + grads[2][i];

  std::vector<Piece> pieces;
  for (uint32_t k = 0; k < kNodes; ++k) {
    pieces.push_back({k, 0, 40});
    pieces.push_back({k, 40, 56});
  }
  std::mt19937 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    std::shuffle(pieces.begin(), pieces.end(), rng);
    GradientAccumulator acc(kNodes, kElems, kElems);
    for (const Piece& p : pieces) {
      auto r = acc.Add(p.node, p.offset, p.count, grads[p.node].data() + p.offset, v1::DTYPE_FP32);
      ASSERT_TRUE(r.ok()) << r.status();
      EXPECT_EQ(*r, Outcome::kApplied);
    }
    ASSERT_TRUE(acc.complete());
    ASSERT_EQ(std::memcmp(acc.sum(), expected.data(), kElems * 4), 0) << "trial " << trial;
  }
}

TEST(GradientAccumulatorTest, RetryIsDuplicateAndChangesNothing) {
  GradientAccumulator acc(2, 64, 64);
  auto g = RandomGrad(64, 3);
  ASSERT_EQ(*acc.Add(0, 0, 32, g.data(), v1::DTYPE_FP32), Outcome::kApplied);
  EXPECT_EQ(*acc.Add(0, 0, 32, g.data(), v1::DTYPE_FP32), Outcome::kDuplicate);
  EXPECT_EQ(*acc.Add(0, 8, 8, g.data(), v1::DTYPE_FP32), Outcome::kDuplicate);  // inside a piece
  ASSERT_EQ(*acc.Add(0, 32, 32, g.data() + 32, v1::DTYPE_FP32), Outcome::kApplied);
  ASSERT_EQ(*acc.Add(1, 0, 64, g.data(), v1::DTYPE_FP32), Outcome::kApplied);
  std::vector<float> before(acc.sum(), acc.sum() + 64);
  EXPECT_EQ(*acc.Add(1, 0, 64, g.data(), v1::DTYPE_FP32), Outcome::kDuplicate);
  EXPECT_EQ(std::memcmp(acc.sum(), before.data(), 64 * 4), 0);
  for (int i = 0; i < 64; ++i) EXPECT_EQ(acc.sum()[i], g[i] + g[i]);
}

TEST(GradientAccumulatorTest, PartialOverlapIsRefusedAndChangesNothing) {
  GradientAccumulator acc(2, 64, 64);
  auto g = RandomGrad(64, 4);
  ASSERT_TRUE(acc.Add(1, 0, 32, g.data(), v1::DTYPE_FP32).ok());
  auto r = acc.Add(1, 16, 32, g.data(), v1::DTYPE_FP32);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("overlaps"), std::string::npos) << r.status();
  EXPECT_EQ(acc.MissingNodes(), (std::vector<uint32_t>{0, 1}));
  // The refused piece left no trace: [32, 64) still completes node 1.
  ASSERT_TRUE(acc.Add(1, 32, 32, g.data() + 32, v1::DTYPE_FP32).ok());
  EXPECT_EQ(acc.MissingNodes(), (std::vector<uint32_t>{0}));
}

TEST(GradientAccumulatorTest, PaddingPastRequiredIsNeverFolded) {
  GradientAccumulator acc(1, 64, 40);
  std::vector<float> g(64, 2.0f);
  ASSERT_TRUE(acc.Add(0, 0, 64, g.data(), v1::DTYPE_FP32).ok());
  ASSERT_TRUE(acc.complete());
  EXPECT_EQ(acc.sum()[39], 2.0f);
  EXPECT_EQ(acc.sum()[40], 0.0f);
  EXPECT_EQ(acc.sum()[63], 0.0f);
}

TEST(GradientAccumulatorTest, ResetStartsTheNextStep) {
  GradientAccumulator acc(2, 64, 64);
  std::vector<float> a(64, 1.0f), b(64, 3.0f);
  ASSERT_TRUE(acc.Add(1, 0, 64, b.data(), v1::DTYPE_FP32).ok());  // early: staged
  EXPECT_GT(acc.bytes(), 64u * 4);
  ASSERT_TRUE(acc.Add(0, 0, 64, a.data(), v1::DTYPE_FP32).ok());
  ASSERT_TRUE(acc.complete());
  EXPECT_EQ(acc.sum()[5], 4.0f);
  EXPECT_EQ(acc.bytes(), 64u * 4);  // staging released once folded
  acc.Reset();
  EXPECT_FALSE(acc.complete());
  ASSERT_TRUE(acc.Add(0, 0, 64, b.data(), v1::DTYPE_FP32).ok());
  ASSERT_TRUE(acc.Add(1, 0, 64, b.data(), v1::DTYPE_FP32).ok());
  EXPECT_EQ(acc.sum()[5], 6.0f);
}

TEST(GradientAccumulatorTest, Bf16PiecesAreDecodedExactly) {
  GradientAccumulator acc(2, 64, 64);
  std::vector<uint16_t> one(64, 0x3f80), two(64, 0x4000);  // 1.0 and 2.0 in bf16
  ASSERT_TRUE(acc.Add(1, 0, 64, two.data(), v1::DTYPE_BF16).ok());
  ASSERT_TRUE(acc.Add(0, 0, 64, one.data(), v1::DTYPE_BF16).ok());
  ASSERT_TRUE(acc.complete());
  EXPECT_EQ(acc.sum()[0], 3.0f);
}

// `bytes` as received: segments cut at odd places, so elements straddle them.
std::vector<ChunkView::Segment> CutOddly(const void* bytes, size_t size) {
  std::vector<ChunkView::Segment> segments;
  const auto* p = static_cast<const uint8_t*>(bytes);
  size_t cuts[] = {1, 3, 7, 5, 64, 2, 13};
  for (size_t at = 0, i = 0; at < size; ++i) {
    size_t n = std::min(cuts[i % 7], size - at);
    segments.push_back({p + at, n});
    at += n;
  }
  return segments;
}

TEST(GradientAccumulatorTest, SegmentedPiecesSumLikeContiguousOnes) {
  constexpr uint32_t kNodes = 3, kElems = 96, kRequired = 90;  // 6 elements of padding
  for (v1::DType dtype : {v1::DTYPE_FP32, v1::DTYPE_BF16}) {
    const size_t esize = dtype == v1::DTYPE_FP32 ? 4 : 2;
    std::vector<std::vector<uint8_t>> wire;
    for (uint32_t k = 0; k < kNodes; ++k) {
      std::vector<float> g = RandomGrad(kElems, 10 + k);
      std::vector<uint8_t> w(kElems * esize);
      if (dtype == v1::DTYPE_FP32) {
        std::memcpy(w.data(), g.data(), w.size());
      } else {
        for (uint32_t i = 0; i < kElems; ++i) {
          uint16_t h = static_cast<uint16_t>(std::bit_cast<uint32_t>(g[i]) >> 16);
          std::memcpy(&w[i * 2], &h, 2);
        }
      }
      wire.push_back(std::move(w));
    }
    GradientAccumulator contiguous(kNodes, kElems, kRequired), segmented(kNodes, kElems, kRequired);
    for (uint32_t k : {2u, 0u, 1u}) {  // node 2 early: staged, folded later
      for (uint32_t offset : {0u, 40u}) {
        uint32_t count = offset == 0 ? 40 : kElems - 40;
        const uint8_t* data = wire[k].data() + offset * esize;
        ASSERT_TRUE(contiguous.Add(k, offset, count, data, dtype).ok());
        auto segments = CutOddly(data, count * esize);
        auto r = segmented.Add(k, offset, count, segments, dtype);
        ASSERT_TRUE(r.ok()) << r.status();
        EXPECT_EQ(*r, Outcome::kApplied);
        EXPECT_EQ(*segmented.Add(k, offset, count, segments, dtype), Outcome::kDuplicate);
      }
    }
    ASSERT_TRUE(segmented.complete());
    EXPECT_EQ(std::memcmp(segmented.sum(), contiguous.sum(), kRequired * 4), 0)
        << DTypeName(dtype);
  }
}

}  // namespace
}  // namespace zerostate::server
