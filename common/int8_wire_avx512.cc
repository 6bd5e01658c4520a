// The int8 wire's AVX-512 loops; compiled with ZEROSTATE_AVX512_FLAGS, so
// it includes only the traits and the loop templates.
#include "common/int8_wire_kernels.h"
#include "common/simd_avx512.h"

namespace zerostate::int8_internal {
namespace {

struct Avx512Int8Ops : simd::Avx512Ops {
  using I = __m512i;
  static I LoadCodes(const int8_t* p) {
    return _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static void StoreCodes(int8_t* p, I q) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm512_cvtsepi32_epi8(q));
  }
  static F FromCodes(I q, F scale) {
    const F f = _mm512_mul_ps(_mm512_cvtepi32_ps(q), scale);
    const __mmask16 nan = _mm512_cmpeq_epi32_mask(q, _mm512_set1_epi32(-128));
    return _mm512_mask_blend_ps(nan, f, _mm512_castsi512_ps(_mm512_set1_epi32(0x7fc00000)));
  }
  static __m512i AbsBits(F v) {
    return _mm512_and_si512(_mm512_castps_si512(v), _mm512_set1_epi32(0x7fffffff));
  }
  static __mmask16 Finite(__m512i abs) {
    return _mm512_cmplt_epi32_mask(abs, _mm512_set1_epi32(0x7f800000));
  }
  static I FiniteAbsBits(F v) {
    const __m512i abs = AbsBits(v);
    return _mm512_maskz_mov_epi32(Finite(abs), abs);
  }
  static I MaxI(I a, I b) { return _mm512_max_epi32(a, b); }
  static uint32_t HMax(I a) { return static_cast<uint32_t>(_mm512_reduce_max_epi32(a)); }
  static I Codes(F v, F inv) {
    const __m512i q = _mm512_cvtps_epi32(_mm512_mul_ps(v, inv));
    return _mm512_mask_blend_epi32(Finite(AbsBits(v)), _mm512_set1_epi32(-128), q);
  }
  static F ZeroNonFinite(F v) { return _mm512_maskz_mov_ps(Finite(AbsBits(v)), v); }
};

}  // namespace

const Int8Kernels& Avx512Int8Kernels() {
  static constexpr Int8Kernels kKernels = MakeInt8Kernels<Avx512Int8Ops>();
  return kKernels;
}

}  // namespace zerostate::int8_internal
