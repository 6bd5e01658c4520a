// Writes one server's shard of a job at a version: its blocks' state (as of
// that version, while training goes on: JobSnapshots::BeginCheckpoint's
// copy-on-write) into a data file, then its manifest, each renamed into
// place only when whole. A crash at any point leaves earlier checkpoints
// untouched and this one without its manifest (incomplete, never loaded).
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/core/job.h"

namespace zerostate::server {

struct CheckpointWritten {
  std::string dir;
  uint64_t bytes = 0;
};

// Errors: FAILED_PRECONDITION (version from the past), DEADLINE_EXCEEDED
// (the shard did not reach the version), RESOURCE_EXHAUSTED (disk full),
// INTERNAL (other I/O errors; names the file).
[[nodiscard]] absl::StatusOr<CheckpointWritten> WriteCheckpoint(Job& job, uint64_t version,
                                                                const std::string& root,
                                                                absl::Time deadline);

// The same for a checkpoint the caller has already begun (so that it can
// let training go on knowing copy-on-write is in force).
// REQUIRES: guard came from job.BeginCheckpoint(version).
[[nodiscard]] absl::StatusOr<CheckpointWritten> WriteCheckpoint(
    Job& job, std::unique_ptr<CheckpointGuard> guard, uint64_t version, const std::string& root,
    absl::Time deadline);

}  // namespace zerostate::server
