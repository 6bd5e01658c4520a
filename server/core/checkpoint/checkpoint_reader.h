// Reads a checkpoint written by any number of servers: checks that every
// shard's manifest is there and that they agree, then serves any block by
// its global index, verifying its checksum. Used by Restore on the server
// and by the `zerostate ckpt` tool. Thread-compatible (const methods may
// run concurrently).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/job_spec.h"
#include "server/core/optimizer/optimizer.h"
#include "zerostate/v1/checkpoint.pb.h"

namespace zerostate::server {

class CheckpointReader {
 public:
  // Opens the checkpoint in `dir` (<root>/<job_id>/v<version>).
  // Errors: NOT_FOUND (no manifest, a shard's manifest or data file
  // missing; names it), FAILED_PRECONDITION (a newer format version, shards
  // that disagree on job, version, layout, trainer state or applied steps),
  // FAILED_PRECONDITION naming spec.moment_format (a moment format this
  // build does not know), DATA_LOSS (an unparsable manifest, applied_steps over the version, a
  // data file of the wrong size, too few checksums).
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<CheckpointReader>> Open(
      const std::string& dir);

  const v1::JobSpec& spec() const { return manifests_[0].spec(); }
  uint64_t version() const { return manifests_[0].version(); }
  uint32_t num_shards() const { return manifests_.size(); }
  uint32_t arrays() const { return manifests_[0].arrays(); }
  const Layout& layout() const { return layout_; }
  const std::vector<v1::ShardManifest>& manifests() const { return manifests_; }
  // How each block's record is laid out (its moment format is the spec's).
  StateLayout state_layout() const { return StateLayoutOf(spec()); }
  size_t block_floats() const { return state_layout().total_floats(); }

  // Reads global block `block`'s record (block_floats() floats) and checks
  // its checksum. Errors: DATA_LOSS (checksum, short file; names file and
  // block), INTERNAL (I/O).
  [[nodiscard]] absl::Status ReadBlock(uint64_t block, float* out) const;

  // Reads and checks every block.
  [[nodiscard]] absl::Status VerifyAll() const;

 private:
  CheckpointReader(std::string dir, std::vector<v1::ShardManifest> manifests);

  std::string dir_;
  std::vector<v1::ShardManifest> manifests_;  // by shard index
  Layout layout_;
};

}  // namespace zerostate::server
