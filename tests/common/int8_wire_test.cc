#include "common/int8_wire.h"

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

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

uint32_t Bits(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  return x;
}

// The quantization of common/int8_wire.h written plainly, one element at a
// time, in the test: the definition every ISA must match.
struct Reference {
  std::vector<float> scales;
  std::vector<int8_t> codes;
  std::vector<float> err;  // v - dequantized, 0 where v is not finite
};

Reference Quantize(const std::vector<float>& v) {
  Reference r;
  for (size_t at = 0; at < v.size(); at += kInt8Group) {
    const size_t end = std::min(v.size(), at + kInt8Group);
    float amax = 0;
    for (size_t i = at; i < end; ++i) {
      if (std::isfinite(v[i])) amax = std::max(amax, std::fabs(v[i]));
    }
    // The least power of two >= amax / 127 (as fp32 rounds the quotient).
    float scale = 0.0f;
    if (amax >= kInt8MinAbsmax) {
      int e = 0;
      const float m = std::frexp(amax / 127.0f, &e);  // m in [0.5, 1)
      scale = std::ldexp(1.0f, m == 0.5f ? e - 1 : e);
    }
    const float inv = scale != 0.0f ? 1.0f / scale : 0.0f;
    r.scales.push_back(scale);
    for (size_t i = at; i < end; ++i) {
      if (!std::isfinite(v[i])) {
        r.codes.push_back(-128);
        r.err.push_back(0);
        continue;
      }
      const auto q = static_cast<int>(std::nearbyint(v[i] * inv));
      EXPECT_LE(std::abs(q), 127) << "element " << i;
      r.codes.push_back(static_cast<int8_t>(q));
      r.err.push_back(v[i] - static_cast<float>(q) * scale);
    }
  }
  return r;
}

std::vector<uint8_t> Encode(Isa isa, const std::vector<float>& v, float* residual = nullptr) {
  std::vector<uint8_t> out(Int8ChunkBytes(v.size()));
  EncodeInt8(isa, v.data(), v1::DTYPE_FP32, v.size(), residual, out.data());
  return out;
}

// The chunk's scale bytes b as the powers of two 2^(b - 127) (0 for 0).
std::vector<float> ScalesOf(const std::vector<uint8_t>& chunk, size_t n) {
  std::vector<float> s(Int8Groups(n));
  for (size_t g = 0; g < s.size(); ++g) s[g] = chunk[g] == 0 ? 0.0f : std::ldexp(1.0f, chunk[g] - 127);
  return s;
}

ChunkView ViewOf(const std::vector<uint8_t>& chunk) {
  ChunkView view;
  view.data_bytes = chunk.size();
  view.data.push_back({chunk.data(), chunk.size()});
  return view;
}

std::vector<float> Decode(const std::vector<uint8_t>& chunk, size_t n) {
  absl::StatusOr<Int8Chunk> c = ReadInt8Chunk(ViewOf(chunk), static_cast<uint32_t>(n));
  EXPECT_TRUE(c.ok()) << c.status();
  std::vector<float> out(n);
  if (c.ok()) DecodeInt8Chunk(*c, v1::DTYPE_FP32, out.data());
  return out;
}

// Mixed magnitudes, so groups have different scales; n is not a whole
// number of groups.
std::vector<float> Gradients(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0, 1);
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = normal(rng) * std::pow(10.0f, (i / kInt8Group) % 7 - 4.0f);
  return v;
}

void ExpectMatchesReference(Isa isa, const std::vector<float>& v, const std::string& what) {
  SCOPED_TRACE(std::string(IsaName(isa)) + " " + what);
  const Reference want = Quantize(v);
  std::vector<float> residual(v.size(), 0.0f);
  const std::vector<uint8_t> got = Encode(isa, v, residual.data());
  const std::vector<float> scales = ScalesOf(got, v.size());
  for (size_t g = 0; g < scales.size(); ++g) {
    ASSERT_EQ(Bits(scales[g]), Bits(want.scales[g])) << "scale of group " << g;
  }
  const auto* codes = reinterpret_cast<const int8_t*>(got.data() + scales.size());
  int mismatches = 0;
  for (size_t i = 0; i < v.size() && mismatches < 5; ++i) {
    if (codes[i] != want.codes[i] || Bits(residual[i]) != Bits(want.err[i])) {
      ADD_FAILURE() << "element " << i << " = " << v[i] << ": code " << int{codes[i]} << " want "
                    << int{want.codes[i]} << ", error " << residual[i] << " want " << want.err[i];
      ++mismatches;
    }
  }
}

