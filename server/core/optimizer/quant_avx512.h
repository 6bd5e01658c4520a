// QuantVec (moment_codec.h) for AVX-512: 16 elements at a time, with the
// map held in registers instead of read with gathers (a gather costs tens of
// cycles where the microcode mitigates Downfall; a permute one). Encoding
// walks the tree of mids (QuantMap::heap_rev) level by level: each level's
// nodes are a run of 1 to 128 floats, read by vpermps (up to 16) or
// vpermi2ps (32 per pair of registers, blended by the steps of levels 5
// and 6 for the two widest levels). Decoding reads the 256 values the same
// way. The same fp32 operations as the plain version (a product by the
// block's reciprocal scale, ordered compares), so the same bits. Included
// only by kernels_avx512.cc, compiled with ZEROSTATE_AVX512_FLAGS.
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

// 64 (k = 2) or 128 (k = 4) consecutive floats, read by the index's low 5
// bits and the masks of its bit 5 (b5) and bit 6 (b6, k = 4 only).
template <int k>
struct TableWide {
  Table32 part[k];
  [[gnu::always_inline]] __m512 Read(__m512i i, __mmask16 b5, __mmask16 b6 = 0) const {
    const __m512 low = _mm512_mask_blend_ps(b5, part[0].Read(i), part[1].Read(i));
    if constexpr (k == 2) {
      return low;
    } else {
      const __m512 high = _mm512_mask_blend_ps(b5, part[2].Read(i), part[3].Read(i));
      return _mm512_mask_blend_ps(b6, low, high);
    }
  }
  [[gnu::always_inline]] __m512 Read(__m512i i) const {
    const __mmask16 b5 = _mm512_test_epi32_mask(i, _mm512_set1_epi32(32));
    if constexpr (k == 2) return Read(i, b5);
    return Read(i, b5, _mm512_test_epi32_mask(i, _mm512_set1_epi32(64)));
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
    // Level l's run of heap_rev, read by r (bits 0..l-1: the steps so far).
    const float* t = map.heap_rev;
    const __m512 level_0 = _mm512_set1_ps(t[1]);
    const __m512 level_1 = _mm512_loadu_ps(t + 2), level_2 = _mm512_loadu_ps(t + 4),
                 level_3 = _mm512_loadu_ps(t + 8), level_4 = _mm512_load_ps(t + 16);
    const Table32 level_5(t + 32);
    const TableWide<2> level_6{{Table32(t + 64), Table32(t + 96)}};
    const TableWide<4> level_7{{Table32(t + 128), Table32(t + 160), Table32(t + 192),
                                Table32(t + 224)}};
    // Bit reversal of a byte, a nibble at a time: the code is r reversed.
    const __m512i rev_lo = _mm512_broadcast_i32x4(
        _mm_setr_epi8(0, 8, 4, 12, 2, 10, 6, 14, 1, 9, 5, 13, 3, 11, 7, 15));
    const __m512i rev_hi = _mm512_slli_epi32(rev_lo, 4);  // nibbles < 16: no carry
    const __m512i nibble = _mm512_set1_epi32(15);
    for (i = 0; i + 16 <= n; i += 16) {
      const __m512 q = _mm512_mul_ps(_mm512_loadu_ps(x + i), a);
      // Step l: right (bit l of r set) where the node is below q.
      __mmask16 c[8];
      c[0] = _mm512_cmp_ps_mask(level_0, q, _CMP_LT_OQ);
      __m512i r = _mm512_maskz_mov_epi32(c[0], _mm512_set1_epi32(1));
      auto step = [&](int l, __m512 node) {
        c[l] = _mm512_cmp_ps_mask(node, q, _CMP_LT_OQ);
        r = _mm512_mask_or_epi32(r, c[l], r, _mm512_set1_epi32(1 << l));
      };
      step(1, _mm512_permutexvar_ps(r, level_1));
      step(2, _mm512_permutexvar_ps(r, level_2));
      step(3, _mm512_permutexvar_ps(r, level_3));
      step(4, _mm512_permutexvar_ps(r, level_4));
      step(5, level_5.Read(r));
      step(6, level_6.Read(r, c[5]));
      step(7, level_7.Read(r, c[5], c[6]));
      const __m512i code =
          _mm512_or_si512(_mm512_shuffle_epi8(rev_hi, _mm512_and_si512(r, nibble)),
                          _mm512_shuffle_epi8(rev_lo, _mm512_srli_epi32(r, 4)));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(codes + i), _mm512_cvtepi32_epi8(code));
    }
    for (; i < n; ++i) codes[i] = QuantizeUnit(map, x[i] * inv);
    return absmax;
  }

  // The 256 values in 16 registers, each read by vpermi2ps from a pair,
  // the pairs blended by the code's bits 5, 6 and 7.
  struct Decoder {
    Decoder(const QuantMap& m, float scale)
        : low{{Table32(m.value), Table32(m.value + 32), Table32(m.value + 64),
               Table32(m.value + 96)}},
          high{{Table32(m.value + 128), Table32(m.value + 160), Table32(m.value + 192),
                Table32(m.value + 224)}},
          s(_mm512_set1_ps(scale)) {}
    [[gnu::always_inline]] __m512 Read(const uint8_t* codes) const {
      const __m512i c =
          _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(codes)));
      const __mmask16 bit7 = _mm512_test_epi32_mask(c, _mm512_set1_epi32(128));
      return _mm512_mul_ps(_mm512_mask_blend_ps(bit7, low.Read(c), high.Read(c)), s);
    }
    TableWide<4> low, high;
    __m512 s;
  };

  static void Dequantize(const QuantMap& map, const uint8_t* codes, size_t n, float scale,
                         float* x) {
    const Decoder d(map, scale);
    size_t i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(x + i, d.Read(codes + i));
    DequantizeBlock(map, codes + i, n - i, scale, x + i);
  }
};

}  // namespace zerostate::server::kernels
