// What the coordinator leaves with the servers at every step of an fp16
// run (JobClient::Step's trainer_state): the loss scaler's state after the
// step, and whether the step was skipped. The other ranks read it once
// they gathered the step's weights, so every scaler moves together without
// a rendezvous; a run that resumes the job reads it at its start version.
// Encoded as text, e.g. "loss_scaler/1 skipped=0 scale_bits=1199570944
// clean_steps=3 hysteresis_left=2" (the scale's IEEE bits: exact).
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "trainer/step_policy.h"

namespace zerostate::trainer {

struct TrainerState {
  LossScaler::State scaler;
  bool skipped = false;  // the step that led here was skipped (overflow)
};

std::string EncodeTrainerState(const TrainerState& state);

// Errors: DATA_LOSS naming what is malformed (not this format, a field
// missing, repeated or unknown, a value out of range, a scale that is not
// finite and > 0).
[[nodiscard]] absl::StatusOr<TrainerState> DecodeTrainerState(absl::string_view text);

}  // namespace zerostate::trainer
