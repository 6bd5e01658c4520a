// One job's shard on this server: its blocks and the operations of a step.
//
// Every operation validates its input completely before it changes
// anything, so a bad request leaves the job exactly as it was. Each block
// has its own mutex (no job-wide lock on the data path); waits for a
// block's progress use that mutex's conditions with a deadline.
//
// Thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/chunk_view.h"
#include "common/job_spec.h"
#include "common/shard_map.h"
#include "server/core/applied_steps.h"
#include "server/core/block.h"
#include "server/core/job_step.h"
#include "server/core/staging_budget.h"
#include "server/core/step_phases.h"
#include "server/core/tier/state_tier.h"
#include "server/core/tier/tier_factory.h"
#include "server/core/trainer_states.h"
#include "server/core/thread_pool.h"
#include "zerostate/v1/state_service.pb.h"

namespace zerostate::server {

class Job {
 public:
  enum class PushOutcome { kApplied, kDuplicate };

  using StepOutcome = server::StepOutcome;

  // Allocates the shard's blocks and initializes the weights (seeded, or
  // zero awaiting InitWeights). The state lives in the tier spec.tier() chooses,
  // built with `tiers` (tier_factory.h). REQUIRES: spec normalized,
  // shard_index < servers.size(). Errors: those of MakeTier, the tier's I/O.
  // With initialize=false the weights stay zero for RestoreBlock. Early
  // nodes' staging buffers come from `staging` (null: unbounded; the
  // server's --staging_budget_bytes otherwise).
  static absl::StatusOr<std::unique_ptr<Job>> Create(
      v1::JobSpec spec, std::vector<std::string> servers, uint32_t shard_index,
      bool initialize = true, const TierOptions& tiers = TierOptions(),
      std::shared_ptr<StagingBudget> staging = nullptr);

  // RAM a job with this spec and shard would hold, before any staging: on
  // TIER_NVME only the low-precision copy, the gradient accumulator and the
  // tier's cache budget. The spec counts too (3x its size: names are kept
  // thrice), so that long tensor names are charged to the budget.
  static uint64_t EstimateBytes(const v1::JobSpec& spec, uint64_t shard_blocks,
                                const TierOptions& tiers = TierOptions());

  const v1::JobSpec& spec() const { return spec_; }
  const Layout& layout() const { return layout_; }
  const std::vector<std::string>& servers() const { return servers_; }
  uint32_t shard_index() const { return shard_index_; }
  Range blocks() const { return blocks_; }
  // EstimateBytes of this job, as it was created.
  uint64_t state_bytes() const { return state_bytes_; }

  // Adds a piece of node chunk.fields.node's gradient for its step, folded
  // straight from the chunk's data segments (the received slices).
  // A retry, or a push for a step already applied, is kDuplicate.
  // A piece that arrives before its node's turn needs a staging buffer from
  // the staging budget; when it is spent the push waits, up to `deadline`
  // (the default: not at all), with no lock held, then tries again.
  // Errors: INVALID_ARGUMENT (block, range, length, node, dtype, partial
  // overlap), FAILED_PRECONDITION (step too far ahead), UNAVAILABLE (no
  // staging memory by the deadline, IsStagingWait; nothing changed; or
  // shutting down).
  absl::StatusOr<PushOutcome> Push(const ChunkView& chunk,
                                   absl::Time deadline = absl::InfinitePast());
  absl::StatusOr<PushOutcome> Push(const v1::Chunk& chunk,
                                   absl::Time deadline = absl::InfinitePast()) {
    return Push(ViewOf(chunk), deadline);
  }
  // True for Push's error when the staging budget had no room in time.
  static bool IsStagingWait(const absl::Status& status);

  // Waits, up to `deadline` and holding no lock, while a push chunk with
  // these fields and `data_bytes` of payload would only wait in Push for
  // staging memory (its node early at its block, without a staging buffer
  // there, and the budget without room). For a caller that takes memory of
  // its own for the payload (the data plane's frame buffers) before Push:
  // waiting first, it does not hold that memory while it waits, where the
  // head node's pushes may need it. Returns at once for any other chunk
  // (a bad one too: Push says why). Push still checks, and waits, itself.
  void AwaitStagingRoom(const ChunkFields& fields, size_t data_bytes, absl::Time deadline);

