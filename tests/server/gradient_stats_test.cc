// The gradient statistics the accumulator keeps as the sum becomes final
// (GradientAccumulator::Stats) against ComputeGradStats over the complete
// sum, bit for bit: over arrival orders, node counts, dtypes, piece sizes
// (multiples of 16 or not, long enough to stream or not), layouts with
// padding, retries, claims received in place, Reset part-way and SetSum.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/convert.h"
#include "common/job_spec.h"
#include "server/core/gradient_accumulator.h"
#include "server/core/optimizer/optimizer.h"

namespace zerostate::server {
namespace {

using Outcome = GradientAccumulator::Outcome;
using Ranges = std::vector<std::pair<uint32_t, uint32_t>>;

struct Layout {
  const char* name;
  uint32_t block_elems, required;
  Ranges tensors;  // empty: all of [0, required)
};

const std::vector<Layout>& Layouts() {
  static const auto* layouts = new std::vector<Layout>{
      {"flat, 1000 of 1008", 1008, 1000, {}},
      {"tensors with padding", 4096, 3001, {{0, 700}, {768, 2000}, {2048, 3001}}},
      {"long, streamed", 65536, 65000, {{0, 30001}, {30016, 65000}}},
      {"tiny", 64, 50, {{0, 20}, {32, 50}}},
  };
  return *layouts;
}

// A node's gradient: random values with NaN, infinities, zeros and
// negative zeros here and there.
std::vector<float> Grad(uint32_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> d(-1e3f, 1e3f);
  std::vector<float> g(n);
  for (float& x : g) {
    switch (rng() % 64) {
      case 0:
        x = std::numeric_limits<float>::quiet_NaN();
        break;
      case 1:
        x = -std::numeric_limits<float>::infinity();
        break;
      case 2:
        x = -0.0f;
        break;
      case 3:
        x = 0.0f;
        break;
      default:
        x = d(rng);
    }
  }
  return g;
}

std::vector<uint8_t> Wire(const std::vector<float>& g, v1::DType dtype) {
  std::vector<uint8_t> out(g.size() * DTypeSize(dtype));
  EncodeFloats(g.data(), g.size(), dtype, out.data());
  return out;
}

struct Piece {
  uint32_t node, offset, count;
};

enum class Cut { kOdd, kSixteens, kLong, kTensorsOnly };

// Cuts [begin, end) into pieces of node `node` after `cut`.
void CutRange(uint32_t node, uint32_t begin, uint32_t end, Cut cut, std::mt19937& rng,
              std::vector<Piece>* out) {
  for (uint32_t at = begin; at < end;) {
    uint32_t n = cut == Cut::kSixteens ? 16 * (1 + rng() % 64)
                 : cut == Cut::kLong   ? 16384 * (1 + rng() % 2)
                                       : 1 + rng() % 300;
    n = std::min(n, end - at);
    out->push_back({node, at, n});
    at += n;
  }
}

std::vector<Piece> PiecesOf(uint32_t node, const Layout& l, Cut cut, std::mt19937& rng) {
  std::vector<Piece> pieces;
  if (cut == Cut::kTensorsOnly && !l.tensors.empty()) {
    for (const auto& [b, e] : l.tensors) CutRange(node, b, e, Cut::kOdd, rng, &pieces);
  } else {
    // The padding too, and the tail past `required` half the time.
    CutRange(node, 0, rng() % 2 ? l.block_elems : l.required, cut, rng, &pieces);
  }
  return pieces;
}

void ExpectSameStats(const GradientAccumulator& acc, const std::string& what) {
  ASSERT_TRUE(acc.complete()) << what;
  const GradStats want = ComputeGradStats(acc.sum(), acc.required());
  const GradStats got = acc.Stats();
  EXPECT_EQ(std::memcmp(&got.sum_squares, &want.sum_squares, sizeof(double)), 0)
      << what << ": " << got.sum_squares << " against " << want.sum_squares;
  EXPECT_EQ(got.nonfinite, want.nonfinite) << what;
}

// Pushes `order` (each piece once; retries added here) into `acc`, node 0's
// fp32 pieces through Claim half the time (some given back and sent again,
// some committed after the next piece), until `stop_after` pieces.
class Pusher {
 public:
  Pusher(GradientAccumulator& acc, const std::vector<std::vector<uint8_t>>& wires,
         v1::DType dtype, std::mt19937& rng)
      : acc_(acc), wires_(wires), dtype_(dtype), rng_(rng) {}

