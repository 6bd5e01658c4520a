// The NVMe tier: every block's state in one file of a directory on a fast
// disk, read and written with O_DIRECT through io_uring (server/core/io/), with
// a RAM cache of blocks under a byte budget.
//
// Each block has two slots (A and B) in the file. A write always goes to
// the slot that is not current, and the block's current slot and sequence
// number change (in memory) only once that write has completed, so a
// failed or torn write never destroys the previous state. Every slot
// carries a CRC32C (slot_format.h) checked on each read.
//
// The file is scratch space for this process: it is created exclusively
// at Create and deleted by the destructor; durability across restarts is
// the checkpoint's job, so the data path does not fsync.
//
// Errors (all name the file, the block or offset, and the errno text):
//   a checksum or trailer mismatch, a short read  -> DATA_LOSS
//   ENOSPC / EDQUOT                               -> RESOURCE_EXHAUSTED
//   EIO and other errno values                    -> INTERNAL
//
// Thread safety: as StateTier. Load and Store of different blocks may run
// concurrently with each other and with an Update. A Load of a block that
// a concurrent Update is stepping (a gather waiting on the block's mutex
// while the step's I/O is in flight) returns the state before or after
// that block's new state was made current, never a mix.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "server/core/io/env.h"
#include "server/core/io/io_buffer.h"
#include "server/core/tier/block_cache.h"
#include "server/core/tier/slot_format.h"
#include "server/core/tier/state_tier.h"
#include "server/core/tier/tier_metrics.h"

namespace zerostate::server {

struct NvmeTierOptions {
  // Directory of the tier's file; must exist. Best on a local NVMe drive.
  std::string dir;
  // Stem of the file name: <dir>/<name>.zst, or <dir>/<name>.<k>.zst when
  // that exists already (another tier or a crashed run's leftover).
  std::string name = "shard";
  // RAM for cached blocks (whole blocks only; 0 disables the cache).
  uint64_t cache_bytes = 0;
  // Blocks in flight in Update's pipeline (reads ahead plus writes
  // behind); one bounce buffer of a block's slot size each. >= 2.
  int queue_depth = 8;
  // I/O layer; null means io::NewUringEnv(). Tests pass an io::FaultEnv.
  std::shared_ptr<io::Env> env;
  // Where I/O figures go; null means nowhere.
  std::shared_ptr<TierMetricsSink> metrics;
};

class NvmeTier final : public StateTier {
 public:
  // Creates the file (preallocated to 2 slots per block) and the pipeline's
  // bounce buffers. Errors: INVALID_ARGUMENT (options, naming the field),
  // RESOURCE_EXHAUSTED (no room for the file), INTERNAL (directory, io_uring).
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<NvmeTier>> Create(TierShape shape,
                                                                        NvmeTierOptions options);
  // The file is unlinked once open (scratch space: the filesystem takes its
  // blocks back when the process ends, however it ends).
  ~NvmeTier() override;

  // Blocks never stored read as zeros, as in the RAM tier.
  [[nodiscard]] absl::Status Load(uint64_t b, float* out) override;
  [[nodiscard]] absl::Status Store(uint64_t b, const float* in) override;
  // Streams `blocks` in order through a pipeline of queue_depth bounce
  // buffers: reads run ahead of the block being computed (on the calling
  // thread; `pool` is not used) while the blocks computed before are being
  // written. A block is committed once its write completed. After an error
  // the remaining blocks are still processed; the first error is returned.
  [[nodiscard]] absl::Status Update(const std::vector<uint64_t>& blocks, ThreadPool& pool,
                                    const std::function<bool(uint64_t b, float* state)>& compute,
                                    const std::function<void(uint64_t b)>& commit) override;
  bool in_place() const override { return false; }
  // Cache entries plus bounce buffers.
  uint64_t ram_bytes() const override;

  // The name the file had, for messages (unlinked).
  const std::string& path() const { return file_->path(); }
  bool direct() const { return file_->direct(); }
  const SlotLayout& slot_layout() const { return layout_; }
  uint64_t cache_bytes() const { return cache_.bytes(); }

 private:
  struct BlockMeta {
    int current = -1;  // slot holding the committed state; -1: never stored
    uint64_t seq = 0;  // sequence number written with it
  };
  // A queue and bounce buffer for one synchronous Load or Store.
  struct Lane {
    std::unique_ptr<io::IoQueue> queue;
    io::IoBuffer buf;
  };
  class UpdateRun;  // nvme_tier_update.cc

  NvmeTier(TierShape shape, NvmeTierOptions options);
  [[nodiscard]] absl::Status Open();
  uint64_t SlotOffset(uint64_t b, int slot) const;
  std::string Where(uint64_t b, int slot) const;
  // `s` with "block b: " before its message.
  [[nodiscard]] static absl::Status ForBlock(uint64_t b, const absl::Status& s);
  io::IoRequest Request(io::IoOp op, uint64_t b, int slot, void* buf) const;
  // Block b's metadata now (takes its lock).
  BlockMeta Meta(uint64_t b) const;
  // Checks a completed read of block b's slot `m.current` (I/O result and
  // trailer against m.seq).
  [[nodiscard]] absl::Status CheckRead(const io::IoCompletion& done, uint64_t b,
                                       const BlockMeta& m) const;
  // Seals `slot_buf` as the state after `m` and returns the write request
  // of the slot that is not m.current.
  io::IoRequest PrepareWrite(uint64_t b, const BlockMeta& m, void* slot_buf) const;
  // After that write completed: makes it block b's current state and
  // caches it. REQUIRES: block_mu_[b] held.
  void CommitLocked(uint64_t b, const io::IoRequest& write, const void* slot_buf);
  void Record(const io::IoCompletion& done, double seconds) const;
  [[nodiscard]] absl::StatusOr<Lane> TakeLane();
  void ReturnLane(Lane lane);
  // Runs `r` on the lane's queue and records it; returns its completion
  // unchecked (errors: the queue's own).
  [[nodiscard]] absl::StatusOr<io::IoCompletion> RunSync(Lane& lane, const io::IoRequest& r) const;

  const NvmeTierOptions options_;
  const SlotLayout layout_;
  std::unique_ptr<io::File> file_;
  // block_mu_[b] guards meta_[b] and orders block b's cache updates; Load
  // and Store hold it across their I/O, Update only to read or commit.
  // Lock order: a caller may hold its own lock of block b (the Job's
  // Block::mu, server/block.h) across Load and Store, so block_mu_ comes
  // after it and is never held while calling out of the tier. (A vector of
  // mutexes: the analysis cannot name them in ABSL_ACQUIRED_AFTER.)
  mutable std::vector<absl::Mutex> block_mu_;
  std::vector<BlockMeta> meta_;
  BlockCache cache_;

  mutable absl::Mutex lanes_mu_;
  std::vector<Lane> free_lanes_ ABSL_GUARDED_BY(lanes_mu_);
  uint64_t lane_bytes_ ABSL_GUARDED_BY(lanes_mu_) = 0;

  absl::Mutex update_mu_;  // one Update at a time owns the pipeline
  std::unique_ptr<io::IoQueue> update_queue_ ABSL_GUARDED_BY(update_mu_);
  std::vector<io::IoBuffer> update_bufs_;  // allocated at Create; used under update_mu_
};

}  // namespace zerostate::server
