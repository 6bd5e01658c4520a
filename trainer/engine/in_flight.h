// A step whose update is still in flight (the delayed parameter update;
// the worker's layer-by-layer landing): which step it is, the version it
// brings, the pushes of its gradients it still waits for, and once known
// its verdict (its pushes' and the coordinator's Step's outcome, and the
// policy after it). Both drivers hold one: zerostate-worker
// (worker/engine.h) and zerostate.torch (through zerostate_engine_c.h).
//
// The lifecycle:
//   idle --Start(step, ...)--> running --(the Step ends)--> joined
//   idle --Follow(step)------> joined   (a rank whose coordinator steps)
//   idle --Fail(step, ...)---> joined   (the step failed before its Step)
//   joined --Take()--> idle, handing the verdict over once.
// Join() waits for a running Step without taking its verdict; Drop()
// waits and forgets.
//
// Thread safety: one driver thread makes the transitions (Start, Follow,
// Fail, Join, Poll, Take, Drop); WaitGathersOut and MarkGathersOut may
// come from any thread (the push thread, the Step's thread) at once.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "trainer/engine/coordinator.h"
#include "trainer/engine/gather_slot.h"
#include "trainer/engine/pusher.h"
#include "trainer/policy.h"

namespace zerostate::trainer {

// The pushes of a step's gradients that the step in flight owns: those
// of `pusher` before `mark` (Pusher::Mark() once they were all queued).
// None when `pusher` is null.
struct StepPushes {
  Pusher* pusher = nullptr;
  uint64_t mark = 0;
};

// What a step in flight came to.
struct Verdict {
  uint64_t step = 0;
  // This rank ran the step's Step (Start). False after Follow (the
  // coordinator's verdict reaches the rank otherwise) and Fail.
  bool coordinated = false;
  // status, stage, decision, refused. A failed push of the step: its
  // error, the stage naming the push ("push of step 3 [0, 1024)").
  Coordinated outcome;
  // The policy after the step (Start, when the decision was made).
  std::optional<Policy> policy;
};

class InFlightStep {
 public:
  // Runs `coordinate` on `policy` (a copy: moved on, it becomes the
  // verdict's policy).
  using CoordinateFn = std::function<Coordinated(Policy* policy)>;
  using FailureFn = std::function<void(const absl::Status&)>;

  InFlightStep() = default;
  ~InFlightStep();  // Drop()
  InFlightStep(const InFlightStep&) = delete;
  InFlightStep& operator=(const InFlightStep&) = delete;

  // Starts step `step`'s Step on a thread of its own: first `pushes` are
  // drained (the coordinator's statistics read what they pushed), then
  // `coordinate(&copy of policy)` runs, unless a push failed: that fails
  // the step as its Step would. When it fails, `on_failure` (if set) is
  // called on that thread at once with its status (a driver ends the
  // waits of the ranks on the version that will not come). Errors:
  // FAILED_PRECONDITION when a step is in flight already (naming it);
  // nothing changes then.
  [[nodiscard]] absl::Status Start(uint64_t step, const Policy& policy, CoordinateFn coordinate,
                                   FailureFn on_failure = nullptr, StepPushes pushes = {})
      ABSL_LOCKS_EXCLUDED(mu_);
  // Step `step` is in flight, its Step another rank's: joined at once,
  // not coordinated; `pushes` are drained by Join or Take (on the
  // driver's thread), a failed one the verdict's error. Errors: as
  // Start's.
  [[nodiscard]] absl::Status Follow(uint64_t step, StepPushes pushes = {}) ABSL_LOCKS_EXCLUDED(mu_);
  // Step `step` is in flight and already failed (`outcome`, whose status
  // must not be OK): joined at once; `pushes` are drained by Join or Take,
  // their errors dropped. Errors: as Start's; INVALID_ARGUMENT for an OK
  // status.
  [[nodiscard]] absl::Status Fail(uint64_t step, Coordinated outcome, StepPushes pushes = {})
      ABSL_LOCKS_EXCLUDED(mu_);

