// The trainer's step policy: from a step's gradient statistics, the clip
// factor, the fp16 overflow skip, the loss scale and the learning rate;
// and the state that moves with it (the trainer_state blob the Step
// carries, trainer/trainer_state.h). zerostate-worker (worker/engine.h)
// and the C API (trainer/zerostate_trainer_c.h, for zerostate.torch) both
// call this class, so the two drivers decide every step alike.
//
// Thread safety: a Policy is a value; one thread at a time may use it.
// Copy it to decide ahead and keep or drop the copy (the worker does).
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "trainer/step_policy.h"
#include "zerostate/v1/config.pb.h"

namespace zerostate::trainer {

class Policy {
 public:
  // REQUIRES: `train` normalized (NormalizePolicyConfig, or the worker's
  // NormalizeConfig, which calls it).
  explicit Policy(const v1::TrainConfig& train);

  // Normalizes `train` (trainer/policy_config.h), then as above.
  // Errors: INVALID_ARGUMENT naming the field.
  [[nodiscard]] static absl::StatusOr<Policy> Create(v1::TrainConfig train);

  // The loss scale the next step runs with (1 unless fp16).
  float loss_scale() const { return scaler_.scale(); }
  // The last step decided (or restored) was skipped.
  bool skipped() const { return skipped_; }

  // The learning rate of 0-based optimizer step `step` (the schedule).
  float LearningRate(uint64_t step) const;

  // Step `step` ends with its update in flight (the delayed parameter
  // update, train.delayed_update): it is on, step + 1 >= max(warmup_steps,
  // 1), and version step + 1 is no sync point (`next_is_sync_point`: a
  // checkpoint of that version, the run's last one), which ends
  // synchronously.
  bool EndsDelayed(uint64_t step, bool next_is_sync_point) const;

  // The grad_scale Decide gives when nothing is clipped and the gradients
  // are finite, at the current loss scale: what a speculative step sends
  // ahead. Errors: INVALID_ARGUMENT (average_over not finite and >= 1).
  [[nodiscard]] absl::StatusOr<float> UnclippedGradScale(double average_over) const;

  // Decides step `step` from the statistics of its summed gradient of
  // loss * loss_scale() (DecideStep, with the config's clipping), the
  // step's lr, and moves the loss scaler on (next_loss_scale).
  // Errors: INVALID_ARGUMENT naming the argument (average_over not finite
  // and >= 1, sum_squares negative); the policy is then unchanged.
  [[nodiscard]] absl::StatusOr<StepDecision> Decide(uint64_t step, double sum_squares,
                                                    uint64_t nonfinite, double average_over);

  // What the Step carries for the other ranks and a resumed run: the
  // scaler's state and skipped() (EncodeTrainerState); "" unless fp16,
  // where nothing moves.
  std::string TrainerState() const;

  // Takes a TrainerState() (of a policy of the same config; without fp16
  // only its skipped flag). Errors: DATA_LOSS naming what is malformed
  // ("" too, with fp16); the policy is then unchanged.
  [[nodiscard]] absl::Status Restore(absl::string_view trainer_state);

 private:
  v1::LrSchedule schedule_;
  v1::DelayedUpdate delayed_;
  float max_norm_;
  LossScaler scaler_;
  bool skipped_ = false;
};

}  // namespace zerostate::trainer
