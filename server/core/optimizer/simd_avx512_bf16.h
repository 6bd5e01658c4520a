// The AVX-512 traits (common/simd_avx512.h) with the bf16 conversion of
// AVX512_BF16 (vcvtneps2bf16: one instruction where the integer rounding
// takes nine), for the CPUs that have it and AVX512_VBMI (Sapphire Rapids
// and later, Zen 4; dispatch.h). The same bits as the integer rounding: vcvtneps2bf16
// rounds to nearest even and quiets a NaN as (bits >> 16) | 0x40, exactly
// as FloatToBf16 does, but flushes denormal inputs to zero, so a vector
// holding one takes the integer rounding instead (one class test, almost
// never taken). Included only by kernels_avx512_bf16.cc, compiled with
// ZEROSTATE_AVX512_FLAGS, -mavx512bf16 and -mavx512vbmi.
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
  // The bf16 of lo (elements 0..15) and hi (16..31) in one vector: one
  // vcvtne2ps2bf16 where two vcvtneps2bf16 take twice the uops.
  static __m512i ToBf16Pair(F lo, F hi) {
    constexpr int kDenormal = 0x20;
    if (__builtin_expect(_kortestz_mask16_u8(_mm512_fpclass_ps_mask(lo, kDenormal),
                                             _mm512_fpclass_ps_mask(hi, kDenormal)),
                         1)) {
      return reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(hi, lo));
    }
    return _mm512_inserti64x4(_mm512_castsi256_si512(simd::Avx512Ops::ToBf16(lo)),
                              simd::Avx512Ops::ToBf16(hi), 1);
  }
  // ToBf16Pair's 32 values to p[0, 32); kStream: non-temporal (REQUIRES: p
  // 64-byte aligned; Fence() before another thread reads them).
  template <bool kStream>
  static void StoreBf16Pair(uint16_t* p, F lo, F hi) {
    if constexpr (kStream) {
      _mm512_stream_si512(reinterpret_cast<__m512i*>(p), ToBf16Pair(lo, hi));
    } else {
      _mm512_storeu_si512(p, ToBf16Pair(lo, hi));
    }
  }
};

// The int8 codec of the AVX-512 traits, with AVX512_VBMI's byte permute
// (every CPU with AVX512_BF16 and VBMI: Sapphire Rapids and later, Zen 4)
// gathering the codes of two vectors at once: one vpermt2b where two
// saturating narrowings take four uops. The same codes: in the vector path
// (BlockEncoder) no index exceeds the map's max, so the narrowing's
// saturation never acts, and a signed code's bit 7 is the sign bit of its
// fp32 value, the top byte of each lane gathered by a second permute.
template <>
struct QuantVec<Avx512Bf16Ops> : QuantVec<simd::Avx512Ops> {
  template <bool kSigned>
  struct Encoder : QuantVec<simd::Avx512Ops>::Encoder<kSigned> {
    using QuantVec<simd::Avx512Ops>::Encoder<kSigned>::Encoder;
    // Codes of x[0, 32). REQUIRES: |x * inv| <= 1 + 2^-23 (BlockEncoder's
    // vector path).
    [[gnu::always_inline]] void Store2(uint8_t* codes, const float* x) const {
      const __m512i lo = this->Scaled(x), hi = this->Scaled(x + 16);
      // Byte k of each dword of lo, then of hi.
      const auto bytes = [](__m512i a, __m512i b, int k) {
        alignas(64) static constexpr auto kPick = [] {
          struct {
            int8_t b[4][64];
          } t{};
          for (int j = 0; j < 4; ++j) {
            for (int i = 0; i < 32; ++i) {
              t.b[j][i] = static_cast<int8_t>((i < 16 ? 0 : 64) + 4 * (i % 16) + j);
            }
          }
          return t;
        }();
        return _mm512_castsi512_si256(
            _mm512_permutex2var_epi8(a, _mm512_load_si512(kPick.b[k]), b));
      };
      __m256i out = bytes(this->Index(lo), this->Index(hi), 0);
      if constexpr (kSigned) {
        // out | (sign byte & 0x80)
        out = _mm256_ternarylogic_epi32(out, bytes(lo, hi, 3), _mm256_set1_epi8(-128), 0xF8);
      }
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(codes), out);
    }
  };
};

}  // namespace zerostate::server::kernels