  // Forgets every block's gradients of the step in progress, giving their
  // staging buffers back to the budget: the job was deleted or replaced,
  // and calls still holding it must not keep the server's staging memory.
  void ReleaseStaging();

  // The job was deleted (JobRegistry::Delete): calls still waiting on one of
  // its blocks (a gather of a version that will never come, a rank whose
  // coordinator's Step failed) end now with NOT_FOUND naming the job
  // instead of waiting out their deadline; calls after it see the same.
  void MarkDeleted();

  // A push received in place (GradientAccumulator::Claim): a claim on the
  // memory of a block's gradient sum where a chunk's payload goes as it is
  // received. Commit() then applies it as Push would have; destroyed
  // without Commit (the payload did not arrive whole), the claim is given
  // back and nothing changed. Empty (data() null) when the chunk must go
  // through Push instead.
  class PushClaim {
   public:
    PushClaim() = default;
    PushClaim(PushClaim&& other) noexcept { *this = std::move(other); }
    PushClaim& operator=(PushClaim&& other) noexcept;
    ~PushClaim() { Release(); }

    void* data() const { return data_; }
    // REQUIRES: data() is not null and holds the payload. Errors:
    // UNAVAILABLE when the block was restored while the payload arrived
    // (push it again).
    absl::StatusOr<PushOutcome> Commit();

   private:
    friend class Job;
    void Release();
    Job* job_ = nullptr;
    Block* block_ = nullptr;  // null: empty or committed
    uint32_t offset_ = 0;
    uint32_t count_ = 0;
    uint64_t epoch_ = 0;
    void* data_ = nullptr;
  };

  // A claim for a push chunk with these fields and `data_bytes` of payload,
  // when its payload may be received in place: valid, for the step in
  // progress, of node 0 in fp32 and not received before. Else an empty
  // claim, whatever the reason (Push says it). The job must outlive it.
  PushClaim ClaimPush(const ChunkFields& fields, size_t data_bytes);

  // Writes initial fp32 weights. Errors: INVALID_ARGUMENT (block, range,
  // length, dtype), FAILED_PRECONDITION (not streamed_init, already stepped).
  absl::Status InitWeights(const ChunkView& chunk);
  absl::Status InitWeights(const v1::Chunk& chunk) { return InitWeights(ViewOf(chunk)); }

  // The step and its statistics (server/core/job_step.h has the contract).
  absl::StatusOr<GradStats> Stats(uint64_t step, absl::Time deadline,
                                  StepPhaseTimes* times = nullptr, ThreadPool* pool = nullptr) {
    return step_.Stats(step, deadline, times, pool);
  }
  // A Step (req.ahead false: JobStep::Step, through `replicator` to the
  // backups when set; true: JobStep::StepAhead).
  absl::StatusOr<StepOutcome> Step(const v1::StepRequest& req, absl::Time deadline,
                                   ThreadPool& pool,
                                   const std::function<bool()>& cancelled = nullptr,
                                   StepReplicator* replicator = nullptr) {
    if (req.ahead()) return step_.StepAhead(req, pool);
    return step_.Step(req, deadline, pool, cancelled, replicator);
  }

  // A backup's copy applies its primary's step (ReplicaService.ApplyStep;
  // issue 19): `grads` (global block -> summed gradient, `required` floats
  // as bytes) become the blocks' complete gradients, then Step(req) runs
  // as on the primary, so the copy stays bit-identical. already_applied
  // when every block holds version step + 1. Errors: FAILED_PRECONDITION
  // (a block at another version: the copy needs a catch-up),
  // INVALID_ARGUMENT (a block of the shard missing from `grads`, one
  // outside it, a wrong size); nothing changed then.
  absl::StatusOr<StepOutcome> ApplyReplicatedStep(
      const v1::StepRequest& req, const std::vector<std::pair<uint64_t, std::string>>& grads,
      ThreadPool& pool);