TEST(Int8WireTest, EveryIsaMatchesTheReferenceQuantizer) {
  for (size_t n : {1, 15, 64, 65, 256, 257, 1000, 4099}) {
    const std::vector<float> v = Gradients(n, static_cast<uint32_t>(n));
    for (Isa isa : SupportedIsas()) ExpectMatchesReference(isa, v, "n=" + std::to_string(n));
  }
}

TEST(Int8WireTest, RoundTripIsWithinHalfAQuantumPerGroup) {
  const std::vector<float> v = Gradients(3000, 7);
  const std::vector<uint8_t> chunk = Encode(BestIsa(), v);
  const std::vector<float> scales = ScalesOf(chunk, v.size());
  const std::vector<float> back = Decode(chunk, v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    const float scale = scales[i / kInt8Group];
    // Half a quantum (codes times powers of two are exact).
    ASSERT_LE(std::fabs(back[i] - v[i]), 0.5f * scale) << "element " << i << " of group "
                                                       << i / kInt8Group << ", scale " << scale;
  }
  // A power of two costs at most one bit: the scale is below 2 amax / 127.
  for (size_t g = 0; g < scales.size(); ++g) {
    float amax = 0;
    for (size_t i = g * kInt8Group; i < std::min(v.size(), (g + 1) * kInt8Group); ++i) {
      amax = std::max(amax, std::fabs(v[i]));
    }
    ASSERT_LT(scales[g], 2 * amax / 127.0f) << "group " << g;
    ASSERT_GE(scales[g] * 127.5f, amax) << "group " << g;
  }
}

TEST(Int8WireTest, ZeroInfAndNaNGroups) {
  std::vector<float> v(4 * kInt8Group, 0.0f);
  // Group 1: finite values with an infinity and a NaN among them.
  for (size_t i = 0; i < kInt8Group; ++i) v[kInt8Group + i] = 0.01f * static_cast<float>(i);
  v[kInt8Group + 3] = kInf;
  v[kInt8Group + 9] = -kNaN;
  // Group 2: nothing but NaN and -Inf. Group 3: far below kInt8MinAbsmax.
  for (size_t i = 0; i < kInt8Group; ++i) v[2 * kInt8Group + i] = i % 2 ? kNaN : -kInf;
  for (size_t i = 0; i < kInt8Group; ++i) v[3 * kInt8Group + i] = 1e-35f;
  for (Isa isa : SupportedIsas()) {
    SCOPED_TRACE(std::string(IsaName(isa)));
    std::vector<float> residual(v.size(), 0.0f);
    const std::vector<uint8_t> chunk = Encode(isa, v, residual.data());
    const std::vector<float> scales = ScalesOf(chunk, v.size());
    EXPECT_EQ(Bits(scales[0]), 0u);
    // The least power of two >= the finite ones' largest (0.63) / 127.
    EXPECT_EQ(scales[1], std::ldexp(1.0f, -7));
    EXPECT_EQ(Bits(scales[2]), 0u);
    EXPECT_EQ(Bits(scales[3]), 0u);
    const std::vector<float> back = Decode(chunk, v.size());
    for (size_t i = 0; i < v.size(); ++i) {
      if (std::isfinite(v[i])) {
        ASSERT_TRUE(std::isfinite(back[i])) << i;
        ASSERT_TRUE(std::isfinite(residual[i])) << i;
      } else {
        ASSERT_TRUE(std::isnan(back[i])) << "element " << i << " (" << v[i] << ") decodes as NaN";
        ASSERT_EQ(Bits(residual[i]), 0u) << "no error is kept for a non-finite element " << i;
      }
    }
    EXPECT_EQ(back[0], 0.0f);
    // A tiny group is sent as zeros; its values stay in the residual.
    EXPECT_EQ(back[3 * kInt8Group], 0.0f);
    EXPECT_EQ(residual[3 * kInt8Group], 1e-35f);
    // The fold counts the non-finite elements for the overflow check.
    absl::StatusOr<Int8Chunk> c = ReadInt8Chunk(ViewOf(chunk), static_cast<uint32_t>(v.size()));
    ASSERT_TRUE(c.ok()) << c.status();
    std::vector<float> sum(v.size(), 1.0f);
    SquareLanes lanes;
    ForEachInt8Run(*c, [&](const Int8Run& run, size_t first, size_t n) {
      AccumulateFloatsSquared(isa, &run, n, v1::DTYPE_INT8, sum.data() + first, &lanes);
    });
    EXPECT_EQ(lanes.nonfinite, 2u + kInt8Group);
  }
}

