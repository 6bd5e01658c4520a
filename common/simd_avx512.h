// Vector operations on 16 fp32 lanes with AVX-512 (F, BW, VL, DQ), the traits
// the kernel templates (common/convert_kernels.h, server/core/optimizer/) are
// written against. Every operation rounds exactly like its scalar twin in
// common/simd_scalar.h, so a kernel gives the same bits with either.
//
// Include only from files compiled with ZEROSTATE_AVX512_FLAGS (see
// common/CMakeLists.txt), next to no header whose non-template inline
// functions other files share (the standard library, protobuf): the linker
// could keep the AVX-512 copy for everyone. Code built with these flags must
// only run after common/cpu_features.h chose Isa::kAvx512.
#pragma once

#if !defined(__AVX512F__) || !defined(__AVX512BW__) || !defined(__AVX512VL__) || \
    !defined(__AVX512DQ__)
#error "common/simd_avx512.h needs ZEROSTATE_AVX512_FLAGS"
#endif

#include <immintrin.h>

#include <cstddef>
#include <cstdint>

namespace zerostate::simd {

struct Avx512Ops {
  using F = __m512;
  static constexpr size_t kWidth = 16;

  static F Set1(float x) { return _mm512_set1_ps(x); }
  static F Load(const float* p) { return _mm512_loadu_ps(p); }
  static void Store(float* p, F x) { _mm512_storeu_ps(p, x); }
  // Non-temporal store. REQUIRES: p is sizeof(F)-aligned; Fence() before
  // another thread reads what it wrote.
  static void Stream(float* p, F x) { _mm512_stream_ps(p, x); }
  static F Add(F a, F b) { return _mm512_add_ps(a, b); }
  static F Sub(F a, F b) { return _mm512_sub_ps(a, b); }
  static F Mul(F a, F b) { return _mm512_mul_ps(a, b); }
  static F Div(F a, F b) { return _mm512_div_ps(a, b); }
  static F Sqrt(F a) { return _mm512_sqrt_ps(a); }

  // +1 where a > 0, -1 where a < 0, `a` itself elsewhere (zeros, NaN).
  static F Sign(F a) {
    const F zero = _mm512_setzero_ps();
    F r = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(a, zero, _CMP_GT_OQ), a, Set1(1.0f));
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(a, zero, _CMP_LT_OQ), r, Set1(-1.0f));
  }

  // kWidth 16-bit elements (bf16 or fp16 bits).
  using H = __m256i;
  static H LoadHalf(const uint16_t* p) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  }
  static void StoreHalf(uint16_t* p, H h) { _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), h); }
  // Non-temporal store. REQUIRES: p is sizeof(H)-aligned; Fence() before
  // another thread reads what it wrote.
  static void StreamHalf(uint16_t* p, H h) {
    _mm256_stream_si256(reinterpret_cast<__m256i*>(p), h);
  }
  static void Fence() { _mm_sfence(); }

  static F FromBf16(H h) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
  static F FromFp16(H h) { return _mm512_cvtph_ps(h); }
  static H ToFp16(F x) { return _mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT); }
  // Integer round-to-nearest-even (vcvtneps2bf16 would flush denormals).
  static H ToBf16(F x) {
    const __m512i b = _mm512_castps_si512(x);
    const __m512i hi = _mm512_srli_epi32(b, 16);
    const __m512i lsb = _mm512_and_si512(hi, _mm512_set1_epi32(1));
    const __m512i bias = _mm512_add_epi32(_mm512_set1_epi32(0x7fff), lsb);
    const __m512i rounded = _mm512_srli_epi32(_mm512_add_epi32(b, bias), 16);
    // A NaN keeps its top half, made quiet (one compare finds it: no
    // magnitude mask, no blend).
    const __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
    return _mm512_cvtepi32_epi16(
        _mm512_mask_or_epi32(rounded, nan, hi, _mm512_set1_epi32(0x40)));
  }

  // 16 double lanes of sums of squares; lane k takes element k of each chunk.
  struct SquareSums {
    __m512d lo = _mm512_setzero_pd();  // lanes 0..7
    __m512d hi = _mm512_setzero_pd();  // lanes 8..15
  };
  // Adds the squares of the finite elements of g[0..16) to `s`; returns how
  // many were not finite.
  static unsigned AddSquares16(SquareSums* s, const float* g) {
    const __m512 x = _mm512_loadu_ps(g);
    const __m512i abs = _mm512_and_si512(_mm512_castps_si512(x), _mm512_set1_epi32(0x7fffffff));
    const __mmask16 finite = _mm512_cmplt_epi32_mask(abs, _mm512_set1_epi32(0x7f800000));
    const __m512 f = _mm512_maskz_mov_ps(finite, x);
    const __m512d lo = _mm512_cvtps_pd(_mm512_castps512_ps256(f));
    const __m512d hi = _mm512_cvtps_pd(_mm512_extractf32x8_ps(f, 1));
    s->lo = _mm512_add_pd(s->lo, _mm512_mul_pd(lo, lo));
    s->hi = _mm512_add_pd(s->hi, _mm512_mul_pd(hi, hi));
    return 16 - static_cast<unsigned>(__builtin_popcount(finite));
  }
  static void SpillSquares(const SquareSums& s, double lanes[16]) {
    _mm512_storeu_pd(lanes, s.lo);
    _mm512_storeu_pd(lanes + 8, s.hi);
  }
  // The sums SpillSquares wrote, to continue them.
  static SquareSums LoadSquares(const double lanes[16]) {
    SquareSums s;
    s.lo = _mm512_loadu_pd(lanes);
    s.hi = _mm512_loadu_pd(lanes + 8);
    return s;
  }
};

}  // namespace zerostate::simd