  // Block `local`'s whole state (tier_shape().block_floats() floats:
  // master, then moments) once it reaches `min_version` and no step is
  // between computing and committing it; `version` gets its version.
  // Errors: DEADLINE_EXCEEDED, UNAVAILABLE, the tier's I/O errors.
  absl::Status ReadBlock(uint64_t local, uint64_t min_version, absl::Time deadline, float* out,
                         uint64_t* version);
  // Block `local`'s state at `version`, its current version, without
  // waiting: a speculated block's from what it keeps (a catch-up's read,
  // issue 19). REQUIRES: no step's pass runs (the caller is the Step, before
  // its pass). Errors: FAILED_PRECONDITION when the block is at another
  // version; the tier's I/O errors.
  absl::Status ReadBlockAt(uint64_t local, uint64_t version, float* out);

  // What the coordinator's Steps carried (StepRequest.trainer_state).
  const TrainerStates& trainer_states() const { return step_.trainer_states(); }
  // Keeps a restored checkpoint's trainer state as version `version`'s.
  // Errors: DATA_LOSS (too large to have come from a Step).
  absl::Status RestoreTrainerState(uint64_t version, const std::string& state);

  // Checks a gather request; returns the element range it covers (empty
  // for the whole shard of an empty shard).
  absl::StatusOr<Range> CheckGather(const v1::GatherRequest& req) const;

  // Receives the pieces of a Gather, in order. Buffer() and Emit() alternate
  // on the gathering thread: Buffer(bytes) returns memory for the next
  // piece's payload, which Job fills (once, under the block's mutex) before
  // calling Emit(piece) without any lock held. Emit returns false to stop
  // the gather (the client went away).
  class GatherSink {
   public:
    virtual ~GatherSink() = default;
    virtual void* Buffer(size_t bytes) = 0;
    virtual bool Emit(const ChunkFields& piece) = 0;  // job_id left empty
  };

  // Serves `range` (from CheckGather) block piece by piece, each once its
  // block reaches min_version, into `sink`, at most `max_piece` elements
  // per piece. Errors: DEADLINE_EXCEEDED, UNAVAILABLE, the tier's I/O
  // errors, CANCELLED when the sink stopped it.
  absl::Status Gather(Range range, uint64_t min_version, v1::DType dtype, uint32_t max_piece,
                      absl::Time deadline, GatherSink& sink);
  // The same, each piece as a Chunk message (tests, tools).
  absl::Status Gather(Range range, uint64_t min_version, v1::DType dtype, uint32_t max_piece,
                      absl::Time deadline, const std::function<bool(const v1::Chunk&)>& emit);

  // The shard's placement, versions and progress.
  v1::JobInfo Info() const;
  void FillStatus(v1::JobStatusResponse* out) const;

  // Wakes every waiter with UNAVAILABLE; later waits fail at once.
  void Shutdown();

  // --- Checkpoints (server/core/checkpoint/) ---

  // Starts a checkpoint of `version`: from now on each block keeps a copy
  // of its state at `version` before a step moves it past (copy-on-write),
  // so training goes on while the checkpoint is written. One checkpoint
  // per job at a time: a second waits; so does one begun during a step's
  // optimizer pass, until the pass ends. Errors: FAILED_PRECONDITION when a
  // block is already past `version`.
  class CheckpointGuard;
  absl::StatusOr<std::unique_ptr<CheckpointGuard>> BeginCheckpoint(uint64_t version);

  // Copies block `local`'s state at the checkpoint's version into `out`
  // (tier shape().block_floats() floats), waiting until the block reaches
  // it. Errors: DEADLINE_EXCEEDED, UNAVAILABLE, the tier's I/O errors.
  absl::Status SnapshotBlock(uint64_t local, uint64_t version, absl::Time deadline, float* out);

