#include "trainer/policy_config.h"

#include <cmath>
#include <string>

#include "absl/strings/str_cat.h"

namespace zerostate::trainer {
namespace {

absl::Status Invalid(const std::string& field, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", what));
}

}  // namespace

absl::Status NormalizeLrSchedule(v1::LrSchedule* lr, uint64_t steps) {
  if (lr->lr() == 0) lr->set_lr(1e-3f);
  if (!(lr->lr() > 0) || !std::isfinite(lr->lr())) return Invalid("train.lr.lr", "must be finite and > 0");
  if (!(lr->warmup_start_lr() >= 0) || !std::isfinite(lr->warmup_start_lr())) {
    return Invalid("train.lr.warmup_start_lr", "must be finite and >= 0");
  }
  if (!(lr->min_lr() >= 0) || lr->min_lr() > lr->lr()) {
    return Invalid("train.lr.min_lr", "must be in [0, lr]");
  }
  if (lr->decay() == v1::LR_DECAY_UNSPECIFIED) lr->set_decay(v1::LR_DECAY_NONE);
  if (!v1::LrDecay_IsValid(lr->decay())) return Invalid("train.lr.decay", "unknown");
  if (lr->decay() != v1::LR_DECAY_NONE && lr->decay_steps() == 0) {
    lr->set_decay_steps(static_cast<uint32_t>(steps > lr->warmup_steps() ? steps - lr->warmup_steps() : 1));
  }
  return absl::OkStatus();
}

absl::Status NormalizeLossScaling(v1::LossScaling* ls) {
  if (ls->initial_scale() == 0) ls->set_initial_scale(65536.0f);
  if (ls->growth_interval() == 0) ls->set_growth_interval(1000);
  if (ls->growth_factor() == 0) ls->set_growth_factor(2.0f);
  if (ls->backoff_factor() == 0) ls->set_backoff_factor(0.5f);
  if (ls->min_scale() == 0) ls->set_min_scale(1.0f);
  if (ls->hysteresis() == 0) ls->set_hysteresis(1);
  if (!(ls->initial_scale() > 0) || !std::isfinite(ls->initial_scale())) {
    return Invalid("train.loss_scaling.initial_scale", "must be finite and > 0");
  }
  if (!(ls->growth_factor() >= 1) || !std::isfinite(ls->growth_factor())) {
    return Invalid("train.loss_scaling.growth_factor", "must be finite and >= 1");
  }
  if (!(ls->backoff_factor() > 0 && ls->backoff_factor() < 1)) {
    return Invalid("train.loss_scaling.backoff_factor", "must be in (0, 1)");
  }
  if (!(ls->min_scale() > 0) || ls->min_scale() > ls->initial_scale()) {
    return Invalid("train.loss_scaling.min_scale", "must be in (0, initial_scale]");
  }
  return absl::OkStatus();
}

absl::Status NormalizePolicyConfig(v1::TrainConfig* t) {
  if (t->precision() == v1::PRECISION_UNSPECIFIED) t->set_precision(v1::PRECISION_FP32);
  if (!v1::Precision_IsValid(t->precision())) return Invalid("train.precision", "unknown");
  if (!(t->gradient_clipping() >= 0) || !std::isfinite(t->gradient_clipping())) {
    return Invalid("train.gradient_clipping", "must be finite and >= 0");
  }
  if (auto s = NormalizeLrSchedule(t->mutable_lr(), t->steps()); !s.ok()) return s;
  return NormalizeLossScaling(t->mutable_loss_scaling());
}

}  // namespace zerostate::trainer