  // A step is in flight (running or joined, not taken).
  bool active() const ABSL_LOCKS_EXCLUDED(mu_);
  // Its Step still runs on its thread.
  bool running() const ABSL_LOCKS_EXCLUDED(mu_);
  // The step in flight, if any; it brings version step() + 1.
  std::optional<uint64_t> step() const ABSL_LOCKS_EXCLUDED(mu_);

  // Waits for a running Step (or drains the pushes of a joined one); its
  // verdict stays until Take. Returns the verdict's status (OK when
  // nothing is in flight).
  absl::Status Join() ABSL_LOCKS_EXCLUDED(mu_);
  // Joins a Step that has ended, without waiting (nor draining). True
  // unless one still runs.
  bool Poll() ABSL_LOCKS_EXCLUDED(mu_);
  // Joins, then hands the verdict over and goes idle; nullopt when idle.
  std::optional<Verdict> Take() ABSL_LOCKS_EXCLUDED(mu_);
  // Joins and forgets the verdict.
  void Drop() ABSL_LOCKS_EXCLUDED(mu_);

  // The gathers of step `step`'s new version are out (a driver's
  // before_step marks it, after putting them out).
  void MarkGathersOut(uint64_t step) ABSL_LOCKS_EXCLUDED(mu_);
  // Returns once step `step` has its gathers out (true), or its Step
  // ended without them, or it is not the step in flight (false: a push
  // of the next step then waits on no gathers of it). Never waits on an
  // idle or followed step.
  bool WaitGathersOut(uint64_t step) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  enum class State { kIdle, kRunning, kJoined };
  absl::Status CheckIdle() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Begins step `step` in `state` (idle before), owning `pushes`.
  void Begin(State state, uint64_t step, StepPushes pushes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The Step's thread: drains its pushes, runs it, records the verdict.
  void Run(Policy policy, const CoordinateFn& coordinate, const FailureFn& on_failure,
           StepPushes pushes) ABSL_LOCKS_EXCLUDED(mu_);
  // Joins the thread if it has ended (or `wait`).
  void JoinThread(bool wait) ABSL_LOCKS_EXCLUDED(mu_);
  // Drains the pushes a joined step still owns; the first failure stays
  // its verdict's.
  void DrainJoined() ABSL_LOCKS_EXCLUDED(mu_);

  mutable absl::Mutex mu_;
  State state_ ABSL_GUARDED_BY(mu_) = State::kIdle;
  bool ended_ ABSL_GUARDED_BY(mu_) = false;        // the running Step's thread is done
  bool gathers_out_ ABSL_GUARDED_BY(mu_) = false;  // of verdict_.step
  Verdict verdict_ ABSL_GUARDED_BY(mu_);
  StepPushes pushes_ ABSL_GUARDED_BY(mu_);  // a joined step's, not drained yet
  // The Step's thread; only the driver's thread starts and joins it.
  std::thread thread_;
};

// The pushes `pushes` owns, drained: OK, or the first failed one's error
// with the stage naming it. OK when there are none.
Coordinated DrainPushes(StepPushes pushes);

// What a failed (or reset, or closing) step leaves in flight, dropped in
// the one order both drivers use, so that nothing waits on a version no
// Step will bring: the Step in flight is waited for (its pushes
// drained) and its verdict forgotten (no call of it outlives the step); every gather of `slots` is
// dropped, which cancels it (a gather of a version whose Step failed on
// servers that are alive would wait out its deadline and retries); every
// push queued is waited for, its error dropped (a push waiting on one of
// those gathers ends with it); then the dropped gathers are waited for,
// so their buffers are the driver's again. `step` and `pusher` may be
// null, `slots` empty. A slot landing (the driver's own thread is in it:
// never, from the driver) is left as it is.
void AbandonInFlight(InFlightStep* step, Pusher* pusher, absl::Span<GatherSlot* const> slots);

}  // namespace zerostate::trainer
