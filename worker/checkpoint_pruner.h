// Deletes a job's old checkpoints so that a long run with --checkpoint_every
// does not fill the checkpoint file system.
//
// The state servers write checkpoints to <root>/<job_id>/v<version>/ on a
// file system they all share (proto/zerostate/v1/checkpoint.proto); the
// coordinator prunes through the same path, so its host must mount the root
// at the same place (docs/operations.md, "Old checkpoints").
//
// Only directories that are checkpoints of this job are deleted: a real
// directory (not a symlink) named v<N> right under <root>/<job_id>/, holding
// nothing but shard files of the format (shard-<i>-of-<S>.state,
// shard-<i>-of-<S>.manifest.json, and their ".tmp" names while being
// written), with at least one manifest, every manifest naming this job and
// version N. Everything is reached through directory descriptors opened
// without following symlinks below the root, so nothing outside the root is
// ever touched.
//
// Thread safety: a free function; concurrent calls on one job race on the
// same files (each failure is reported, none is fatal).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace zerostate::worker {

struct PruneReport {
  std::vector<std::string> deleted;   // paths of the checkpoints deleted
  std::vector<std::string> problems;  // "<path>: <reason>", one per failure
};

// Call once the checkpoint of version `newest` is complete (every server
// answered OK). Keeps `newest` and the `keep` - 1 newest complete
// checkpoints of `job_id` older than it; deletes this job's other
// checkpoints older than `newest`, complete or not. Versions above `newest`
// are left alone: they belong to another timeline of the job (a run resumed
// from an older checkpoint), which is not this run's to discard.
// keep == 0 deletes nothing. Never fails: what could not be inspected or
// deleted is in `problems`, naming the path and the reason.
// REQUIRES: root is absolute.
PruneReport PruneCheckpoints(const std::string& root, const std::string& job_id, uint64_t newest,
                             uint64_t keep);

}  // namespace zerostate::worker
