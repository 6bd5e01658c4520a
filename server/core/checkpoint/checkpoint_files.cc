#include "server/core/checkpoint/checkpoint_files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "google/protobuf/util/json_util.h"
#include "server/core/io/crc32c.h"

namespace zerostate::server {
namespace {

absl::Status Errno(const std::string& what, const std::string& path) {
  int e = errno;
  std::string msg = absl::StrCat(what, " ", path, ": ", std::strerror(e));
  if (e == ENOSPC || e == EDQUOT) return absl::ResourceExhaustedError(msg);
  if (e == ENOENT) return absl::NotFoundError(msg);
  return absl::InternalError(msg);
}

std::string DirOf(const std::string& path) { return path.substr(0, path.rfind('/')); }

absl::Status SyncDir(const std::string& dir) {
  int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) return Errno("open directory", dir);
  int rc = fsync(fd);
  close(fd);
  if (rc != 0) return Errno("fsync directory", dir);
  return absl::OkStatus();
}

}  // namespace

std::string CheckpointDir(const std::string& root, const std::string& job_id, uint64_t version) {
  return absl::StrCat(root, "/", job_id, "/v", version);
}

std::string ShardDataName(uint32_t shard, uint32_t num_shards) {
  return absl::StrCat("shard-", shard, "-of-", num_shards, ".state");
}

std::string ShardManifestName(uint32_t shard, uint32_t num_shards) {
  return absl::StrCat("shard-", shard, "-of-", num_shards, ".manifest.json");
}

absl::Status MakeDirs(const std::string& dir) {
  for (size_t pos = 1; pos != std::string::npos;) {
    pos = dir.find('/', pos + 1);
    std::string prefix = dir.substr(0, pos);
    if (mkdir(prefix.c_str(), 0755) != 0 && errno != EEXIST) return Errno("mkdir", prefix);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<AtomicFile>> AtomicFile::Create(const std::string& path) {
  std::string tmp = path + ".tmp";
  int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Errno("create", tmp);
  return std::unique_ptr<AtomicFile>(new AtomicFile(path, fd));
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) close(fd_);
  if (!committed_) unlink((path_ + ".tmp").c_str());
}

absl::Status AtomicFile::Append(const void* data, size_t bytes) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    ssize_t n = write(fd_, p, bytes);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return Errno(absl::StrCat("write at offset ", size_, " of"), path_ + ".tmp");
    p += n;
    bytes -= static_cast<size_t>(n);
    size_ += static_cast<uint64_t>(n);
  }
  // Start writeback of each full window now, so that the disk works while
  // later blocks are snapshotted and the final fsync finds little to do.
  constexpr uint64_t kWindow = 32u << 20;
  while (size_ - flushed_ >= kWindow) {
    sync_file_range(fd_, static_cast<off_t>(flushed_), kWindow, SYNC_FILE_RANGE_WRITE);
    flushed_ += kWindow;
  }
  return absl::OkStatus();
}

absl::Status AtomicFile::Commit() {
  if (fsync(fd_) != 0) return Errno("fsync", path_ + ".tmp");
  close(fd_);
  fd_ = -1;
  if (rename((path_ + ".tmp").c_str(), path_.c_str()) != 0) return Errno("rename onto", path_);
  committed_ = true;
  return SyncDir(DirOf(path_));
}

absl::Status WriteManifest(const std::string& path, const v1::ShardManifest& manifest) {
  std::string json;
  google::protobuf::util::JsonPrintOptions opt;
  opt.add_whitespace = true;
  opt.always_print_primitive_fields = true;
  auto st = google::protobuf::util::MessageToJsonString(manifest, &json, opt);
  if (!st.ok()) return absl::InternalError(absl::StrCat("manifest to JSON: ", st.ToString()));
  auto file = AtomicFile::Create(path);
  if (!file.ok()) return file.status();
  if (auto s = (*file)->Append(json.data(), json.size()); !s.ok()) return s;
  return (*file)->Commit();
}

absl::StatusOr<v1::ShardManifest> ReadManifest(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("manifest ", path, " is missing"));
  std::stringstream buf;
  buf << in.rdbuf();
  v1::ShardManifest manifest;
  auto st = google::protobuf::util::JsonStringToMessage(buf.str(), &manifest);
  if (!st.ok()) {
    return absl::DataLossError(absl::StrCat("manifest ", path, " is not valid: ", st.ToString()));
  }
  return manifest;
}

uint32_t BlockChecksum(const void* data, size_t bytes) { return io::Crc32c(data, bytes); }

}  // namespace zerostate::server
