// The AVX2 (+F16C) optimizer kernels; compiled with ZEROSTATE_AVX2_FLAGS.
#include "common/simd_avx2.h"
#include "server/core/optimizer/kernel_table.h"
#include "server/core/optimizer/quant_avx2.h"
#include "server/core/optimizer/step_loop.h"

namespace zerostate::server::kernels {

const KernelTable& Avx2Kernels() {
  static constexpr KernelTable kTable = MakeKernelTable<simd::Avx2Ops>();
  return kTable;
}

}  // namespace zerostate::server::kernels
