// The scalar twin of common/simd_avx2.h and common/simd_avx512.h: the same
// traits on one fp32 lane, built on the reference conversions of
// common/convert.h. A kernel template instantiated with it is the scalar
// variant, and the definition the vector variants must match bit for bit.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "common/convert.h"

namespace zerostate::simd {

struct ScalarOps {
  using F = float;
  static constexpr size_t kWidth = 1;

  static F Set1(float x) { return x; }
  static F Load(const float* p) { return *p; }
  static void Store(float* p, F x) { *p = x; }
  static void Stream(float* p, F x) { *p = x; }
  static F Add(F a, F b) { return a + b; }
  static F Sub(F a, F b) { return a - b; }
  static F Mul(F a, F b) { return a * b; }
  static F Div(F a, F b) { return a / b; }
  static F Sqrt(F a) { return std::sqrt(a); }

  // +1 where a > 0, -1 where a < 0, `a` itself elsewhere (zeros, NaN).
  static F Sign(F a) { return a > 0 ? 1.0f : a < 0 ? -1.0f : a; }

  // kWidth 16-bit elements (bf16 or fp16 bits).
  using H = uint16_t;
  static H LoadHalf(const uint16_t* p) { return *p; }
  static void StoreHalf(uint16_t* p, H h) { *p = h; }
  static void StreamHalf(uint16_t* p, H h) { *p = h; }
  static void Fence() {}

  static F FromBf16(H h) { return Bf16ToFloat(h); }
  static F FromFp16(H h) { return Fp16ToFloat(h); }
  static H ToBf16(F x) { return FloatToBf16(x); }
  static H ToFp16(F x) { return FloatToFp16(x); }

  // 16 double lanes of sums of squares; lane k takes element k of each chunk.
  struct SquareSums {
    double lane[16] = {};
  };
  // Adds the squares of the finite elements of g[0..16) to `s`; returns how
  // many were not finite.
  static unsigned AddSquares16(SquareSums* s, const float* g) {
    unsigned nonfinite = 0;
    for (int k = 0; k < 16; ++k) {
      if (std::isfinite(g[k])) {
        const double x = g[k];
        s->lane[k] += x * x;
      } else {
        ++nonfinite;
      }
    }
    return nonfinite;
  }
  static void SpillSquares(const SquareSums& s, double lanes[16]) {
    std::memcpy(lanes, s.lane, sizeof(s.lane));
  }
  // The sums SpillSquares wrote, to continue them.
  static SquareSums LoadSquares(const double lanes[16]) {
    SquareSums s;
    std::memcpy(s.lane, lanes, sizeof(s.lane));
    return s;
  }
};

}  // namespace zerostate::simd
