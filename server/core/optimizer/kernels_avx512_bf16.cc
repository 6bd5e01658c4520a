// The AVX-512 optimizer kernels with AVX512_BF16's conversion of the
// low-precision copy (simd_avx512_bf16.h); compiled with
// ZEROSTATE_AVX512_FLAGS, -mavx512bf16 and -mavx512vbmi.
#include "server/core/optimizer/kernel_table.h"
#include "server/core/optimizer/simd_avx512_bf16.h"
#include "server/core/optimizer/step_loop.h"

namespace zerostate::server::kernels {

const KernelTable& Avx512Bf16Kernels() {
  static constexpr KernelTable kTable = MakeKernelTable<Avx512Bf16Ops>();
  return kTable;
}

}  // namespace zerostate::server::kernels
