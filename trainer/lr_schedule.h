// The learning-rate schedule: linear warm-up, then constant, linear or
// cosine decay to min_lr (see LrSchedule in proto/zerostate/v1/config.proto).
// Thread-safe: pure function.
#pragma once

#include <cstdint>

#include "zerostate/v1/config.pb.h"

namespace zerostate::trainer {

// The learning rate of 0-based optimizer step `step`.
// REQUIRES: schedule normalized (NormalizeLrSchedule, trainer/policy_config.h).
float LearningRate(const v1::LrSchedule& schedule, uint64_t step);

}  // namespace zerostate::trainer
