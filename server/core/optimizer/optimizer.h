// Fused optimizer kernels: one pass over a block's memory reads the master
// weights, the summed gradient and the moments, and writes the new weights,
// the new moments and the low-precision copy that Gather serves.
//
// Numerics: fp32 throughout, no FMA contraction, the same sequence of
// operations in every ISA variant, so AVX-512, AVX2 and scalar results are
// bit-identical; they match a float64 reference within 1e-6 relative.
// Thread-safe: a call touches only the memory it is given.
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/cpu_features.h"
#include "common/square_lanes.h"
#include "server/core/optimizer/state_layout.h"
#include "zerostate/v1/state_service.pb.h"

namespace zerostate::server {

namespace v1 = ::zerostate::v1;

// Everything a step needs besides the block's memory.
struct StepParams {
  v1::OptimizerConfig config;  // normalized (see common/job_spec.h)
  float lr = 0;
  float grad_scale = 1;  // the summed gradient is multiplied by this first
  uint64_t t = 1;        // 1-based step count, for Adam's bias correction
};

// One block's memory. Which moment buffers are used depends on the optimizer:
// AdamW/Adam: m and v; SGD with momentum: m; Lion: m. Unused ones may be null.
// The step is in place, or, when `from_param` is set, out of place: the
// state is read from from_param / from_m / from_v (left as they are) and
// the new state written to param / m / v, with non-temporal stores where
// those are vector-aligned (the new state is not read again by the pass,
// so its lines are not read in first). Bit for bit the same new state.
struct BlockRefs {
  float* param = nullptr;
  float* m = nullptr;
  float* v = nullptr;
  const float* grad = nullptr;
  void* lowp = nullptr;  // n elements of lowp_dtype; null when lowp_dtype is FP32
  v1::DType lowp_dtype = v1::DTYPE_FP32;
  size_t n = 0;
  const float* from_param = nullptr;  // null: in place
  const float* from_m = nullptr;
  const float* from_v = nullptr;
  // How the moments are stored (state_layout.h). kFp32: m and v as above.
  // kBf16, kInt8: m and v (from_m, from_v) point at the moments' codes
  // where StateLayout puts them, and for int8 m_scale and v_scale
  // (from_*_scale) at their scales, one per kQuantBlock elements from
  // element 0 (so `n` elements with n > kQuantBlock start on a boundary).
  MomentFormat moments = MomentFormat::kFp32;
  float* m_scale = nullptr;
  float* v_scale = nullptr;
  const float* from_m_scale = nullptr;
  const float* from_v_scale = nullptr;
  // Instead of grad (then null): the gradient as bf16, one node's push
  // where it landed, with no fold into an fp32 sum; widened as it is read,
  // so the step is bit for bit the one on the widened fp32 gradient.
  const uint16_t* grad_bf16 = nullptr;
};

// The refs of a block's whole state at `state` (StateLayout `layout`),
// stepped in place, n = layout.block_elems; grad and lowp left unset.
BlockRefs StateRefs(const StateLayout& layout, float* state);
// The same, stepped out of place from `from` into `to`.
BlockRefs StateRefs(const StateLayout& layout, float* to, const float* from);

// Number of moment buffers the optimizer keeps per parameter (0, 1 or 2).
int MomentCount(v1::OptimizerKind kind);

// The kernels' name of a JobSpec moment format. REQUIRES: a valid value.
MomentFormat MomentFormatOf(v1::MomentFormat format);
// The layout of each block's state of a normalized spec.
StateLayout StateLayoutOf(const v1::JobSpec& spec);

// Applies one step to a block in a single pass, with the best ISA or a given one.
// REQUIRES: pointers 64-byte aligned, isa supported by this CPU.
// The update rules (PyTorch's semantics) are spelled out in
// server/core/optimizer/rules.h. The low-precision copy is written with
// non-temporal stores and fenced before return. REQUIRES: p.t >= 1 and
// p.config normalized (an unknown optimizer kind aborts: a programmer bug).
void StepBlock(const StepParams& p, const BlockRefs& b);
void StepBlock(Isa isa, const StepParams& p, const BlockRefs& b);

// Steps the runs of `b`, run i = elements [begin, end) with *params: one
// pass over each run (fp32 moments) or over each quantization block
// (compact moments, whose runs may share a block), bit-identical to
// StepBlock on each run alone where the moments are fp32. The runs are
// sorted, cover [0, b.n) and begin on multiples of 16 elements; all share
// one optimizer kind. The rest as StepBlock.
struct ParamsRun {
  size_t begin = 0;
  size_t end = 0;
  const StepParams* params = nullptr;
};
void StepRuns(Isa isa, const ParamsRun* runs, size_t count, const BlockRefs& b);

// Moves exactly the bytes of an AdamW step on `b` (reads param, grad, m, v;
// writes param, m, v and the low-precision copy) with no optimizer math:
// param += grad, m and v rewritten unchanged. For benchmarks, as the memory
// limit a step is measured against. Same REQUIRES as StepBlock; m and v set.
void TrafficPass(Isa isa, const BlockRefs& b);

// Statistics of a gradient block: sum of squares of the finite elements and
// the number of non-finite ones. The summation order is fixed (16 double
// lanes folded pairwise), identical in every ISA variant.
struct GradStats {
  double sum_squares = 0;
  uint64_t nonfinite = 0;
};
GradStats ComputeGradStats(const float* g, size_t n);
GradStats ComputeGradStats(Isa isa, const float* g, size_t n);

// ComputeGradStats in parts (common/square_lanes.h): adds g[0, n) to
// `lanes` as the elements that follow those it holds. FoldGradStats after
// the last part gives ComputeGradStats of the whole buffer, bit for bit,
// whatever the parts (so do the conversions of common/convert.h that square
// as they write, for their parts).
void AddGradSquares(const float* g, size_t n, SquareLanes* lanes);
void AddGradSquares(Isa isa, const float* g, size_t n, SquareLanes* lanes);
GradStats FoldGradStats(const SquareLanes& lanes);

}  // namespace zerostate::server
