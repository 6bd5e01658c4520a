// QuantVec (moment_codec.h) for AVX-512: 16 elements at a time, the map's
// tables read with gathers. The same operations as the plain version (an
// IEEE division, integer keys, ordered compares), so the same bits.
// Included only by kernels_avx512.cc, compiled with ZEROSTATE_AVX512_FLAGS.
#pragma once

#include "common/simd_avx512.h"
#include "server/core/optimizer/moment_codec.h"

namespace zerostate::server::kernels {

template <>
struct QuantVec<simd::Avx512Ops> {
  static float Quantize(const QuantMap& map, const float* x, size_t n, uint8_t* codes) {
    __m512i bits = _mm512_setzero_si512();
    const __m512i magnitude = _mm512_set1_epi32(0x7fffffff);
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
      bits = _mm512_max_epu32(bits, _mm512_and_si512(_mm512_loadu_si512(x + i), magnitude));
    }
    uint32_t top = _mm512_reduce_max_epu32(bits);
    for (; i < n; ++i) {
      uint32_t u;
      __builtin_memcpy(&u, x + i, 4);
      u &= 0x7fffffffu;
      top = u > top ? u : top;
    }
    float absmax;
    __builtin_memcpy(&absmax, &top, 4);
    if (absmax == 0) return QuantizeBlock(map, x, n, codes);  // all zeros
    const __m512 a = _mm512_set1_ps(absmax);
    const __m512i top_bit = _mm512_set1_epi32(static_cast<int>(0x80000000u));
    const __m512i byte = _mm512_set1_epi32(0xff), one = _mm512_set1_epi32(1);
    for (i = 0; i + 16 <= n; i += 16) {
      const __m512 q = _mm512_div_ps(_mm512_loadu_ps(x + i), a);
      const __m512i u = _mm512_castps_si512(q);
      // OrderKey: ~u for negatives, u | 2^31 otherwise.
      const __m512i key = _mm512_xor_si512(u, _mm512_or_si512(_mm512_srai_epi32(u, 31), top_bit));
      const __m512i lo = _mm512_and_si512(
          _mm512_i32gather_epi32(_mm512_srli_epi32(key, 16), map.lo, 1), byte);
      const __m512 m0 = _mm512_i32gather_ps(lo, map.mid, 4);
      const __m512 m1 = _mm512_i32gather_ps(_mm512_add_epi32(lo, one), map.mid, 4);
      __m512i code = _mm512_mask_add_epi32(lo, _mm512_cmp_ps_mask(m0, q, _CMP_LT_OQ), lo, one);
      code = _mm512_mask_add_epi32(code, _mm512_cmp_ps_mask(m1, q, _CMP_LT_OQ), code, one);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(codes + i),
                       _mm512_cvtepi32_epi8(_mm512_min_epu32(code, byte)));
    }
    for (; i < n; ++i) codes[i] = QuantizeUnit(map, x[i] / absmax);
    return absmax;
  }

  static void Dequantize(const QuantMap& map, const uint8_t* codes, size_t n, float scale,
                         float* x) {
    const __m512 s = _mm512_set1_ps(scale);
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
      const __m512i c =
          _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(codes + i)));
      _mm512_storeu_ps(x + i, _mm512_mul_ps(_mm512_i32gather_ps(c, map.value, 4), s));
    }
    DequantizeBlock(map, codes + i, n - i, scale, x + i);
  }
};

}  // namespace zerostate::server::kernels
