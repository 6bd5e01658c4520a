#include "server/core/optimizer/param_groups.h"

#include <cstdint>

namespace zerostate::server {

std::vector<StepParams> GroupStepParams(const v1::JobSpec& spec, const StepParams& base) {
  std::vector<StepParams> out(1 + spec.groups_size(), base);
  for (int i = 0; i < spec.groups_size(); ++i) {
    const v1::TensorGroup& g = spec.groups(i);
    StepParams& p = out[i + 1];
    p.lr = static_cast<float>(static_cast<double>(base.lr) * g.lr_scale());
    p.config.set_weight_decay(g.weight_decay());
    if (g.has_beta1()) p.config.set_beta1(g.beta1());
    if (g.has_beta2()) p.config.set_beta2(g.beta2());
  }
  return out;
}

void StepBlockRuns(Isa isa, const std::vector<GroupRun>& runs,
                   const std::vector<StepParams>& by_group, const BlockRefs& b) {
  for (const GroupRun& run : runs) {
    BlockRefs r = b;
    r.param += run.begin;
    if (r.m != nullptr) r.m += run.begin;
    if (r.v != nullptr) r.v += run.begin;
    r.grad += run.begin;
    if (r.from_param != nullptr) {
      r.from_param += run.begin;
      if (r.from_m != nullptr) r.from_m += run.begin;
      if (r.from_v != nullptr) r.from_v += run.begin;
    }
    if (r.lowp != nullptr && r.lowp_dtype != v1::DTYPE_FP32) {
      r.lowp = static_cast<uint16_t*>(r.lowp) + run.begin;
    }
    r.n = run.end - run.begin;
    StepBlock(isa, by_group[run.group], r);
  }
}

void StepBlockRuns(const std::vector<GroupRun>& runs, const std::vector<StepParams>& by_group,
                   const BlockRefs& b) {
  StepBlockRuns(BestIsa(), runs, by_group, b);
}

}  // namespace zerostate::server
