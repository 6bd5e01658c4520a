#include "server/core/optimizer/dispatch.h"

#include <cpuid.h>

namespace zerostate::server::kernels {

bool HasAvx512Bf16() {
  static const bool has = [] {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) == 0 || (ecx & (1u << 1)) == 0) {
      return false;  // no AVX512_VBMI
    }
    return __get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx) != 0 && (eax & (1u << 5)) != 0;
  }();
  return has;
}

const KernelTable& KernelsFor(Isa isa) {
  switch (isa) {
    case Isa::kAvx512:
      return HasAvx512Bf16() ? Avx512Bf16Kernels() : Avx512Kernels();
    case Isa::kAvx2:
      return Avx2Kernels();
    default:
      return ScalarKernels();
  }
}

}  // namespace zerostate::server::kernels
