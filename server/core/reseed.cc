#include "server/core/reseed.h"

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/core/aligned_buffer.h"
#include "server/core/trainer_states.h"

namespace zerostate::server {

Reseed::Reseed(Job& copy, Header header)
    : copy_(&copy),
      header_(std::move(header)),
      begin_(copy.blocks().begin),
      block_bytes_(copy.shard().tier_shape().block_floats() * sizeof(float)),
      states_(copy.blocks().size()),
      seen_(copy.blocks().size(), false) {}

absl::StatusOr<Reseed> Reseed::Begin(Job& copy, Header header) {
  if (header.applied_steps > header.version) {
    return absl::InvalidArgumentError(absl::StrCat("Seed: applied_steps ", header.applied_steps,
                                                   " exceed version ", header.version));
  }
  if (auto s = TrainerStates::Check(header.trainer_state); !s.ok()) return s;
  return Reseed(copy, std::move(header));
}

void Reseed::DeposeRegistered(JobRegistry& jobs, const std::string& job_id, uint32_t servers) {
  for (uint32_t shard = 0; shard < servers; ++shard) {
    auto copy = jobs.GetShard(job_id, shard);
    if (!copy.ok()) continue;  // no copy of it here
    (*copy)->step().MarkDeposed(absl::StrCat(
        "not primary: shard ", shard, " of job '", job_id,
        "': this server restarted and its copy has not been caught up yet; ask the shard's "
        "other copies"));
  }
}

absl::Status Reseed::Add(uint64_t block, uint64_t version, std::string state) {
  const uint64_t count = states_.size();
  if (block < begin_ || block >= begin_ + count) {
    return absl::InvalidArgumentError(absl::StrCat("Seed: block ", block, " is outside shard ",
                                                   header_.shard, " [", begin_, ", ",
                                                   begin_ + count, ")"));
  }
  const uint64_t local = block - begin_;
  if (seen_[local]) {
    return absl::InvalidArgumentError(absl::StrCat("Seed: block ", block, " came twice"));
  }
  if (version != header_.version) {
    return absl::InvalidArgumentError(absl::StrCat("Seed: block ", block, " is at version ",
                                                   version, ", not the shard's ",
                                                   header_.version));
  }
  if (state.size() != block_bytes_) {
    return absl::InvalidArgumentError(absl::StrCat("Seed: block ", block, " carries ",
                                                   state.size(), " bytes of state, not ",
                                                   block_bytes_));
  }
  seen_[local] = true;
  states_[local] = std::move(state);
  ++received_;
  return absl::OkStatus();
}

absl::Status Reseed::Commit() {
  for (uint64_t local = 0; local < states_.size(); ++local) {
    if (!seen_[local]) {
      return absl::InvalidArgumentError(absl::StrCat("Seed: block ", begin_ + local, " of shard ",
                                                     header_.shard, " is missing"));
    }
  }
  Job& copy = *copy_;
  AlignedBuffer<float> state(copy.shard().tier_shape().block_floats());
  for (uint64_t local = 0; local < states_.size(); ++local) {
    std::memcpy(state.data(), states_[local].data(), block_bytes_);
    if (auto s = copy.snapshots().RestoreBlock(local, state.data(), header_.version); !s.ok()) {
      return s;
    }
  }
  copy.snapshots().RestoreAppliedSteps(header_.version, header_.applied_steps);
  if (!header_.trainer_state.empty()) {
    if (auto s = copy.snapshots().RestoreTrainerState(header_.version, header_.trainer_state);
        !s.ok()) {
      return s;
    }
  }
  copy.step().Reseeded();  // a deposed copy's unacknowledged step is gone
  return absl::OkStatus();
}

}  // namespace zerostate::server
