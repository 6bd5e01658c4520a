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
// for two vectors at once: one vpermt2b gathers the top halves of 32
// elements into a tile (where a narrowing of each vector takes two uops),
// the encoder codes 32 top halves in 16-bit lanes and one vpermb gathers
// their low bytes. The same operations per element as the plain codec.
template <>
struct QuantVec<Avx512Bf16Ops> : QuantVec<simd::Avx512Ops> {
  using Base = QuantVec<simd::Avx512Ops>;
  using Words = __m512i;
  static Words NoWords() { return _mm512_setzero_si512(); }
  static uint16_t Reduce(Words acc) {
    return Base::Reduce(_mm256_max_epu16(_mm512_castsi512_si256(acc),
                                         _mm512_extracti64x4_epi64(acc, 1)));
  }
  template <bool kSigned>
  [[gnu::always_inline]] static void Tile(uint16_t* h, __m512 x, Words* acc) {
    __m256i low = _mm512_castsi512_si256(*acc);
    Base::Tile<kSigned>(h, x, &low);
    *acc = _mm512_inserti64x4(*acc, low, 0);
  }
  // Tile of lo (elements 0..15) and hi (16..31).
  template <bool kSigned>
  [[gnu::always_inline]] static void Tile2(uint16_t* h, __m512 lo, __m512 hi, Words* acc) {
    // Bytes 2 and 3 of each dword of lo, then of hi.
    alignas(64) static constexpr auto kHigh = [] {
      struct {
        int8_t b[64];
      } t{};
      for (int i = 0; i < 32; ++i) {
        t.b[2 * i] = static_cast<int8_t>((i < 16 ? 0 : 64) + 4 * (i % 16) + 2);
        t.b[2 * i + 1] = static_cast<int8_t>(t.b[2 * i] + 1);
      }
      return t;
    }();
    const __m512i w = _mm512_permutex2var_epi8(_mm512_castps_si512(lo), _mm512_load_si512(kHigh.b),
                                               _mm512_castps_si512(hi));
    const __m512i a = _mm512_and_si512(w, _mm512_set1_epi16(kTopMagnitude));
    _mm512_storeu_si512(h, kSigned ? w : a);
    *acc = _mm512_max_epu16(*acc, a);
  }

  template <bool kSigned>
  struct Encoder : Base::Encoder<kSigned> {
    using Base::Encoder<kSigned>::Encoder;
    // Codes of h[0, 32).
    [[gnu::always_inline]] void Store2(uint8_t* codes, const uint16_t* h) const {
      alignas(64) static constexpr auto kLowBytes = [] {
        struct {
          int8_t b[64];
        } t{};
        for (int i = 0; i < 64; ++i) t.b[i] = static_cast<int8_t>(2 * (i % 32));
        return t;
      }();
      const __m512i w = _mm512_loadu_si512(h);
      const __m512i a = kSigned ? _mm512_and_si512(w, _mm512_set1_epi16(kTopMagnitude)) : w;
      const __mmask32 normal = _mm512_test_epi16_mask(w, _mm512_set1_epi16(kTopExponent));
      __m512i idx = _mm512_srai_epi16(_mm512_add_epi16(a, this->offset), 4);
      idx = _mm512_maskz_max_epi16(normal, idx, _mm512_set1_epi16(1));
      if constexpr (kSigned) {
        idx = _mm512_ternarylogic_epi32(idx, _mm512_srli_epi16(w, 8), _mm512_set1_epi16(0x80), 0xF8);
      }
      const __m512i bytes = _mm512_permutexvar_epi8(_mm512_load_si512(kLowBytes.b), idx);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(codes), _mm512_castsi512_si256(bytes));
    }
  };
};

}  // namespace zerostate::server::kernels
