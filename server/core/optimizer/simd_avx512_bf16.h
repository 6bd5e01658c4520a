// The AVX-512 traits (common/simd_avx512.h) with the bf16 conversion of
// AVX512_BF16 (vcvtneps2bf16: one instruction where the integer rounding
// takes nine), for the CPUs that have it (Cooper Lake, Sapphire Rapids and
// later, Zen 4). The same bits as the integer rounding: vcvtneps2bf16
// rounds to nearest even and quiets a NaN as (bits >> 16) | 0x40, exactly
// as FloatToBf16 does, but flushes denormal inputs to zero, so a vector
// holding one takes the integer rounding instead (one class test, almost
// never taken). Included only by kernels_avx512_bf16.cc, compiled with
// ZEROSTATE_AVX512_FLAGS and -mavx512bf16.
#pragma once

#include "common/simd_avx512.h"
#include "server/core/optimizer/quant_avx512.h"

namespace zerostate::server::kernels {

struct Avx512Bf16Ops : simd::Avx512Ops {
  static H ToBf16(F x) {
    constexpr int kDenormal = 0x20;  // vfpclassps: a denormal, either sign
    if (__builtin_expect(_mm512_fpclass_ps_mask(x, kDenormal) == 0, 1)) {
      return reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(x));
    }
    return simd::Avx512Ops::ToBf16(x);
  }
};

// The int8 codec of the AVX-512 traits, unchanged.
template <>
struct QuantVec<Avx512Bf16Ops> : QuantVec<simd::Avx512Ops> {};

}  // namespace zerostate::server::kernels
