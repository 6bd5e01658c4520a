// The push flow of one job's shard (a part of Job, server/core/job.h):
// gradient chunks folded into their blocks' accumulators (Push), received
// in place where they may be (ClaimPush, PushClaim), the waits for staging
// memory (AwaitStagingRoom), streamed initial weights (InitWeights), and a
// backup copy's whole-step gradients from its primary (ApplyReplicatedStep).
// The push that completes a block hands it to the step (JobStep::OnComplete).
//
// Every operation validates its input completely before it changes
// anything, so a bad request leaves the job exactly as it was.
//
// Thread-safe. Lock order: the replica mutex, then the step's pass mutex
// (through JobStep::Step), then a block's mutex.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/chunk_view.h"
#include "server/core/block.h"
#include "server/core/job_shard.h"
#include "server/core/job_step.h"
#include "server/core/thread_pool.h"
#include "zerostate/v1/state_service.pb.h"

namespace zerostate::server {

enum class PushOutcome { kApplied, kDuplicate };

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
  [[nodiscard]] absl::StatusOr<PushOutcome> Commit();

 private:
  friend class JobPushes;
  void Release();
  JobStep* step_ = nullptr;
  Block* block_ = nullptr;  // null: empty or committed
  uint32_t offset_ = 0;
  uint32_t count_ = 0;
  uint64_t epoch_ = 0;
  void* data_ = nullptr;
};

class JobPushes {
 public:
  // Both outlive the JobPushes (Job owns all three).
  JobPushes(JobShard& shard, JobStep& step) : shard_(shard), step_(step) {}
  JobPushes(const JobPushes&) = delete;
  JobPushes& operator=(const JobPushes&) = delete;

  // Adds a piece of node chunk.fields.node's gradient for its step, folded
  // straight from the chunk's data segments (the received slices).
  // A retry, or a push for a step already applied, is kDuplicate.
  // A piece that arrives before its node's turn needs a staging buffer from
  // the staging budget; when it is spent the push waits, up to `deadline`
  // (the default: not at all), with no lock held, then tries again.
  // A DTYPE_INT8 chunk (JobSpec.gradient_wire WIRE_INT8) is dequantized in
  // the fold itself.
  // Errors: INVALID_ARGUMENT (block, range, length, node, dtype, partial
  // overlap; an int8 chunk's length that is not that of its elems, a scale
  // NaN, infinite or negative), FAILED_PRECONDITION (step too far ahead), UNAVAILABLE (no
  // staging memory by the deadline, IsStagingWait; nothing changed; or
  // shutting down).
  [[nodiscard]] absl::StatusOr<PushOutcome> Push(const ChunkView& chunk,
                                                 absl::Time deadline = absl::InfinitePast());
  [[nodiscard]] absl::StatusOr<PushOutcome> Push(const v1::Chunk& chunk,
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

  // A claim for a push chunk with these fields and `data_bytes` of payload,
  // when its payload may be received in place: valid, for the step in
  // progress, of node 0 in fp32 and not received before. Else an empty
  // claim, whatever the reason (Push says it). The job must outlive it.
  PushClaim ClaimPush(const ChunkFields& fields, size_t data_bytes);

  // Forgets every block's gradients of the step in progress, giving their
  // staging buffers back to the budget: the job was deleted or replaced,
  // and calls still holding it must not keep the server's staging memory.
  void ReleaseStaging();

  // Writes initial fp32 weights. Errors: INVALID_ARGUMENT (block, range,
  // length, dtype), FAILED_PRECONDITION (not streamed_init, already stepped).
  [[nodiscard]] absl::Status InitWeights(const ChunkView& chunk);
  [[nodiscard]] absl::Status InitWeights(const v1::Chunk& chunk) {
    return InitWeights(ViewOf(chunk));
  }

  // A backup's copy applies its primary's step (ReplicaService.ApplyStep):
  // `grads` (global block -> summed gradient, `required` floats
  // as bytes) become the blocks' complete gradients, then JobStep::Step(req)
  // runs as on the primary, so the copy stays bit-identical. already_applied
  // when every block holds version step + 1. Errors: FAILED_PRECONDITION
  // (a block at another version: the copy needs a catch-up),
  // INVALID_ARGUMENT (a block of the shard missing from `grads`, one
  // outside it, a wrong size); nothing changed then.
  using ReplicatedGrads = std::vector<std::pair<uint64_t, std::string>>;
  [[nodiscard]] absl::StatusOr<StepOutcome> ApplyReplicatedStep(const v1::StepRequest& req,
                                                                const ReplicatedGrads& grads,
                                                                ThreadPool& pool);
  // ApplyReplicatedStep's checks alone, nothing changed: true when every
  // block holds version step + 1 already (nothing to apply). With
  // `behind_held` the copy still holds earlier steps to apply (HeldSteps):
  // the blocks' versions are not read (they will be at req.step()) and
  // every block's sum is required. `by_local` (may be null) gets each
  // block's sum by local index (null where none came). Errors as
  // ApplyReplicatedStep's.
  [[nodiscard]] absl::StatusOr<bool> CheckReplicatedStep(
      const v1::StepRequest& req, const ReplicatedGrads& grads, bool behind_held,
      std::vector<const std::string*>* by_local = nullptr);

 private:
  // CheckChunk for a gradient push, and its node. With fields and a length
  // only (no data): for the checks before a payload is read.
  [[nodiscard]] absl::StatusOr<JobShard::ChunkRef> CheckPush(const ChunkView& c) const;
  [[nodiscard]] absl::StatusOr<JobShard::ChunkRef> CheckPush(const ChunkFields& fields,
                                                             size_t data_bytes) const;

  JobShard& shard_;
  JobStep& step_;
  // One replicated step applied at a time on a backup's copy.
  absl::Mutex replica_mu_ ABSL_ACQUIRED_BEFORE(Block::mu);
};

}  // namespace zerostate::server
