// Internal to server/core/optimizer/: what optimizer.cc hands the per-ISA kernel
// files (kernels_scalar.cc, kernels_avx2.cc, kernels_avx512*.cc) and what
// they give back. Plain types only: the ISA files are compiled with ISA
// flags and must not include protobuf or standard-library headers that
// define inline functions (see common/simd_avx2.h).
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/square_lanes.h"
#include "server/core/optimizer/state_layout.h"

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
  const uint16_t* grad_bf16 = nullptr;  // the gradient, for the kernels that read bf16
};

// A run [begin, end) of a block's elements that steps with one set of
// constants (a tensor group's); the runs of a call are sorted and cover
// [0, n) without overlap.
struct StepRun {
  size_t begin = 0;
  size_t end = 0;
  StepConsts c;
};

// One block's memory with compact moments (state_layout.h): m and v hold
// the codes (uint16 per element for bf16, uint8 for int8), m_scale and
// v_scale int8's scales, one per kQuantBlock elements from element 0. As in
// StepBuffers, null `from_param`: in place; else the state is read from
// `from_*` and written to the others.
struct CompactBuffers {
  float* param = nullptr;
  void* m = nullptr;
  void* v = nullptr;
  float* m_scale = nullptr;
  float* v_scale = nullptr;
  const float* grad = nullptr;
  uint16_t* lowp = nullptr;
  size_t n = 0;
  const float* from_param = nullptr;
  const void* from_m = nullptr;
  const void* from_v = nullptr;
  const float* from_m_scale = nullptr;
  const float* from_v_scale = nullptr;
  const uint16_t* grad_bf16 = nullptr;  // as in StepBuffers
};

// kTraffic: the memory traffic of AdamW without its arithmetic (benchmarks).
enum class Rule { kAdamW, kAdam, kSgd, kSgdNesterov, kLion, kTraffic };
inline constexpr int kRuleCount = 6;
enum class Lowp { kNone, kBf16, kFp16 };
inline constexpr int kLowpCount = 3;

using StepFn = void (*)(const StepConsts& c, const StepBuffers& b);
// The step with compact moments: per quantization block, decodes the
// moments, steps each run's part with its constants, encodes them again.
using CompactStepFn = void (*)(const StepRun* runs, size_t count, const CompactBuffers& b);
// Continues `lanes` (common/square_lanes.h) over g[0, n), the buffer's
// elements from position lanes->elems on.
using GradStatsFn = void (*)(const float* g, size_t n, SquareLanes* lanes);

struct QuantMap;  // moment_codec.h
// Encodes one int8 quantization block x[0, n) into codes; returns its scale
// (moment_codec.h's QuantizeBlock, this ISA's version).
using QuantizeFn = float (*)(const QuantMap& map, const float* x, size_t n, uint8_t* codes);
// Decodes codes[0, n) of one block with its scale into x (this ISA's
// DequantizeBlock, the step's decoder).
using DequantizeFn = void (*)(const QuantMap& map, const uint8_t* codes, size_t n, float scale,
                              float* x);

struct KernelTable {
  struct ByLowp {
    StepFn by_lowp[kLowpCount];
    CompactStepFn compact[kMomentFormatCount - 1][kLowpCount];  // [format - 1][lowp]
  };
  struct Row {
    ByLowp grad[2];  // [0]: an fp32 gradient (grad), [1]: bf16 (grad_bf16)
  };
  Row step[kRuleCount];  // indexed by Rule, then Lowp
  GradStatsFn grad_stats;
  QuantizeFn quantize;
  DequantizeFn dequantize;
};

// REQUIRES (to call what they return): the CPU supports the ISA.
const KernelTable& ScalarKernels();
const KernelTable& Avx2Kernels();
const KernelTable& Avx512Kernels();
// Avx512Kernels with AVX512_BF16's conversion of the bf16 copy
// (simd_avx512_bf16.h): the same bits. REQUIRES also AVX512_BF16.
const KernelTable& Avx512Bf16Kernels();

}  // namespace zerostate::server::kernels
