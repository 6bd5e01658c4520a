// The scalar (the reference) optimizer kernels; compiled with no ISA flags.
#include "common/simd_scalar.h"
#include "server/core/optimizer/kernel_table.h"
#include "server/core/optimizer/step_loop.h"

namespace zerostate::server::kernels {

const KernelTable& ScalarKernels() {
  static constexpr KernelTable kTable = MakeKernelTable<simd::ScalarOps>();
  return kTable;
}

}  // namespace zerostate::server::kernels
