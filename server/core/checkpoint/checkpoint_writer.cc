#include "server/core/checkpoint/checkpoint_writer.h"

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/field_limits.h"
#include "server/core/aligned_buffer.h"
#include "server/core/checkpoint/checkpoint_files.h"

namespace zerostate::server {
namespace {

v1::ShardManifest ManifestOf(const Job& job, uint64_t version) {
  v1::ShardManifest m;
  m.set_format_version(kCheckpointFormatVersion);
  *m.mutable_spec() = job.spec();
  m.set_version(version);
  m.set_applied_steps(job.step().applied_steps().Before(version));
  m.set_num_shards(job.servers().size());
  m.set_shard_index(job.shard_index());
  for (const auto& s : job.servers()) m.add_servers(s);
  m.set_first_block(job.blocks().begin);
  m.set_num_blocks(job.blocks().size());
  m.set_arrays(job.shard().tier_shape().arrays);
  m.set_data_file(ShardDataName(job.shard_index(), job.servers().size()));
  m.set_created_at(absl::FormatTime(absl::RFC3339_sec, absl::Now(), absl::UTCTimeZone()));
  if (auto state = job.step().trainer_states().Find(version); state.has_value()) {
    m.set_trainer_state(*std::move(state));
  }
  return m;
}

}  // namespace

absl::StatusOr<CheckpointWritten> WriteCheckpoint(Job& job, uint64_t version,
                                                  const std::string& root, absl::Time deadline) {
  if (auto s = CheckLength("root", root, kMaxPathBytes); !s.ok()) return s;
  if (root.empty() || root[0] != '/') {
    return absl::InvalidArgumentError(absl::StrCat("root: '", root, "' is not an absolute path"));
  }
  auto guard = job.snapshots().BeginCheckpoint(version);
  if (!guard.ok()) return guard.status();
  return WriteCheckpoint(job, *std::move(guard), version, root, deadline);
}

absl::StatusOr<CheckpointWritten> WriteCheckpoint(Job& job, std::unique_ptr<CheckpointGuard> guard,
                                                  uint64_t version, const std::string& root,
                                                  absl::Time deadline) {
  if (auto s = CheckLength("root", root, kMaxPathBytes); !s.ok()) return s;
  if (root.empty() || root[0] != '/') {
    return absl::InvalidArgumentError(absl::StrCat("root: '", root, "' is not an absolute path"));
  }
  CheckpointWritten out;
  out.dir = CheckpointDir(root, job.spec().job_id(), version);
  if (auto s = MakeDirs(out.dir); !s.ok()) return s;
  v1::ShardManifest manifest = ManifestOf(job, version);
  auto data = AtomicFile::Create(absl::StrCat(out.dir, "/", manifest.data_file()));
  if (!data.ok()) return data.status();
  AlignedBuffer<float> state(job.shard().tier_shape().block_floats());
  const size_t record = state.size() * sizeof(float);
  for (uint64_t local = 0; local < job.blocks().size(); ++local) {
    if (auto s = job.snapshots().SnapshotBlock(local, version, deadline, state.data()); !s.ok()) {
      return s;
    }
    manifest.add_block_crc32(BlockChecksum(state.data(), record));
    if (auto s = (*data)->Append(state.data(), record); !s.ok()) return s;
  }
  manifest.set_data_bytes((*data)->size());
  if (auto s = (*data)->Commit(); !s.ok()) return s;
  std::string name = ShardManifestName(job.shard_index(), job.servers().size());
  if (auto s = WriteManifest(absl::StrCat(out.dir, "/", name), manifest); !s.ok()) return s;
  out.bytes = manifest.data_bytes();
  return out;
}

}  // namespace zerostate::server