// Every decode form on every ISA: the same bits as the scalar plain
// decode, whatever the run's phase, length and the output's alignment.
TEST(Int8WireTest, EveryDecodeFormGivesTheSameBitsOnEveryIsa) {
  const size_t n = 3 * kInt8Group + 77;
  std::vector<float> v = Gradients(n, 3);
  v[100] = kNaN;
  const std::vector<uint8_t> chunk = Encode(Isa::kScalar, v);
  absl::StatusOr<Int8Chunk> c = ReadInt8Chunk(ViewOf(chunk), n);
  ASSERT_TRUE(c.ok()) << c.status();
  const Int8Run whole{c->scales.data(), reinterpret_cast<const int8_t*>(c->codes[0].data), 0};
  const std::vector<float> base = Gradients(n + 16, 9);
  for (size_t skip : {0, 1, 13, 63, 64, 100, 200}) {
    const Int8Run run = whole.Skip(skip);
    const size_t len = n - skip;
    std::vector<float> want(len);
    DecodeInt8(Isa::kScalar, run, len, want.data());
    std::vector<float> want_sum(base.begin() + 3, base.begin() + 3 + len);
    for (size_t i = 0; i < len; ++i) want_sum[i] = want_sum[i] + want[i];
    for (Isa isa : SupportedIsas()) {
      SCOPED_TRACE(std::string(IsaName(isa)) + " skip " + std::to_string(skip));
      for (int form = 0; form < 6; ++form) {
        std::vector<float> out(base.begin(), base.end());  // dst at out + 3: unaligned
        float* dst = out.data() + 3;
        SquareLanes lanes;
        lanes.elems = 5;
        switch (form) {
          case 0: DecodeFloats(isa, &run, len, v1::DTYPE_INT8, dst); break;
          case 1: DecodeFloatsStreaming(isa, &run, len, v1::DTYPE_INT8, dst); break;
          case 2: AccumulateFloats(isa, &run, len, v1::DTYPE_INT8, dst); break;
          case 3: DecodeFloatsSquared(isa, &run, len, v1::DTYPE_INT8, dst, &lanes); break;
          case 4: DecodeFloatsStreamingSquared(isa, &run, len, v1::DTYPE_INT8, dst, &lanes); break;
          case 5: AccumulateFloatsSquared(isa, &run, len, v1::DTYPE_INT8, dst, &lanes); break;
        }
        const std::vector<float>& expect = form == 2 || form == 5 ? want_sum : want;
        for (size_t i = 0; i < len; ++i) {
          ASSERT_EQ(Bits(dst[i]), Bits(expect[i])) << "form " << form << " element " << i;
        }
        EXPECT_EQ(Bits(out[2]), Bits(base[2])) << "form " << form << " wrote before dst";
        EXPECT_EQ(Bits(out[3 + len]), Bits(base[3 + len])) << "form " << form << " wrote past";
        if (form >= 3) {
          EXPECT_EQ(lanes.elems, 5 + len);
        }
      }
    }
  }
}

