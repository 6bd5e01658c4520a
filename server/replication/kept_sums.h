// The sums a backup's primary sends ahead of a step (REPLICA_SUM
// frames on the data plane; replica_service.h): kept per (job, shard), one
// transfer each, until the ApplyStep of that transfer takes them, a sum of
// another transfer of the shard replaces them, or the job is deleted
// (Forget: the sums of a step that never came would otherwise stay for the
// server's life). Their bytes are the gauge zerostate_replica_kept_sum_bytes.
// Applied sums are kept idle for reuse (Recycle, Buffer) up to a bound, in
// room of the RAM budget the jobs leave (a RamLender: the JobRegistry),
// and dropped when a job needs it (LentRam); their bytes are the gauge
// zerostate_replica_recycled_sum_bytes, and count in
// zerostate_ram_used_bytes. The bound is sized from the held steps: each
// shard this server backs adds the sums of the steps a copy can have at
// once (Provide), so that once a copy holds its first step no later step
// is received into fresh pages. Thread-safe.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "server/core/lent_ram.h"
#include "server/core/metrics.h"
#include "server/core/replica_sums.h"

namespace zerostate::server {

class KeptSums final : public SumBuffers, public LentRam {
 public:
  using Sums = std::vector<std::pair<uint64_t, std::string>>;  // global block, sum

  // `metrics` (may be null) must outlive this object; `lender` (null: no
  // budget) must outlive its use here. `steps_per_shard` (>= 1): the steps
  // of one shard's sums a copy can have at once, the ones it holds
  // (--replica_held_steps) and the one it receives. Recycled sums wait for
  // reuse (Buffer) up to the room Provide made, each only once `lender`
  // lent its bytes.
  explicit KeptSums(ServerMetrics* metrics = nullptr, uint64_t steps_per_shard = 3,
                    RamLender* lender = nullptr)
      : metrics_(metrics),
        steps_per_shard_(std::max<uint64_t>(1, steps_per_shard)),
        lender_(lender) {}

  // Makes room for steps_per_shard steps of (job, shard)'s sums, `sizes`
  // being its blocks' sums' bytes (a step's): once per (job, shard), until
  // Forget(job). The bound on recycled bytes grows by those steps' bytes,
  // and buffers for all of them but the step in hand are made now (their
  // pages faulted in, PopulatedString) while the lender lends their bytes,
  // so that the next steps are received into them. Called with the first
  // step a copy holds, on that step's call: the later steps make no
  // memory. Returns the bytes made (0 when the room was there).
  uint64_t Provide(const std::string& job, uint32_t shard, const std::vector<uint64_t>& sizes)
      ABSL_LOCKS_EXCLUDED(mu_);

  // Adds block `block`'s sum to those kept for (job, shard) under
  // `transfer`; those of another transfer are dropped first. Errors:
  // INVALID_ARGUMENT when the transfer already holds the block's sum
  // (nothing changes).
  [[nodiscard]] absl::Status Keep(const std::string& job, uint32_t shard, uint64_t transfer,
                                  uint64_t block, std::string sum);
  // The sums kept for (job, shard) under `transfer` (empty when none or of
  // another transfer), no longer kept once taken.
  Sums Take(const std::string& job, uint32_t shard, uint64_t transfer);
  // Drops every sum kept for `job` (deleted) and the room Provide made for
  // it: recycled sums beyond the rest's room are freed.
  void Forget(const std::string& job);
  // The bytes of the sums kept.
  uint64_t bytes() const;

  // A buffer of `bytes` for a sum to receive: a recycled one of that size
  // where there is one, else new, its pages faulted in at once
  // (PopulatedString). Its contents are arbitrary.
  std::string Buffer(uint64_t bytes) override;
  // Keeps `sums`' memory for Buffer while the free ones stay within the
  // room Provide made and the lender lends their bytes; frees the rest.
  void Recycle(Sums sums) override;
  // The bytes of recycled sums waiting for reuse.
  uint64_t free_bytes() const;
  // LentRam: frees the recycled sums waiting for reuse.
  uint64_t DropIdle() override;

 private:
  struct Kept {
    uint64_t transfer = 0;
    Sums sums;
    uint64_t bytes = 0;
  };
  // Drops `kept`'s bytes from the total.
  void DropLocked(const Kept& kept) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void PublishLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Reserves `bytes` for a recycled sum within max_free_bytes_ and the
  // lender's room (mu_ not held while the lender is asked).
  bool ReserveFree(uint64_t bytes) ABSL_LOCKS_EXCLUDED(mu_);
  // Keeps `sum`, reserved by ReserveFree, for Buffer.
  void AddFree(std::string sum) ABSL_LOCKS_EXCLUDED(mu_);
  // Moves recycled sums into `freed` until the idle and reserved bytes fit
  // max_free_bytes_; returns their bytes (the lender's again: the caller
  // returns them once mu_ is let go).
  uint64_t TrimLocked(std::vector<std::string>& freed) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  ServerMetrics* const metrics_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::pair<std::string, uint32_t>, Kept> kept_ ABSL_GUARDED_BY(mu_);
  uint64_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
  const uint64_t steps_per_shard_;
  RamLender* const lender_;
  // The room Provide made, by (job, shard), and its sum.
  absl::flat_hash_map<std::pair<std::string, uint32_t>, uint64_t> room_ ABSL_GUARDED_BY(mu_);
  uint64_t max_free_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<std::string> free_ ABSL_GUARDED_BY(mu_);  // recycled, for Buffer
  uint64_t free_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  // free_bytes_ and the bytes reserved for sums on their way into free_.
  uint64_t reserved_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace zerostate::server
