// Where a backup keeps the summed gradients its shard's primary sends
// ahead of a step on the TCP data plane (REPLICA_SUM frames,
// proto/zerostate/v1/data_plane.proto), until the step's
// ReplicaService.ApplyStep of the same transfer takes them. The data
// plane's sessions call it (server/dataplane/data_session.h); the replica
// service implements it (server/replication/replica_service.h).
// Thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "zerostate/v1/data_plane.pb.h"

namespace zerostate::server {

// The memory of the sums a backup receives, reused from step to step
// (server/replication/kept_sums.h implements it), so that each step's
// sums do not map and fault in fresh pages. Thread-safe.
class SumBuffers {
 public:
  virtual ~SumBuffers() = default;
  // Memory for a sum of `bytes` about to be received: `bytes` long, its
  // contents arbitrary (the receive overwrites them), a recycled sum's
  // where one fits.
  virtual std::string Buffer(uint64_t bytes) = 0;
  // Takes back the sums of a step the copy applied, up to a bound; the
  // rest are freed.
  virtual void Recycle(std::vector<std::pair<uint64_t, std::string>> sums) = 0;
};

class ReplicaSums {
 public:
  virtual ~ReplicaSums() = default;

  // Checks a REPLICA_SUM from its meta, before its `bytes` of payload are
  // read: `token` is the job's, this server holds a copy of the shard
  // that takes steps from a primary, the transfer is not 0, the block is in
  // the shard and `bytes` is its sum's size. Errors: UNAUTHENTICATED /
  // PERMISSION_DENIED (the token), NOT_FOUND (no copy of the shard here),
  // ABORTED (this server serves the shard as primary now) and
  // FAILED_PRECONDITION (the copy needs a catch-up) as ApplyStep's,
  // INVALID_ARGUMENT naming the field.
  [[nodiscard]] virtual absl::Status Check(const std::string& token, const v1::ReplicaSum& sum,
                                           uint64_t bytes) const = 0;
  // Keeps a checked sum under its (job, shard, transfer); a sum of another
  // transfer first drops those kept for the shard. Errors:
  // INVALID_ARGUMENT when the transfer already holds the block's sum
  // (nothing changes).
  [[nodiscard]] virtual absl::Status Keep(const v1::ReplicaSum& sum, std::string bytes) = 0;
  // Where a checked sum's payload is received (SumBuffers::Buffer).
  virtual SumBuffers& buffers() = 0;
};

}  // namespace zerostate::server
