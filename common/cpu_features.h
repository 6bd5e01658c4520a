// Run-time choice of instruction set for the vectorised kernels: the same
// binary runs on any x86-64 host and uses the widest ISA it has.
#pragma once

#include <string_view>
#include <vector>

namespace zerostate {

enum class Isa { kScalar = 0, kAvx2 = 1, kAvx512 = 2 };

// The widest ISA this CPU and OS support (AVX-512 needs F, BW, VL and DQ;
// AVX2 needs AVX2, FMA and F16C). Honours ZEROSTATE_ISA=scalar|avx2|avx512
// only to narrow the choice (for tests and benchmarks), never to widen it.
Isa BestIsa();

// Every ISA this CPU supports, narrowest first (always includes kScalar).
std::vector<Isa> SupportedIsas();

std::string_view IsaName(Isa isa);

}  // namespace zerostate