  void Push(std::vector<Piece> order, size_t stop_after = SIZE_MAX) {
    std::vector<bool> retry(order.size(), false);
    for (size_t i = 0; i < order.size() && i < stop_after; ++i) {
      ++tick_;
      const Piece p = order[i];
      const uint8_t* src = wires_[p.node].data() + size_t{p.offset} * DTypeSize(dtype_);
      if (retry[i] || rng_() % 8 != 0) {
        Apply(p, src, retry[i]);
      } else {
        Apply(p, src, false);
        // A retry of it, later.
        const size_t at = i + 1 + rng_() % (order.size() - i);
        order.insert(order.begin() + at, p);
        retry.insert(retry.begin() + at, true);
      }
      if (pending_ && claim_tick_ < tick_) EndClaim();
    }
    if (pending_) EndClaim();
  }

 private:
  void Apply(const Piece& p, const uint8_t* src, bool is_retry) {
    if (!is_retry && p.node == 0 && dtype_ == v1::DTYPE_FP32 && !pending_ && rng_() % 2) {
      if (float* into = acc_.Claim(0, p.offset, p.count, dtype_)) {
        std::memcpy(into, src, size_t{p.count} * 4);
        claim_ = p;
        pending_ = true;
        give_back_ = rng_() % 4 == 0;
        claim_tick_ = tick_;
        if (rng_() % 2) EndClaim();  // else after the next piece
        return;
      }
    }
    auto r = acc_.Add(p.node, p.offset, p.count, src, dtype_);
    if (!r.ok()) {
      // Only a retry of the piece still claimed is refused, for now.
      ASSERT_TRUE(pending_ && absl::IsUnavailable(r.status())) << r.status();
      return;
    }
    // A piece wholly past `required` is padding alone: a duplicate from the start.
    const bool duplicate = is_retry || p.offset >= acc_.required();
    EXPECT_EQ(*r, duplicate ? Outcome::kDuplicate : Outcome::kApplied)
        << "node " << p.node << " [" << p.offset << ", +" << p.count << ")";
  }

  void EndClaim() {
    pending_ = false;
    const uint8_t* src = wires_[0].data() + size_t{claim_.offset} * 4;
    if (give_back_) {
      acc_.Abandon(claim_.offset, claim_.count, acc_.epoch());
      // Sent again, through Add.
      ASSERT_EQ(*acc_.Add(0, claim_.offset, claim_.count, src, dtype_), Outcome::kApplied);
    } else {
      ASSERT_TRUE(acc_.Commit(claim_.offset, claim_.count, acc_.epoch()));
    }
  }

