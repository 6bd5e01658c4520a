#include "server/core/checkpoint/checkpoint_reader.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/shard_map.h"
#include "server/core/aligned_buffer.h"
#include "server/core/checkpoint/checkpoint_files.h"
#include "server/core/optimizer/optimizer.h"

namespace zerostate::server {
namespace {

// The shard count named by the first shard-<i>-of-<S>.manifest.json in dir.
absl::StatusOr<uint32_t> FindShardCount(const std::string& dir) {
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) {
    return absl::NotFoundError(absl::StrCat("checkpoint directory ", dir, ": ", std::strerror(errno)));
  }
  uint32_t count = 0;
  for (dirent* e; (e = readdir(d)) != nullptr;) {
    unsigned i = 0, s = 0;
    char tail[32] = {0};
    if (std::sscanf(e->d_name, "shard-%u-of-%u.%31s", &i, &s, tail) == 3 &&
        std::string(tail) == "manifest.json" && s > 0) {
      count = s;
      break;
    }
  }
  closedir(d);
  if (count == 0) {
    return absl::NotFoundError(absl::StrCat("no shard manifest in ", dir,
                                            " (an incomplete or missing checkpoint)"));
  }
  return count;
}

absl::Status CheckAgree(const v1::ShardManifest& first, const v1::ShardManifest& m,
                        const std::string& name) {
  std::string diff = FirstDifference(first.spec(), m.spec());
  if (!diff.empty() || m.version() != first.version() || m.arrays() != first.arrays() ||
      m.num_shards() != first.num_shards() || m.trainer_state() != first.trainer_state() ||
      m.has_applied_steps() != first.has_applied_steps() ||
      m.applied_steps() != first.applied_steps()) {
    return absl::FailedPreconditionError(absl::StrCat(
        name, " disagrees with shard 0 on the job, version, layout, trainer state or applied "
        "steps ", diff));
  }
  return absl::OkStatus();
}

// The fields every later check divides by or sizes with, before any use:
// format version, shard count, a spec as the writer stores it (normalized),
// the optimizer's number of state arrays.
absl::Status CheckHeader(const v1::ShardManifest& m, uint32_t count, const std::string& name) {
  if (m.format_version() > kCheckpointFormatVersion) {
    return absl::FailedPreconditionError(
        absl::StrCat(name, ": format version ", m.format_version(), " is newer than ",
                     kCheckpointFormatVersion, ", the newest this build reads"));
  }
  if (m.data_file() != ShardDataName(m.shard_index(), count)) {
    return absl::DataLossError(absl::StrCat(name, ": data_file '", m.data_file(), "' is not ",
                                            ShardDataName(m.shard_index(), count)));
  }
  if (m.applied_steps() > m.version()) {
    return absl::DataLossError(absl::StrCat(name, ": applied_steps ", m.applied_steps(),
                                            " is more than the version ", m.version()));
  }
  if (m.num_shards() != count) {
    return absl::DataLossError(absl::StrCat(name, ": num_shards ", m.num_shards(),
                                            " does not match its file name"));
  }
  if (auto s = CheckMomentFormat(m.spec().moment_format()); !s.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(
        name, ": spec.", s.message(), " (a format this server does not know; written by a newer "
        "build?)"));
  }
  auto spec = NormalizeJobSpec(m.spec());
  if (!spec.ok()) {
    return absl::DataLossError(absl::StrCat(name, ": job spec is invalid: ", spec.status().message()));
  }
  std::string diff = FirstDifference(*spec, m.spec());
  if (!diff.empty()) {
    return absl::DataLossError(absl::StrCat(name, ": job spec is incomplete: ", diff));
  }
  if (m.arrays() != 1u + MomentCount(spec->optimizer().kind())) {
    return absl::DataLossError(absl::StrCat(name, ": ", m.arrays(), " state arrays per block, but ",
                                            v1::OptimizerKind_Name(spec->optimizer().kind()),
                                            " keeps ", 1 + MomentCount(spec->optimizer().kind())));
  }
  return absl::OkStatus();
}

