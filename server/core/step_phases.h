// The phases of a step on the server, as one GradStats or Step call spent
// them: the zerostate_step_phase_seconds histograms (docs/metrics.md).
#pragma once

#include <optional>
#include <utility>

namespace zerostate::server {

struct StepPhaseTimes {
  // Waiting until every block of the shard had every node's gradient.
  std::optional<double> wait_gradients;
  // Statistics of the summed gradient computed by the call itself: those a
  // push did not compute already as it completed its block.
  std::optional<double> grad_stats;
  // The optimizer pass over the shard, wall time (commit and copy-on-write
  // below run inside it).
  std::optional<double> optimizer;
  // Committing the stepped blocks (version, low-precision copy, resetting
  // the gradient accumulator), summed over the threads of the pass.
  std::optional<double> commit;
  // Saving blocks' state for a running checkpoint before the pass moves
  // them past its version, summed over the threads; only when it saved any.
  std::optional<double> copy_on_write;
  // A step of a shard with backups: handing it to the
  // replicator before the pass (StepReplicator::Decide), and waiting for
  // the backups' acknowledgement after the pass.
  std::optional<double> replicate;
  std::optional<double> backups;

  // Calls fn(phase name, seconds) for each phase measured, in the order above.
  template <class Fn>
  void ForEach(Fn fn) const {
    const std::pair<const char*, const std::optional<double>*> phases[] = {
        {"wait_gradients", &wait_gradients},
        {"grad_stats", &grad_stats},
        {"optimizer", &optimizer},
        {"commit", &commit},
        {"copy_on_write", &copy_on_write},
        {"replicate", &replicate},
        {"backups", &backups}};
    for (const auto& [name, value] : phases) {
      if (value->has_value()) fn(name, **value);
    }
  }
};

}  // namespace zerostate::server
