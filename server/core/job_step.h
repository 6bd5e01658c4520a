// The step of one job's shard and its gradient statistics: GradStats, Step,
// the Step sent ahead of its gradients (speculation), and the optimizer
// pass. A part of Job (server/core/job.h), which owns one; callers reach it
// through Job::step().
//
// Plain step. Step(s) checks every block (window, completeness) before
// anything changes, waits until each has every node's gradient, then
// decides under the pass mutex: applied only while its caller still waits
// (not cancelled, not past its answer deadline, answer_deadline.h), so a
// Step its caller gave up on never takes effect. It records the trainer
// state for version s+1, then runs the fused kernel over the blocks on the
// pool and commits each (version s+1, accumulator reset). Adam's bias
// correction counts applied steps (applied_steps.h). Exactly once: a Step
// of blocks already at s+1 is acknowledged (already_applied).
//
// Speculative step (JobSpec.speculative_step; the parameters come from a
// Step sent ahead, StepRequest.ahead, since the loss scale and the lr
// schedule are the trainer's). StepAhead(s) records lr, grad_scale and the
// bias-correction count; from then on each block at version s is stepped
// on the pool as soon as it has every node's gradient (the push that
// completes it schedules it), assuming the clip factor 1 and finite
// gradients. The new state is computed aside, out of place (the tier keeps
// the block's state at s, which gathers and checkpoints of s read
// meanwhile), and so is the new low-precision copy; nothing is visible
// before the Step. Step(s) then decides exactly as a plain one and, per
// block: speculated with the same parameters (bit for bit): the state
// computed aside takes the tier's place (StateTier::Exchange, no copy) and
// the block commits; with others (clipping, another lr): the plain step
// from the tier's state; a skip drops the speculation; not speculated:
// the plain pass. The result is bit-identical to the plain step in every
// case: the kernel is deterministic, in place or not, and each block's
// inputs (state, summed gradient, parameters) are the same.
//
// Thread-safe. Lock order: the pass mutex, then a block's mutex, then the
// ahead mutex.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/core/applied_steps.h"
#include "server/core/block.h"
#include "server/core/needed_first_queue.h"
#include "server/core/step_phases.h"
#include "server/core/step_visibility.h"
#include "server/core/thread_pool.h"
#include "server/core/tier/state_tier.h"
#include "server/core/trainer_states.h"
#include "zerostate/v1/state_service.pb.h"

namespace zerostate::server {

struct StepOutcome {
  uint64_t version = 0;
  bool already_applied = false;
  uint64_t params_stepped = 0;  // 0 when already applied or skipped
  StepPhaseTimes times;         // wait_gradients; the pass's phases when it ran one
  // Speculative jobs: blocks whose speculation the Step confirmed (only
  // committed), and blocks it redid or restored (clipping, a skip, other
  // parameters).
  uint64_t blocks_confirmed = 0;
  uint64_t blocks_redone = 0;
};

// The way of a primary's steps to its shard's backups
// (server/replication/replicator.h implements it). A JobStep keeps one for
// its job's life once it serves as primary (JobStep::Replicator). The push
// that completes a block tells it (OnBlockComplete), so the block's summed
// gradient can travel while the other blocks fold; JobStep::Step calls
// Decide once a step is decided, before its optimizer pass, lets the pass
// mutex go once the pass committed, and answers the Step only once the
// returned wait says every live backup holds the step (its request and
// sums, kept there to apply behind this copy: not its pass).
class StepReplicator {
 public:
  // What a backup needs to run the same step: the coordinator's request and
  // each block's summed gradient (global block index; its `required` fp32
  // elements, as bytes ready for the wire).
  struct Payload {
    v1::StepRequest request;
    std::vector<std::pair<uint64_t, std::string>> grads;
  };
  virtual ~StepReplicator() = default;
  // Called by the push that completes block `b` (every node's gradient of
  // step b.version in), under b.mu: the block's sum may start travelling
  // to the backups before the Step. Must not block.
  virtual void OnBlockComplete(const Block& b) ABSL_EXCLUSIVE_LOCKS_REQUIRED(b.mu) = 0;
  // Step `req` is decided (called under the pass mutex, before the pass
  // moves any block): sends it, with every block's summed gradient not sent
  // ahead, to the backups, and `*sent` gets the payload (a retry's Resend;
  // its sums are filled in where the backups did not all acknowledge it).
  // The sums may go straight from the blocks' accumulators while the pass
  // reads them too (pinned: Block::PinSum; a commit does not wait, the
  // next version's pushes do). The returned function, called after the
  // pass (or instead of it), waits for the backups' answers (each holds
  // the step: it applies it later) and lets the sums go; it must be called
  // once, without the pass mutex (the next Decide waits until it
  // returned). Errors (of the wait): UNAVAILABLE naming the backup that
  // did not acknowledge (the primary's Step fails; its retry resends).
  virtual std::function<absl::Status()> Decide(const v1::StepRequest& req,
                                               std::shared_ptr<const Payload>* sent) = 0;
  // Sends `payload` whole again (a retried Step the backups did not all
  // acknowledge). Errors as Decide's.
  virtual std::function<absl::Status()> Resend(std::shared_ptr<const Payload> payload) = 0;
};

class JobStep {
 public:
  // What the step uses of its job; every pointer outlives the JobStep.
  struct Env {
    const v1::JobSpec* spec = nullptr;  // normalized
    const std::vector<std::unique_ptr<Block>>* blocks = nullptr;
    const std::unique_ptr<StateTier>* tier = nullptr;  // set before the first call
    const std::atomic<bool>* shutting_down = nullptr;
    // The version a running checkpoint writes (copy-on-write), or UINT64_MAX.
    const std::atomic<uint64_t>* cow_version = nullptr;
  };
  explicit JobStep(Env env) : env_(env) {}
  // Waits for speculation tasks still queued on a pool (they do nothing
  // once the job shuts down).
  ~JobStep();
  JobStep(const JobStep&) = delete;
  JobStep& operator=(const JobStep&) = delete;

