// A copy of a shard rewritten whole from its primary's state: the catch-up
// of a lost copy (docs/reliability.md, "Replicated shards";
// ReplicaService.Seed decodes the stream and hands each part here). The
// header (version, applied steps, trainer state) is checked at Begin,
// every block as it comes (inside the shard, once, at the header's
// version, of the tier's block size), and nothing is written until Commit
// has every block: a refused seed leaves the copy as it was.
// Not thread-safe: one Seed call drives one Reseed.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/core/job.h"
#include "server/core/job_registry.h"

namespace zerostate::server {

class Reseed {
 public:
  struct Header {
    uint32_t shard = 0;
    uint64_t version = 0;
    uint64_t applied_steps = 0;
    std::string trainer_state;  // empty: none
  };

  // A reseed of `copy` (which must outlive it) to `header`. Errors:
  // INVALID_ARGUMENT naming the field (applied steps past the version, a
  // malformed trainer state).
  [[nodiscard]] static absl::StatusOr<Reseed> Begin(Job& copy, Header header);

  // A job that a catch-up registered here (this server restarted empty)
  // holds nothing yet: every copy of it on this server is deposed
  // (JobStep::MarkDeposed) until its own seed commits, so that none serves
  // as primary meanwhile (a takeover, or a client's failover, must find
  // the copies that hold the shard's acknowledged steps).
  static void DeposeRegistered(JobRegistry& jobs, const std::string& job_id, uint32_t servers);

  // Takes block `block`'s state (global block index) at `version`.
  // Errors: INVALID_ARGUMENT naming the block and what is wrong with it.
  [[nodiscard]] absl::Status Add(uint64_t block, uint64_t version, std::string state);
  // Blocks taken so far.
  uint64_t received() const { return received_; }

  // Writes every block, the applied steps and the trainer state at the
  // header's version, and ends the copy's unacknowledged step (a deposed
  // copy's is gone). Errors: INVALID_ARGUMENT naming the first missing
  // block (nothing written); the tier's.
  // RestoreBlock's restriction holds: the primary sends a lost copy no step
  // until the seed is answered, and clients use it only after a failover,
  // which takes a restarted server only once it is at the step in progress.
  [[nodiscard]] absl::Status Commit();

 private:
  Reseed(Job& copy, Header header);

  Job* copy_;
  Header header_;
  uint64_t begin_ = 0;  // the shard's first block
  size_t block_bytes_ = 0;
  std::vector<std::string> states_;  // by local block
  std::vector<bool> seen_;
  uint64_t received_ = 0;
};

}  // namespace zerostate::server
