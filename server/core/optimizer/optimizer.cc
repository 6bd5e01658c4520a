// StepBlock: turns the step's hyper-parameters into fp32 constants once per
// call and hands the block to the kernel of the chosen ISA.
#include "server/core/optimizer/optimizer.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "server/core/optimizer/dispatch.h"

namespace zerostate::server {
namespace {

using kernels::Lowp;
using kernels::Rule;

// A config that did not come from NormalizeJobSpec is a programmer bug.
[[noreturn]] void DieUnknownOptimizer(int kind) {
  std::fprintf(stderr, "StepBlock: unknown optimizer kind %d (config not normalized)\n", kind);
  std::abort();
}

Rule RuleOf(const v1::OptimizerConfig& c) {
  switch (c.kind()) {
    case v1::OPTIMIZER_ADAMW:
      return Rule::kAdamW;
    case v1::OPTIMIZER_ADAM:
      return Rule::kAdam;
    case v1::OPTIMIZER_SGD_MOMENTUM:
      return c.nesterov() ? Rule::kSgdNesterov : Rule::kSgd;
    case v1::OPTIMIZER_LION:
      return Rule::kLion;
    default:
      DieUnknownOptimizer(c.kind());
  }
}

Lowp LowpOf(v1::DType dtype) {
  switch (dtype) {
    case v1::DTYPE_BF16:
      return Lowp::kBf16;
    case v1::DTYPE_FP16:
      return Lowp::kFp16;
    default:
      return Lowp::kNone;
  }
}

// Everything derived from hyper-parameters is computed in double and rounded
// once, so every ISA (and every block) sees the same fp32 constants.
kernels::StepConsts ConstsOf(const StepParams& p) {
  const v1::OptimizerConfig& c = p.config;
  const double lr = p.lr, wd = c.weight_decay(), b1 = c.beta1(), b2 = c.beta2();
  const double t = static_cast<double>(p.t);
  kernels::StepConsts k;
  k.grad_scale = p.grad_scale;
  k.lr = p.lr;
  k.weight_decay = c.weight_decay();
  k.decay = static_cast<float>(1.0 - lr * wd);
  k.beta1 = c.beta1();
  k.one_minus_beta1 = static_cast<float>(1.0 - b1);
  k.beta2 = c.beta2();
  k.one_minus_beta2 = static_cast<float>(1.0 - b2);
  k.eps = c.eps();
  k.step_size = static_cast<float>(lr / (1.0 - std::pow(b1, t)));
  k.inv_bc2_sqrt = static_cast<float>(1.0 / std::sqrt(1.0 - std::pow(b2, t)));
  k.momentum = c.momentum();
  return k;
}

void RunRuleRuns(Isa isa, kernels::Rule rule, const kernels::StepRun* runs, size_t count,
                 const BlockRefs& b) {
  const Lowp lowp = LowpOf(b.lowp_dtype);
  auto* lowp_out = lowp == Lowp::kNone ? nullptr : static_cast<uint16_t*>(b.lowp);
  const auto& row =
      kernels::KernelsFor(isa).step[static_cast<int>(rule)].grad[b.grad_bf16 != nullptr ? 1 : 0];
  if (b.moments == MomentFormat::kFp32) {
    for (size_t i = 0; i < count; ++i) {
      const size_t at = runs[i].begin;
      auto shift = [at](auto* p) { return p == nullptr ? p : p + at; };
      const kernels::StepBuffers buffers{
          b.param + at,       shift(b.m),      shift(b.v),      shift(b.grad),   shift(lowp_out),
          runs[i].end - at,   shift(b.from_param), shift(b.from_m), shift(b.from_v),
          shift(b.grad_bf16)};
      row.by_lowp[static_cast<int>(lowp)](runs[i].c, buffers);
    }
    return;
  }
  const kernels::CompactBuffers buffers{
      b.param,  b.m,  b.v,           b.m_scale,     b.v_scale,     b.grad,       lowp_out,
      b.n,      b.from_param, b.from_m, b.from_v, b.from_m_scale, b.from_v_scale, b.grad_bf16};
  row.compact[static_cast<int>(b.moments) - 1][static_cast<int>(lowp)](runs, count, buffers);
}

void RunRule(Isa isa, Rule rule, const kernels::StepConsts& c, const BlockRefs& b) {
  const kernels::StepRun run{0, b.n, c};
  RunRuleRuns(isa, rule, &run, 1, b);
}

}  // namespace

void StepRuns(Isa isa, const ParamsRun* runs, size_t count, const BlockRefs& b) {
  if (count == 0) return;
  std::vector<kernels::StepRun> steps(count);
  for (size_t i = 0; i < count; ++i) steps[i] = {runs[i].begin, runs[i].end, ConstsOf(*runs[i].params)};
  RunRuleRuns(isa, RuleOf(runs[0].params->config), steps.data(), count, b);
}

BlockRefs StateRefs(const StateLayout& layout, float* to, const float* from) {
  BlockRefs r = StateRefs(layout, to);
  if (from == to) return r;
  const BlockRefs f = StateRefs(layout, const_cast<float*>(from));
  r.from_param = f.param;
  r.from_m = f.m;
  r.from_v = f.v;
  r.from_m_scale = f.m_scale;
  r.from_v_scale = f.v_scale;
  return r;
}

BlockRefs StateRefs(const StateLayout& layout, float* state) {
  BlockRefs r;
  r.param = state;
  r.n = layout.block_elems;
  r.moments = layout.format;
  if (layout.moments >= 1) r.m = state + layout.m_offset();
  if (layout.moments >= 2) r.v = state + layout.v_offset();
  if (layout.format == MomentFormat::kInt8) {
    if (layout.moments >= 1) r.m_scale = state + layout.m_scale_offset();
    if (layout.moments >= 2) r.v_scale = state + layout.v_scale_offset();
  }
  return r;
}

int MomentCount(v1::OptimizerKind kind) {
  switch (kind) {
    case v1::OPTIMIZER_ADAMW:
    case v1::OPTIMIZER_ADAM:
      return 2;
    case v1::OPTIMIZER_SGD_MOMENTUM:
    case v1::OPTIMIZER_LION:
      return 1;
    default:
      return 0;
  }
}

MomentFormat MomentFormatOf(v1::MomentFormat format) {
  switch (format) {
    case v1::MOMENTS_BF16:
      return MomentFormat::kBf16;
    case v1::MOMENTS_INT8:
      return MomentFormat::kInt8;
    default:
      return MomentFormat::kFp32;
  }
}

StateLayout StateLayoutOf(const v1::JobSpec& spec) {
  return {spec.block_elems(), MomentCount(spec.optimizer().kind()),
          MomentFormatOf(spec.moment_format())};
}

void StepBlock(Isa isa, const StepParams& p, const BlockRefs& b) {
  RunRule(isa, RuleOf(p.config), ConstsOf(p), b);
}

void TrafficPass(Isa isa, const BlockRefs& b) { RunRule(isa, Rule::kTraffic, {}, b); }

void StepBlock(const StepParams& p, const BlockRefs& b) { StepBlock(BestIsa(), p, b); }

}  // namespace zerostate::server
