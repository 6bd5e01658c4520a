// QuantVec (moment_codec.h) for AVX-512: 16 elements at a time, the 8-bit
// float map's integer arithmetic on the 16-bit top halves (encoding) and
// the fp32 bits (decoding), with masks where AVX2 compares and blends; the
// same operations as the plain version, so the same bits. Included only by
// kernels_avx512.cc and simd_avx512_bf16.h, compiled with
// ZEROSTATE_AVX512_FLAGS.
#pragma once

#include "common/simd_avx512.h"
#include "server/core/optimizer/moment_codec.h"

namespace zerostate::server::kernels {

template <>
struct QuantVec<simd::Avx512Ops> {
  using Words = __m256i;
  static Words NoWords() { return _mm256_setzero_si256(); }
  static uint16_t Reduce(Words acc) {
    alignas(32) uint16_t lanes[16];
    _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), acc);
    uint16_t top = 0;
    for (uint16_t l : lanes) top = l > top ? l : top;
    return top;
  }
  // The unsigned map's codes ignore the sign: its tile keeps magnitudes
  // (the encoder then masks nothing).
  template <bool kSigned>
  [[gnu::always_inline]] static void Tile(uint16_t* h, __m512 x, Words* acc) {
    const __m256i w = _mm512_cvtepi32_epi16(_mm512_srli_epi32(_mm512_castps_si512(x), 16));
    const __m256i a = _mm256_and_si256(w, _mm256_set1_epi16(kTopMagnitude));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(h), kSigned ? w : a);
    *acc = _mm256_max_epu16(*acc, a);
  }

  template <bool kSigned>
  struct Encoder {
    explicit Encoder(int32_t off) : offset(_mm512_set1_epi16(static_cast<int16_t>(off))) {}
    [[gnu::always_inline]] void Store(uint8_t* codes, const uint16_t* h) const {
      const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(h));
      const __m256i a = kSigned ? _mm256_and_si256(w, _mm256_set1_epi16(kTopMagnitude)) : w;
      const __mmask16 normal = _mm256_test_epi16_mask(w, _mm256_set1_epi16(kTopExponent));
      __m256i idx = _mm256_srai_epi16(_mm256_add_epi16(a, _mm512_castsi512_si256(offset)), 4);
      idx = _mm256_maskz_max_epi16(normal, idx, _mm256_set1_epi16(1));
      if constexpr (kSigned) {
        // idx | (w >> 8 & 0x80): the sign to bit 7
        idx = _mm256_ternarylogic_epi32(idx, _mm256_srli_epi16(w, 8), _mm256_set1_epi16(0x80), 0xF8);
      }
      _mm_storeu_si128(reinterpret_cast<__m128i*>(codes), _mm256_cvtepi16_epi8(idx));
    }
    __m512i offset;
  };

  // bits = (idx << 20) + base where idx != 0, with the sign (signed: the
  // code's bit 7 sign-extended lands on bit 31); Read: times the scale.
  template <bool kSigned>
  struct Decoder {
    Decoder(uint32_t b, float scale)
        : base(_mm512_set1_epi32(static_cast<int>(b))), s(_mm512_set1_ps(scale)) {}
    [[gnu::always_inline]] __m512 Exact(const uint8_t* codes) const {
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
      return _mm512_castsi512_ps(t);
    }
    [[gnu::always_inline]] __m512 Read(const uint8_t* codes) const {
      return _mm512_mul_ps(Exact(codes), s);
    }
    __m512i base;
    __m512 s;
  };
};

}  // namespace zerostate::server::kernels
