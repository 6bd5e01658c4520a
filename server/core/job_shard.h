// The state every part of a job (server/core/job.h) shares: the job's
// spec and placement, its shard's blocks, the tier that holds their master
// weights and moments, the staging budget their accumulators draw on, and
// the waits on a block's progress. The parts (JobPushes, JobStep,
// JobGathers, JobSnapshots) each hold a reference to the one JobShard
// their Job owns; callers reach it through Job::shard().
//
// Each block has its own mutex (no job-wide lock on the data path); a wait
// for a block's progress uses that mutex's conditions with a deadline, and
// ends early once the job shuts down (UNAVAILABLE) or is deleted
// (NOT_FOUND).
//
// Thread-safe once the tier is built (Open).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/chunk_view.h"
#include "common/job_spec.h"
#include "common/shard_map.h"
#include "server/core/block.h"
#include "server/core/job_step.h"
#include "server/core/staging_budget.h"
#include "server/core/tier/state_tier.h"
#include "server/core/tier/tier_factory.h"
#include "zerostate/v1/state_service.pb.h"

namespace zerostate::server {

// The shard's progress, as JobStatus reports it: its blocks' lowest and
// highest versions (0 on an empty shard), the blocks still waiting for a
// node's gradient of their step, and those a speculative step computed.
// Whether a job's blocks keep a copy of their weights in weight_dtype for
// Gather to serve (Block::lowp), given whether the server would give it the
// RAM (`weight_copy`, JobRegistry: where the budget has room for it). FP32
// weights never need one; the NVMe tier always does (a gather must not read
// the disk). A RAM-tier job without one converts the resident master as
// its gathers copy it out (JobGathers::Gather): the same bits the copy
// would hold, 2 B per parameter less of RAM and of the pass's writes, at
// about a third more of the gather's memory traffic (4 B read, not 2).
bool KeepsLowpCopy(const v1::JobSpec& spec, bool weight_copy);
// Whether the copy is the server's choice: bf16 or fp16 weights on the RAM tier.
bool LowpCopyOptional(const v1::JobSpec& spec);

struct ShardProgress {
  uint64_t min_version = 0;
  uint64_t max_version = 0;
  uint64_t blocks_waiting = 0;
  uint64_t blocks_speculated = 0;
};

class JobShard {
 public:
  // Allocates the blocks of shard `shard_index` of `spec`'s layout over
  // `servers`. REQUIRES: spec normalized, shard_index < servers.size().
  // Early nodes' staging buffers come from `staging` (null: unbounded).
  // `weight_copy`: KeepsLowpCopy's.
  JobShard(v1::JobSpec spec, std::vector<std::string> servers, uint32_t shard_index,
           std::shared_ptr<StagingBudget> staging, bool weight_copy = true);
  JobShard(const JobShard&) = delete;
  JobShard& operator=(const JobShard&) = delete;

  // Builds the tier spec().tier() chooses, with `tiers` (tier_factory.h).
  // Once, before any other call but the accessors. Errors: those of MakeTier.
  [[nodiscard]] absl::Status Open(const TierOptions& tiers);
  // Stores every block's initial weights (seeded, or zeros awaiting
  // JobPushes::InitWeights when spec().streamed_init()). Errors: the tier's.
  [[nodiscard]] absl::Status InitializeWeights();

  const v1::JobSpec& spec() const { return spec_; }
  const Layout& layout() const { return layout_; }
  // The blocks keep a weight_dtype copy (KeepsLowpCopy).
  bool keeps_lowp_copy() const { return keeps_lowp_copy_; }
  const std::vector<std::string>& servers() const { return servers_; }
  uint32_t shard_index() const { return shard_index_; }
  // The global indices of the shard's blocks.
  Range blocks() const { return blocks_; }
  // REQUIRES: blocks().begin <= global_index < blocks().end.
  Block& block(uint64_t global_index) const { return *blocks_data_[global_index - blocks_.begin]; }
  // REQUIRES: local < blocks().size().
  Block& local_block(uint64_t local) const { return *blocks_data_[local]; }
  const std::vector<std::unique_ptr<Block>>& all_blocks() const { return blocks_data_; }
  StateTier& tier() const { return *tier_; }
  const TierShape& tier_shape() const { return tier_->shape(); }
  // Null when the server's staging memory is unbounded.
  StagingBudget* staging() const { return staging_.get(); }
  bool shutting_down() const { return shutting_down_.load(); }

