#include "common/convert.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

namespace zerostate {
namespace {

float FromBits(uint32_t x) {
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}
uint32_t Bits(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  return x;
}

// Zeros, denormals, the edges of each format's range, infinities, NaNs
// (quiet, signalling, negative, with payloads), and rounding ties.
std::vector<float> EdgeFloats() {
  std::vector<uint32_t> bits = {
      0x00000000, 0x80000000, 0x00000001, 0x80000001, 0x007fffff, 0x00400000, 0x00008000,
      0x00018000, 0x00800000, 0x7f7fffff, 0xff7fffff, 0x7f800000, 0xff800000, 0x7fc00000,
      0xffc00000, 0x7f800001, 0xff800001, 0x7fa00000, 0x7fffffff, 0x7f80ffff, 0x3f800000,
      0x3f808000, 0x3f818000, 0x3f808001, 0x3f807fff, 0x3f801000, 0x3f803000, 0x3f801001,
      0x477fe000, 0x477fefff, 0x477ff000, 0x477ff001, 0x38800000, 0x387fffff, 0x387fe000,
      0x387ff000, 0x33000000, 0x33000001, 0x32ffffff, 0x33400000, 0x33c00000, 0x34000000,
      0x7f7f8000, 0x7f7f7fff, 0xc77ff000, 0xb3000001, 0x3fffffff, 0x00000800};
  std::vector<float> out;
  for (uint32_t b : bits) out.push_back(FromBits(b));
  return out;
}

// EdgeFloats plus about a million bit patterns spread over all 2^32.
std::vector<float> SweepFloats() {
  std::vector<float> out = EdgeFloats();
  for (uint64_t x = 0; x < (1ull << 32); x += 4099)
    out.push_back(FromBits(static_cast<uint32_t>(x)));
  return out;
}

std::vector<uint16_t> AllHalves() {
  std::vector<uint16_t> out(65536);
  for (uint32_t i = 0; i < 65536; ++i) out[i] = static_cast<uint16_t>(i);
  return out;
}

// Fails with the first few mismatching elements and the input they came from.
template <class T, class In>
void ExpectSameBits(const std::vector<T>& got, const std::vector<T>& want,
                    const std::vector<In>& in, const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  int shown = 0;
  for (size_t i = 0; i < got.size() && shown < 5; ++i) {
    if (std::memcmp(&got[i], &want[i], sizeof(T)) == 0) continue;
    uint64_t g = 0, w = 0, x = 0;
    std::memcpy(&g, &got[i], sizeof(T));
    std::memcpy(&w, &want[i], sizeof(T));
    std::memcpy(&x, &in[i], sizeof(In));
    ADD_FAILURE() << what << " [" << i << "] input 0x" << std::hex << x << ": got 0x" << g
                  << ", want 0x" << w;
    ++shown;
  }
}

std::string Name(Isa isa, v1::DType dtype) {
  return std::string(IsaName(isa)) + "/" + v1::DType_Name(dtype);
}

uint16_t ScalarEncode(v1::DType dtype, float f) {
  return dtype == v1::DTYPE_BF16 ? FloatToBf16(f) : FloatToFp16(f);
}
float ScalarDecode(v1::DType dtype, uint16_t h) {
  return dtype == v1::DTYPE_BF16 ? Bf16ToFloat(h) : Fp16ToFloat(h);
}

constexpr v1::DType kHalfTypes[] = {v1::DTYPE_BF16, v1::DTYPE_FP16};

TEST(ConvertTest, KnownValues) {
  EXPECT_EQ(FloatToBf16(1.0f), 0x3f80);
  EXPECT_EQ(FloatToBf16(FromBits(0x3f808000)), 0x3f80);  // tie, to even (down)
  EXPECT_EQ(FloatToBf16(FromBits(0x3f818000)), 0x3f82);  // tie, to even (up)
  EXPECT_EQ(FloatToBf16(FromBits(0x00000001)), 0x0000);  // smallest denormal
  EXPECT_EQ(FloatToBf16(FromBits(0x00018000)), 0x0002);  // denormal tie, kept
  EXPECT_EQ(FloatToBf16(FromBits(0x7f7fffff)), 0x7f80);  // max rounds to inf
  EXPECT_EQ(FloatToBf16(FromBits(0x7f800001)), 0x7fc0);  // sNaN is quieted
  EXPECT_EQ(FloatToFp16(1.0f), 0x3c00);
  EXPECT_EQ(FloatToFp16(-2.0f), 0xc000);
  EXPECT_EQ(FloatToFp16(65504.0f), 0x7bff);
  EXPECT_EQ(FloatToFp16(65519.99f), 0x7bff);
  EXPECT_EQ(FloatToFp16(65520.0f), 0x7c00);  // tie above max rounds to inf
  EXPECT_EQ(FloatToFp16(std::ldexp(1.0f, -24)), 0x0001);
  EXPECT_EQ(FloatToFp16(std::ldexp(1.0f, -25)), 0x0000);  // tie, to even
  EXPECT_EQ(FloatToFp16(std::ldexp(3.0f, -25)), 0x0002);  // tie, to even
  EXPECT_EQ(FloatToFp16(std::ldexp(1.0f, -14)), 0x0400);  // smallest normal
  EXPECT_EQ(FloatToFp16(FromBits(0x7f800001)), 0x7e00);   // sNaN is quieted
  EXPECT_EQ(Fp16ToFloat(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(Fp16ToFloat(0x7bff), 65504.0f);
  EXPECT_EQ(Bits(Fp16ToFloat(0x7c01)), 0x7fc02000u);  // sNaN is quieted
  EXPECT_EQ(Bits(Bf16ToFloat(0xff80)), 0xff800000u);
}

TEST(ConvertTest, HalfRoundTripsThroughFloat) {
  for (v1::DType dtype : kHalfTypes) {
    for (uint32_t i = 0; i < 65536; ++i) {
      const auto h = static_cast<uint16_t>(i);
      const float f = ScalarDecode(dtype, h);
      if (std::isnan(f)) {
        EXPECT_TRUE(std::isnan(ScalarDecode(dtype, ScalarEncode(dtype, f))));
        continue;
      }
      ASSERT_EQ(ScalarEncode(dtype, f), h) << v1::DType_Name(dtype) << " 0x" << std::hex << i;
    }
  }
}

TEST(ConvertTest, EncodeMatchesScalarOnEveryIsa) {
  const std::vector<float> in = SweepFloats();
  for (v1::DType dtype : kHalfTypes) {
    std::vector<uint16_t> want(in.size());
    for (size_t i = 0; i < in.size(); ++i) want[i] = ScalarEncode(dtype, in[i]);
    for (Isa isa : SupportedIsas()) {
      std::vector<uint16_t> got(in.size());
      EncodeFloats(isa, in.data(), in.size(), dtype, got.data());
      ExpectSameBits(got, want, in, Name(isa, dtype));
    }
  }
}

TEST(ConvertTest, DecodeMatchesScalarOnEveryIsa) {
  const std::vector<uint16_t> in = AllHalves();
  for (v1::DType dtype : kHalfTypes) {
    std::vector<float> want(in.size());
    for (size_t i = 0; i < in.size(); ++i) want[i] = ScalarDecode(dtype, in[i]);
    for (Isa isa : SupportedIsas()) {
      std::vector<float> got(in.size());
      DecodeFloats(isa, in.data(), in.size(), dtype, got.data());
      ExpectSameBits(got, want, in, Name(isa, dtype));
    }
  }
}

TEST(ConvertTest, AccumulateMatchesScalarOnEveryIsa) {
  const std::vector<uint16_t> in = AllHalves();
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-4.0f, 4.0f);
  std::vector<float> base(in.size());
  for (float& x : base) x = dist(rng);
  for (v1::DType dtype : kHalfTypes) {
    std::vector<float> want = base;
    for (size_t i = 0; i < in.size(); ++i) want[i] += ScalarDecode(dtype, in[i]);
    for (Isa isa : SupportedIsas()) {
      std::vector<float> got = base;
      AccumulateFloats(isa, in.data(), in.size(), dtype, got.data());
      ExpectSameBits(got, want, in, Name(isa, dtype));
    }
  }
}

// The streaming decode gives DecodeFloats' bits for every dtype and ISA,
// from every alignment of the output (head, streamed body and tail), and
// writes nothing outside its n elements.
TEST(ConvertTest, StreamingDecodeMatchesDecodeAtEveryAlignment) {
  const std::vector<uint16_t> halves = AllHalves();
  const std::vector<float> floats = SweepFloats();
  constexpr float kGuard = -7.25f;
  for (v1::DType dtype : {v1::DTYPE_BF16, v1::DTYPE_FP16, v1::DTYPE_FP32}) {
    const void* src = dtype == v1::DTYPE_FP32 ? static_cast<const void*>(floats.data())
                                              : static_cast<const void*>(halves.data());
    const size_t avail = 1000;  // elements of src read at most
    for (Isa isa : SupportedIsas()) {
      for (size_t off = 0; off < 17; ++off) {
        for (size_t n : {size_t{0}, size_t{1}, size_t{15}, size_t{16}, size_t{17}, size_t{63},
                         avail - 17}) {
          std::vector<float> want(avail + 18, kGuard), got(avail + 18, kGuard);
          DecodeFloats(Isa::kScalar, src, n, dtype, want.data() + off);
          DecodeFloatsStreaming(isa, src, n, dtype, got.data() + off);
          for (size_t i = 0; i < got.size(); ++i) {
            uint32_t a, b;
            std::memcpy(&a, &got[i], 4);
            std::memcpy(&b, &want[i], 4);
            ASSERT_EQ(a, b) << Name(isa, dtype) << " n=" << n << " off=" << off << " i=" << i;
          }
        }
      }
    }
  }
}

// The streaming copy is memcpy's bytes from every source and destination
// alignment (head, streamed body of 64- and 16-byte groups, tail), writing
// nothing outside its bytes.
TEST(ConvertTest, StreamingCopyIsMemcpyAtEveryAlignment) {
  std::vector<uint8_t> src(600);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>(i * 7 + 3);
  for (size_t from = 0; from < 17; ++from) {
    for (size_t off = 0; off < 17; ++off) {
      for (size_t bytes : {size_t{0}, size_t{1}, size_t{15}, size_t{16}, size_t{17},
                           size_t{63}, size_t{64}, size_t{65}, size_t{127}, size_t{500}}) {
        std::vector<uint8_t> want(540, 0xA5), got(540, 0xA5);
        std::memcpy(want.data() + off, src.data() + from, bytes);
        CopyStreaming(src.data() + from, bytes, got.data() + off);
        ASSERT_EQ(got, want) << "bytes=" << bytes << " from=" << from << " off=" << off;
      }
    }
  }
}

TEST(ConvertTest, Fp32IsACopyAndAPlainSum) {
  const std::vector<float> in = EdgeFloats();
  for (Isa isa : SupportedIsas()) {
    std::vector<float> copy(in.size());
    EncodeFloats(isa, in.data(), in.size(), v1::DTYPE_FP32, copy.data());
    ExpectSameBits(copy, in, in, Name(isa, v1::DTYPE_FP32));
    DecodeFloats(isa, in.data(), in.size(), v1::DTYPE_FP32, copy.data());
    ExpectSameBits(copy, in, in, Name(isa, v1::DTYPE_FP32));
    std::vector<float> sum(in.size(), 1.5f), want(in.size(), 1.5f);
    for (size_t i = 0; i < in.size(); ++i) want[i] += in[i];
    AccumulateFloats(isa, in.data(), in.size(), v1::DTYPE_FP32, sum.data());
    ExpectSameBits(sum, want, in, Name(isa, v1::DTYPE_FP32));
  }
}

// Every length and offset around the vector widths, so the padded tail and
// unaligned starts take the same path as the body.
TEST(ConvertTest, TailsAndOffsetsTouchOnlyTheirElements) {
  const std::vector<float> edges = EdgeFloats();
  constexpr uint16_t kGuard = 0xabcd;
  for (v1::DType dtype : kHalfTypes) {
    for (Isa isa : SupportedIsas()) {
      for (size_t off = 0; off < 3; ++off) {
        for (size_t n = 0; n + off <= edges.size(); n += 5) {
          std::vector<uint16_t> out(edges.size() + 1, kGuard);
          EncodeFloats(isa, edges.data() + off, n, dtype, out.data() + off);
          for (size_t i = 0; i < out.size(); ++i) {
            const bool inside = i >= off && i < off + n;
            const uint16_t want = inside ? ScalarEncode(dtype, edges[i]) : kGuard;
            ASSERT_EQ(out[i], want)
                << Name(isa, dtype) << " n=" << n << " off=" << off << " i=" << i;
          }
        }
      }
    }
  }
}

TEST(ConvertTest, DefaultIsaIsSupported) {
  const std::vector<Isa> isas = SupportedIsas();
  EXPECT_EQ(isas.front(), Isa::kScalar);
  EXPECT_LE(BestIsa(), isas.back());
  if (std::getenv("ZEROSTATE_ISA") == nullptr) {
    EXPECT_EQ(BestIsa(), isas.back());
  }
}

}  // namespace
}  // namespace zerostate

namespace zerostate {
namespace {

// The statistics' order (common/square_lanes.h), one element at a time.
void ReferenceSquares(const float* g, size_t n, SquareLanes* lanes) {
  for (size_t i = 0; i < n; ++i, ++lanes->elems) {
    if (!std::isfinite(g[i])) {
      ++lanes->nonfinite;
      continue;
    }
    lanes->lane[lanes->elems % 16] += static_cast<double>(g[i]) * g[i];
  }
}

// The *Squared forms write the plain forms' bits and carry the statistics
// over them, from any position of the buffer, as element-by-element
// squaring does, bit for bit: on every ISA, dtype and form.
TEST(ConvertTest, SquaredFormsWritePlainBitsAndSquareInOrder) {
  const std::vector<uint16_t> halves = AllHalves();
  const std::vector<float> floats = SweepFloats();  // NaN, infinities, denormals
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> dist(-4.0f, 4.0f);
  constexpr size_t kCap = 1152;  // a multiple of 16 floats, as aligned_alloc requires
  float* buffer = static_cast<float*>(std::aligned_alloc(64, kCap * 4));
  std::vector<float> base(kCap);
  for (float& x : base) x = dist(rng);
  enum Form { kDecode, kStream, kAccumulate };
  for (v1::DType dtype : {v1::DTYPE_BF16, v1::DTYPE_FP16, v1::DTYPE_FP32}) {
    const void* src = dtype == v1::DTYPE_FP32 ? static_cast<const void*>(floats.data())
                                              : static_cast<const void*>(halves.data());
    for (Form form : {kDecode, kStream, kAccumulate}) {
      for (Isa isa : SupportedIsas()) {
        for (size_t off : {0, 1, 7, 15, 16, 17, 40}) {
          for (size_t n : {0, 1, 15, 16, 17, 63, 1000}) {
            const std::string what = Name(isa, dtype) + " form " + std::to_string(form) +
                                     " off=" + std::to_string(off) + " n=" + std::to_string(n);
            // The plain form's output, and the reference statistics of the
            // buffer's first off + n elements (all of base copied, so that no
            // pointer is null when off + n is 0: memcpy and memcmp take none).
            std::vector<float> want(base);
            float* out = want.data() + off;
            if (form == kAccumulate) {
              AccumulateFloats(isa, src, n, dtype, out);
            } else {
              DecodeFloats(isa, src, n, dtype, out);
            }
            SquareLanes prefix, want_lanes;
            ReferenceSquares(want.data(), off, &prefix);
            ReferenceSquares(want.data(), off + n, &want_lanes);

            std::memcpy(buffer, base.data(), (off + n) * 4);
            SquareLanes lanes = prefix;
            if (form == kDecode) DecodeFloatsSquared(isa, src, n, dtype, buffer + off, &lanes);
            if (form == kStream) {
              DecodeFloatsStreamingSquared(isa, src, n, dtype, buffer + off, &lanes);
            }
            if (form == kAccumulate) {
              AccumulateFloatsSquared(isa, src, n, dtype, buffer + off, &lanes);
            }
            ASSERT_EQ(std::memcmp(buffer, want.data(), (off + n) * 4), 0) << what;
            ASSERT_EQ(std::memcmp(lanes.lane, want_lanes.lane, sizeof(lanes.lane)), 0) << what;
            ASSERT_EQ(lanes.nonfinite, want_lanes.nonfinite) << what;
            ASSERT_EQ(lanes.elems, off + n) << what;
          }
        }
      }
    }
  }
  std::free(buffer);
}

}  // namespace
}  // namespace zerostate
