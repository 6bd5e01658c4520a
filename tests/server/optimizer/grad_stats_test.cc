#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "server/core/optimizer/optimizer.h"

namespace zerostate::server {
namespace {

// The documented order: element i into lane i % 16, lanes folded pairwise.
GradStats ReferenceStats(const std::vector<float>& g) {
  double lanes[16] = {};
  GradStats s;
  for (size_t i = 0; i < g.size(); ++i) {
    if (!std::isfinite(g[i])) {
      ++s.nonfinite;
      continue;
    }
    lanes[i % 16] += static_cast<double>(g[i]) * g[i];
  }
  for (int width = 8; width >= 1; width /= 2) {
    for (int k = 0; k < width; ++k) lanes[k] += lanes[k + width];
  }
  s.sum_squares = lanes[0];
  return s;
}

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

TEST(GradStatsTest, SkipsAndCountsNonFinite) {
  const std::vector<float> g = {1, 2, kNaN, 3, kInf, -kInf, 4, -kNaN, 0};
  for (Isa isa : SupportedIsas()) {
    const GradStats s = ComputeGradStats(isa, g.data(), g.size());
    EXPECT_EQ(s.sum_squares, 30.0) << IsaName(isa);
    EXPECT_EQ(s.nonfinite, 4u) << IsaName(isa);
  }
}

TEST(GradStatsTest, EmptyAndLargeValues) {
  const float big = std::numeric_limits<float>::max();
  const std::vector<float> g = {big, -big};
  for (Isa isa : SupportedIsas()) {
    EXPECT_EQ(ComputeGradStats(isa, g.data(), 0).sum_squares, 0.0) << IsaName(isa);
    const GradStats s = ComputeGradStats(isa, g.data(), g.size());
    EXPECT_EQ(s.sum_squares, 2.0 * static_cast<double>(big) * big) << IsaName(isa);  // no overflow
    EXPECT_EQ(s.nonfinite, 0u);
  }
}

TEST(GradStatsTest, EveryIsaFollowsTheSixteenLaneOrderBitForBit) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> dist(-3.0f, 3.0f);
  for (size_t n : {1, 15, 16, 17, 33, 1000, 4099}) {
    std::vector<float> g(n);
    for (size_t i = 0; i < n; ++i) g[i] = i % 97 == 5 ? kNaN : i % 101 == 7 ? -kInf : dist(rng);
    const GradStats want = ReferenceStats(g);
    for (Isa isa : SupportedIsas()) {
      const GradStats got = ComputeGradStats(isa, g.data(), n);
      EXPECT_EQ(std::memcmp(&got.sum_squares, &want.sum_squares, 8), 0)
          << IsaName(isa) << " n=" << n << ": " << got.sum_squares << " vs " << want.sum_squares;
      EXPECT_EQ(got.nonfinite, want.nonfinite) << IsaName(isa) << " n=" << n;
    }
  }
}

}  // namespace
}  // namespace zerostate::server

namespace zerostate::server {
namespace {

// Computed in parts cut anywhere (AddGradSquares, FoldGradStats), the
// statistics are ComputeGradStats' over the whole, bit for bit.
TEST(GradStatsTest, PartsCutAnywhereGiveTheSameBits) {
  std::mt19937 rng(12);
  std::uniform_real_distribution<float> dist(-3.0f, 3.0f);
  for (size_t n : {0, 1, 15, 16, 17, 100, 1000, 4099}) {
    std::vector<float> g(n);
    for (size_t i = 0; i < n; ++i) g[i] = i % 97 == 5 ? kNaN : i % 101 == 7 ? -kInf : dist(rng);
    for (Isa isa : SupportedIsas()) {
      const GradStats want = ComputeGradStats(isa, g.data(), n);
      for (int trial = 0; trial < 20; ++trial) {
        SquareLanes lanes;
        for (size_t at = 0; at < n;) {
          const size_t part = std::min<size_t>(n - at, rng() % 40);
          AddGradSquares(isa, g.data() + at, part, &lanes);
          at += part;
        }
        ASSERT_EQ(lanes.elems, n);
        const GradStats got = FoldGradStats(lanes);
        EXPECT_EQ(std::memcmp(&got.sum_squares, &want.sum_squares, 8), 0)
            << IsaName(isa) << " n=" << n << ": " << got.sum_squares << " vs " << want.sum_squares;
        EXPECT_EQ(got.nonfinite, want.nonfinite) << IsaName(isa) << " n=" << n;
      }
    }
  }
}

}  // namespace
}  // namespace zerostate::server
