#include "server/core/job_snapshots.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/convert.h"
#include "server/core/trainer_states.h"

namespace zerostate::server {

absl::StatusOr<std::unique_ptr<CheckpointGuard>> JobSnapshots::BeginCheckpoint(uint64_t version) {
  auto guard = std::make_unique<CheckpointGuard>(this);
  // No optimizer pass may be under way: one that had computed a block at
  // `version` before copy-on-write was in force would commit it past
  // `version` with no snapshot, and until it commits the block's version
  // passes the check below while the tier already holds the next state.
  absl::MutexLock pass_lock(&step_.pass_mu());
  shard_.set_cow_version(version);
  for (auto& bp : shard_.all_blocks()) {
    absl::MutexLock lock(&bp->mu);
    if (bp->version > version) {
      return absl::FailedPreconditionError(absl::StrCat("version: ", version,
                                                        " is from the past; block ", bp->index,
                                                        " is already at version ", bp->version));
    }
  }
  return guard;
}

CheckpointGuard::CheckpointGuard(JobSnapshots* snapshots) : snapshots_(snapshots) {
  absl::MutexLock lock(&snapshots->checkpoint_mu_);
  snapshots->checkpoint_mu_.Await(absl::Condition(
      +[](bool* running) { return !*running; }, &snapshots->checkpoint_running_));
  snapshots->checkpoint_running_ = true;
}

CheckpointGuard::~CheckpointGuard() {
  snapshots_->shard_.set_cow_version(JobShard::kNoCheckpoint);
  for (auto& bp : snapshots_->shard_.all_blocks()) {
    absl::MutexLock lock(&bp->mu);
    bp->kept.Release();
  }
  absl::MutexLock lock(&snapshots_->checkpoint_mu_);
  snapshots_->checkpoint_running_ = false;
}

absl::Status JobSnapshots::SnapshotBlock(uint64_t local, uint64_t version, absl::Time deadline,
                                         float* out) {
  Block& b = shard_.local_block(local);
  absl::MutexLock lock(&b.mu);
  if (auto st = shard_.AwaitVersion(b, version, deadline); !st.ok()) return st;
  // A snapshot exists once a step has computed the block at `version`. The
  // step commits (b.version + 1) in a later critical section, after the
  // tier has the new state (RAM: updated in place; NVMe: written), so even
  // while b.version == version the tier may hold version + 1: the snapshot
  // is the state at `version` whenever there is one.
  // A speculated block (not yet committed) keeps its state at `version` there too.
  if (b.kept.held() && b.kept.version() == version) {
    std::memcpy(out, b.kept.data(), b.kept.size() * sizeof(float));
    b.kept.Release();
    return absl::OkStatus();
  }
  if (b.version == version) return shard_.tier().Load(local, out);
  return absl::InternalError(absl::StrCat("block ", b.index, " moved past version ", version,
                                          " without a copy-on-write snapshot"));
}

absl::Status JobSnapshots::RestoreTrainerState(uint64_t version, const std::string& state) {
  if (auto s = TrainerStates::Check(state); !s.ok()) {
    return absl::DataLossError(absl::StrCat("checkpoint manifest ", s.message()));
  }
  if (!state.empty()) step_.trainer_states().Record(version, state);
  return absl::OkStatus();
}

absl::Status JobSnapshots::RestoreBlock(uint64_t local, const float* state, uint64_t version) {
  Block& b = shard_.local_block(local);
  absl::MutexLock lock(&b.mu);
  b.AwaitSpeculation();  // it reads the state and the sum this replaces
  b.AwaitSumUnpinned();  // a replicator sends the sum
  if (auto s = shard_.tier().Store(local, state); !s.ok()) return s;
  if (!b.lowp.empty()) EncodeFloats(state, b.required, shard_.spec().weight_dtype(), b.lowp.data());
  b.lowp_current = true;
  b.pending_copy = Block::PendingCopy::kNone;  // a dropped speculation's
  return b.Restore(version);  // not stepping (one writer), not kRunning: awaited above
}

}  // namespace zerostate::server
