// QuantVec (moment_codec.h) for AVX-512: 16 elements at a time, with the
// map held in registers instead of read with gathers (a gather costs tens of
// cycles where the microcode mitigates Downfall; the permutes below one).
// Encoding walks the heap of mids (QuantMap::heap) level by level: each
// level's nodes are a run of 1 to 128 floats, read by vpermps (up to 16)
// or vpermi2ps (32 per pair of registers, blended by h's bits 5 and 6 for
// the two widest levels). Decoding reads the 256 values the same way. The
// same fp32 operations as the plain version (a product by the block's
// reciprocal scale, ordered compares), so the same bits. Included only by
// kernels_avx512.cc, compiled with ZEROSTATE_AVX512_FLAGS.
#pragma once

#include "common/simd_avx512.h"
#include "server/core/optimizer/moment_codec.h"

namespace zerostate::server::kernels {

// 32 consecutive floats of a table in two registers, read by 5-bit index.
struct Table32 {
  __m512 lo, hi;
  explicit Table32(const float* t) : lo(_mm512_load_ps(t)), hi(_mm512_load_ps(t + 16)) {}
  [[gnu::always_inline]] __m512 Read(__m512i i) const { return _mm512_permutex2var_ps(lo, i, hi); }
};

// 64 (k = 2) or 128 (k = 4) consecutive floats, read by the index's low 6
// or 7 bits.
template <int k>
struct TableWide {
  Table32 part[k];
  [[gnu::always_inline]] __m512 Read(__m512i i) const {
    const __mmask16 b5 = _mm512_test_epi32_mask(i, _mm512_set1_epi32(32));
    const __m512 low = _mm512_mask_blend_ps(b5, part[0].Read(i), part[1].Read(i));
    if constexpr (k == 2) {
      return low;
    } else {
      const __mmask16 b6 = _mm512_test_epi32_mask(i, _mm512_set1_epi32(64));
      const __m512 high = _mm512_mask_blend_ps(b5, part[2].Read(i), part[3].Read(i));
      return _mm512_mask_blend_ps(b6, low, high);
    }
  }
};

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
    const float inv = 1.0f / absmax;
    // All zeros, or a scale whose reciprocal overflows: the plain version.
    if (absmax == 0 || !ReciprocalIsFinite(inv)) return QuantizeBlock(map, x, n, codes);
    const __m512 a = _mm512_set1_ps(inv);
    const __m512 root = _mm512_set1_ps(map.heap[1]);
    const __m512 levels_1_3 = _mm512_load_ps(map.heap);  // nodes 2..15 by h
    const __m512 level_4 = _mm512_load_ps(map.heap + 16);
    const Table32 level_5(map.heap + 32);
    const TableWide<2> level_6{{Table32(map.heap + 64), Table32(map.heap + 96)}};
    const TableWide<4> level_7{{Table32(map.heap + 128), Table32(map.heap + 160),
                                Table32(map.heap + 192), Table32(map.heap + 224)}};
    const __m512i one = _mm512_set1_epi32(1), two = _mm512_set1_epi32(2),
                  three = _mm512_set1_epi32(3);
    // h = 2h + (node h < q): the child of h on q's side.
    auto down = [&](__m512i h, __m512 node, __m512 q) {
      const __mmask16 right = _mm512_cmp_ps_mask(node, q, _CMP_LT_OQ);
      h = _mm512_add_epi32(h, h);
      return _mm512_mask_or_epi32(h, right, h, one);
    };
    for (i = 0; i + 16 <= n; i += 16) {
      const __m512 q = _mm512_mul_ps(_mm512_loadu_ps(x + i), a);
      __m512i h = _mm512_mask_blend_epi32(_mm512_cmp_ps_mask(root, q, _CMP_LT_OQ), two, three);
      h = down(h, _mm512_permutexvar_ps(h, levels_1_3), q);
      h = down(h, _mm512_permutexvar_ps(h, levels_1_3), q);
      h = down(h, _mm512_permutexvar_ps(h, levels_1_3), q);
      h = down(h, _mm512_permutexvar_ps(h, level_4), q);  // the low 4 bits of h
      h = down(h, level_5.Read(h), q);
      h = down(h, level_6.Read(h), q);
      h = down(h, level_7.Read(h), q);
      // h = 256 + code: its low byte.
      _mm_storeu_si128(reinterpret_cast<__m128i*>(codes + i), _mm512_cvtepi32_epi8(h));
    }
    for (; i < n; ++i) codes[i] = QuantizeUnit(map, x[i] * inv);
    return absmax;
  }

  static void Dequantize(const QuantMap& map, const uint8_t* codes, size_t n, float scale,
                         float* x) {
    const __m512 s = _mm512_set1_ps(scale);
    const TableWide<4> low{{Table32(map.value), Table32(map.value + 32), Table32(map.value + 64),
                            Table32(map.value + 96)}};
    const TableWide<4> high{{Table32(map.value + 128), Table32(map.value + 160),
                             Table32(map.value + 192), Table32(map.value + 224)}};
    const __m512i bit7 = _mm512_set1_epi32(128);
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
      const __m512i c =
          _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(codes + i)));
      const __m512 v = _mm512_mask_blend_ps(_mm512_test_epi32_mask(c, bit7), low.Read(c),
                                            high.Read(c));
      _mm512_storeu_ps(x + i, _mm512_mul_ps(v, s));
    }
    DequantizeBlock(map, codes + i, n - i, scale, x + i);
  }
};

}  // namespace zerostate::server::kernels