  // What JobStep uses of the shard, with the checkpoint's copy-on-write
  // version (cow_version()).
  JobStep::Env StepEnv() const {
    return JobStep::Env{&spec_, &blocks_data_, &tier_, &shutting_down_, &cow_version_};
  }

  // The version a running checkpoint writes (JobSnapshots): a step keeps
  // each block's state at it before moving the block past (copy-on-write).
  // kNoCheckpoint when none runs.
  static constexpr uint64_t kNoCheckpoint = UINT64_MAX;
  uint64_t cow_version() const { return cow_version_.load(); }
  void set_cow_version(uint64_t version) { cow_version_ = version; }

  // A chunk of one block: where its elements go.
  struct ChunkRef {
    Block* block;
    uint32_t offset;
    uint32_t count;
  };
  // Validates the placement and payload length of a chunk of `dtype`
  // (`dtype_field` names the spec's field in the error; DTYPE_INT8: the
  // length of Chunk.elems elements, common/int8_wire.h). Errors:
  // INVALID_ARGUMENT (block, dtype, length, offset).
  [[nodiscard]] absl::StatusOr<ChunkRef> CheckChunk(const ChunkView& c, v1::DType dtype,
                                                    const char* dtype_field) const;

  // Waits under b.mu until pred() holds; the error names what was awaited.
  // With `cancelled` (polled every kCancelPoll, b.mu released meanwhile)
  // CANCELLED once it is true. Errors also: UNAVAILABLE (shut down),
  // NOT_FOUND (deleted), DEADLINE_EXCEEDED.
  [[nodiscard]] absl::Status AwaitBlock(Block& b, absl::Time deadline,
                                        const std::function<bool()>& pred,
                                        const std::function<std::string()>& what,
                                        const std::function<bool()>& cancelled = nullptr) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(b.mu);
  // Under b.mu: until the block reaches `version`.
  [[nodiscard]] absl::Status AwaitVersion(Block& b, uint64_t version, absl::Time deadline) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(b.mu);
  // Under b.mu: until the block reaches `version` and no step is between
  // computing and committing it (Block::stepping), so what is read is the
  // state its version says; with `visible` (null: always), also until
  // visible(version) holds (JobStep::visible_through: the backups hold it);
  // with `cancelled` (null: never), CANCELLED naming the block and the
  // version once it says the caller went away (AwaitBlock).
  [[nodiscard]] absl::Status AwaitReadable(
      Block& b, uint64_t version, absl::Time deadline,
      const std::function<bool(uint64_t)>& visible = nullptr,
      const std::function<bool()>& cancelled = nullptr) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(b.mu);

  // The blocks' versions and progress, each block read under its mutex.
  ShardProgress Progress() const;

  // Wakes every waiter with UNAVAILABLE; later waits fail at once.
  void Shutdown();

  // The job was deleted (JobRegistry::Delete): calls still waiting on one of
  // its blocks (a gather of a version that will never come, a rank whose
  // coordinator's Step failed) end now with NOT_FOUND naming the job
  // instead of waiting out their deadline; calls after it see the same.
  void MarkDeleted();

 private:
  const v1::JobSpec spec_;
  const Layout layout_;
  const std::vector<std::string> servers_;
  const uint32_t shard_index_;
  const Range blocks_;
  const bool keeps_lowp_copy_;
  // Before blocks_data_: their accumulators give staging back on destruction.
  const std::shared_ptr<StagingBudget> staging_;
  std::vector<std::unique_ptr<Block>> blocks_data_;
  std::unique_ptr<StateTier> tier_;  // set by Open
  std::atomic<uint64_t> cow_version_{kNoCheckpoint};
  std::atomic<bool> shutting_down_{false};
  std::atomic<bool> deleted_{false};  // MarkDeleted
};

}  // namespace zerostate::server
