// Internal to server/core/optimizer/: the kernel table of an ISA.
#pragma once

#include "common/cpu_features.h"
#include "server/core/optimizer/kernel_table.h"

namespace zerostate::server::kernels {

// Whether the CPU has AVX512_BF16 (CPUID leaf 7, subleaf 1, EAX bit 5) and
// AVX512_VBMI (leaf 7, subleaf 0, ECX bit 1), the two that
// Avx512Bf16Kernels use beyond AVX-512 (Cooper Lake, with BF16 but no VBMI,
// takes Avx512Kernels); the AVX-512 register state is HasAvx512's
// (common/cpu_features.cc).
bool HasAvx512Bf16();

// REQUIRES (to call what it returns): the CPU supports `isa`. For
// Isa::kAvx512, Avx512Bf16Kernels where the CPU has AVX512_BF16 (the same
// bits, fewer instructions).
const KernelTable& KernelsFor(Isa isa);

}  // namespace zerostate::server::kernels
