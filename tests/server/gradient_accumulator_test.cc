#include "server/core/gradient_accumulator.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "common/convert.h"
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

// Node 0's long pieces are written with non-temporal stores (streamed()):
// short ones and a later node's fold go through the cache; Reset forgets.
TEST(GradientAccumulatorTest, StreamedSaysWhetherTheSumWasWrittenPastTheCache) {
  constexpr uint32_t kElems = 32768;
  std::vector<uint16_t> g(kElems, FloatToBf16(1.5f));
  GradientAccumulator one(1, kElems, kElems);
  ASSERT_TRUE(one.Add(0, 0, 64, g.data(), v1::DTYPE_BF16).ok());
  EXPECT_FALSE(one.streamed()) << "a short piece";
  ASSERT_TRUE(one.Add(0, 64, kElems - 64, g.data(), v1::DTYPE_BF16).ok());
  ASSERT_TRUE(one.complete());
  EXPECT_TRUE(one.streamed());
  EXPECT_EQ(one.sum()[kElems - 1], 1.5f);
  one.Reset();
  EXPECT_FALSE(one.streamed());
  GradientAccumulator two(2, kElems, kElems);
  ASSERT_TRUE(two.Add(0, 0, kElems, g.data(), v1::DTYPE_BF16).ok());
  EXPECT_TRUE(two.streamed());
  ASSERT_TRUE(two.Add(1, 0, kElems, g.data(), v1::DTYPE_BF16).ok());
  ASSERT_TRUE(two.complete());
  EXPECT_FALSE(two.streamed()) << "node 1 folded all of it through the cache";
  EXPECT_EQ(two.sum()[7], 3.0f);
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

// Node 0's fp32 pieces received in place: the sum is what Add gives, in
// any mix with the other nodes' pieces.
TEST(GradientAccumulatorTest, ClaimedPiecesSumLikeAddedOnes) {
  constexpr uint32_t kElems = 64;
  const auto g0 = RandomGrad(kElems, 11), g1 = RandomGrad(kElems, 12);
  GradientAccumulator want(2, kElems, kElems);
  ASSERT_TRUE(want.Add(0, 0, kElems, g0.data(), v1::DTYPE_FP32).ok());
  ASSERT_TRUE(want.Add(1, 0, kElems, g1.data(), v1::DTYPE_FP32).ok());

  GradientAccumulator acc(2, kElems, kElems);
  ASSERT_TRUE(acc.Add(1, 0, kElems, g1.data(), v1::DTYPE_FP32).ok());  // node 1 early: staged
  float* first = acc.Claim(0, 0, 40, v1::DTYPE_FP32);
  ASSERT_NE(first, nullptr);
  std::memcpy(first, g0.data(), 40 * 4);
  EXPECT_FALSE(acc.complete());
  ASSERT_TRUE(acc.Commit(0, 40, acc.epoch()));
  ASSERT_TRUE(acc.Add(0, 40, 24, g0.data() + 40, v1::DTYPE_FP32).ok());
  ASSERT_TRUE(acc.complete());
  EXPECT_EQ(std::memcmp(acc.sum(), want.sum(), kElems * 4), 0);
}

// Only a piece whose fold would be a copy is claimed.
TEST(GradientAccumulatorTest, ClaimOnlyNodeZeroFp32NotYetReceived) {
  GradientAccumulator acc(2, 64, 48);
  const auto g = RandomGrad(64, 13);
  EXPECT_EQ(acc.Claim(1, 0, 16, v1::DTYPE_FP32), nullptr) << "another node";
  EXPECT_EQ(acc.Claim(0, 0, 16, v1::DTYPE_BF16), nullptr) << "a conversion";
  EXPECT_EQ(acc.Claim(0, 40, 16, v1::DTYPE_FP32), nullptr) << "layout padding";
  ASSERT_TRUE(acc.Add(0, 0, 16, g.data(), v1::DTYPE_FP32).ok());
  EXPECT_EQ(acc.Claim(0, 0, 16, v1::DTYPE_FP32), nullptr) << "a retry";
  EXPECT_EQ(acc.Claim(0, 8, 16, v1::DTYPE_FP32), nullptr) << "an overlap";
  ASSERT_NE(acc.Claim(0, 16, 16, v1::DTYPE_FP32), nullptr);
  EXPECT_EQ(acc.Claim(0, 16, 16, v1::DTYPE_FP32), nullptr) << "claimed already";
  ASSERT_TRUE(acc.Commit(16, 16, acc.epoch()));
  ASSERT_TRUE(acc.Add(0, 32, 16, g.data() + 32, v1::DTYPE_FP32).ok());
  ASSERT_TRUE(acc.Add(1, 0, 48, g.data(), v1::DTYPE_FP32).ok());
  ASSERT_TRUE(acc.complete());
  EXPECT_EQ(acc.Claim(0, 0, 16, v1::DTYPE_FP32), nullptr) << "node 0 folded: head moved on";
}

// While a claim is open its range counts as not received: the step cannot
// complete, and a retry of it is UNAVAILABLE and changes nothing.
TEST(GradientAccumulatorTest, OpenClaimRefusesARacingRetry) {
  GradientAccumulator acc(1, 32, 32);
  const auto g = RandomGrad(32, 14);
  float* into = acc.Claim(0, 0, 32, v1::DTYPE_FP32);
  ASSERT_NE(into, nullptr);
  auto racing = acc.Add(0, 0, 32, g.data(), v1::DTYPE_FP32);
  EXPECT_EQ(racing.status().code(), absl::StatusCode::kUnavailable) << racing.status();
  EXPECT_NE(racing.status().message().find("still being received"), std::string::npos);
  EXPECT_FALSE(acc.complete());
  std::memcpy(into, g.data(), 32 * 4);
  ASSERT_TRUE(acc.Commit(0, 32, acc.epoch()));
  EXPECT_TRUE(acc.complete());
  EXPECT_EQ(*acc.Add(0, 0, 32, g.data(), v1::DTYPE_FP32), Outcome::kDuplicate);
  EXPECT_EQ(std::memcmp(acc.sum(), g.data(), 32 * 4), 0);
}

// An abandoned claim (payload cut short) leaves the range free: the piece
// sent again is applied over whatever was written.
TEST(GradientAccumulatorTest, AbandonedClaimIsOverwrittenByTheRetry) {
  GradientAccumulator acc(1, 32, 32);
  const auto g = RandomGrad(32, 15);
  float* into = acc.Claim(0, 0, 32, v1::DTYPE_FP32);
  ASSERT_NE(into, nullptr);
  std::fill(into, into + 10, 123.0f);  // part of a payload, then the connection broke
  acc.Abandon(0, 32, acc.epoch());
  EXPECT_FALSE(acc.complete());
  ASSERT_EQ(*acc.Add(0, 0, 32, g.data(), v1::DTYPE_FP32), Outcome::kApplied);
  ASSERT_TRUE(acc.complete());
  EXPECT_EQ(std::memcmp(acc.sum(), g.data(), 32 * 4), 0);
}

// A claim that outlives a Reset (a block restored meanwhile) commits
// nothing into the next step.
TEST(GradientAccumulatorTest, ClaimFromBeforeResetDoesNotCommit) {
  GradientAccumulator acc(1, 32, 32);
  ASSERT_NE(acc.Claim(0, 0, 32, v1::DTYPE_FP32), nullptr);
  const uint64_t epoch = acc.epoch();
  acc.Reset();
  ASSERT_NE(acc.Claim(0, 0, 32, v1::DTYPE_FP32), nullptr);  // the new step's own claim
  EXPECT_FALSE(acc.Commit(0, 32, epoch));
  EXPECT_FALSE(acc.complete());
  EXPECT_TRUE(acc.Commit(0, 32, acc.epoch()));
  EXPECT_TRUE(acc.complete());
}

// Pieces long enough to be decoded with non-temporal stores sum like short ones.
TEST(GradientAccumulatorTest, LongFirstNodePiecesStreamTheSameBits) {
  constexpr uint32_t kElems = 1 << 17;
  const auto g0 = RandomGrad(kElems, 16), g1 = RandomGrad(kElems, 17);
  std::vector<uint16_t> half(kElems);
  EncodeFloats(g0.data(), kElems, v1::DTYPE_BF16, half.data());
  for (v1::DType dtype : {v1::DTYPE_FP32, v1::DTYPE_BF16}) {
    const void* src = dtype == v1::DTYPE_FP32 ? static_cast<const void*>(g0.data())
                                              : static_cast<const void*>(half.data());
    std::vector<float> want(kElems);
    DecodeFloats(src, kElems, dtype, want.data());
    for (uint32_t i = 0; i < kElems; ++i) want[i] += g1[i];
    GradientAccumulator acc(2, kElems, kElems);
    ASSERT_TRUE(acc.Add(0, 3, kElems - 3, static_cast<const char*>(src) + 3 * DTypeSize(dtype),
                        dtype).ok());
    ASSERT_TRUE(acc.Add(0, 0, 3, src, dtype).ok());
    ASSERT_TRUE(acc.Add(1, 0, kElems, g1.data(), v1::DTYPE_FP32).ok());
    ASSERT_TRUE(acc.complete());
    EXPECT_EQ(std::memcmp(acc.sum(), want.data(), kElems * 4), 0) << DTypeName(dtype);
  }
}

// A block of 64 elements, 50 before the tail: tensors at [0, 20) and
// [32, 50), alignment padding at [20, 32).
const std::vector<std::pair<uint32_t, uint32_t>> kTensors = {{0, 20}, {32, 50}};

// The sum's value at i: sum of the nodes' gradients on tensor elements,
// zero on padding.
std::vector<float> TensorSum(const std::vector<std::vector<float>>& grads) {
  std::vector<float> want(64, 0.0f);
  for (const auto& [b, e] : kTensors) {
    for (uint32_t i = b; i < e; ++i) {
      for (const auto& g : grads) want[i] += g[i];
    }
  }
  return want;
}

// Nodes may push the padding or leave it out; either way it is never
// folded and the sum holds zero there, in any arrival order, through
// staging too.
TEST(GradientAccumulatorTest, PaddingBetweenTensorsMayBeLeftOutAndIsNeverFolded) {
  const auto g0 = RandomGrad(64, 21), g1 = RandomGrad(64, 22);  // padding not zero
  for (bool node1_first : {false, true}) {
    SCOPED_TRACE(node1_first ? "node 1 first (staged)" : "in order");
    GradientAccumulator acc(2, 64, 50, nullptr, kTensors);
    auto push_tensors = [&](uint32_t node, const std::vector<float>& g) {
      for (const auto& [b, e] : kTensors) {
        ASSERT_EQ(*acc.Add(node, b, e - b, g.data() + b, v1::DTYPE_FP32), Outcome::kApplied);
      }
    };
    auto push_flat = [&](uint32_t node, const std::vector<float>& g) {
      ASSERT_EQ(*acc.Add(node, 0, 64, g.data(), v1::DTYPE_FP32), Outcome::kApplied);
    };
    if (node1_first) {
      push_flat(1, g1);
      EXPECT_FALSE(acc.complete());
      push_tensors(0, g0);
    } else {
      push_tensors(0, g0);
      EXPECT_FALSE(acc.complete());
      EXPECT_EQ(acc.MissingNodes(), std::vector<uint32_t>{1});
      push_flat(1, g1);
    }
    ASSERT_TRUE(acc.complete());
    const std::vector<float> want = TensorSum({g0, g1});
    EXPECT_EQ(std::memcmp(acc.sum(), want.data(), 64 * 4), 0);
  }
}

// A node that leaves out part of a tensor is still missing.
TEST(GradientAccumulatorTest, TensorElementsLeftOutKeepTheNodeMissing) {
  GradientAccumulator acc(1, 64, 50, nullptr, kTensors);
  const auto g = RandomGrad(64, 23);
  ASSERT_TRUE(acc.Add(0, 0, 20, g.data(), v1::DTYPE_FP32).ok());
  ASSERT_TRUE(acc.Add(0, 32, 17, g.data() + 32, v1::DTYPE_FP32).ok());
  EXPECT_FALSE(acc.complete());
  EXPECT_EQ(acc.MissingNodes(), std::vector<uint32_t>{0});
  ASSERT_TRUE(acc.Add(0, 49, 1, g.data() + 49, v1::DTYPE_FP32).ok());
  EXPECT_TRUE(acc.complete());
}

// A payload received in place lands its padding in the sum: committing
// zeroes it, and so does giving the claim back.
TEST(GradientAccumulatorTest, ClaimedPaddingIsZeroedOnCommitAndAbandon) {
  const auto g = RandomGrad(64, 24);
  GradientAccumulator acc(1, 64, 50, nullptr, kTensors);
  float* into = acc.Claim(0, 0, 50, v1::DTYPE_FP32);
  ASSERT_NE(into, nullptr);
  std::memcpy(into, g.data(), 50 * 4);
  acc.Abandon(0, 50, acc.epoch());
  for (uint32_t i = 20; i < 32; ++i) EXPECT_EQ(acc.sum()[i], 0.0f) << i;
  into = acc.Claim(0, 0, 50, v1::DTYPE_FP32);
  ASSERT_NE(into, nullptr);
  std::memcpy(into, g.data(), 50 * 4);
  ASSERT_TRUE(acc.Commit(0, 50, acc.epoch()));
  ASSERT_TRUE(acc.complete());
  const std::vector<float> want = TensorSum({g});
  EXPECT_EQ(std::memcmp(acc.sum(), want.data(), 64 * 4), 0);
}

// --- Single-gradient mode: one node's bf16 gradient kept where it lands ---

std::vector<uint16_t> Bf16Of(const std::vector<float>& g) {
  std::vector<uint16_t> h(g.size());
  for (size_t i = 0; i < g.size(); ++i) h[i] = FloatToBf16(g[i]);
  return h;
}

TEST(SingleGradientTest, OneNodeOfBf16GradientsLandsTheGradient) {
  v1::JobSpec spec;
  spec.set_num_nodes(1);
  spec.set_grad_dtype(v1::DTYPE_BF16);
  EXPECT_TRUE(LandsGradientAsBf16(spec));
  spec.set_grad_dtype(v1::DTYPE_FP32);
  EXPECT_FALSE(LandsGradientAsBf16(spec));
  spec.set_grad_dtype(v1::DTYPE_BF16);
  spec.set_num_nodes(2);
  EXPECT_FALSE(LandsGradientAsBf16(spec));
}

// Pieces in any order land bit for bit, padding between tensors stays zero,
// the statistics are those of the widened gradient (whether squared as the
// pieces land or read at the end), and the block holds 2 bytes per element.
TEST(SingleGradientTest, LandedPiecesAreThePushedBitsAndStatsOfTheirWidening) {
  constexpr uint32_t kElems = 40000, kRequired = 39000;
  const std::vector<std::pair<uint32_t, uint32_t>> tensors = {{0, 20000}, {20064, kRequired}};
  const std::vector<uint16_t> h = Bf16Of(RandomGrad(kElems, 9));
  std::vector<float> wide(kElems, 0.0f);
  for (const auto& [b, e] : tensors) {
    for (uint32_t i = b; i < e; ++i) wide[i] = Bf16ToFloat(h[i]);
  }
  const GradStats want = ComputeGradStats(wide.data(), kRequired);
  for (bool reversed : {false, true}) {
    GradientAccumulator acc(1, kElems, kRequired, nullptr, tensors, /*land_bf16=*/true);
    EXPECT_EQ(acc.sum(), nullptr);
    EXPECT_EQ(acc.Claim(0, 0, 100, v1::DTYPE_FP32), nullptr);  // no fp32 sum to receive into
    std::vector<Piece> pieces = {{0, 0, 17000}, {0, 17000, 5000}, {0, 22000, kElems - 22000}};
    if (reversed) std::reverse(pieces.begin(), pieces.end());
    for (const Piece& p : pieces) {
      ASSERT_EQ(*acc.Add(0, p.offset, p.count, h.data() + p.offset, v1::DTYPE_BF16),
                Outcome::kApplied);
    }
    ASSERT_TRUE(acc.complete());
    for (uint32_t i = 0; i < kElems; ++i) {
      ASSERT_EQ(Bf16ToFloat(acc.landed_sum()[i]), i < kRequired ? wide[i] : 0.0f) << i;
    }
    const GradStats got = acc.Stats();
    EXPECT_EQ(got.sum_squares, want.sum_squares) << reversed;
    EXPECT_EQ(got.nonfinite, want.nonfinite);
    EXPECT_EQ(acc.bytes(), kElems * sizeof(uint16_t));
    std::string copy;
    acc.CopySum(&copy);
    ASSERT_EQ(copy.size(), kRequired * sizeof(float));
    EXPECT_EQ(std::memcmp(copy.data(), wide.data(), copy.size()), 0);
  }
}

// A piece in another dtype is rounded to bf16 as it lands; a replica's
// SetSum of the primary's widened gradient lands the same bits.
TEST(SingleGradientTest, OtherDtypesRoundAndReplicasLandTheSameBits) {
  constexpr uint32_t kElems = 5000;
  const std::vector<float> g = RandomGrad(kElems, 13);
  GradientAccumulator primary(1, kElems, kElems, nullptr, {}, /*land_bf16=*/true);
  ASSERT_EQ(*primary.Add(0, 0, kElems, g.data(), v1::DTYPE_FP32), Outcome::kApplied);
  for (uint32_t i = 0; i < kElems; ++i) {
    ASSERT_EQ(primary.landed_sum()[i], FloatToBf16(g[i])) << i;
  }
  std::string sum;
  primary.CopySum(&sum);
  GradientAccumulator replica(1, kElems, kElems, nullptr, {}, /*land_bf16=*/true);
  replica.SetSum(reinterpret_cast<const float*>(sum.data()));
  ASSERT_TRUE(replica.complete());
  EXPECT_EQ(std::memcmp(replica.landed_sum(), primary.landed_sum(), kElems * 2), 0);
  EXPECT_EQ(replica.Stats().sum_squares, primary.Stats().sum_squares);
}

// A held piece (the sender keeps its memory until the step) that covers a
// block without padding whole is not copied: landed_sum() is the sender's
// memory, the statistics and CopySum are those of a copied landing, a retry
// is a duplicate, and Reset lets the memory go. A piece that does not cover
// it whole, one of another dtype, or a block with padding inside lands as
// before, held or not.
TEST(SingleGradientTest, AHeldPieceCoveringItsBlockIsNotCopied) {
  constexpr uint32_t kElems = 5000;
  const std::vector<uint16_t> h = Bf16Of(RandomGrad(kElems, 17));
  auto mapped = std::make_shared<int>(0);  // stands for the sender's mapping
  std::weak_ptr<int> alive = mapped;
  auto segment = [&](uint32_t at) {
    return ChunkView::Segment{reinterpret_cast<const uint8_t*>(h.data() + at),
                              (kElems - at) * sizeof(uint16_t)};
  };
  GradientAccumulator copied(1, kElems, kElems, nullptr, {}, /*land_bf16=*/true);
  ASSERT_EQ(*copied.Add(0, 0, kElems, h.data(), v1::DTYPE_BF16), Outcome::kApplied);
  {
    GradientAccumulator acc(1, kElems, kElems, nullptr, {}, /*land_bf16=*/true);
    const ChunkView::Segment whole = segment(0);
    ASSERT_EQ(*acc.Add(0, 0, kElems, absl::MakeConstSpan(&whole, 1), v1::DTYPE_BF16,
                       std::move(mapped)),
              Outcome::kApplied);
    ASSERT_TRUE(acc.complete());
    EXPECT_TRUE(acc.landed_held());
    EXPECT_EQ(acc.landed_sum(), h.data());
    EXPECT_FALSE(alive.expired());
    EXPECT_EQ(acc.Stats().sum_squares, copied.Stats().sum_squares);
    std::string a, b;
    acc.CopySum(&a);
    copied.CopySum(&b);
    EXPECT_EQ(a, b);
    EXPECT_EQ(*acc.Add(0, 0, kElems, h.data(), v1::DTYPE_BF16), Outcome::kDuplicate);
    acc.Reset();
    EXPECT_FALSE(acc.landed_held());
    EXPECT_TRUE(alive.expired());  // the mapping is let go
  }
  // Landed as before: a piece from element 1, one that does not reach
  // `required`, an fp32 piece, a block with padding between its tensors.
  auto held = std::make_shared<int>(0);
  const ChunkView::Segment from1 = segment(1);
  GradientAccumulator late(1, kElems, kElems, nullptr, {}, /*land_bf16=*/true);
  ASSERT_EQ(*late.Add(0, 1, kElems - 1, absl::MakeConstSpan(&from1, 1), v1::DTYPE_BF16, held),
            Outcome::kApplied);
  EXPECT_FALSE(late.landed_held());
  const ChunkView::Segment whole = segment(0);
  const ChunkView::Segment part{whole.data, 100 * sizeof(uint16_t)};
  GradientAccumulator short_piece(1, kElems, kElems, nullptr, {}, /*land_bf16=*/true);
  ASSERT_EQ(*short_piece.Add(0, 0, 100, absl::MakeConstSpan(&part, 1), v1::DTYPE_BF16, held),
            Outcome::kApplied);
  EXPECT_FALSE(short_piece.landed_held());
  const std::vector<float> g = RandomGrad(kElems, 19);
  const ChunkView::Segment fp32{reinterpret_cast<const uint8_t*>(g.data()), kElems * 4};
  GradientAccumulator wide(1, kElems, kElems, nullptr, {}, /*land_bf16=*/true);
  ASSERT_EQ(*wide.Add(0, 0, kElems, absl::MakeConstSpan(&fp32, 1), v1::DTYPE_FP32, held),
            Outcome::kApplied);
  EXPECT_FALSE(wide.landed_held());
  GradientAccumulator padded(1, kElems, kElems, nullptr, {{0, 2000}, {2064, kElems}},
                             /*land_bf16=*/true);
  ASSERT_EQ(*padded.Add(0, 0, kElems, absl::MakeConstSpan(&whole, 1), v1::DTYPE_BF16, held),
            Outcome::kApplied);
  EXPECT_FALSE(padded.landed_held());
  EXPECT_EQ(padded.landed_sum()[2010], 0);  // its padding, zero whatever was pushed there
}

}  // namespace
}  // namespace zerostate::server
