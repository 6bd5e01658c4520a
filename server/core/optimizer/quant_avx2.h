// QuantVec (moment_codec.h) for AVX2: 8 elements at a time, the 8-bit
// float map's integer arithmetic on the fp32 bits; the same operations as
// the plain version, so the same bits. Included only by kernels_avx2.cc
// (ZEROSTATE_AVX2_FLAGS).
#pragma once

#include "common/simd_avx2.h"
#include "server/core/optimizer/moment_codec.h"

namespace zerostate::server::kernels {

template <>
struct QuantVec<simd::Avx2Ops> {
  using Bits = __m256i;
  static Bits NoBits() { return _mm256_setzero_si256(); }
  static Bits MaxAbs(Bits acc, __m256 x) {
    return _mm256_max_epu32(
        acc, _mm256_and_si256(_mm256_castps_si256(x), _mm256_set1_epi32(0x7fffffff)));
  }
  static uint32_t Reduce(Bits acc) {
    alignas(32) uint32_t lanes[8];
    _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), acc);
    uint32_t top = 0;
    for (uint32_t l : lanes) top = l > top ? l : top;
    return top;
  }

  template <bool kSigned>
  struct Encoder {
    explicit Encoder(float inv_scale)
        : inv(_mm256_set1_ps(inv_scale)),
          offset(_mm256_set1_epi32(static_cast<int>(kHalfStep - MapFor<kSigned>().base))),
          max(_mm256_set1_epi32(MapFor<kSigned>().max)) {}
    [[gnu::always_inline]] void Store(uint8_t* codes, const float* x) const {
      const __m256i bits = _mm256_castps_si256(_mm256_mul_ps(_mm256_loadu_ps(x), inv));
      const __m256i u = _mm256_and_si256(bits, _mm256_set1_epi32(0x7fffffff));
      __m256i idx = _mm256_srai_epi32(_mm256_add_epi32(u, offset), kMantissaShift);
      idx = _mm256_min_epi32(_mm256_max_epi32(idx, _mm256_set1_epi32(1)), max);
      // 0 below 2^-126
      idx = _mm256_and_si256(_mm256_cmpgt_epi32(u, _mm256_set1_epi32(kMinNormalBits - 1)), idx);
      if constexpr (kSigned) {
        idx = _mm256_or_si256(
            idx, _mm256_and_si256(_mm256_srli_epi32(bits, 24), _mm256_set1_epi32(0x80)));
      }
      // Byte 0 of each dword to the front of its lane, then the two lanes.
      const __m256i front = _mm256_shuffle_epi8(
          idx, _mm256_setr_epi8(0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, 0, 4,
                                8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1));
      _mm_storel_epi64(reinterpret_cast<__m128i*>(codes),
                       _mm_unpacklo_epi32(_mm256_castsi256_si128(front),
                                          _mm256_extracti128_si256(front, 1)));
    }
    __m256 inv;
    __m256i offset, max;
  };

  // bits = (idx << 20) + base where idx != 0, with the sign (signed: the
  // code's bit 7 sign-extended lands on bit 31), times the scale.
  template <bool kSigned>
  struct Decoder {
    explicit Decoder(float scale)
        : base(_mm256_set1_epi32(static_cast<int>(MapFor<kSigned>().base))),
          s(_mm256_set1_ps(scale)) {}
    [[gnu::always_inline]] __m256 Read(const uint8_t* codes) const {
      const __m128i bytes = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(codes));
      __m256i c = kSigned ? _mm256_cvtepi8_epi32(bytes) : _mm256_cvtepu8_epi32(bytes);
      __m256i t = _mm256_slli_epi32(c, kMantissaShift);
      __m256i idx = c;
      if constexpr (kSigned) {
        t = _mm256_and_si256(t, _mm256_set1_epi32(static_cast<int>(0x87f00000u)));
        idx = _mm256_and_si256(c, _mm256_set1_epi32(0x7f));
      }
      const __m256i zero = _mm256_cmpeq_epi32(idx, _mm256_setzero_si256());
      t = _mm256_add_epi32(t, _mm256_andnot_si256(zero, base));
      return _mm256_mul_ps(_mm256_castsi256_ps(t), s);
    }
    __m256i base;
    __m256 s;
  };
};

}  // namespace zerostate::server::kernels