// Error feedback: over many steps, what was sent adds up to the true
// gradients to within one quantum per element (the last residual).
TEST(Int8WireTest, ErrorFeedbackSumsToTheTrueGradientsWithinOneQuantum) {
  const size_t n = 2 * kInt8Group + 40;
  std::vector<float> residual(n, 0.0f);
  std::vector<double> sent(n, 0.0), truth(n, 0.0);
  std::vector<float> last_scales;
  for (uint32_t step = 0; step < 200; ++step) {
    std::vector<float> g = Gradients(n, 100 + step);
    std::vector<uint16_t> bf16(n);  // the trainer's bf16 gradients
    EncodeFloats(g.data(), n, v1::DTYPE_BF16, bf16.data());
    std::vector<uint8_t> chunk(Int8ChunkBytes(n));
    EncodeInt8(bf16.data(), v1::DTYPE_BF16, n, residual.data(), chunk.data());
    const std::vector<float> back = Decode(chunk, n);
    for (size_t i = 0; i < n; ++i) {
      sent[i] += back[i];
      truth[i] += Bf16ToFloat(bf16[i]);
    }
    last_scales = ScalesOf(chunk, n);
  }
  for (size_t i = 0; i < n; ++i) {
    const double quantum = last_scales[i / kInt8Group];
    ASSERT_LE(std::fabs(sent[i] - truth[i]), quantum)
        << "element " << i << ": sent " << sent[i] << ", true " << truth[i];
  }
}

TEST(Int8WireTest, ReadRefusesAWrongLengthAndBadScalesByName) {
  const std::vector<float> v = Gradients(300, 1);
  std::vector<uint8_t> chunk = Encode(BestIsa(), v);
  // Two segments split inside the scales: read as one.
  ChunkView split;
  split.data_bytes = chunk.size();
  split.data.push_back({chunk.data(), 3});
  split.data.push_back({chunk.data() + 3, chunk.size() - 3});
  absl::StatusOr<Int8Chunk> ok = ReadInt8Chunk(split, 300);
  ASSERT_TRUE(ok.ok()) << ok.status();
  std::vector<float> back(300);
  DecodeInt8Chunk(*ok, v1::DTYPE_FP32, back.data());
  EXPECT_EQ(back, Decode(chunk, 300));

  for (uint32_t elems : {0u, 299u, 301u, 257u}) {
    absl::StatusOr<Int8Chunk> bad = ReadInt8Chunk(ViewOf(chunk), elems);
    ASSERT_TRUE(absl::IsInvalidArgument(bad.status())) << elems << ": " << bad.status();
    EXPECT_NE(bad.status().message().find("data: an int8 chunk of"), std::string::npos)
        << bad.status();
  }
  // Byte 255 is the one scale that is not finite (an infinity's exponent).
  std::vector<uint8_t> bad = chunk;
  bad[1] = 255;
  absl::StatusOr<Int8Chunk> got = ReadInt8Chunk(ViewOf(bad), 300);
  ASSERT_TRUE(absl::IsInvalidArgument(got.status())) << got.status();
  EXPECT_NE(got.status().message().find("scale 1 of the int8 chunk is byte 255"),
            std::string::npos)
      << got.status();
  bad[1] = 254;  // 2^127: finite
  got = ReadInt8Chunk(ViewOf(bad), 300);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->scales[1], std::ldexp(1.0f, 127));
  EXPECT_EQ(Int8ScaleOf(0), 0.0f);
  EXPECT_EQ(Int8ScaleOf(127), 1.0f);
}

TEST(Int8WireTest, DecodesIntoBf16AndFp16AsRoundingTheFp32Decode) {
  const std::vector<float> v = Gradients(600, 5);
  const std::vector<uint8_t> chunk = Encode(BestIsa(), v);
  absl::StatusOr<Int8Chunk> c = ReadInt8Chunk(ViewOf(chunk), 600);
  ASSERT_TRUE(c.ok());
  std::vector<float> f(600);
  std::vector<uint16_t> h(600);
  DecodeInt8Chunk(*c, v1::DTYPE_FP32, f.data());
  DecodeInt8Chunk(*c, v1::DTYPE_BF16, h.data());
  for (size_t i = 0; i < 600; ++i) ASSERT_EQ(h[i], FloatToBf16(f[i])) << i;
  DecodeInt8Chunk(*c, v1::DTYPE_FP16, h.data());
  for (size_t i = 0; i < 600; ++i) ASSERT_EQ(h[i], FloatToFp16(f[i])) << i;
}

}  // namespace
}  // namespace zerostate
