// The step policy's C handle (trainer/zerostate_trainer_c.h), for the C
// APIs built beside it into libzerostate_client.so (trainer/engine/c_api.cc:
// the coordinator's step on a zs_policy). Not for trainers: they see only
// the opaque handle.
#pragma once

#include "trainer/policy.h"
#include "trainer/zerostate_trainer_c.h"

struct zs_policy {
  zerostate::trainer::Policy policy;
};

namespace zerostate::trainer {

// `d` as the C API's struct.
inline zs_step_decision DecisionOf(const StepDecision& d) {
  return zs_step_decision{d.skip ? 1 : 0, d.grad_scale, d.grad_norm,
                          d.clip_factor,  d.lr,         d.next_loss_scale};
}

}  // namespace zerostate::trainer
