// QuantVec (moment_codec.h) for AVX2: 8 elements at a time, the map's
// tables read with gathers; the same operations as the plain version, so
// the same bits. Included only by kernels_avx2.cc (ZEROSTATE_AVX2_FLAGS).
#pragma once

#include "common/simd_avx2.h"
#include "server/core/optimizer/moment_codec.h"

namespace zerostate::server::kernels {

template <>
struct QuantVec<simd::Avx2Ops> {
  static float Quantize(const QuantMap& map, const float* x, size_t n, uint8_t* codes) {
    __m256i bits = _mm256_setzero_si256();
    const __m256i magnitude = _mm256_set1_epi32(0x7fffffff);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
      const __m256i u = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i));
      bits = _mm256_max_epu32(bits, _mm256_and_si256(u, magnitude));
    }
    alignas(32) uint32_t lanes[8];
    _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), bits);
    uint32_t top = 0;
    for (uint32_t l : lanes) top = l > top ? l : top;
    for (; i < n; ++i) {
      uint32_t u;
      __builtin_memcpy(&u, x + i, 4);
      u &= 0x7fffffffu;
      top = u > top ? u : top;
    }
    float absmax;
    __builtin_memcpy(&absmax, &top, 4);
    const float inv = 1.0f / absmax;
    // All zeros, or a scale whose reciprocal overflows: the plain version.
    if (absmax == 0 || !ReciprocalIsFinite(inv)) return QuantizeBlock(map, x, n, codes);
    const __m256 a = _mm256_set1_ps(inv);
    const __m256i top_bit = _mm256_set1_epi32(static_cast<int>(0x80000000u));
    const __m256i byte = _mm256_set1_epi32(0xff), one = _mm256_set1_epi32(1);
    const auto* lo_table = reinterpret_cast<const int*>(map.lo);
    for (i = 0; i + 8 <= n; i += 8) {
      const __m256 q = _mm256_mul_ps(_mm256_loadu_ps(x + i), a);
      const __m256i u = _mm256_castps_si256(q);
      const __m256i key = _mm256_xor_si256(u, _mm256_or_si256(_mm256_srai_epi32(u, 31), top_bit));
      const __m256i lo =
          _mm256_and_si256(_mm256_i32gather_epi32(lo_table, _mm256_srli_epi32(key, 16), 1), byte);
      const __m256 m0 = _mm256_i32gather_ps(map.mid, lo, 4);
      const __m256 m1 = _mm256_i32gather_ps(map.mid, _mm256_add_epi32(lo, one), 4);
      // A true compare is all ones (-1): subtracting it adds one.
      __m256i code = _mm256_sub_epi32(lo, _mm256_castps_si256(_mm256_cmp_ps(m0, q, _CMP_LT_OQ)));
      code = _mm256_sub_epi32(code, _mm256_castps_si256(_mm256_cmp_ps(m1, q, _CMP_LT_OQ)));
      alignas(32) uint32_t out[8];
      _mm256_store_si256(reinterpret_cast<__m256i*>(out), _mm256_min_epu32(code, byte));
      for (int k = 0; k < 8; ++k) codes[i + k] = static_cast<uint8_t>(out[k]);
    }
    for (; i < n; ++i) codes[i] = QuantizeUnit(map, x[i] * inv);
    return absmax;
  }

  struct Decoder {
    Decoder(const QuantMap& m, float scale) : map(m), s(_mm256_set1_ps(scale)) {}
    __m256 Read(const uint8_t* codes) const {
      const __m256i c =
          _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(codes)));
      return _mm256_mul_ps(_mm256_i32gather_ps(map.value, c, 4), s);
    }
    const QuantMap& map;
    __m256 s;
  };

  static void Dequantize(const QuantMap& map, const uint8_t* codes, size_t n, float scale,
                         float* x) {
    const Decoder d(map, scale);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, d.Read(codes + i));
    DequantizeBlock(map, codes + i, n - i, scale, x + i);
  }
};

}  // namespace zerostate::server::kernels
