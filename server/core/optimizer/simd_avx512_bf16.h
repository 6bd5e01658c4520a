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

// The int8 codec of the AVX-512 traits, with AVX512_VBMI's byte permutes
// (every CPU with AVX512_BF16 and VBMI: Sapphire Rapids and later, Zen 4)
// coding two vectors at once in 16-bit lanes: one vpermt2b gathers the top
// halves of 32 scaled values (all the index depends on: moment_codec.h),
// the index arithmetic runs on 32 lanes a vector, and one vpermb gathers
// the 32 codes. The same operations per element as QuantizeUnit, in the
// vector path of BlockEncoder, where no index exceeds the map's max.
template <>
struct QuantVec<Avx512Bf16Ops> : QuantVec<simd::Avx512Ops> {
  template <bool kSigned>
  struct Encoder : QuantVec<simd::Avx512Ops>::Encoder<kSigned> {
    explicit Encoder(float inv_scale)
        : QuantVec<simd::Avx512Ops>::Encoder<kSigned>(inv_scale),
          offset2(_mm512_set1_epi16(
              static_cast<int16_t>(2 * ((kHalfStep >> 16) - (MapFor<kSigned>().base >> 16))))) {}
    // Codes of x[0, 32). REQUIRES: |x * inv| <= 1 + 2^-23 (BlockEncoder's
    // vector path).
    [[gnu::always_inline]] void Store2(uint8_t* codes, const float* x) const {
      // Bytes 2 and 3 of each dword of lo, then of hi: 32 top halves.
      alignas(64) static constexpr auto kTop = [] {
        struct {
          int8_t b[64];
        } t{};
        for (int i = 0; i < 32; ++i) {
          t.b[2 * i] = static_cast<int8_t>((i < 16 ? 0 : 64) + 4 * (i % 16) + 2);
          t.b[2 * i + 1] = static_cast<int8_t>(t.b[2 * i] + 1);
        }
        return t;
      }();
      // The low byte of each 16-bit lane.
      alignas(64) static constexpr auto kLow = [] {
        struct {
          int8_t b[64];
        } t{};
        for (int i = 0; i < 64; ++i) t.b[i] = static_cast<int8_t>(2 * (i % 32));
        return t;
      }();
      const __m512i w = _mm512_permutex2var_epi8(this->Scaled(x), _mm512_load_si512(kTop.b),
                                                 this->Scaled(x + 16));
      // |top| * 2 (the sign shifted out: no mask constant), offset2 twice
      // the offset, shifted by one more: the same index, no overflow.
      const __m512i u2 = _mm512_slli_epi16(w, 1);
      const __mmask32 normal = _mm512_test_epi16_mask(w, _mm512_set1_epi16(0x7f80));
      __m512i idx = _mm512_srai_epi16(_mm512_add_epi16(u2, offset2), 5);
      idx = _mm512_maskz_max_epi16(normal, idx, _mm512_set1_epi16(1));
      if constexpr (kSigned) {
        // idx | (w >> 8 & 0x80): the sign to bit 7
        idx = _mm512_ternarylogic_epi32(idx, _mm512_srli_epi16(w, 8), _mm512_set1_epi16(0x80), 0xF8);
      }
      const __m512i out = _mm512_permutexvar_epi8(_mm512_load_si512(kLow.b), idx);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(codes), _mm512_castsi512_si256(out));
    }
    __m512i offset2;
  };
};

}  // namespace zerostate::server::kernels
