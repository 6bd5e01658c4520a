// Internal to server/core/optimizer/: what optimizer.cc hands the per-ISA kernel
// files (kernels_scalar.cc, kernels_avx2.cc, kernels_avx512.cc) and what
// they give back. Plain types only: the ISA files are compiled with ISA
// flags and must not include protobuf or standard-library headers that
// define inline functions (see common/simd_avx2.h).
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/square_lanes.h"

namespace zerostate::server::kernels {

// The per-call constants of a step, computed once in optimizer.cc (the bias
// corrections in double) and rounded to fp32. Each rule uses its subset.
struct StepConsts {
  float grad_scale = 1;
  float lr = 0;
  float weight_decay = 0;  // L2 coefficient (Adam, SGD)
  float decay = 1;         // 1 - lr * weight_decay (AdamW, Lion)
  float beta1 = 0;
  float one_minus_beta1 = 1;
  float beta2 = 0;
  float one_minus_beta2 = 1;
  float eps = 0;
  float step_size = 0;     // lr / (1 - beta1^t)
  float inv_bc2_sqrt = 1;  // 1 / sqrt(1 - beta2^t)
  float momentum = 0;
};

// One block's memory; m, v and lowp may be null when the rule or the low-
// precision dtype does not use them. The step reads the state from `from_*`
// and writes it to param, m and v; null `from_*`: in place.
struct StepBuffers {
  float* param = nullptr;
  float* m = nullptr;
  float* v = nullptr;
  const float* grad = nullptr;
  uint16_t* lowp = nullptr;
  size_t n = 0;
  const float* from_param = nullptr;
  const float* from_m = nullptr;
  const float* from_v = nullptr;
};

// kTraffic: the memory traffic of AdamW without its arithmetic (benchmarks).
enum class Rule { kAdamW, kAdam, kSgd, kSgdNesterov, kLion, kTraffic };
inline constexpr int kRuleCount = 6;
enum class Lowp { kNone, kBf16, kFp16 };
inline constexpr int kLowpCount = 3;

using StepFn = void (*)(const StepConsts& c, const StepBuffers& b);
// Continues `lanes` (common/square_lanes.h) over g[0, n), the buffer's
// elements from position lanes->elems on.
using GradStatsFn = void (*)(const float* g, size_t n, SquareLanes* lanes);

struct KernelTable {
  struct Row {
    StepFn by_lowp[kLowpCount];
  };
  Row step[kRuleCount];  // indexed by Rule, then Lowp
  GradStatsFn grad_stats;
};

// REQUIRES (to call what they return): the CPU supports the ISA.
const KernelTable& ScalarKernels();
const KernelTable& Avx2Kernels();
const KernelTable& Avx512Kernels();

}  // namespace zerostate::server::kernels