  GradientAccumulator& acc_;
  const std::vector<std::vector<uint8_t>>& wires_;
  const v1::DType dtype_;
  std::mt19937& rng_;
  bool pending_ = false;
  bool give_back_ = false;
  uint64_t tick_ = 0;        // pieces pushed
  uint64_t claim_tick_ = 0;  // when the pending claim was taken
  Piece claim_{};
};

TEST(GradientStatsTest, KeptStatisticsAreComputeGradStatsBitForBit) {
  std::mt19937 rng(2026);
  int trials = 0;
  for (const Layout& l : Layouts()) {
    for (uint32_t nodes : {1u, 2u, 3u}) {
      for (v1::DType dtype : {v1::DTYPE_FP32, v1::DTYPE_BF16, v1::DTYPE_FP16}) {
        for (Cut cut : {Cut::kOdd, Cut::kSixteens, Cut::kLong, Cut::kTensorsOnly}) {
          for (int order = 0; order < 3; ++order) {  // in order, shuffled, last node first
            const std::string what =
                absl::StrCat(l.name, ", ", nodes, " nodes, ", DTypeName(dtype), ", cut ",
                             static_cast<int>(cut), ", order ", order);
            SCOPED_TRACE(what);
            std::vector<std::vector<uint8_t>> wires;
            std::vector<Piece> pieces;
            for (uint32_t k = 0; k < nodes; ++k) {
              wires.push_back(Wire(Grad(l.block_elems, rng), dtype));
              for (const Piece& p : PiecesOf(k, l, cut, rng)) pieces.push_back(p);
            }
            if (order == 1) std::shuffle(pieces.begin(), pieces.end(), rng);
            if (order == 2) {
              std::stable_sort(pieces.begin(), pieces.end(),
                               [](const Piece& a, const Piece& b) { return a.node > b.node; });
            }
            GradientAccumulator acc(nodes, l.block_elems, l.required, nullptr, l.tensors);
            Pusher pusher(acc, wires, dtype, rng);
            // A Reset part-way, half the time: the next step starts over.
            if (rng() % 2) {
              pusher.Push(pieces, rng() % pieces.size());
              acc.Reset();
              EXPECT_EQ(acc.stats_at(), 0u);
            }
            pusher.Push(pieces);
            ExpectSameStats(acc, what);
            EXPECT_LE(acc.stats_at(), acc.required());

            // A replicated step's sum, given whole, part-way through another step.
            const std::vector<float> sum(acc.sum(), acc.sum() + l.required);
            acc.Reset();
            pusher.Push(pieces, pieces.size() / 2);
            acc.SetSum(sum.data());
            EXPECT_EQ(acc.stats_at(), acc.required());  // taken in the copy
            ExpectSameStats(acc, what + ", SetSum");
            ++trials;
          }
        }
      }
    }
  }
  EXPECT_EQ(trials, 4 * 3 * 3 * 4 * 3);
}

// In order and on multiples of 16, the statistics come from the folds
// alone: nothing is left for Stats() to read, even where the sum was
// streamed past the cache (one node's long bf16 pieces). Out of order, the
// rest is read at the end, with the same bits.
TEST(GradientStatsTest, InOrderFoldsLeaveNothingToRead) {
  std::mt19937 rng(16);
  const Layout& l = Layouts()[2];
  for (uint32_t nodes : {1u, 2u}) {
    for (v1::DType dtype : {v1::DTYPE_FP32, v1::DTYPE_BF16, v1::DTYPE_FP16}) {
      SCOPED_TRACE(absl::StrCat(nodes, " nodes, ", DTypeName(dtype)));
      std::vector<std::vector<uint8_t>> wires;
      std::vector<Piece> pieces;
      for (uint32_t k = 0; k < nodes; ++k) {
        wires.push_back(Wire(Grad(l.block_elems, rng), dtype));
        CutRange(k, 0, l.block_elems, Cut::kLong, rng, &pieces);
      }
      GradientAccumulator acc(nodes, l.block_elems, l.required, nullptr, l.tensors);
      for (const Piece& p : pieces) {
        const uint8_t* src = wires[p.node].data() + size_t{p.offset} * DTypeSize(dtype);
        ASSERT_EQ(*acc.Add(p.node, p.offset, p.count, src, dtype), Outcome::kApplied);
      }
      EXPECT_EQ(acc.streamed(), nodes == 1);
      EXPECT_EQ(acc.stats_at(), acc.required());
      ExpectSameStats(acc, "in order");

      // The first piece last: the streamed sum is left to Stats().
      acc.Reset();
      std::rotate(pieces.begin(), pieces.begin() + 1, pieces.end());
      for (const Piece& p : pieces) {
        const uint8_t* src = wires[p.node].data() + size_t{p.offset} * DTypeSize(dtype);
        ASSERT_EQ(*acc.Add(p.node, p.offset, p.count, src, dtype), Outcome::kApplied);
      }
      if (nodes == 1) {
        EXPECT_LT(acc.stats_at(), acc.required());
      }
      ExpectSameStats(acc, "first piece last");
    }
  }
}

// Zeros and negative zeros alone: +0.0 either way, as ComputeGradStats.
TEST(GradientStatsTest, NegativeZerosSumToPositiveZero) {
  const std::vector<float> g(100, -0.0f);
  GradientAccumulator acc(1, 112, 100);
  ASSERT_EQ(*acc.Add(0, 0, 100, g.data(), v1::DTYPE_FP32), Outcome::kApplied);
  ExpectSameStats(acc, "-0.0");
  EXPECT_FALSE(std::signbit(acc.Stats().sum_squares));
}

}  // namespace
}  // namespace zerostate::server