  // Loads block `local`'s state (from a checkpoint) and sets its version.
  // Only for a job not yet visible to callers (JobRegistry::Restore).
  absl::Status RestoreBlock(uint64_t local, const float* state, uint64_t version);
  // Of the steps before `version`, `applied` applied the optimizer (the
  // checkpoint's ShardManifest.applied_steps). Same restriction.
  void RestoreAppliedSteps(uint64_t version, uint64_t applied) {
    step_.applied_steps().Restore(version, applied);
  }
  // Steps among [0, version) that applied the optimizer (a checkpoint's).
  uint64_t AppliedStepsBefore(uint64_t version) const {
    return step_.applied_steps().Before(version);
  }

  const TierShape& tier_shape() const { return tier_->shape(); }

 private:
  struct ChunkRef {
    Block* block;
    uint32_t offset;
    uint32_t count;
  };
  // Validates the placement and payload of a chunk of `dtype`.
  absl::StatusOr<ChunkRef> CheckChunk(const ChunkView& c, v1::DType dtype,
                                      const char* dtype_field) const;
  // CheckChunk for a gradient push, and its node. With fields and a length
  // only (no data): for the checks before a payload is read.
  absl::StatusOr<ChunkRef> CheckPush(const ChunkView& c) const;
  absl::StatusOr<ChunkRef> CheckPush(const ChunkFields& fields, size_t data_bytes) const;
  Block& block(uint64_t global_index) const { return *blocks_data_[global_index - blocks_.begin]; }
  // Waits under b.mu until pred() holds; the error names what was awaited.
  // With `cancelled` (polled every kCancelPoll, b.mu released meanwhile)
  // CANCELLED once it is true.
  absl::Status AwaitBlock(Block& b, absl::Time deadline, const std::function<bool()>& pred,
                          const std::function<std::string()>& what,
                          const std::function<bool()>& cancelled = nullptr) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(b.mu);
  // Under b.mu: until the block reaches `version`, or until every node's
  // gradient for `step` is in (or the block moved on).
  absl::Status AwaitVersion(Block& b, uint64_t version, absl::Time deadline) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(b.mu);
  // Under b.mu: until the block reaches `version` and no step is between
  // computing and committing it (Block::stepping), so what is read is
  // the state its version says; with `acknowledged`, also until the
  // backups hold `version` (JobStep::visible_through).
  absl::Status AwaitReadable(Block& b, uint64_t version, absl::Time deadline,
                             bool acknowledged = false) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(b.mu);
  Job(v1::JobSpec spec, std::vector<std::string> servers, uint32_t shard_index,
      std::shared_ptr<StagingBudget> staging);
  absl::Status InitializeWeights();
  // Builds tier_ (spec_.tier()) and sets state_bytes_.
  absl::Status CreateTier(const TierOptions& tiers);

  const v1::JobSpec spec_;
  const Layout layout_;
  const std::vector<std::string> servers_;
  const uint32_t shard_index_;
  const Range blocks_;
  // Before blocks_data_: their accumulators give staging back on destruction.
  const std::shared_ptr<StagingBudget> staging_;
  std::vector<std::unique_ptr<Block>> blocks_data_;
  std::unique_ptr<StateTier> tier_;
  uint64_t state_bytes_ = 0;  // constant after Create
  absl::Mutex checkpoint_mu_;
  bool checkpoint_running_ ABSL_GUARDED_BY(checkpoint_mu_) = false;  // one at a time
  static constexpr uint64_t kNoCheckpoint = UINT64_MAX;
  std::atomic<uint64_t> cow_version_{kNoCheckpoint};
  std::atomic<bool> shutting_down_{false};
  // One replicated step applied at a time on a backup's copy.
  absl::Mutex replica_mu_;
  std::atomic<bool> deleted_{false};  // MarkDeleted
  // Last: destroyed first, once its speculation tasks ended, while the
  // blocks and the tier they use are still there.
  JobStep step_{JobStep::Env{&spec_, &blocks_data_, &tier_, &shutting_down_, &cow_version_}};
};

// Ends the checkpoint (stops copy-on-write, frees snapshots) when destroyed.
// May be destroyed on another thread than the one that began the checkpoint.
class Job::CheckpointGuard {
 public:
  explicit CheckpointGuard(Job* job);
  ~CheckpointGuard();

 private:
  Job* job_;
};

}  // namespace zerostate::server
