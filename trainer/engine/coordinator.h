// The coordinator's part of a step (global rank 0), as both drivers run
// it (zerostate-worker's engine; zerostate.torch through
// zerostate_engine_c.h), and the speculative step's parameters sent
// ahead of it (SendAhead). The step: the summed gradient's statistics
// (JobClient::GradStats), the step policy's decision (Policy::Decide: clip
// factor, overflow skip, loss scale), then `before_step` (where a driver
// puts its gathers of the new version out, so blocks stream back as the
// servers step them) and the Step, carrying the policy's trainer_state.
//
// Thread safety: one call at a time per Policy; the JobClient's calls are
// thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "client/client.h"
#include "trainer/policy.h"

namespace zerostate::trainer {

struct CoordinateOptions {
  // The Step's learning rate; unset: the policy's schedule (Decide's lr).
  // A driver whose own LR scheduler drives the job sets it.
  std::optional<float> lr;
  // Runs after the decision, right before the Step; its error ends the
  // step there (no Step).
  std::function<absl::Status()> before_step;
};

struct Coordinated {
  // OK, or the first failure; `stage` names where it failed:
  // "gradient statistics of step <s>", "step <s>" (the Step, or
  // before_step), the decision's own ("decision of step <s>").
  absl::Status status;
  std::string stage;
  StepDecision decision;  // what the Step carried (lr: the Step's)
  // Never set here: a driver's own refusal of the step as bad input
  // (nothing sent, nothing to roll back; InFlightStep::Fail), e.g. torch
  // param_groups whose lr ratios changed.
  bool refused = false;
};

// Coordinates step `step` of `job` (the rank's micro-batches summed over
// `average_over` terms), moving `policy` on when it decides.
// A gradient holding non-finite values is skipped in every precision (a
// Step with skip: the version moves on, the weights do not; fp16 backs
// the loss scale off too): DeepSpeed's rule wherever it checks (fp16, and
// bf16 with check_grad_overflow), torch's GradScaler's, and one that
// every rank's gathers of the next version complete with. On a failure
// after the decision `policy` stays moved: a driver that must keep the
// policy of a failed step copies it first (the worker does).
Coordinated CoordinateStep(client::JobClient* job, Policy* policy, uint64_t step,
                           double average_over, const CoordinateOptions& options);

// The speculative step (JobSpec.speculative_step): step `step`'s Step
// parameters sent ahead of its gradients (JobClient::StepAhead), so the
// servers step each block as soon as its gradients are in: the grad_scale
// CoordinateStep will carry if nothing is clipped or skipped
// (Policy::UnclippedGradScale), and `lr` (unset: the policy's schedule).
// Errors: the policy's (average_over), the servers'.
[[nodiscard]] absl::Status SendAhead(client::JobClient* job, const Policy& policy, uint64_t step,
                                     double average_over, std::optional<float> lr);

}  // namespace zerostate::trainer