  // Statistics of the summed gradient of `step` over the shard, once every
  // block has every node's gradient (zeros on an empty shard): the sum over
  // blocks, in block order, of each block's ComputeGradStats, kept by its
  // accumulator as the sum is written (GradientAccumulator::Stats) and
  // completed by the push that completed the block (OnComplete), which reads
  // what the accumulator could not square in order (where that was written
  // with non-temporal stores, GradientAccumulator::streamed(), it is out of
  // cache: then on the stats pool as soon as the block completes, see
  // below; else here, or at the step's commit), kept until
  // the block's next step commits (a retry gets the same answer). `times`
  // (null: not measured) gets wait_gradients and grad_stats. The blocks
  // whose statistics are still left to this call are computed on `pool`
  // (null: here, one after another).
  //
  // A non-null `pool` becomes the job's stats pool from then on: the push
  // that completes a block whose sum was streamed queues the block's
  // statistics on it, so they are read back on cores that are idle while
  // the other blocks' gradients still arrive, not after the last one (a
  // job of one node pushing bf16: a pass over the whole sum between the
  // last push and the Step). The pool must stay alive while pushes reach
  // the job and run its queued tasks before it goes (~ThreadPool does);
  // ~JobStep waits for those still queued. Errors: FAILED_PRECONDITION
  // (step from the past or too far ahead), DEADLINE_EXCEEDED (names
  // missing nodes), UNAVAILABLE.
  [[nodiscard]] absl::StatusOr<GradStats> Stats(uint64_t step, absl::Time deadline,
                                                StepPhaseTimes* times = nullptr,
                                                ThreadPool* pool = nullptr);

  // Applies step req.step() as described above; a Step sent ahead
  // (req.ahead()) is StepAhead(req, pool). Errors:
  // INVALID_ARGUMENT (lr, grad_scale, trainer_state), FAILED_PRECONDITION,
  // DEADLINE_EXCEEDED (names missing nodes), CANCELLED, UNAVAILABLE, the
  // tier's errors; after any error nothing was applied (a block whose new
  // state could not be stored keeps its previous one). On an empty shard:
  // version 0, not applied (the trainer state and a skip still recorded).
  //
  // With a `replicator` (a primary of a job with JobSpec.replicas > 0:
  // the one ReplicatorOrMake returned) the step is sent to the backups
  // while it runs here (the sums of blocks that completed earlier already
  // went); the pass commits and lets the pass mutex go, then the Step
  // waits for the backups to acknowledge that they hold it (they apply it
  // behind this copy) and is answered; when they did not, the error is
  // the replicator's (the step is applied here, its version not visible)
  // and a retry sends it again.
  [[nodiscard]] absl::StatusOr<StepOutcome> Step(const v1::StepRequest& req, absl::Time deadline,
                                   ThreadPool& pool,
                                   const std::function<bool()>& cancelled = nullptr,
                                   StepReplicator* replicator = nullptr);

  // The replicator of this copy as a primary: made by `make` at the first
  // call, then the same for the job's life (it is told of every block that
  // completes from then on, OnComplete). Thread-safe.
  StepReplicator* ReplicatorOrMake(const std::function<std::unique_ptr<StepReplicator>()>& make);

