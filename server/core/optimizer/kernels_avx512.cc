// The AVX-512 optimizer kernels; compiled with ZEROSTATE_AVX512_FLAGS.
#include "common/simd_avx512.h"
#include "server/core/optimizer/kernel_table.h"
#include "server/core/optimizer/quant_avx512.h"
#include "server/core/optimizer/step_loop.h"

namespace zerostate::server::kernels {

const KernelTable& Avx512Kernels() {
  static constexpr KernelTable kTable = MakeKernelTable<simd::Avx512Ops>();
  return kTable;
}

}  // namespace zerostate::server::kernels
