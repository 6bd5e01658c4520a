#include "server/core/job_pushes.h"

#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/convert.h"
#include "common/int8_wire.h"
#include "common/timeline.h"

namespace zerostate::server {
namespace {

// Marks Push's "no staging memory in time" error (JobPushes::IsStagingWait).
constexpr char kStagingWaitPayload[] = "zerostate.server/staging_wait";

}  // namespace

bool JobPushes::IsStagingWait(const absl::Status& status) {
  return status.GetPayload(kStagingWaitPayload).has_value();
}

absl::StatusOr<JobShard::ChunkRef> JobPushes::CheckPush(const ChunkView& c) const {
  const v1::JobSpec& spec = shard_.spec();
  // The compressed wire's chunks where the job asks for them; its plain
  // chunks always (the same-host plane sends those).
  const bool int8 = c.fields.dtype == v1::DTYPE_INT8 && spec.gradient_wire() == v1::WIRE_INT8;
  auto ref = int8 ? shard_.CheckChunk(c, v1::DTYPE_INT8, "gradient_wire")
                  : shard_.CheckChunk(c, spec.grad_dtype(), "grad_dtype");
  if (!ref.ok()) return ref.status();
  if (c.fields.node >= spec.num_nodes()) {
    return absl::InvalidArgumentError(
        absl::StrCat("node: ", c.fields.node, " is not below num_nodes ", spec.num_nodes()));
  }
  return ref;
}

absl::StatusOr<JobShard::ChunkRef> JobPushes::CheckPush(const ChunkFields& fields,
                                                        size_t data_bytes) const {
  ChunkView view;
  view.fields = fields;
  view.data_bytes = data_bytes;
  return CheckPush(view);
}

absl::StatusOr<PushOutcome> JobPushes::Push(const ChunkView& c, absl::Time deadline) {
  auto ref = CheckPush(c);
  if (!ref.ok()) return ref.status();
  const ChunkFields& f = c.fields;
  // An int8 chunk's scales are checked (and copied out) before any lock.
  std::optional<Int8Chunk> int8;
  if (f.dtype == v1::DTYPE_INT8) {
    absl::StatusOr<Int8Chunk> read = ReadInt8Chunk(c, f.elems);
    if (!read.ok()) return read.status();
    int8 = *std::move(read);
  }
  Block& b = *ref->block;
  StagingBudget* staging = shard_.staging();
  // Tries under the block's mutex; a piece that needs staging memory the
  // budget does not have waits for a change without the mutex (a wait under
  // it would stop the very pushes that free memory or move the head), then
  // tries again from the start: meanwhile the step may have been applied,
  // or the node become the head and need no staging at all.
  while (true) {
    uint64_t seen = 0;
    {
      absl::MutexLock lock(&b.mu);
      if (f.step < b.version) return PushOutcome::kDuplicate;  // that step is applied
      if (f.step > b.version) {
        return absl::FailedPreconditionError(absl::StrCat(
            "step: ", f.step, " is too far ahead; block ", b.index, " is at version ", b.version));
      }
      // A retry racing its first attempt, whose payload is still arriving
      // in place on another connection (ClaimPush): waits for that attempt
      // to end (committed: this is a duplicate; given back: this applies).
      // Past the deadline Add says UNAVAILABLE, which clients retry.
      if (b.acc.Claimed(f.node, ref->offset, ref->count)) {
        std::function<bool()> ended = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(b.mu) {
          return shard_.shutting_down() || !b.acc.Claimed(f.node, ref->offset, ref->count);
        };
        b.mu.AwaitWithDeadline(absl::Condition(&ended), deadline);
        if (shard_.shutting_down()) return absl::UnavailableError("server is shutting down");
        if (f.step != b.version) continue;  // the step moved on meanwhile: judged afresh
      }
      // The previous version's sum still travels to the backups straight
      // from the accumulator (Block::PinSum): written only once it went.
      // (A complete block takes no more writes: a retry is a duplicate.)
      if (b.sum_pinned() && !b.acc.complete()) {
        std::function<bool()> unpinned = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(b.mu) {
          return shard_.shutting_down() || b.SumUnpinned();
        };
        if (!b.mu.AwaitWithDeadline(absl::Condition(&unpinned), deadline)) {
          return absl::UnavailableError(absl::StrCat(
              "step ", f.step, ": block ", b.index,
              "'s previous sum was still being sent to its backups; push again"));
        }
        if (shard_.shutting_down()) return absl::UnavailableError("server is shutting down");
        continue;  // judged afresh
      }
      // Read before trying, under the mutex: a change after it is seen.
      if (staging != nullptr) seen = staging->generation();
      Timeline::Record("fold_begin", static_cast<int64_t>(b.index), static_cast<int64_t>(f.node));
      auto added = int8 ? b.acc.Add(f.node, ref->offset, *int8)
                        // (A replicated job's sums travel to its backups
                        // after the step: it copies, keeping its own.)
                        : b.acc.Add(f.node, ref->offset, ref->count, c.data, f.dtype,
                                    shard_.spec().replicas() == 0 ? c.held : nullptr);
      Timeline::Record("fold_end", static_cast<int64_t>(b.index), static_cast<int64_t>(f.node));
      if (!added.ok()) return added.status();
      if (*added == GradientAccumulator::Outcome::kApplied) {
        step_.OnComplete(b);
        return PushOutcome::kApplied;
      }
      if (*added == GradientAccumulator::Outcome::kDuplicate) return PushOutcome::kDuplicate;
    }
    // kNoStaging (only with a budget). The head node's pieces never need
    // staging, so this wait never holds up the node whose pushes complete
    // the block, and with it the budget's release.
    const bool changed = staging->AwaitChange(seen, deadline);
    if (shard_.shutting_down()) return absl::UnavailableError("server is shutting down");
    if (!changed) {
      absl::Status s = staging->Exhausted(
          absl::StrCat("step ", f.step, ": node ", f.node, "'s chunk [", ref->offset, ", ",
                       ref->offset + ref->count, ") of block ", b.index),
          uint64_t{shard_.layout().block_elems} * sizeof(float));
      s.SetPayload(kStagingWaitPayload, absl::Cord());
      return s;
    }
  }
}

void JobPushes::AwaitStagingRoom(const ChunkFields& f, size_t data_bytes, absl::Time deadline) {
  StagingBudget* staging = shard_.staging();
  if (staging == nullptr) return;
  auto ref = CheckPush(f, data_bytes);
  if (!ref.ok()) return;
  Block& b = *ref->block;
  const uint64_t bytes = uint64_t{shard_.layout().block_elems} * sizeof(float);
  while (!shard_.shutting_down()) {
    uint64_t seen = 0;
    {
      absl::MutexLock lock(&b.mu);
      if (f.step != b.version || !b.acc.NeedsStaging(f.node, ref->offset, ref->count) ||
          staging->free() >= bytes) {
        return;
      }
      seen = staging->generation();
    }
    if (!staging->AwaitChange(seen, deadline)) return;
  }
}

void JobPushes::ReleaseStaging() {
  for (auto& bp : shard_.all_blocks()) {
    absl::MutexLock lock(&bp->mu);
    bp->AwaitSpeculation();  // it reads the sum
    bp->acc.Reset();
  }
}

PushClaim JobPushes::ClaimPush(const ChunkFields& f, size_t data_bytes) {
  PushClaim claim;
  auto ref = CheckPush(f, data_bytes);
  if (!ref.ok()) return claim;
  Block& b = *ref->block;
  absl::MutexLock lock(&b.mu);
  if (f.step != b.version || b.sum_pinned()) return claim;  // Push waits for the pin
  float* into = b.acc.Claim(f.node, ref->offset, ref->count, f.dtype);
  if (into == nullptr) return claim;
  claim.step_ = &step_;
  claim.block_ = &b;
  claim.offset_ = ref->offset;
  claim.count_ = ref->count;
  claim.epoch_ = b.acc.epoch();
  claim.data_ = into;
  return claim;
}

PushClaim& PushClaim::operator=(PushClaim&& other) noexcept {
  Release();
  step_ = other.step_;
  block_ = std::exchange(other.block_, nullptr);
  offset_ = other.offset_;
  count_ = other.count_;
  epoch_ = other.epoch_;
  data_ = std::exchange(other.data_, nullptr);
  return *this;
}

absl::StatusOr<PushOutcome> PushClaim::Commit() {
  Block* b = std::exchange(block_, nullptr);
  absl::MutexLock lock(&b->mu);
  if (!b->acc.Commit(offset_, count_, epoch_)) {
    return absl::UnavailableError(
        absl::StrCat("block ", b->index, " was restored while the chunk arrived; push it again"));
  }
  Timeline::Record("fold_end", static_cast<int64_t>(b->index));  // landed in place
  step_->OnComplete(*b);
  return PushOutcome::kApplied;
}

void PushClaim::Release() {
  if (block_ == nullptr) return;
  absl::MutexLock lock(&block_->mu);
  block_->acc.Abandon(offset_, count_, epoch_);
  block_ = nullptr;
}

absl::Status JobPushes::InitWeights(const ChunkView& c) {
  const v1::JobSpec& spec = shard_.spec();
  if (!spec.streamed_init()) {
    return absl::FailedPreconditionError(
        "job was registered with seeded weights (streamed_init is false)");
  }
  auto ref = shard_.CheckChunk(c, v1::DTYPE_FP32, "initial weights dtype");
  if (!ref.ok()) return ref.status();
  Block& b = *ref->block;
  StateTier& tier = shard_.tier();
  absl::MutexLock lock(&b.mu);
  if (b.version != 0 || b.stepping()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "block ", b.index, " is at version ", b.version, b.stepping() ? " (being stepped)" : "",
        "; initial weights can be streamed only before the first step"));
  }
  b.AwaitSpeculation();  // of step 0, reading the state this writes
  AlignedBuffer<float> state(tier.shape().block_floats());
  if (auto s = tier.Load(b.local, state.data()); !s.ok()) return s;
  CopyChunkData(c, v1::DTYPE_FP32, v1::DTYPE_FP32, state.data() + ref->offset);
  if (auto s = tier.Store(b.local, state.data()); !s.ok()) return s;
  if (!b.lowp.empty()) {
    EncodeFloats(state.data() + ref->offset, ref->count, spec.weight_dtype(),
                 b.lowp.data() + ref->offset);
  }
  return absl::OkStatus();
}