  // Visibility and fencing (step_visibility.h): gathers serve versions up
  // to visible_through() only (a replicated step's new version once every
  // backup holds it). A copy is deposed (MarkDeposed) when a backup of its
  // shard answered its step that it serves the shard as primary now: the
  // step ran here but was never acknowledged, so until a catch-up replaces
  // its state (Reseeded) the copy serves nothing as primary
  // (Primaries::Serve refuses it), takes no step from a primary, and
  // gathers waiting on it end with CheckNotDeposed's error (UNAVAILABLE
  // "not primary: ..."). Never blocks on the pass.
  uint64_t visible_through() const { return visibility_.visible_through(); }
  void MarkDeposed(std::string why) { visibility_.MarkDeposed(std::move(why)); }
  bool deposed() const { return visibility_.deposed(); }
  [[nodiscard]] absl::Status CheckNotDeposed() const { return visibility_.CheckNotDeposed(); }
  // The copy's state was replaced by its primary's (ReplicaService.Seed):
  // no longer deposed; its versions are acknowledged ones (visible), and an
  // unacknowledged step it kept for a retry is dropped.
  void Reseeded() ABSL_LOCKS_EXCLUDED(pass_mu_);

  // The Step sent ahead (req.ahead): records its parameters and schedules
  // every complete block at version req.step() on `pool` (which must outlive
  // the job). Does not wait; commits nothing. Answer: version req.step()
  // (step + 1 and already_applied once applied; 0 on an empty shard).
  // Errors: FAILED_PRECONDITION (job without speculative_step; step from
  // the past or too far ahead), INVALID_ARGUMENT (lr, grad_scale, skip set,
  // trainer_state set). A retry is harmless.
  [[nodiscard]] absl::StatusOr<StepOutcome> StepAhead(const v1::StepRequest& req, ThreadPool& pool);

  // Called by every push that applied a piece to block b; once the block
  // is complete (every node's gradient in), it completes the block's
  // statistics (when what is left of them is out of
  // cache, GradientAccumulator::streamed(): queues them on the stats pool,
  // if Stats gave one), schedules its speculation when
  // the step's parameters are known, and tells the replicator, if any
  // (StepReplicator::OnBlockComplete). REQUIRES: b.mu held.
  void OnComplete(Block& b) ABSL_EXCLUSIVE_LOCKS_REQUIRED(b.mu);

  // Held by a pass over the blocks (Step). BeginCheckpoint takes it, so no
  // pass straddles the start of copy-on-write.
  absl::Mutex& pass_mu() ABSL_LOCK_RETURNED(pass_mu_) { return pass_mu_; }

  TrainerStates& trainer_states() { return trainer_states_; }
  const TrainerStates& trainer_states() const { return trainer_states_; }
  AppliedSteps& applied_steps() { return applied_steps_; }
  const AppliedSteps& applied_steps() const { return applied_steps_; }

 private:
  struct Ahead {
    uint64_t step = 0;
    StepParams params;
    ThreadPool* pool = nullptr;
  };

  const v1::JobSpec& spec() const { return *env_.spec; }
  StateTier& tier() const { return **env_.tier; }
  const std::vector<std::unique_ptr<Block>>& blocks() const { return *env_.blocks; }

  // The checks of a Step's numbers, ahead or not.
  [[nodiscard]] static absl::Status CheckRequest(const v1::StepRequest& req);
  // The parameters req asks for: lr, grad_scale (0 means 1) and t, the
  // steps applied before req.step() + 1.
  StepParams ParamsOf(const v1::StepRequest& req) const;
  [[nodiscard]] absl::Status CheckStepWindow(const Block& b, uint64_t step, bool for_stats) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(b.mu);
  [[nodiscard]] absl::Status AwaitGradients(Block& b, uint64_t step, absl::Time deadline,
                                            const std::function<bool()>& cancelled = nullptr) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(b.mu);
  // Unless it holds them already, the block's gradient statistics once complete.
  void StatsOnComplete(Block& b) ABSL_EXCLUSIVE_LOCKS_REQUIRED(b.mu);
  // Queues StatsOnComplete of complete block b at its version on the stats
  // pool (none yet: left to Stats or the commit).
  void QueueStats(Block& b) ABSL_EXCLUSIVE_LOCKS_REQUIRED(b.mu);

  // Queues b's speculation when it is complete, not stepped, and the
  // parameters of its step are known.
  void MaybeSpeculate(Block& b) ABSL_EXCLUSIVE_LOCKS_REQUIRED(b.mu);
  // A pool task: steps block `local` speculatively, into b.next_state, if
  // it still may.
  void Speculate(uint64_t local);

