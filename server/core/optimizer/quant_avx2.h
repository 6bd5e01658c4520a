// QuantVec (moment_codec.h) for AVX2: 8 elements at a time, the 8-bit
// float map's integer arithmetic on the 16-bit top halves (encoding) and
// the fp32 bits (decoding); the same operations as
// the plain version, so the same bits. Included only by kernels_avx2.cc
// (ZEROSTATE_AVX2_FLAGS).
#pragma once

#include "common/simd_avx2.h"
#include "server/core/optimizer/moment_codec.h"

namespace zerostate::server::kernels {

template <>
struct QuantVec<simd::Avx2Ops> {
  using Words = __m128i;
  static Words NoWords() { return _mm_setzero_si128(); }
  static uint16_t Reduce(Words acc) {
    alignas(16) uint16_t lanes[8];
    _mm_store_si128(reinterpret_cast<__m128i*>(lanes), acc);
    uint16_t top = 0;
    for (uint16_t l : lanes) top = l > top ? l : top;
    return top;
  }
  // The unsigned map's tile keeps magnitudes, as in quant_avx512.h.
  template <bool kSigned>
  [[gnu::always_inline]] static void Tile(uint16_t* h, __m256 x, Words* acc) {
    const __m256i w32 = _mm256_srli_epi32(_mm256_castps_si256(x), 16);
    const __m128i w = _mm_packus_epi32(_mm256_castsi256_si128(w32), _mm256_extracti128_si256(w32, 1));
    const __m128i a = _mm_and_si128(w, _mm_set1_epi16(kTopMagnitude));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(h), kSigned ? w : a);
    *acc = _mm_max_epu16(*acc, a);
  }

  template <bool kSigned>
  struct Encoder {
    explicit Encoder(int32_t off) : offset(_mm_set1_epi16(static_cast<int16_t>(off))) {}
    [[gnu::always_inline]] void Store(uint8_t* codes, const uint16_t* h) const {
      const __m128i w = _mm_loadu_si128(reinterpret_cast<const __m128i*>(h));
      const __m128i a = kSigned ? _mm_and_si128(w, _mm_set1_epi16(kTopMagnitude)) : w;
      __m128i idx = _mm_srai_epi16(_mm_add_epi16(a, offset), 4);
      idx = _mm_max_epi16(idx, _mm_set1_epi16(1));
      idx = _mm_and_si128(idx, _mm_cmpgt_epi16(a, _mm_set1_epi16(kTopMinNormal - 1)));
      if constexpr (kSigned) {
        idx = _mm_or_si128(idx, _mm_and_si128(_mm_srli_epi16(w, 8), _mm_set1_epi16(0x80)));
      }
      _mm_storel_epi64(reinterpret_cast<__m128i*>(codes), _mm_packus_epi16(idx, idx));
    }
    __m128i offset;
  };

  // bits = (idx << 20) + base where idx != 0, with the sign (signed: the
  // code's bit 7 sign-extended lands on bit 31); Read: times the scale.
  template <bool kSigned>
  struct Decoder {
    Decoder(uint32_t b, float scale)
        : base(_mm256_set1_epi32(static_cast<int>(b))), s(_mm256_set1_ps(scale)) {}
    [[gnu::always_inline]] __m256 Exact(const uint8_t* codes) const {
      const __m128i bytes = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(codes));
      __m256i c = kSigned ? _mm256_cvtepi8_epi32(bytes) : _mm256_cvtepu8_epi32(bytes);
      __m256i t = _mm256_slli_epi32(c, kMantissaShift);
      __m256i idx = c;
      if constexpr (kSigned) {
        t = _mm256_and_si256(t, _mm256_set1_epi32(static_cast<int>(0x87f00000u)));
        idx = _mm256_and_si256(c, _mm256_set1_epi32(0x7f));
      }
      const __m256i zero = _mm256_cmpeq_epi32(idx, _mm256_setzero_si256());
      return _mm256_castsi256_ps(_mm256_add_epi32(t, _mm256_andnot_si256(zero, base)));
    }
    [[gnu::always_inline]] __m256 Read(const uint8_t* codes) const {
      return _mm256_mul_ps(Exact(codes), s);
    }
    __m256i base;
    __m256 s;
  };
};

}  // namespace zerostate::server::kernels
