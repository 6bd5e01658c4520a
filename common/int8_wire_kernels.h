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

// One ISA's loops. The decodes take n codes of one scale.
struct Int8Kernels {
  // Quantizes v[0, padded) (padded: a multiple of 16, zeros past the
  // group's elements), writing codes[0, padded) and, when err is not null,
  // err[i] = v[i] - dequantized (0 where v[i] is not finite). Returns the
  // scale.
  float (*quantize)(const float* v, size_t padded, int8_t* codes, float* err);
  void (*decode)(const int8_t* codes, size_t n, float scale, float* dst);
  void (*stream)(const int8_t* codes, size_t n, float scale, float* dst);
  void (*accumulate)(const int8_t* codes, size_t n, float scale, float* dst);
  void (*decode_squared)(const int8_t* codes, size_t n, float scale, float* dst,
                         SquareLanes* lanes);
  void (*stream_squared)(const int8_t* codes, size_t n, float scale, float* dst,
                         SquareLanes* lanes);
  void (*accumulate_squared)(const int8_t* codes, size_t n, float scale, float* dst,
                             SquareLanes* lanes);
};

// Defined in int8_wire.cc, int8_wire_avx2.cc and int8_wire_avx512.cc.
const Int8Kernels& ScalarInt8Kernels();
const Int8Kernels& Avx2Int8Kernels();
const Int8Kernels& Avx512Int8Kernels();

template <class Ops>
float Quantize(const float* v, size_t padded, int8_t* codes, float* err) {
  constexpr size_t W = Ops::kWidth;
  using F = typename Ops::F;
  using I = typename Ops::I;
  I amax_bits = Ops::FiniteAbsBits(Ops::Set1(0.0f));
  for (size_t i = 0; i < padded; i += W) {
    amax_bits = Ops::MaxI(amax_bits, Ops::FiniteAbsBits(Ops::Load(v + i)));
  }
  const uint32_t bits = Ops::HMax(amax_bits);
  float amax;
  std::memcpy(&amax, &bits, 4);
  float scale = 0.0f;
  float inv = 0.0f;
  if (amax >= kMinAbsmax) {
    scale = amax / 127.0f;
    inv = 127.0f / amax;
  }
  const F vscale = Ops::Set1(scale);
  const F vinv = Ops::Set1(inv);
  for (size_t i = 0; i < padded; i += W) {
    const F x = Ops::Load(v + i);
    const I q = Ops::Codes(x, vinv);
    Ops::StoreCodes(codes + i, q);
    if (err != nullptr) {
      // NaN - NaN is NaN: a non-finite element's error is made 0 below.
      const F e = Ops::Sub(x, Ops::FromCodes(q, vscale));
      Ops::Store(err + i, Ops::ZeroNonFinite(e));
    }
  }
  return scale;
}

template <class Ops>
constexpr Int8Kernels MakeInt8Kernels() {
  constexpr size_t W = Ops::kWidth;
  using convert_internal::MapChunks;
  using convert_internal::SquaredChunks;
  using convert_internal::StreamChunks;
  return {
      &Quantize<Ops>,
      [](const int8_t* c, size_t n, float s, float* d) {
        MapChunks<W>(c, d, n, [s](const int8_t* a, float* b) {
          Ops::Store(b, Ops::FromCodes(Ops::LoadCodes(a), Ops::Set1(s)));
        });
      },
      [](const int8_t* c, size_t n, float s, float* d) {
        StreamChunks<Ops>(c, d, n, [s](const int8_t* a) {
          return Ops::FromCodes(Ops::LoadCodes(a), Ops::Set1(s));
        });
      },
      [](const int8_t* c, size_t n, float s, float* d) {
        MapChunks<W>(c, d, n, [s](const int8_t* a, float* b) {
          Ops::Store(b, Ops::Add(Ops::Load(b), Ops::FromCodes(Ops::LoadCodes(a), Ops::Set1(s))));
        });
      },
      [](const int8_t* c, size_t n, float s, float* d, SquareLanes* l) {
        SquaredChunks<Ops, false>(c, d, n, l, [s](const int8_t* a, const float*) {
          return Ops::FromCodes(Ops::LoadCodes(a), Ops::Set1(s));
        });
      },
      [](const int8_t* c, size_t n, float s, float* d, SquareLanes* l) {
        SquaredChunks<Ops, true>(c, d, n, l, [s](const int8_t* a, const float*) {
          return Ops::FromCodes(Ops::LoadCodes(a), Ops::Set1(s));
        });
      },
      [](const int8_t* c, size_t n, float s, float* d, SquareLanes* l) {
        SquaredChunks<Ops, false>(c, d, n, l, [s](const int8_t* a, const float* b) {
          return Ops::Add(Ops::Load(b), Ops::FromCodes(Ops::LoadCodes(a), Ops::Set1(s)));
        });
      },
  };
}

}  // namespace zerostate::int8_internal
