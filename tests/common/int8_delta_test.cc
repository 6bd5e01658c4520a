#include "common/int8_delta.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "common/convert.h"

namespace zerostate {
namespace {

uint32_t Bits(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  return x;
}

float FromBf16(uint16_t h) {
  const uint32_t bits = uint32_t{h} << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// bf16 of f, round half to even; NaN as the quiet NaN 0x7fc0.
uint16_t ToBf16(float f) {
  if (std::isnan(f)) return 0x7fc0;
  const uint32_t b = Bits(f);
  return static_cast<uint16_t>((b + 0x7fffu + ((b >> 16) & 1u)) >> 16);
}

// common/int8_delta.h written plainly, one element at a time, in the test:
// the chunk of target - copy and the copy after it.
struct Reference {
  std::vector<uint8_t> chunk;
  std::vector<uint16_t> copy;
};

Reference Delta(const std::vector<float>& target, std::vector<uint16_t> copy) {
  const size_t n = target.size();
  const size_t groups = (n + kInt8Group - 1) / kInt8Group;
  Reference r{std::vector<uint8_t>(groups + n), {}};
  for (size_t g = 0; g < groups; ++g) {
    const size_t at = g * kInt8Group;
    const size_t end = std::min(n, at + kInt8Group);
    std::vector<float> d(end - at);
    float amax = 0;
    for (size_t i = at; i < end; ++i) {
      d[i - at] = FromBf16(ToBf16(target[i])) - FromBf16(copy[i]);
      if (std::isfinite(d[i - at])) amax = std::max(amax, std::fabs(d[i - at]));
    }
    float scale = 0;
    uint8_t byte = 0;
    if (amax >= kInt8MinAbsmax) {
      int e = 0;
      const float m = std::frexp(amax / 127.0f, &e);  // m in [0.5, 1)
      const int exp = m == 0.5f ? e - 1 : e;          // scale = 2^exp >= amax / 127
      scale = std::ldexp(1.0f, exp);
      byte = static_cast<uint8_t>(exp + 127);
    }
    r.chunk[g] = byte;
    for (size_t i = at; i < end; ++i) {
      const float v = d[i - at];
      int q = -128;
      if (std::isfinite(v)) q = scale == 0 ? 0 : static_cast<int>(std::nearbyint(v / scale));
      r.chunk[groups + i] = static_cast<uint8_t>(static_cast<int8_t>(q));
      const float change = q == -128 ? std::numeric_limits<float>::quiet_NaN() : q * scale;
      copy[i] = ToBf16(FromBf16(copy[i]) + change);
    }
  }
  r.copy = std::move(copy);
  return r;
}

// Equal bits, any NaN equal to any NaN.
void ExpectSameCopy(const std::vector<uint16_t>& got, const std::vector<uint16_t>& want,
                    const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int shown = 0;
  for (size_t i = 0; i < got.size() && shown < 5; ++i) {
    const bool both_nan = std::isnan(FromBf16(got[i])) && std::isnan(FromBf16(want[i]));
    if (got[i] != want[i] && !both_nan) {
      ADD_FAILURE() << what << ": element " << i << " is " << FromBf16(got[i]) << ", want "
                    << FromBf16(want[i]);
      ++shown;
    }
  }
}

ChunkView ViewOf(const std::vector<uint8_t>& chunk) {
  ChunkView view;
  view.data_bytes = chunk.size();
  view.data.push_back({chunk.data(), chunk.size()});
  return view;
}

// Weights of mixed magnitudes by group (n not a whole number of groups),
// each version moving by about 1e-3 of its magnitude, as an optimizer does.
struct Walk {
  explicit Walk(size_t n, uint32_t seed) : rng(seed), w(n) {
    for (size_t i = 0; i < n; ++i) w[i] = normal(rng) * Magnitude(i);
  }
  float Magnitude(size_t i) const { return std::pow(10.0f, (i / kInt8Group) % 5 - 3.0f); }
  const std::vector<float>& Next() {
    for (size_t i = 0; i < w.size(); ++i) w[i] += 1e-3f * normal(rng) * Magnitude(i);
    return w;
  }
  std::mt19937 rng;
  std::normal_distribution<float> normal{0, 1};
  std::vector<float> w;
};

TEST(Int8DeltaTest, EveryIsaMatchesTheReferenceAndTheReceiverHoldsTheSendersCopy) {
  for (size_t n : {1, 63, 64, 65, 1000, 4099}) {
    Walk walk(n, static_cast<uint32_t>(n));
    std::vector<uint16_t> want(n, 0);  // the first version is sent against zeros
    std::vector<std::vector<uint16_t>> sender(SupportedIsas().size(), want);
    std::vector<uint16_t> receiver = want;
    for (int version = 0; version < 20; ++version) {
      const std::vector<float>& target = walk.Next();
      const Reference ref = Delta(target, want);
      for (size_t k = 0; k < SupportedIsas().size(); ++k) {
        const Isa isa = SupportedIsas()[k];
        const std::string what = std::string(IsaName(isa)) + " n " + std::to_string(n) +
                                 " version " + std::to_string(version);
        std::vector<uint8_t> chunk(Int8ChunkBytes(n));
        ASSERT_TRUE(EncodeInt8Delta(isa, target.data(), v1::DTYPE_FP32, n, sender[k].data(),
                                    chunk.data()).ok());
        ASSERT_EQ(chunk, ref.chunk) << what;
        ExpectSameCopy(sender[k], ref.copy, what + " sender");
        if (k == 0) {
          absl::StatusOr<Int8Chunk> read = ReadInt8Chunk(ViewOf(chunk), static_cast<uint32_t>(n));
          ASSERT_TRUE(read.ok()) << read.status();
          ASSERT_TRUE(ApplyInt8Delta(*read, n, receiver.data()).ok());
          ExpectSameCopy(receiver, ref.copy, what + " receiver");
        }
      }
      want = ref.copy;
    }
  }
}

TEST(Int8DeltaTest, TracksTheTargetWithinHalfAQuantumOfTheChange) {
  const size_t n = 4099;
  Walk walk(n, 7);
  std::vector<uint16_t> copy(n, 0);
  std::vector<uint8_t> chunk(Int8ChunkBytes(n));
  double delta_err = 0, plain_err = 0;
  for (int version = 0; version < 30; ++version) {
    const std::vector<float> target = walk.Next();
    std::vector<float> diff(n);
    for (size_t i = 0; i < n; ++i) diff[i] = FromBf16(ToBf16(target[i])) - FromBf16(copy[i]);
    ASSERT_TRUE(EncodeInt8Delta(target.data(), v1::DTYPE_FP32, n, copy.data(), chunk.data()).ok());
    std::vector<uint8_t> plain(Int8ChunkBytes(n));
    EncodeInt8(target.data(), v1::DTYPE_FP32, n, nullptr, plain.data());
    for (size_t i = 0; i < n; ++i) {
      // From the target's bf16 copy: half the group's quantum, the fp32
      // subtraction's half ulp and the copy's bf16 half ulp.
      const float scale = Int8ScaleOf(chunk[i / kInt8Group]);
      const float c = FromBf16(copy[i]);
      const float bound = scale / 2 + std::fabs(diff[i]) * 0x1p-24f + std::fabs(c) * 0x1p-8f;
      ASSERT_LE(std::fabs(FromBf16(ToBf16(target[i])) - c), bound)
          << "version " << version << " element " << i;
      if (version >= 5) {
        const float p = Int8ScaleOf(plain[i / kInt8Group]) *
                        static_cast<float>(static_cast<int8_t>(plain[Int8Groups(n) + i]));
        delta_err += std::fabs(target[i] - c) / walk.Magnitude(i);
        plain_err += std::fabs(target[i] - FromBf16(ToBf16(p))) / walk.Magnitude(i);
      }
    }
  }
  // Each version's change is about 1e-3 of a weight: the copy tracks it
  // to about the bf16 rounding, a plain int8 copy to its own quantum.
  EXPECT_LT(delta_err, plain_err / 4) << "delta " << delta_err << " plain " << plain_err;
}

TEST(Int8DeltaTest, AFixedTargetIsReachedExactlyInItsBf16Copy) {
  const size_t n = 1000;
  Walk walk(n, 3);
  const std::vector<float> target = walk.w;
  std::vector<uint16_t> copy(n, 0);
  std::vector<uint8_t> chunk(Int8ChunkBytes(n));
  int version = 0;
  for (; version < 10; ++version) {
    size_t exact = 0;
    for (size_t i = 0; i < n; ++i) exact += copy[i] == ToBf16(target[i]);
    if (exact == n) break;
    ASSERT_TRUE(EncodeInt8Delta(target.data(), v1::DTYPE_FP32, n, copy.data(), chunk.data()).ok());
  }
  EXPECT_LE(version, 5) << "versions until every element is its target's bf16 copy";
  // Then the change is all zeros: a zero scale, zero codes.
  ASSERT_TRUE(EncodeInt8Delta(target.data(), v1::DTYPE_FP32, n, copy.data(), chunk.data()).ok());
  EXPECT_EQ(chunk, std::vector<uint8_t>(Int8ChunkBytes(n), 0));
}

TEST(Int8DeltaTest, ABf16TargetAndNonFiniteValues) {
  const size_t n = 130;
  Walk walk(n, 11);
  std::vector<uint16_t> target(n);
  for (size_t i = 0; i < n; ++i) target[i] = ToBf16(walk.w[i]);
  target[70] = ToBf16(std::numeric_limits<float>::infinity());
  std::vector<float> as_float(n);
  for (size_t i = 0; i < n; ++i) as_float[i] = FromBf16(target[i]);
  std::vector<uint16_t> copy(n, 0);
  std::vector<uint8_t> chunk(Int8ChunkBytes(n));
  ASSERT_TRUE(EncodeInt8Delta(target.data(), v1::DTYPE_BF16, n, copy.data(), chunk.data()).ok());
  const Reference ref = Delta(as_float, std::vector<uint16_t>(n, 0));
  EXPECT_EQ(chunk, ref.chunk);
  ExpectSameCopy(copy, ref.copy, "bf16 target");
  // The infinity's code is -128; the copy is NaN there and stays NaN.
  EXPECT_EQ(static_cast<int8_t>(chunk[Int8Groups(n) + 70]), kInt8NonFinite);
  target[70] = ToBf16(1.0f);
  ASSERT_TRUE(EncodeInt8Delta(target.data(), v1::DTYPE_BF16, n, copy.data(), chunk.data()).ok());
  EXPECT_TRUE(std::isnan(FromBf16(copy[70])));
  EXPECT_FALSE(std::isnan(FromBf16(copy[69])));
}

TEST(Int8DeltaTest, BadInputIsRefusedByNameAndChangesNothing) {
  const size_t n = 100;
  Walk walk(n, 5);
  std::vector<uint16_t> copy(n, 0x3f80);  // 1.0
  const std::vector<uint16_t> before = copy;
  std::vector<uint8_t> chunk(Int8ChunkBytes(n), 0xab);
  const std::vector<uint8_t> chunk_before = chunk;
  absl::Status s = EncodeInt8Delta(walk.w.data(), v1::DTYPE_FP16, n, copy.data(), chunk.data());
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_NE(s.message().find("dtype: the target of an int8 delta is fp32 or bf16, not fp16"),
            std::string::npos) << s;
  s = EncodeInt8Delta(walk.w.data(), v1::DTYPE_INT8, n, copy.data(), chunk.data());
  EXPECT_NE(s.message().find("dtype:"), std::string::npos) << s;
  s = EncodeInt8Delta(walk.w.data(), v1::DTYPE_FP32, 0, copy.data(), chunk.data());
  EXPECT_NE(s.message().find("n: an int8 delta of no elements"), std::string::npos) << s;
  EXPECT_EQ(copy, before);
  EXPECT_EQ(chunk, chunk_before);

  ASSERT_TRUE(EncodeInt8Delta(walk.w.data(), v1::DTYPE_FP32, n, copy.data(), chunk.data()).ok());
  absl::StatusOr<Int8Chunk> read = ReadInt8Chunk(ViewOf(chunk), n);
  ASSERT_TRUE(read.ok()) << read.status();
  std::vector<uint16_t> receiver = before;
  s = ApplyInt8Delta(*read, n - 1, receiver.data());
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_NE(s.message().find("elems: the int8 delta holds 100 elements, the copy 99"),
            std::string::npos) << s;
  EXPECT_EQ(receiver, before);
  // A scale byte of 255 never reaches the copy: ReadInt8Chunk refuses it.
  chunk[0] = 255;
  EXPECT_TRUE(absl::IsInvalidArgument(ReadInt8Chunk(ViewOf(chunk), n).status()));
}

}  // namespace
}  // namespace zerostate