absl::Status CheckShard(const std::string& dir, const v1::ShardManifest& m, uint32_t shard,
                        const Layout& layout, const std::string& name) {
  Range blocks = ShardBlocks(layout.num_blocks(), m.num_shards(), shard);
  const uint64_t record = StateLayoutOf(m.spec()).total_floats() * sizeof(float);
  if (m.shard_index() != shard || m.first_block() != blocks.begin ||
      m.num_blocks() != blocks.size() || m.block_crc32_size() != static_cast<int>(blocks.size()) ||
      m.data_bytes() != blocks.size() * record) {
    return absl::DataLossError(absl::StrCat(name, ": shard placement or sizes do not match the "
                                            "job's layout"));
  }
  struct stat st;
  std::string data = absl::StrCat(dir, "/", m.data_file());
  if (stat(data.c_str(), &st) != 0) {
    return absl::NotFoundError(absl::StrCat("data file ", data, " is missing"));
  }
  if (static_cast<uint64_t>(st.st_size) != m.data_bytes()) {
    return absl::DataLossError(absl::StrCat("data file ", data, " has ", st.st_size,
                                            " bytes; the manifest says ", m.data_bytes()));
  }
  return absl::OkStatus();
}

}  // namespace

CheckpointReader::CheckpointReader(std::string dir, std::vector<v1::ShardManifest> manifests)
    : dir_(std::move(dir)), manifests_(std::move(manifests)), layout_(LayoutOf(spec())) {}

absl::StatusOr<std::unique_ptr<CheckpointReader>> CheckpointReader::Open(const std::string& dir) {
  auto count = FindShardCount(dir);
  if (!count.ok()) return count.status();
  std::vector<v1::ShardManifest> manifests;
  for (uint32_t i = 0; i < *count; ++i) {
    std::string name = ShardManifestName(i, *count);
    auto m = ReadManifest(absl::StrCat(dir, "/", name));
    if (!m.ok()) return m.status();
    if (auto s = CheckHeader(*m, *count, name); !s.ok()) return s;
    if (!manifests.empty()) {
      if (auto s = CheckAgree(manifests[0], *m, name); !s.ok()) return s;
    }
    manifests.push_back(*std::move(m));
  }
  Layout layout = LayoutOf(manifests[0].spec());  // checked by CheckHeader
  for (uint32_t i = 0; i < *count; ++i) {
    auto s = CheckShard(dir, manifests[i], i, layout, ShardManifestName(i, *count));
    if (!s.ok()) return s;
  }
  return std::unique_ptr<CheckpointReader>(new CheckpointReader(dir, std::move(manifests)));
}

absl::Status CheckpointReader::ReadBlock(uint64_t block, float* out) const {
  uint32_t shard = ShardOfBlock(layout_.num_blocks(), num_shards(), block);
  const v1::ShardManifest& m = manifests_[shard];
  uint64_t local = block - m.first_block();
  size_t record = block_floats() * sizeof(float);
  std::string path = absl::StrCat(dir_, "/", m.data_file());
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return absl::NotFoundError(absl::StrCat("open ", path, ": ", std::strerror(errno)));
  ssize_t n = pread(fd, out, record, static_cast<off_t>(local * record));
  int err = errno;
  close(fd);
  if (n < 0) return absl::InternalError(absl::StrCat("read ", path, ": ", std::strerror(err)));
  if (static_cast<size_t>(n) != record) {
    return absl::DataLossError(absl::StrCat("short read of block ", block, " in ", path));
  }
  if (BlockChecksum(out, record) != m.block_crc32(local)) {
    return absl::DataLossError(
        absl::StrCat("checksum mismatch in block ", block, " of ", path));
  }
  return absl::OkStatus();
}

absl::Status CheckpointReader::VerifyAll() const {
  AlignedBuffer<float> buf(block_floats());
  for (uint64_t b = 0; b < layout_.num_blocks(); ++b) {
    if (auto s = ReadBlock(b, buf.data()); !s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace zerostate::server
