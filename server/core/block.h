// One block of a job's shard: a contiguous run of the flat parameter space
// with its version, the low-precision copy of its weights that Gather
// serves, and the gradient accumulator of the step in progress. The master
// weights and moments live in the job's StateTier (server/core/tier/). Its
// step and speculation states change only through its transitions
// (BeginStep, Commit, QueueSpeculation, ...), each with its contract.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "common/job_spec.h"
#include "server/core/aligned_buffer.h"
#include "server/core/kept_state.h"
#include "server/core/gradient_accumulator.h"
#include "server/core/optimizer/optimizer.h"
#include "server/core/optimizer/param_groups.h"

namespace zerostate::server {

class Block {
 public:
  // `tensor_elems`: the block's elements that belong to a tensor
  // (TensorElements of common/job_spec.h); the rest is padding.
  // `group_runs`: GroupRuns of its first `required` elements.
  // `speculative`: the job steps speculatively (JobSpec.speculative_step),
  // so the speculated state and the next low-precision copy keep their
  // memory from step to step. `land_bf16`: the accumulator keeps the one
  // node's bf16 gradient where it lands (GradientAccumulator's single-
  // gradient mode, LandsGradientAsBf16).
  Block(uint64_t index, uint64_t local, uint64_t flat_begin, uint32_t required,
        uint32_t block_elems, uint32_t num_nodes, bool has_lowp, StagingBudget* staging,
        std::vector<std::pair<uint32_t, uint32_t>> tensor_elems,
        std::vector<GroupRun> group_runs, bool speculative = false, bool land_bf16 = false)
      : index(index),
        local(local),
        flat_begin(flat_begin),
        required(required),
        group_runs(std::move(group_runs)),
        speculative(speculative),
        acc(num_nodes, block_elems, required, staging, std::move(tensor_elems), land_bf16),
        lowp(has_lowp ? block_elems : 0) {}

  // Constant after construction.
  const uint64_t index;       // global block index
  const uint64_t local;       // index within the shard, as the StateTier knows it
  const uint64_t flat_begin;  // first element in the flat space
  const uint32_t required;    // elements before the layout's tail padding
  // Where the tensor group changes within the block: the runs a step gives
  // their own hyper-parameters (one run when the block is in one group).
  const std::vector<GroupRun> group_runs;
  const bool speculative;

  // Lock order (the analysis of a clang build checks it where both are
  // taken in one function): the job's pass mutex (JobStep, core/job_step.h)
  // before this; this before the StagingBudget's mutex and before the
  // tier's own locks (NvmeTier's block_mu_, taken by Load and Store called
  // under this).
  mutable absl::Mutex mu ABSL_ACQUIRED_BEFORE(StagingBudget::mu_);
  // Number of optimizer steps applied (skipped steps count).
  uint64_t version ABSL_GUARDED_BY(mu) = 0;
  GradientAccumulator acc ABSL_GUARDED_BY(mu);
  // Statistics of the summed gradient of step `stats_step`, once computed.
  std::optional<GradStats> stats ABSL_GUARDED_BY(mu);
  uint64_t stats_step ABSL_GUARDED_BY(mu) = 0;
  // The same, published for GradStats to read without `mu`
  // (JobStep::Stats): set with
  // `stats` (PublishStats), forgotten where the version moves back
  // (ForgetStats: a restore, after which the step's gradients come again).
  mutable absl::Mutex published_mu ABSL_ACQUIRED_AFTER(mu);
  uint64_t published_step ABSL_GUARDED_BY(published_mu) = UINT64_MAX;  // none
  GradStats published ABSL_GUARDED_BY(published_mu);
  AlignedBuffer<uint16_t> lowp ABSL_GUARDED_BY(mu);  // empty when weight dtype is FP32
  // The next low-precision copy, written by a step whose new state is not
  // yet stored (tiers that do not update in place) or not yet confirmed
  // (a speculative job's steps); swapped in on commit when
  // `next_lowp_ready`. Freed then, unless the job is speculative.
  AlignedBuffer<uint16_t> next_lowp ABSL_GUARDED_BY(mu);
  bool next_lowp_ready ABSL_GUARDED_BY(mu) = false;
  // A same-host gather waiting for this block's whole low-precision copy at
  // `version`, into `to` (a client's shared buffer: JobGathers::Gather
  // registers it while it waits and takes it back when it ends, under `mu`).
  // The step that brings the block to `version` on a tier that updates in
  // place (a speculation included) writes its copy there rather than into
  // `lowp` (JobStep::RefsOf), which saves the gather's read and write of
  // it; `written` once that step committed.
  struct DirectCopy {
    uint16_t* to = nullptr;
    uint64_t version = 0;
    bool written = false;
  };
  DirectCopy direct ABSL_GUARDED_BY(mu);
  // Where the step computed and not yet committed wrote the copy: nowhere
  // (kNone: no step computed one, or a skip), lowp or next_lowp (kOwn),
  // the waiting gather's memory at direct.to (kClient), or the memory of a
  // gather taken back since (kGone: not served; the block's own copy is
  // not of the new version either). A speculation writes it without `mu`,
  // so a gather taking kClient memory back waits for it first.
  enum class PendingCopy { kNone, kOwn, kClient, kGone };
  PendingCopy pending_copy ABSL_GUARDED_BY(mu) = PendingCopy::kNone;
  // Whether `lowp` holds the copy of this version: false once a step wrote
  // it to a gather's memory instead; a gather then converts the master
  // (the same bits), until a step or a restore writes `lowp` again.
  bool lowp_current ABSL_GUARDED_BY(mu) = true;
  // The block's state before a step changed it in place, while a running
  // checkpoint of that version needs it (kept_state.h).
  KeptState kept ABSL_GUARDED_BY(mu);

