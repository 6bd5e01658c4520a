#include "trainer/engine/coordinator.h"

#include "absl/strings/str_cat.h"
#include "common/timeline.h"

namespace zerostate::trainer {
namespace {

Coordinated Failed(absl::Status status, std::string stage) {
  Coordinated out;
  out.status = std::move(status);
  out.stage = std::move(stage);
  return out;
}

}  // namespace

Coordinated CoordinateStep(client::JobClient* job, Policy* policy, uint64_t step,
                           double average_over, const CoordinateOptions& options) {
  Timeline::Record("coordinate_begin", static_cast<int64_t>(step));
  auto stats = job->GradStats(step);
  if (!stats.ok())
    return Failed(stats.status(), absl::StrCat("gradient statistics of step ", step));
  auto decision = policy->Decide(step, stats->sum_squares, stats->nonfinite_count, average_over);
  if (!decision.ok()) return Failed(decision.status(), absl::StrCat("decision of step ", step));
  Coordinated out;
  out.decision = *decision;
  if (options.lr.has_value()) out.decision.lr = *options.lr;
  out.stage = absl::StrCat("step ", step);
  if (options.before_step) out.status = options.before_step();
  if (!out.status.ok()) return out;
  // The servers keep the coordinator's trainer_state (fp16): the other
  // ranks read it after their gathers, a resuming run at its start.
  Timeline::Record("step_sent", static_cast<int64_t>(step));
  out.status = job->Step(step, out.decision.lr, out.decision.grad_scale, out.decision.skip,
                         policy->TrainerState());
  Timeline::Record("step_answered", static_cast<int64_t>(step));
  return out;
}

absl::Status SendAhead(client::JobClient* job, const Policy& policy, uint64_t step,
                       double average_over, std::optional<float> lr) {
  auto grad_scale = policy.UnclippedGradScale(average_over);
  if (!grad_scale.ok()) return grad_scale.status();
  return job->StepAhead(step, lr.has_value() ? *lr : policy.LearningRate(step), *grad_scale);
}

}  // namespace zerostate::trainer
