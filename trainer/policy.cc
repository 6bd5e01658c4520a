#include "trainer/policy.h"

#include <algorithm>

#include <cmath>

#include "absl/strings/str_cat.h"
#include "trainer/lr_schedule.h"
#include "trainer/policy_config.h"
#include "trainer/trainer_state.h"

namespace zerostate::trainer {
namespace {

absl::Status CheckAverageOver(double average_over) {
  if (std::isfinite(average_over) && average_over >= 1) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "average_over: ", average_over, " must be finite and >= 1 (ranks * micro-batches)"));
}

}  // namespace

Policy::Policy(const v1::TrainConfig& train)
    : schedule_(train.lr()),
      delayed_(train.delayed_update()),
      max_norm_(train.gradient_clipping()),
      scaler_(train.loss_scaling(), train.precision() == v1::PRECISION_FP16) {}

absl::StatusOr<Policy> Policy::Create(v1::TrainConfig train) {
  if (auto s = NormalizePolicyConfig(&train); !s.ok()) return s;
  return Policy(train);
}

float Policy::LearningRate(uint64_t step) const { return trainer::LearningRate(schedule_, step); }

bool Policy::EndsDelayed(uint64_t step, bool next_is_sync_point) const {
  if (!delayed_.enabled() || step + 1 < std::max<uint64_t>(delayed_.warmup_steps(), 1)) {
    return false;
  }
  return !next_is_sync_point;
}

absl::StatusOr<float> Policy::UnclippedGradScale(double average_over) const {
  if (auto s = CheckAverageOver(average_over); !s.ok()) return s;
  return trainer::UnclippedGradScale(scaler_.scale(), average_over);
}

absl::StatusOr<StepDecision> Policy::Decide(uint64_t step, double sum_squares, uint64_t nonfinite,
                                            double average_over) {
  if (auto s = CheckAverageOver(average_over); !s.ok()) return s;
  if (sum_squares < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("sum_squares: ", sum_squares, " is negative (a sum of squares)"));
  }
  StepDecision d = DecideStep(sum_squares, nonfinite, scaler_.scale(), average_over, max_norm_);
  d.lr = LearningRate(step);
  scaler_.Update(d.skip);
  skipped_ = d.skip;
  d.next_loss_scale = scaler_.scale();
  return d;
}

std::string Policy::TrainerState() const {
  if (!scaler_.enabled()) return "";
  return EncodeTrainerState({scaler_.state(), skipped_});
}

absl::Status Policy::Restore(absl::string_view trainer_state) {
  if (!scaler_.enabled() && trainer_state.empty()) return absl::OkStatus();
  auto state = DecodeTrainerState(trainer_state);
  if (!state.ok()) return state.status();
  // Without fp16 the scale stays 1, whatever an fp16 run left.
  if (scaler_.enabled()) scaler_.set_state(state->scaler);
  skipped_ = state->skipped;
  return absl::OkStatus();
}

}  // namespace zerostate::trainer
