// The step policy's C handle (trainer/zerostate_trainer_c.h), for the C
// APIs built beside it into libzerostate_client.so (trainer/engine/c_api.cc:
// the coordinator's step on a zs_policy). Not for trainers: they see only
// the opaque handle.
#pragma once

#include "trainer/policy.h"

struct zs_policy {
  zerostate::trainer::Policy policy;
};
