// What the `zerostate ckpt` command does with checkpoints on disk: list
// them, verify their checksums, describe them, and export the fp32 master
// weights to a safetensors file that PyTorch and Hugging Face load
// directly (safetensors.torch.load_file).
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace zerostate::server {

struct CheckpointEntry {
  std::string job_id;
  uint64_t version = 0;
  std::string dir;
  bool complete = false;  // every shard's manifest present and consistent
  std::string problem;    // why not, when not complete
};

// Every <root>/<job>/v<version> directory, by job then version.
// Errors: NOT_FOUND (root missing).
[[nodiscard]] absl::StatusOr<std::vector<CheckpointEntry>> ListCheckpoints(const std::string& root);

// Opens and reads every block, checking every checksum.
[[nodiscard]] absl::Status VerifyCheckpoint(const std::string& dir);

// Writes a human-readable description (job, version, optimizer, shards,
// tensors) to `out`.
[[nodiscard]] absl::Status InspectCheckpoint(const std::string& dir, std::ostream& out);

// Writes the fp32 master weights of every tensor, in layout order, to a
// safetensors file (written to a temporary name and renamed into place).
// `with_moments`: then each tensor's optimizer moments, decoded to fp32
// whatever the checkpoint's moment format, named as PyTorch's optimizer
// state names them: "<tensor>.exp_avg" and "<tensor>.exp_avg_sq" (Adam,
// AdamW), "<tensor>.momentum_buffer" (SGD), "<tensor>.exp_avg" (Lion).
// Every block's checksum is checked on the way.
[[nodiscard]] absl::Status ExportSafetensors(const std::string& dir, const std::string& path,
                                             bool with_moments = false);

}  // namespace zerostate::server
