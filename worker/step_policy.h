// What the coordinator decides from a step's gradient statistics, and how
// the fp16 loss scale follows the outcomes. Every rank runs the same
// LossScaler on the same outcomes, so all agree on the scale of the next
// step without exchanging it.
// Thread safety: DecideStep is pure; a LossScaler is not thread-safe.
#pragma once

#include <cstdint>

#include "zerostate/v1/config.pb.h"

namespace zerostate::worker {

struct StepDecision {
  bool skip = false;     // non-finite gradients: advance the version only
  float grad_scale = 1;  // what Step multiplies the summed gradient by
  double grad_norm = 0;  // global L2 norm of the averaged, unscaled gradient
  double clip_factor = 1;
};

// `sum_squares` and `nonfinite` describe the summed (over ranks and
// micro-batches) gradient of loss * loss_scale; `average_over` is the number
// of (rank, micro-batch) terms in that sum. max_norm 0 disables clipping.
StepDecision DecideStep(double sum_squares, uint64_t nonfinite, float loss_scale,
                        double average_over, float max_norm);

// The grad_scale DecideStep gives when no clipping applies and the
// gradients are finite: what the coordinator sends ahead for a speculative
// step (JobClient::StepAhead), bit for bit.
float UnclippedGradScale(float loss_scale, double average_over);

// Dynamic loss scaling with DeepSpeed's semantics (see LossScaling).
class LossScaler {
 public:
  // `enabled` false: the scale stays 1 and Update never backs off.
  LossScaler(const v1::LossScaling& config, bool enabled);

  float scale() const { return scale_; }

  // Records a step's outcome and adjusts the scale for the next one.
  void Update(bool overflow);

  // What moves as steps go by: enough to go on from the same point in
  // another process (a resumed run, another rank).
  struct State {
    float scale = 1;
    uint32_t clean_steps = 0;      // clean steps since the last growth or overflow
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
  bool dynamic_;
  float scale_;
  uint32_t clean_steps_ = 0;
  uint32_t hysteresis_left_;
};

}  // namespace zerostate::worker
