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
  std::vector<ParamsRun> parts(runs.size());
  for (size_t i = 0; i < runs.size(); ++i) {
    parts[i] = {runs[i].begin, runs[i].end, &by_group[runs[i].group]};
  }
  StepRuns(isa, parts.data(), parts.size(), b);
}

void StepBlockRuns(const std::vector<GroupRun>& runs, const std::vector<StepParams>& by_group,
                   const BlockRefs& b) {
  StepBlockRuns(BestIsa(), runs, by_group, b);
}

}  // namespace zerostate::server
