#include "trainer/step_policy.h"

#include <algorithm>
#include <cmath>

namespace zerostate::trainer {

namespace {

double Unscale(float loss_scale, double average_over) {
  return 1.0 / (static_cast<double>(loss_scale) * average_over);
}

}  // namespace

float UnclippedGradScale(float loss_scale, double average_over) {
  return static_cast<float>(1.0 * Unscale(loss_scale, average_over));
}

StepDecision DecideStep(double sum_squares, uint64_t nonfinite, float loss_scale,
                        double average_over, float max_norm) {
  StepDecision d;
  if (nonfinite > 0 || !std::isfinite(sum_squares)) {
    d.skip = true;
    return d;
  }
  const double unscale = Unscale(loss_scale, average_over);
  d.grad_norm = std::sqrt(sum_squares) * unscale;
  if (max_norm > 0) d.clip_factor = std::min(1.0, max_norm / (d.grad_norm + 1e-6));
  d.grad_scale = static_cast<float>(d.clip_factor * unscale);
  return d;
}

LossScaler::LossScaler(const v1::LossScaling& config, bool enabled)
    : config_(config),
      enabled_(enabled),
      dynamic_(enabled && !config.static_scale()),
      scale_(enabled ? config.initial_scale() : 1.0f),
      hysteresis_left_(config.hysteresis()) {}

void LossScaler::Update(bool overflow) {
  if (!dynamic_) return;
  if (overflow) {
    clean_steps_ = 0;
    if (hysteresis_left_ > 1) {
      --hysteresis_left_;
      return;
    }
    scale_ = std::max(scale_ * config_.backoff_factor(), config_.min_scale());
    return;
  }
  // DeepSpeed grows when its stable interval (clean steps since the last
  // overflow, less one) is a positive multiple of the window.
  if (++clean_steps_ > config_.growth_interval()) {
    clean_steps_ = 1;
    scale_ *= config_.growth_factor();
    hysteresis_left_ = config_.hysteresis();
  }
}

}  // namespace zerostate::trainer
