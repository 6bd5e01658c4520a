// QuantVec (moment_codec.h) for AVX-512: 16 elements at a time, the 8-bit
// float map's integer arithmetic on the fp32 bits, with masks where AVX2
// compares and blends; the same operations as the plain version, so the
// same bits. Included only by kernels_avx512.cc, compiled with
// ZEROSTATE_AVX512_FLAGS.
#pragma once

#include "common/simd_avx512.h"
#include "server/core/optimizer/moment_codec.h"

namespace zerostate::server::kernels {

template <>
struct QuantVec<simd::Avx512Ops> {
  // The running max of |x|'s bits shifted left by one (the sign shifted
  // out: the same order, and no mask constant to keep in a register).
  using Bits = __m512i;
  static Bits NoBits() { return _mm512_setzero_si512(); }
  static Bits MaxAbs(Bits acc, __m512 x) {
    return _mm512_max_epu32(acc, _mm512_slli_epi32(_mm512_castps_si512(x), 1));
  }
  static uint32_t Reduce(Bits acc) { return _mm512_reduce_max_epu32(acc) >> 1; }

  template <bool kSigned>
  struct Encoder {
    explicit Encoder(float inv_scale)
        : inv(_mm512_set1_ps(inv_scale)),
          offset(_mm512_set1_epi32(static_cast<int>(kHalfStep - MapFor<kSigned>().base))) {}
    // The bits of x[0, 16) * inv.
    [[gnu::always_inline]] __m512i Scaled(const float* x) const {
      return _mm512_castps_si512(_mm512_mul_ps(_mm512_loadu_ps(x), inv));
    }
    // The magnitude index of each lane of `bits`, clamped from below only:
    // 0 below 2^-126, else at least 1.
    [[gnu::always_inline]] __m512i Index(__m512i bits) const {
      const __m512i u = _mm512_and_si512(bits, _mm512_set1_epi32(0x7fffffff));
      const __mmask16 normal = _mm512_test_epi32_mask(bits, _mm512_set1_epi32(0x7f800000));
      const __m512i idx = _mm512_srai_epi32(_mm512_add_epi32(u, offset), kMantissaShift);
      return _mm512_maskz_max_epi32(normal, idx, _mm512_set1_epi32(1));
    }
    [[gnu::always_inline]] void Store(uint8_t* codes, const float* x) const {
      const __m512i bits = Scaled(x);
      const __m512i idx = Index(bits);
      __m128i out;
      if constexpr (kSigned) {
        // idx >= 0: the signed saturation is min(idx, 127); then bit 7
        // set where x is negative (an add: bit 7 is clear).
        out = _mm512_cvtsepi32_epi8(idx);
        out = _mm_mask_add_epi8(out, _mm512_movepi32_mask(bits), out, _mm_set1_epi8(-128));
      } else {
        out = _mm512_cvtusepi32_epi8(idx);  // idx >= 0: saturating is min(idx, 255)
      }
      _mm_storeu_si128(reinterpret_cast<__m128i*>(codes), out);
    }
    __m512 inv;
    __m512i offset;
  };

  // bits = (idx << 20) + base where idx != 0, with the sign (signed: the
  // code's bit 7 sign-extended lands on bit 31), times the scale.
  template <bool kSigned>
  struct Decoder {
    explicit Decoder(float scale)
        : base(_mm512_set1_epi32(static_cast<int>(MapFor<kSigned>().base))),
          s(_mm512_set1_ps(scale)) {}
    [[gnu::always_inline]] __m512 Read(const uint8_t* codes) const {
      const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(codes));
      const __m512i c = kSigned ? _mm512_cvtepi8_epi32(bytes) : _mm512_cvtepu8_epi32(bytes);
      __m512i t = _mm512_slli_epi32(c, kMantissaShift);
      if constexpr (kSigned) {
        t = _mm512_and_si512(t, _mm512_set1_epi32(static_cast<int>(0x87f00000u)));
        // Index 0 keeps its sign: -0 for code 0x80.
        t = _mm512_mask_add_epi32(t, _mm512_test_epi32_mask(c, _mm512_set1_epi32(0x7f)), base, t);
      } else {
        t = _mm512_maskz_add_epi32(_mm512_test_epi32_mask(c, c), t, base);  // code 0: +0
      }
      return _mm512_mul_ps(_mm512_castsi512_ps(t), s);
    }
    __m512i base;
    __m512 s;
  };
};

}  // namespace zerostate::server::kernels
