// The AVX2 (+F16C) conversion loops; compiled with ZEROSTATE_AVX2_FLAGS,
// so it includes only the traits and the loop templates.
#include "common/convert_kernels.h"
#include "common/simd_avx2.h"

namespace zerostate::convert_internal {

const ConvertKernels& Avx2ConvertKernels() {
  static constexpr ConvertKernels kKernels = MakeConvertKernels<simd::Avx2Ops>();
  return kKernels;
}

}  // namespace zerostate::convert_internal
