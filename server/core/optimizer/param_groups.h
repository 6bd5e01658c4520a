// Tensor groups in the step (JobSpec.groups, torch's param_groups): the
// step parameters of each group, and the fused pass over a block whose runs
// of elements belong to different groups.
#pragma once

#include <vector>

#include "common/cpu_features.h"
#include "common/job_spec.h"
#include "server/core/optimizer/optimizer.h"

namespace zerostate::server {

// The step parameters of every group of a normalized spec, indexed by
// TensorSlot::group: [kNoGroup] is `base` (the job's optimizer), [i + 1] is
// `base` with spec.groups(i)'s weight_decay (and betas, where the optimizer
// has them) and lr = fp32(double(base.lr) * lr_scale), rounded once. As in
// torch's param_groups, a group's lr is all of its lr: AdamW and Lion decay
// by 1 - lr * weight_decay with the group's lr, SGD's step is lr * d.
// REQUIRES: spec came from NormalizeJobSpec; base.config is spec.optimizer().
std::vector<StepParams> GroupStepParams(const v1::JobSpec& spec, const StepParams& base);

// Steps each run of `b` with by_group[run.group]: one fused pass per run,
// each bit-identical to StepBlock on that run's elements alone, so a block
// of one run (the common case) costs exactly one StepBlock.
// REQUIRES: the runs are GroupRuns of the block (sorted, within [0, b.n),
// each begin a multiple of kTensorAlignElems, which keeps every run's memory
// as aligned as the block's); run.group < by_group.size(); the rest as
// StepBlock.
void StepBlockRuns(Isa isa, const std::vector<GroupRun>& runs,
                   const std::vector<StepParams>& by_group, const BlockRefs& b);
void StepBlockRuns(const std::vector<GroupRun>& runs, const std::vector<StepParams>& by_group,
                   const BlockRefs& b);

}  // namespace zerostate::server
