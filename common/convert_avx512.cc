// The AVX-512 conversion loops; compiled with ZEROSTATE_AVX512_FLAGS,
// so it includes only the traits and the loop templates.
#include "common/convert_kernels.h"
#include "common/simd_avx512.h"

namespace zerostate::convert_internal {

const ConvertKernels& Avx512ConvertKernels() {
  static constexpr ConvertKernels kKernels = MakeConvertKernels<simd::Avx512Ops>();
  return kKernels;
}

}  // namespace zerostate::convert_internal
