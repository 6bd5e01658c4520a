// Internal to common/int8_wire*.cc: the int8 wire's loops over one group
// (or a part of one: a single scale), written once as templates over the
// vector traits of common/simd_*.h widened with the int8 operations below,
// and instantiated once per ISA (int8_wire.cc: scalar, int8_wire_avx2.cc,
// int8_wire_avx512.cc). Include only what the ISA files may include.
//
// The int8 traits an ISA adds to its simd::*Ops (kWidth lanes):
//   I                          kWidth int32 lanes
//   I LoadCodes(const int8_t*) kWidth codes, sign-extended
//   void StoreCodes(int8_t*, I) the lanes as int8 (each in [-128, 127])
//   F FromCodes(I q, F scale)  q * scale, NaN where q == -128
//   I FiniteAbsBits(F v)       |v|'s bits where v is finite, else 0
//   I MaxI(I, I); uint32_t HMax(I)
//   I Codes(F v, F inv)        round-half-even(v * inv), -128 where v is
//                              not finite
//   F ZeroNonFinite(F v)       v, 0 where v is not finite
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "common/convert_kernels.h"
#include "common/square_lanes.h"

namespace zerostate::int8_internal {

// 2^-100 (common/int8_wire.h, kInt8MinAbsmax).
inline constexpr float kMinAbsmax = 7.8886090522101181e-31f;

// One ISA's loops. The encodes write a whole chunk of n elements (scales,
// then codes; residual: error feedback, may be null); the decodes take n
// codes whose first is element `phase` of the group of scales[0] (the
// groups' loop is inside each: one call per run, one fence per streaming
// call, however many groups of 64 it spans).
struct Int8Kernels {
  void (*encode_fp32)(const float* src, size_t n, float* residual, uint8_t* out);
  void (*encode_bf16)(const uint16_t* src, size_t n, float* residual, uint8_t* out);
  void (*encode_fp16)(const uint16_t* src, size_t n, float* residual, uint8_t* out);
  void (*decode)(const int8_t* codes, size_t n, const float* scales, uint32_t phase, float* dst);
  // The decode rounded to bf16 or fp16 (the trainer's weights).
  void (*decode_bf16)(const int8_t* codes, size_t n, const float* scales, uint32_t phase,
                      uint16_t* dst);
  void (*decode_fp16)(const int8_t* codes, size_t n, const float* scales, uint32_t phase,
                      uint16_t* dst);
  void (*stream)(const int8_t* codes, size_t n, const float* scales, uint32_t phase, float* dst);
  void (*accumulate)(const int8_t* codes, size_t n, const float* scales, uint32_t phase,
                     float* dst);
  void (*decode_squared)(const int8_t* codes, size_t n, const float* scales, uint32_t phase,
                         float* dst, SquareLanes* lanes);
  void (*stream_squared)(const int8_t* codes, size_t n, const float* scales, uint32_t phase,
                         float* dst, SquareLanes* lanes);
  void (*accumulate_squared)(const int8_t* codes, size_t n, const float* scales,
                             uint32_t phase, float* dst, SquareLanes* lanes);
};

// Defined in int8_wire.cc, int8_wire_avx2.cc and int8_wire_avx512.cc.
const Int8Kernels& ScalarInt8Kernels();
const Int8Kernels& Avx2Int8Kernels();
const Int8Kernels& Avx512Int8Kernels();

inline constexpr size_t kGroup = 64;  // common/int8_wire.h, kInt8Group

// The float of bits `exponent` << 23: 2^(exponent - 127), 0 for 0.
inline float PowerOfTwo(uint32_t exponent) {
  const uint32_t bits = exponent << 23;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// The scale byte of a group whose largest finite magnitude is amax: the
// exponent field of the least power of two >= amax / 127 (common/int8_wire.h).
inline uint8_t ScaleByte(float amax) {
  if (!(amax >= kMinAbsmax)) return 0;
  const float t = amax / 127.0f;  // normal: amax >= 2^-100
  uint32_t bits;
  std::memcpy(&bits, &t, 4);
  return static_cast<uint8_t>((bits >> 23) + ((bits & 0x7fffffu) != 0 ? 1 : 0));
}

// Quantizes one group of len <= kGroup elements: v = load(src + i) (plus
// residual[i]) in one pass, kept in L1 with the largest finite magnitude;
// then the codes and the new residual in a second. The tail's partial
// vector goes through zero-padded copies, so it takes the same path.
// Returns the scale byte.
template <class Ops, class In, class LoadIn>
uint8_t EncodeGroup(const In* src, size_t len, float* residual, int8_t* codes, LoadIn load) {
  constexpr size_t W = Ops::kWidth;
  using F = typename Ops::F;
  using I = typename Ops::I;
  alignas(64) float v[kGroup + W];
  const size_t full = len / W * W;
  I amax_bits = Ops::FiniteAbsBits(Ops::Set1(0.0f));
  auto first = [&](const In* s, const float* r, float* into) {
    F x = load(s);
    if (residual != nullptr) x = Ops::Add(x, Ops::Load(r));
    Ops::Store(into, x);
    amax_bits = Ops::MaxI(amax_bits, Ops::FiniteAbsBits(x));
  };
  // (No offset on a null residual: undefined, and UBSan says so.)
  auto r_at = [residual](size_t i) { return residual != nullptr ? residual + i : nullptr; };
  for (size_t i = 0; i < full; i += W) first(src + i, r_at(i), v + i);
  In tin[W] = {};
  alignas(64) float rin[W] = {};
  if (full < len) {
    std::memcpy(tin, src + full, (len - full) * sizeof(In));
    if (residual != nullptr) std::memcpy(rin, residual + full, (len - full) * sizeof(float));
    first(tin, rin, v + full);
  }
  const uint32_t bits = Ops::HMax(amax_bits);
  float amax;
  std::memcpy(&amax, &bits, 4);
  const uint8_t byte = ScaleByte(amax);
  const float scale = PowerOfTwo(byte);
  const float inv = byte != 0 ? PowerOfTwo(254u - byte) : 0.0f;
  const F vscale = Ops::Set1(scale);
  const F vinv = Ops::Set1(inv);
  auto second = [&](const float* x_at, int8_t* c, float* r) {
    const F x = Ops::Load(x_at);
    const typename Ops::I q = Ops::Codes(x, vinv);
    Ops::StoreCodes(c, q);
    // NaN - NaN is NaN: a non-finite element's error is made 0.
    if (residual != nullptr) Ops::Store(r, Ops::ZeroNonFinite(Ops::Sub(x, Ops::FromCodes(q, vscale))));
  };
  for (size_t i = 0; i < full; i += W) second(v + i, codes + i, r_at(i));
  if (full < len) {
    int8_t cout[W];
    second(v + full, cout, rin);
    std::memcpy(codes + full, cout, len - full);
    if (residual != nullptr) std::memcpy(residual + full, rin, (len - full) * sizeof(float));
  }
  return byte;
}

// A whole chunk: its scale bytes, then its codes.
template <class Ops, class In, class LoadIn>
void EncodeChunk(const In* src, size_t n, float* residual, uint8_t* out, LoadIn load) {
  const size_t groups = (n + kGroup - 1) / kGroup;
  auto* codes = reinterpret_cast<int8_t*>(out + groups);
  for (size_t g = 0; g < groups; ++g) {
    const size_t at = g * kGroup;
    const size_t len = n - at < kGroup ? n - at : kGroup;
    float* r = residual != nullptr ? residual + at : nullptr;
    out[g] = EncodeGroup<Ops>(src + at, len, r, codes + at, load);
  }
}

// Calls part(codes + i, len, scale, i) for each part of codes[0, n) under
// one scale: the first from `phase` of scales[0]'s group, then whole groups.
template <class Part>
inline void ForGroups(const int8_t* codes, size_t n, const float* scales, uint32_t phase,
                      Part part) {
  for (size_t i = 0; i < n; phase = 0, ++scales) {
    const size_t len = n - i < kGroup - phase ? n - i : kGroup - phase;
    part(codes + i, len, *scales, i);
    i += len;
  }
}

template <class Ops>
constexpr Int8Kernels MakeInt8Kernels() {
  constexpr size_t W = Ops::kWidth;
  using convert_internal::MapChunks;
  using convert_internal::SquaredChunks;
  using convert_internal::StreamChunks;
  return {
      [](const float* s, size_t n, float* r, uint8_t* o) {
        EncodeChunk<Ops>(s, n, r, o, [](const float* a) { return Ops::Load(a); });
      },
      [](const uint16_t* s, size_t n, float* r, uint8_t* o) {
        EncodeChunk<Ops>(s, n, r, o, [](const uint16_t* a) { return Ops::FromBf16(Ops::LoadHalf(a)); });
      },
      [](const uint16_t* s, size_t n, float* r, uint8_t* o) {
        EncodeChunk<Ops>(s, n, r, o, [](const uint16_t* a) { return Ops::FromFp16(Ops::LoadHalf(a)); });
      },
      [](const int8_t* c, size_t n, const float* sc, uint32_t ph, float* d) {
        ForGroups(c, n, sc, ph, [d](const int8_t* g, size_t len, float s, size_t i) {
          MapChunks<W>(g, d + i, len, [s](const int8_t* a, float* b) {
            Ops::Store(b, Ops::FromCodes(Ops::LoadCodes(a), Ops::Set1(s)));
          });
        });
      },
      [](const int8_t* c, size_t n, const float* sc, uint32_t ph, uint16_t* d) {
        ForGroups(c, n, sc, ph, [d](const int8_t* g, size_t len, float s, size_t i) {
          MapChunks<W>(g, d + i, len, [s](const int8_t* a, uint16_t* b) {
            Ops::StoreHalf(b, Ops::ToBf16(Ops::FromCodes(Ops::LoadCodes(a), Ops::Set1(s))));
          });
        });
      },
      [](const int8_t* c, size_t n, const float* sc, uint32_t ph, uint16_t* d) {
        ForGroups(c, n, sc, ph, [d](const int8_t* g, size_t len, float s, size_t i) {
          MapChunks<W>(g, d + i, len, [s](const int8_t* a, uint16_t* b) {
            Ops::StoreHalf(b, Ops::ToFp16(Ops::FromCodes(Ops::LoadCodes(a), Ops::Set1(s))));
          });
        });
      },
      [](const int8_t* c, size_t n, const float* sc, uint32_t ph, float* d) {
        ForGroups(c, n, sc, ph, [d](const int8_t* g, size_t len, float s, size_t i) {
          auto value = [s](const int8_t* a) {
            return Ops::FromCodes(Ops::LoadCodes(a), Ops::Set1(s));
          };
          StreamChunks<Ops, int8_t, decltype(value), false>(g, d + i, len, value);
        });
        Ops::Fence();
      },
      [](const int8_t* c, size_t n, const float* sc, uint32_t ph, float* d) {
        ForGroups(c, n, sc, ph, [d](const int8_t* g, size_t len, float s, size_t i) {
          MapChunks<W>(g, d + i, len, [s](const int8_t* a, float* b) {
            Ops::Store(b, Ops::Add(Ops::Load(b), Ops::FromCodes(Ops::LoadCodes(a), Ops::Set1(s))));
          });
        });
      },
      [](const int8_t* c, size_t n, const float* sc, uint32_t ph, float* d, SquareLanes* l) {
        ForGroups(c, n, sc, ph, [d, l](const int8_t* g, size_t len, float s, size_t i) {
          SquaredChunks<Ops, false>(g, d + i, len, l, [s](const int8_t* a, const float*) {
            return Ops::FromCodes(Ops::LoadCodes(a), Ops::Set1(s));
          });
        });
      },
      [](const int8_t* c, size_t n, const float* sc, uint32_t ph, float* d, SquareLanes* l) {
        ForGroups(c, n, sc, ph, [d, l](const int8_t* g, size_t len, float s, size_t i) {
          auto value = [s](const int8_t* a, const float*) {
            return Ops::FromCodes(Ops::LoadCodes(a), Ops::Set1(s));
          };
          SquaredChunks<Ops, true, int8_t, decltype(value), false>(g, d + i, len, l, value);
        });
        Ops::Fence();
      },
      [](const int8_t* c, size_t n, const float* sc, uint32_t ph, float* d, SquareLanes* l) {
        ForGroups(c, n, sc, ph, [d, l](const int8_t* g, size_t len, float s, size_t i) {
          SquaredChunks<Ops, false>(g, d + i, len, l, [s](const int8_t* a, const float* b) {
            return Ops::Add(Ops::Load(b), Ops::FromCodes(Ops::LoadCodes(a), Ops::Set1(s)));
          });
        });
      },
  };
}

}  // namespace zerostate::int8_internal
