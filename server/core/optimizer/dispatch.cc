#include "server/core/optimizer/dispatch.h"

namespace zerostate::server::kernels {

const KernelTable& KernelsFor(Isa isa) {
  switch (isa) {
    case Isa::kAvx512:
      return Avx512Kernels();
    case Isa::kAvx2:
      return Avx2Kernels();
    default:
      return ScalarKernels();
  }
}

}  // namespace zerostate::server::kernels
