// The parts of a TrainConfig (proto/zerostate/v1/config.proto) that the
// step policy reads, defaults filled and checked: one set of rules for
// zerostate-worker (worker/config.h calls these) and for the drivers of
// the C API (Policy::Create).
// Thread-safe: pure functions.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "zerostate/v1/config.pb.h"

namespace zerostate::trainer {

// Fills the schedule's defaults; a LINEAR or COSINE decay without
// decay_steps decays over the rest of a run of `steps` steps (at least 1).
// Errors: INVALID_ARGUMENT naming the field, e.g. "train.lr.min_lr: must
// be in [0, lr]".
[[nodiscard]] absl::Status NormalizeLrSchedule(v1::LrSchedule* lr, uint64_t steps);

// Fills the loss scaling's defaults. Errors: INVALID_ARGUMENT naming the field.
[[nodiscard]] absl::Status NormalizeLossScaling(v1::LossScaling* ls);

// Everything the policy reads: precision (UNSPECIFIED becomes FP32),
// gradient_clipping, the schedule (over train.steps) and the loss scaling.
// Errors: INVALID_ARGUMENT naming the field.
[[nodiscard]] absl::Status NormalizePolicyConfig(v1::TrainConfig* train);

}  // namespace zerostate::trainer