  // The step's and the speculation's states (server/core/job_step.h),
  // changed only by the transitions below. stepping(): a step computed the
  // block's next state but has not committed it (the version is not yet
  // raised): the tier's state and an in-place lowp copy may already be
  // version + 1's. Readers that label what they read with `version` wait
  // while it is set. speculation(): kQueued: a pool task will try it;
  // kRunning: a pool task steps it, without `mu` (the Step, GradStats and
  // gathers of other blocks go on meanwhile), reading the tier's state and
  // the accumulator's sum and writing next_state and next_lowp, which
  // nothing else touches until it is over (AwaitSpeculation); kDone:
  // `next_state` holds the state stepped with spec_params() (and next_lowp
  // its copy), not committed: the tier still holds the block's state at
  // `version`.
  enum class Speculation { kNone, kQueued, kRunning, kDone };
  bool stepping() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { return stepping_; }
  Speculation speculation() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { return speculation_; }
  const StepParams& spec_params() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { return spec_params_; }

  // The transitions. Each refuses a state it does not start from with
  // FAILED_PRECONDITION naming itself, the block and the state, and then
  // changes nothing.
  // kNone, not stepping -> kQueued.
  [[nodiscard]] absl::Status QueueSpeculation() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // kQueued -> kNone (the task found it may not step the block).
  [[nodiscard]] absl::Status CancelSpeculation() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // kQueued, not stepping -> kRunning: the caller steps the block without
  // `mu` until FinishSpeculation.
  [[nodiscard]] absl::Status BeginSpeculation() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // kRunning -> kDone, stepped with `params`.
  [[nodiscard]] absl::Status FinishSpeculation(const StepParams& params)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // Not kRunning -> kNone: a queued or done speculation is dropped (the
  // Step came first, or stepped with other parameters).
  [[nodiscard]] absl::Status DropSpeculation() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // Not stepping, not kRunning -> stepping.
  [[nodiscard]] absl::Status BeginStep() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // Stepping -> not stepping, the version kept: the new state was not
  // stored.
  [[nodiscard]] absl::Status AbortStep() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // Not kRunning -> version + 1, not stepping, kNone, the accumulator
  // reset (a step, or a skip, which never began one).
  [[nodiscard]] absl::Status Commit() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // Not stepping, not kRunning -> at `to`, kNone, the accumulator reset
  // and the statistics forgotten (the state was replaced: a restore, a
  // catch-up).
  [[nodiscard]] absl::Status Restore(uint64_t to) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);

  // The summed gradient read without `mu` by a primary's replicator
  // (server/replication/shard_replicator.h), which sends it to the
  // backups straight from the accumulator while the pass reads it too.
  // While the sum is pinned nothing writes it: every writer (a push of
  // the next version, a replicated step's SetSum, a restore) calls
  // AwaitSumUnpinned first. A commit does not wait: Reset keeps the sum's
  // memory and values, and the pass only reads it.
  // Complete -> one more pin. Refused (FAILED_PRECONDITION naming the
  // block) while the accumulator is not complete: there is no sum yet.
  [[nodiscard]] absl::Status PinSum() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // Pinned -> one pin fewer. Refused when not pinned.
  [[nodiscard]] absl::Status UnpinSum() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  bool sum_pinned() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { return sum_pins_ > 0; }
  void AwaitSumUnpinned() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    mu.Await(absl::Condition(this, &Block::SumUnpinned));
  }
  bool SumUnpinned() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { return sum_pins_ == 0; }
  // The pinned sum's first `required` fp32 elements as bytes, readable
  // without `mu` until the pin that covers it goes; empty in single-
  // gradient mode (no fp32 sum: GradientAccumulator::CopySum widens it).
  // REQUIRES: sum_pinned().
  std::string_view PinnedSum() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);

  // A speculative job's next state, computed aside; a confirmed one is
  // exchanged with the tier's (StateTier::Exchange), and this then holds
  // the memory for the next speculation.
  AlignedBuffer<float> next_state ABSL_GUARDED_BY(mu);

  // Returns once no speculation steps the block (kRunning). Everything that
  // writes the block's state, sum or next buffers calls it first.
  void AwaitSpeculation() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    mu.Await(absl::Condition(this, &Block::NotSpeculating));
  }
  bool NotSpeculating() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    return speculation_ != Speculation::kRunning;
  }

  // `stats` of step `stats_step` become the published ones.
  void PublishStats() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    absl::MutexLock lock(&published_mu);
    published_step = stats_step;
    published = *stats;
  }
  // No statistics are kept or published any more.
  void ForgetStats() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    stats.reset();
    absl::MutexLock lock(&published_mu);
    published_step = UINT64_MAX;
  }
  // The published statistics of `step` into *out; false when there are none.
  bool PublishedStats(uint64_t step, GradStats* out) const {
    absl::MutexLock lock(&published_mu);
    if (published_step != step) return false;
    *out = published;
    return true;
  }

 private:
  // FAILED_PRECONDITION: `transition` refused in the block's state.
  absl::Status Refused(const char* transition) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);

  bool stepping_ ABSL_GUARDED_BY(mu) = false;
  uint32_t sum_pins_ ABSL_GUARDED_BY(mu) = 0;
  Speculation speculation_ ABSL_GUARDED_BY(mu) = Speculation::kNone;
  StepParams spec_params_ ABSL_GUARDED_BY(mu);
};

}  // namespace zerostate::server
