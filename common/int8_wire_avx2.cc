// The int8 wire's AVX2 loops; compiled with ZEROSTATE_AVX2_FLAGS, so it
// includes only the traits and the loop templates.
#include "common/int8_wire_kernels.h"
#include "common/simd_avx2.h"

namespace zerostate::int8_internal {
namespace {

struct Avx2Int8Ops : simd::Avx2Ops {
  using I = __m256i;
  static I LoadCodes(const int8_t* p) {
    return _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
  }
  static void StoreCodes(int8_t* p, I q) {
    const __m128i w = _mm_packs_epi32(_mm256_castsi256_si128(q), _mm256_extracti128_si256(q, 1));
    _mm_storel_epi64(reinterpret_cast<__m128i*>(p), _mm_packs_epi16(w, w));
  }
  static F FromCodes(I q, F scale) {
    const F f = _mm256_mul_ps(_mm256_cvtepi32_ps(q), scale);
    const __m256i nan = _mm256_cmpeq_epi32(q, _mm256_set1_epi32(-128));
    return _mm256_blendv_ps(f, _mm256_castsi256_ps(_mm256_set1_epi32(0x7fc00000)),
                            _mm256_castsi256_ps(nan));
  }
  static __m256i Finite(__m256i abs) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(0x7f800000), abs);
  }
  static __m256i AbsBits(F v) {
    return _mm256_and_si256(_mm256_castps_si256(v), _mm256_set1_epi32(0x7fffffff));
  }
  static I FiniteAbsBits(F v) {
    const __m256i abs = AbsBits(v);
    return _mm256_and_si256(abs, Finite(abs));
  }
  static I MaxI(I a, I b) { return _mm256_max_epi32(a, b); }
  static uint32_t HMax(I a) {
    alignas(32) int32_t lanes[8];
    _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), a);
    int32_t m = lanes[0];
    for (int k = 1; k < 8; ++k) m = lanes[k] > m ? lanes[k] : m;
    return static_cast<uint32_t>(m);
  }
  static I Codes(F v, F inv) {
    const __m256i q = _mm256_cvtps_epi32(_mm256_mul_ps(v, inv));
    return _mm256_blendv_epi8(_mm256_set1_epi32(-128), q, Finite(AbsBits(v)));
  }
  static F ZeroNonFinite(F v) { return _mm256_and_ps(v, _mm256_castsi256_ps(Finite(AbsBits(v)))); }
};

}  // namespace

const Int8Kernels& Avx2Int8Kernels() {
  static constexpr Int8Kernels kKernels = MakeInt8Kernels<Avx2Int8Ops>();
  return kKernels;
}

}  // namespace zerostate::int8_internal
