// Vector operations on 8 fp32 lanes with AVX2 and F16C, the traits the kernel
// templates (common/convert_kernels.h, server/core/optimizer/) are written
// against. Every operation rounds exactly like its scalar twin in
// common/simd_scalar.h, so a kernel gives the same bits with either.
//
// Include only from files compiled with ZEROSTATE_AVX2_FLAGS (see
// common/CMakeLists.txt), next to no header whose non-template inline
// functions other files share (the standard library, protobuf): the linker
// could keep the AVX2 copy for everyone. Code built with these flags must
// only run after common/cpu_features.h chose Isa::kAvx2 or wider.
#pragma once

#if !defined(__AVX2__) || !defined(__F16C__)
#error "common/simd_avx2.h needs ZEROSTATE_AVX2_FLAGS"
#endif

#include <immintrin.h>

#include <cstddef>
#include <cstdint>

namespace zerostate::simd {

struct Avx2Ops {
  using F = __m256;
  static constexpr size_t kWidth = 8;

  static F Set1(float x) { return _mm256_set1_ps(x); }
  static F Load(const float* p) { return _mm256_loadu_ps(p); }
  static void Store(float* p, F x) { _mm256_storeu_ps(p, x); }
  // Non-temporal store. REQUIRES: p is sizeof(F)-aligned; Fence() before
  // another thread reads what it wrote.
  static void Stream(float* p, F x) { _mm256_stream_ps(p, x); }
  static F Add(F a, F b) { return _mm256_add_ps(a, b); }
  static F Sub(F a, F b) { return _mm256_sub_ps(a, b); }
  static F Mul(F a, F b) { return _mm256_mul_ps(a, b); }
  static F Div(F a, F b) { return _mm256_div_ps(a, b); }
  static F Sqrt(F a) { return _mm256_sqrt_ps(a); }

  // +1 where a > 0, -1 where a < 0, `a` itself elsewhere (zeros, NaN).
  static F Sign(F a) {
    const F zero = _mm256_setzero_ps();
    F r = _mm256_blendv_ps(a, Set1(1.0f), _mm256_cmp_ps(a, zero, _CMP_GT_OQ));
    return _mm256_blendv_ps(r, Set1(-1.0f), _mm256_cmp_ps(a, zero, _CMP_LT_OQ));
  }

  // kWidth 16-bit elements (bf16 or fp16 bits).
  using H = __m128i;
  static H LoadHalf(const uint16_t* p) {
    return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  }
  static void StoreHalf(uint16_t* p, H h) { _mm_storeu_si128(reinterpret_cast<__m128i*>(p), h); }
  // Non-temporal store. REQUIRES: p is sizeof(H)-aligned; Fence() before
  // another thread reads what it wrote.
  static void StreamHalf(uint16_t* p, H h) { _mm_stream_si128(reinterpret_cast<__m128i*>(p), h); }
  static void Fence() { _mm_sfence(); }

  static F FromBf16(H h) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
  static F FromFp16(H h) { return _mm256_cvtph_ps(h); }
  static H ToFp16(F x) { return _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT); }
  // Integer round-to-nearest-even, NaN kept and quieted.
  static H ToBf16(F x) {
    const __m256i b = _mm256_castps_si256(x);
    const __m256i hi = _mm256_srli_epi32(b, 16);
    const __m256i lsb = _mm256_and_si256(hi, _mm256_set1_epi32(1));
    const __m256i bias = _mm256_add_epi32(_mm256_set1_epi32(0x7fff), lsb);
    const __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(b, bias), 16);
    const __m256i quiet = _mm256_or_si256(hi, _mm256_set1_epi32(0x40));
    const __m256i abs = _mm256_and_si256(b, _mm256_set1_epi32(0x7fffffff));
    const __m256i nan = _mm256_cmpgt_epi32(abs, _mm256_set1_epi32(0x7f800000));
    const __m256i r = _mm256_blendv_epi8(rounded, quiet, nan);
    // Every lane is <= 0xffff, so the unsigned-saturating pack is exact.
    return _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
  }

  // 16 double lanes of sums of squares; lane k takes element k of each chunk.
  struct SquareSums {
    __m256d lane[4] = {_mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd(),
                       _mm256_setzero_pd()};
  };
  // Adds the squares of the finite elements of g[0..16) to `s`; returns how
  // many were not finite.
  static unsigned AddSquares16(SquareSums* s, const float* g) {
    unsigned nonfinite = 0;
    for (int half = 0; half < 2; ++half) {
      const __m256 x = _mm256_loadu_ps(g + 8 * half);
      const __m256i abs = _mm256_and_si256(_mm256_castps_si256(x), _mm256_set1_epi32(0x7fffffff));
      const __m256i finite = _mm256_cmpgt_epi32(_mm256_set1_epi32(0x7f800000), abs);
      const __m256 f = _mm256_and_ps(x, _mm256_castsi256_ps(finite));
      const __m256d lo = _mm256_cvtps_pd(_mm256_castps256_ps128(f));
      const __m256d hi = _mm256_cvtps_pd(_mm256_extractf128_ps(f, 1));
      s->lane[2 * half] = _mm256_add_pd(s->lane[2 * half], _mm256_mul_pd(lo, lo));
      s->lane[2 * half + 1] = _mm256_add_pd(s->lane[2 * half + 1], _mm256_mul_pd(hi, hi));
      nonfinite += 8 - __builtin_popcount(_mm256_movemask_ps(_mm256_castsi256_ps(finite)));
    }
    return nonfinite;
  }
  static void SpillSquares(const SquareSums& s, double lanes[16]) {
    for (int k = 0; k < 4; ++k) _mm256_storeu_pd(lanes + 4 * k, s.lane[k]);
  }
  // The sums SpillSquares wrote, to continue them.
  static SquareSums LoadSquares(const double lanes[16]) {
    SquareSums s;
    for (int k = 0; k < 4; ++k) s.lane[k] = _mm256_loadu_pd(lanes + 4 * k);
    return s;
  }
};

}  // namespace zerostate::simd
