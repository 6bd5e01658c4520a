// What the coordinator decides from a step's gradient statistics, and how
// the fp16 loss scale follows the outcomes: DeepSpeed's rules (its
// fused optimizer's clip and DynamicLossScaler.update_scale). Every rank
// runs the same LossScaler on the same outcomes, so all agree on the scale
// of the next step without exchanging it. Drivers call these through
// trainer/policy.h.
// Thread safety: DecideStep is pure; a LossScaler is not thread-safe.
#pragma once

#include <cstdint>

#include "zerostate/v1/config.pb.h"

namespace zerostate::trainer {

struct StepDecision {
  bool skip = false;     // non-finite gradients: advance the version only
  float grad_scale = 1;  // what Step multiplies the summed gradient by
  double grad_norm = 0;  // global L2 norm of the averaged, unscaled gradient
  double clip_factor = 1;
  float lr = 0;               // the step's learning rate (Policy::Decide)
  float next_loss_scale = 1;  // the loss scale of the next step (Policy::Decide)
};

// `sum_squares` and `nonfinite` describe the summed (over ranks and
// micro-batches) gradient of loss * loss_scale; `average_over` is the number
// of (rank, micro-batch) terms in that sum. max_norm 0 disables clipping;
// else the gradient is scaled by max_norm / (norm + 1e-6) when that is
// below 1 (DeepSpeed's and torch.nn.utils.clip_grad_norm_'s rule).
// Fills skip, grad_scale, grad_norm and clip_factor.
StepDecision DecideStep(double sum_squares, uint64_t nonfinite, float loss_scale,
                        double average_over, float max_norm);

// The grad_scale DecideStep gives when no clipping applies and the
// gradients are finite: what the coordinator sends ahead for a speculative
// step (JobClient::StepAhead), bit for bit.
float UnclippedGradScale(float loss_scale, double average_over);

// Dynamic loss scaling (see LossScaling), DeepSpeed's DynamicLossScaler:
// an overflow uses up one unit of hysteresis, and the one that finds a
// single unit left backs the scale off (not below min_scale) and leaves
// hysteresis at 1. The scale grows once the clean steps since the last
// overflow reach growth_interval + 1, then again every growth_interval
// clean steps; only a growth refills the hysteresis.
class LossScaler {
 public:
  // `enabled` false: the scale stays 1 and Update never backs off.
  LossScaler(const v1::LossScaling& config, bool enabled);

  float scale() const { return scale_; }
  bool enabled() const { return enabled_; }

  // Records a step's outcome and adjusts the scale for the next one.
  void Update(bool overflow);

  // What moves as steps go by: enough to go on from the same point in
  // another process (a resumed run, another rank).
  struct State {
    float scale = 1;
    // Clean steps since the last overflow (or the start), counted from 1
    // again at each growth: DeepSpeed's stable interval.
    uint32_t clean_steps = 0;
    uint32_t hysteresis_left = 0;  // overflows still tolerated before a backoff
    bool operator==(const State&) const = default;
  };
  State state() const { return State{scale_, clean_steps_, hysteresis_left_}; }
  void set_state(const State& s) {
    scale_ = s.scale;
    clean_steps_ = s.clean_steps;
    hysteresis_left_ = s.hysteresis_left;
  }

 private:
  v1::LossScaling config_;
  bool enabled_;
  bool dynamic_;
  float scale_;
  uint32_t clean_steps_ = 0;
  uint32_t hysteresis_left_;
};

}  // namespace zerostate::trainer