  // The optimizer pass of the Step over the blocks still at `step`.
  [[nodiscard]] absl::Status RunPass(uint64_t step, const StepParams& params, ThreadPool& pool,
                                     uint64_t* stepped, StepOutcome* out);
  // The Step's skip: the version moves on, the state stays (a speculation
  // is dropped, counted in out->blocks_redone).
  // Returns the elements skipped. Under a running checkpoint the blocks'
  // state at its version is kept first: a tier Load error fails the Step
  // with the tier's code, naming the block, and nothing is skipped.
  [[nodiscard]] absl::StatusOr<uint64_t> SkipPass(uint64_t step, StepOutcome* out);
  // Runs the fused kernel on b's state `from`, writing the new state to
  // `to` (the same pointer: in place). The low-precision copy goes to a
  // gather's memory registered for it on a tier that updates in place
  // (Block::direct, kClient), else to b.next_lowp (next_lowp_ready) when the
  // tier does not update in place or the job is speculative, else straight
  // into b.lowp (Block::pending_copy says which).
  void ComputeBlock(Block& b, float* to, const float* from, const std::vector<StepParams>& by_group)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(b.mu);
  // The memory ComputeBlock steps (allocating b.next_lowp where it is
  // written aside), for a kernel run after the mutex is let go.
  BlockRefs RefsOf(Block& b, float* to, const float* from) ABSL_EXCLUSIVE_LOCKS_REQUIRED(b.mu);
  // Forgets a next low-precision copy not swapped in (its memory stays for
  // a speculative job's next step).
  static void DropNextLowp(Block& b) ABSL_EXCLUSIVE_LOCKS_REQUIRED(b.mu);
  // The new state is stored: version + 1, low-precision copy swapped in,
  // accumulator reset, speculation over.
  void CommitBlock(Block& b) ABSL_EXCLUSIVE_LOCKS_REQUIRED(b.mu);
  // Keeps b's state before a step moves it past a running checkpoint's
  // version; false when there was nothing to keep.
  bool CopyOnWrite(Block& b, const float* state) ABSL_EXCLUSIVE_LOCKS_REQUIRED(b.mu);

  // The Step under the pass mutex, from its decision to its commit: checks
  // that the caller still waits, hands the step to `replicator` (*acked:
  // the wait for the backups' acknowledgement, null when there is none,
  // for AwaitBackups to call once the mutex is let go), records the
  // trainer state and runs the pass (or the skip), filling *out. A step whose
  // acknowledgement another Step still awaits waits for it first.
  [[nodiscard]] absl::Status Decided(const v1::StepRequest& req, absl::Time deadline,
                                     ThreadPool& pool, const std::function<bool()>& cancelled,
                                     StepReplicator* replicator, bool pending, StepOutcome* out,
                                     std::function<absl::Status()>* acked)
      ABSL_LOCKS_EXCLUDED(pass_mu_);
  // Without the pass mutex: waits for `acked` (when set), then, under it,
  // ends the wait and, when the backups hold step `step`, makes its
  // version visible. out->times.backups gets the wait.
  [[nodiscard]] absl::Status AwaitBackups(const std::function<absl::Status()>& acked,
                                          uint64_t step, StepOutcome* out)
      ABSL_LOCKS_EXCLUDED(pass_mu_);

  // Under pass_mu_, once Step(req) is decided: starts sending it to the
  // backups (`pending`: it applies now; else a retry, which re-sends only
  // what they have not acknowledged). Null when there is nothing to wait for.
  std::function<absl::Status()> Replicate(StepReplicator* replicator, const v1::StepRequest& req,
                                          bool pending) ABSL_EXCLUSIVE_LOCKS_REQUIRED(pass_mu_);

  const Env env_;
  // Made once, kept for the job's life; read without the mutex (OnComplete).
  absl::Mutex replicator_mu_;
  std::unique_ptr<StepReplicator> owned_replicator_ ABSL_GUARDED_BY(replicator_mu_);
  std::atomic<StepReplicator*> replicator_{nullptr};
  // One pass per job at a time (speculation tasks step single blocks
  // outside it, under each block's mutex).
  absl::Mutex pass_mu_ ABSL_ACQUIRED_BEFORE(Block::mu, ahead_mu_);
  // The last step sent to the backups until they all acknowledged it.
  std::shared_ptr<const StepReplicator::Payload> unacked_ ABSL_GUARDED_BY(pass_mu_);
  // A decided step waits, without the mutex, for its backups' acknowledgement.
  bool awaiting_backups_ ABSL_GUARDED_BY(pass_mu_) = false;
  StepVisibility visibility_{env_.blocks};
  TrainerStates trainer_states_;
  AppliedSteps applied_steps_;

  mutable absl::Mutex ahead_mu_;
  std::optional<Ahead> ahead_ ABSL_GUARDED_BY(ahead_mu_);
  // The blocks queued for speculation (MaybeSpeculate), stepped lowest
  // first: the next forward needs them in that order.
  NeededFirstQueue speculations_;

  // The pool of the last Stats that gave one (QueueStats), or null.
  std::atomic<ThreadPool*> stats_pool_{nullptr};

  absl::Mutex tasks_mu_;
  // Speculation and statistics tasks queued or running.
  uint64_t tasks_ ABSL_GUARDED_BY(tasks_mu_) = 0;
};

}  // namespace zerostate::server
