#include "common/cpu_features.h"

#include <cpuid.h>

#include <cstdlib>
#include <string>

namespace zerostate {
namespace {

// F16C from CPUID leaf 1 (ECX bit 29): clang 14's __builtin_cpu_supports does
// not know "f16c". Its ymm state is the AVX state that "avx2" already checks.
bool HasF16c() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0;
}

bool HasAvx2() {
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && HasF16c();
}

// The AVX-512 kernels are built with the AVX2 flags too (common/CMakeLists.txt).
bool HasAvx512() {
  return HasAvx2() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
}

// libgcc's __builtin_cpu_supports also checks (XGETBV) that the OS saves the
// AVX and AVX-512 register state.
Isa Detect() {
  __builtin_cpu_init();
  if (HasAvx512()) return Isa::kAvx512;
  if (HasAvx2()) return Isa::kAvx2;
  return Isa::kScalar;
}

Isa Narrowed(Isa hw) {
  const char* env = std::getenv("ZEROSTATE_ISA");
  if (env == nullptr) return hw;
  std::string want(env);
  Isa w = want == "scalar" ? Isa::kScalar : want == "avx2" ? Isa::kAvx2 : Isa::kAvx512;
  return w < hw ? w : hw;
}

}  // namespace

Isa BestIsa() {
  static const Isa isa = Narrowed(Detect());
  return isa;
}

std::vector<Isa> SupportedIsas() {
  static const Isa hw = Detect();
  std::vector<Isa> out;
  for (Isa i : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
    if (i <= hw) out.push_back(i);
  }
  return out;
}

std::string_view IsaName(Isa isa) {
  switch (isa) {
    case Isa::kAvx512:
      return "avx512";
    case Isa::kAvx2:
      return "avx2";
    default:
      return "scalar";
  }
}

}  // namespace zerostate
