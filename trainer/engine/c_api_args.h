// What the C API files of the trainer engine (c_api.cc, c_api_in_flight.cc)
// share: the error of a null argument, a zs_wait as a status, and the
// coordinator's options from zs_coordinate's arguments. Not a public API.
#pragma once

#include "absl/status/status.h"
#include "trainer/engine/coordinator.h"
#include "trainer/engine/zerostate_engine_c.h"

namespace zerostate::trainer::capi {

// INVALID_ARGUMENT "<what>: null".
absl::Status Null(const char* what);

// The wait `w` run as a status: ABORTED naming its code when not 0.
absl::Status RunWait(zs_wait w);

// INVALID_ARGUMENT when before_step is non-null without a fn.
absl::Status CheckBeforeStep(const zs_wait* before_step);

// zs_coordinate's lr, use_lr and before_step.
// REQUIRES: CheckBeforeStep(before_step) is OK.
CoordinateOptions OptionsOf(float lr, int use_lr, const zs_wait* before_step);

}  // namespace zerostate::trainer::capi
