// Names and file operations of the checkpoint format (see
// proto/zerostate/v1/checkpoint.proto): where a version's files live, and
// writing a file so that a crash leaves either the old file or the whole
// new one (temporary name, fsync, rename, fsync of the directory).
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "zerostate/v1/checkpoint.pb.h"

namespace zerostate::server {

inline constexpr uint32_t kCheckpointFormatVersion = 1;

// <root>/<job_id>/v<version>
std::string CheckpointDir(const std::string& root, const std::string& job_id, uint64_t version);
// shard-<i>-of-<S>.state and shard-<i>-of-<S>.manifest.json
std::string ShardDataName(uint32_t shard, uint32_t num_shards);
std::string ShardManifestName(uint32_t shard, uint32_t num_shards);

// Creates `dir` and its parents. Errors: INTERNAL naming the path and errno.
[[nodiscard]] absl::Status MakeDirs(const std::string& dir);

// An append-only file written under a temporary name and renamed into
// place by Commit(); destroyed without Commit() it removes the temporary.
class AtomicFile {
 public:
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<AtomicFile>> Create(const std::string& path);
  ~AtomicFile();
  [[nodiscard]] absl::Status Append(const void* data, size_t bytes);
  // fsync, rename onto the final path, fsync the directory.
  [[nodiscard]] absl::Status Commit();
  uint64_t size() const { return size_; }

 private:
  AtomicFile(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  std::string path_;
  int fd_;
  uint64_t size_ = 0;
  uint64_t flushed_ = 0;  // bytes whose writeback has been started
  bool committed_ = false;
};

// Writes / reads a manifest as JSON. Read errors: NOT_FOUND (no file),
// DATA_LOSS (unparsable), both naming the path.
[[nodiscard]] absl::Status WriteManifest(const std::string& path,
                                         const v1::ShardManifest& manifest);
[[nodiscard]] absl::StatusOr<v1::ShardManifest> ReadManifest(const std::string& path);

// CRC-32C of a block record (the NVMe tier's checksum too).
uint32_t BlockChecksum(const void* data, size_t bytes);

}  // namespace zerostate::server