absl::StatusOr<bool> JobPushes::CheckReplicatedStep(const v1::StepRequest& req,
                                                    const ReplicatedGrads& grads,
                                                    bool behind_held,
                                                    std::vector<const std::string*>* by_local) {
  const uint64_t step = req.step();
  const Range blocks = shard_.blocks();
  const auto& all = shard_.all_blocks();
  std::vector<const std::string*> mine(all.size(), nullptr);
  for (const auto& [index, grad] : grads) {
    if (index < blocks.begin || index >= blocks.end) {
      return absl::InvalidArgumentError(absl::StrCat("block: ", index, " is not in shard ",
                                                     shard_.shard_index(), " [", blocks.begin, ", ",
                                                     blocks.end, ")"));
    }
    const Block& b = shard_.block(index);
    if (grad.size() != size_t{b.required} * sizeof(float) || mine[b.local] != nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("grad: block ", index, " has ", grad.size(),
                                                     " bytes (or came twice); it needs ",
                                                     size_t{b.required} * sizeof(float)));
    }
    mine[b.local] = &grad;
  }
  bool applied = !all.empty();
  for (auto& bp : all) {
    uint64_t version = step;  // behind held steps: every block at `step` by then
    if (!behind_held) {
      absl::MutexLock lock(&bp->mu);
      version = bp->version;
    }
    if (version != step && version != step + 1) {
      return absl::FailedPreconditionError(absl::StrCat(
          "block ", bp->index, " of this copy is at version ", version, ", not ", step, " or ",
          step + 1, ": the copy needs a catch-up before it can apply step ", step));
    }
    if (version == step && mine[bp->local] == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("grad: block ", bp->index, " of step ", step, " is missing"));
    }
    applied = applied && version == step + 1;
  }
  if (by_local != nullptr) *by_local = std::move(mine);
  return applied;
}

absl::StatusOr<StepOutcome> JobPushes::ApplyReplicatedStep(const v1::StepRequest& req,
                                                           const ReplicatedGrads& grads,
                                                           ThreadPool& pool) {
  absl::MutexLock replica_lock(&replica_mu_);
  const uint64_t step = req.step();
  const auto& all = shard_.all_blocks();
  // Everything is checked before anything changes.
  std::vector<const std::string*> by_local;
  if (auto checked = CheckReplicatedStep(req, grads, /*behind_held=*/false, &by_local);
      !checked.ok()) {
    return checked.status();
  }
  // Spread over the pool: each block's copy and its statistics (a GradStats
  // retried here after a failover finds them).
  pool.ParallelFor(all.size(), [&](size_t local) {
    Block& b = *all[local];
    absl::MutexLock lock(&b.mu);
    if (b.version != step) return;
    b.AwaitSpeculation();  // it reads the sum this replaces
    b.AwaitSumUnpinned();
    b.acc.SetSum(reinterpret_cast<const float*>(by_local[b.local]->data()));
    step_.OnComplete(b);
  });
  v1::StepRequest plain = req;
  plain.set_ahead(false);
  return step_.Step(plain, absl::InfiniteFuture(), pool);
}

}  // namespace zerostate::server
