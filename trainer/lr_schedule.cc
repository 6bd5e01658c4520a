#include "trainer/lr_schedule.h"

#include <algorithm>
#include <cmath>

namespace zerostate::trainer {

float LearningRate(const v1::LrSchedule& s, uint64_t step) {
  const double peak = s.lr();
  if (step < s.warmup_steps()) {
    // Reaches the peak at the end of warm-up: step warmup_steps-1 is at (w-1+1)/w.
    double frac = static_cast<double>(step + 1) / s.warmup_steps();
    return static_cast<float>(s.warmup_start_lr() + (peak - s.warmup_start_lr()) * frac);
  }
  if (s.decay() != v1::LR_DECAY_LINEAR && s.decay() != v1::LR_DECAY_COSINE) return s.lr();
  double t = static_cast<double>(step - s.warmup_steps()) / std::max<uint32_t>(1, s.decay_steps());
  t = std::min(t, 1.0);
  double w = s.decay() == v1::LR_DECAY_LINEAR ? 1.0 - t : 0.5 * (1.0 + std::cos(M_PI * t));
  return static_cast<float>(s.min_lr() + (peak - s.min_lr()) * w);
}

}  // namespace zerostate::trainer
