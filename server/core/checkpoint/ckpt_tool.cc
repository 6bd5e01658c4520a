#include "server/core/checkpoint/ckpt_tool.h"

#include <algorithm>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/core/aligned_buffer.h"
#include "server/core/checkpoint/checkpoint_files.h"
#include "server/core/checkpoint/checkpoint_reader.h"
#include "server/core/optimizer/state_convert.h"

namespace zerostate::server {
namespace fs = std::filesystem;

absl::StatusOr<std::vector<CheckpointEntry>> ListCheckpoints(const std::string& root) {
  std::error_code ec;
  if (!fs::is_directory(root, ec)) {
    return absl::NotFoundError(absl::StrCat("checkpoint root ", root, " is not a directory"));
  }
  std::vector<CheckpointEntry> out;
  for (const auto& job : fs::directory_iterator(root, ec)) {
    if (!job.is_directory()) continue;
    for (const auto& ver : fs::directory_iterator(job.path(), ec)) {
      std::string name = ver.path().filename().string();
      if (!ver.is_directory() || name.size() < 2 || name[0] != 'v') continue;
      CheckpointEntry e;
      e.job_id = job.path().filename().string();
      e.version = std::strtoull(name.c_str() + 1, nullptr, 10);
      e.dir = ver.path().string();
      auto reader = CheckpointReader::Open(e.dir);
      e.complete = reader.ok();
      if (!reader.ok()) e.problem = std::string(reader.status().message());
      out.push_back(std::move(e));
    }
  }
  std::sort(out.begin(), out.end(), [](const CheckpointEntry& a, const CheckpointEntry& b) {
    return std::tie(a.job_id, a.version) < std::tie(b.job_id, b.version);
  });
  return out;
}

absl::Status VerifyCheckpoint(const std::string& dir) {
  auto reader = CheckpointReader::Open(dir);
  if (!reader.ok()) return reader.status();
  return (*reader)->VerifyAll();
}

absl::Status InspectCheckpoint(const std::string& dir, std::ostream& out) {
  auto reader = CheckpointReader::Open(dir);
  if (!reader.ok()) return reader.status();
  const CheckpointReader& r = **reader;
  const v1::JobSpec& spec = r.spec();
  out << "job " << spec.job_id() << " version " << r.version() << "\n"
      << "optimizer " << v1::OptimizerKind_Name(spec.optimizer().kind()) << " "
      << spec.optimizer().ShortDebugString() << "\n"
      << "nodes " << spec.num_nodes() << ", grad " << DTypeName(spec.grad_dtype()) << ", weights "
      << DTypeName(spec.weight_dtype()) << ", block " << spec.block_elems() << " elements, "
      << r.layout().num_blocks() << " blocks, moments "
      << v1::MomentFormat_Name(spec.moment_format()) << "\n"
      << "written by " << r.num_shards() << " shards: "
      << absl::StrJoin(r.manifests()[0].servers(), " ") << "\n";
  for (int i = 0; i < spec.groups_size(); ++i) {
    v1::TensorGroup values = spec.groups(i);
    values.clear_tensors();
    out << "groups[" << i << "] " << values.ShortDebugString() << ", "
        << spec.groups(i).tensors_size() << " tensors\n";
  }
  for (const auto& t : r.layout().tensors) {
    out << "  " << t.name << " [" << absl::StrJoin(t.shape, ", ") << "] at " << t.offset;
    if (t.group != kNoGroup) out << " in groups[" << t.group - 1 << "]";
    out << "\n";
  }
  return absl::OkStatus();
}

namespace {

// PyTorch's names for the optimizer's state of a parameter.
std::vector<std::string> MomentNames(v1::OptimizerKind kind) {
  switch (kind) {
    case v1::OPTIMIZER_ADAMW:
    case v1::OPTIMIZER_ADAM:
      return {"exp_avg", "exp_avg_sq"};
    case v1::OPTIMIZER_SGD_MOMENTUM:
      return {"momentum_buffer"};
    default:
      return {"exp_avg"};
  }
}

// The exported arrays: the master weights (0), then each moment (1, 2).
int ExportedArrays(const CheckpointReader& r, bool with_moments) {
  return with_moments ? 1 + MomentCount(r.spec().optimizer().kind()) : 1;
}

std::string SafetensorsHeader(const CheckpointReader& r, bool with_moments) {
  std::vector<std::string> entries;
  entries.push_back(absl::StrCat("\"__metadata__\":{\"format\":\"pt\",\"job_id\":\"",
                                 r.spec().job_id(), "\",\"version\":\"", r.version(), "\"}"));
  const std::vector<std::string> moments = MomentNames(r.spec().optimizer().kind());
  uint64_t pos = 0;
  for (int array = 0; array < ExportedArrays(r, with_moments); ++array) {
    for (const auto& t : r.layout().tensors) {
      const std::string name = array == 0 ? t.name : absl::StrCat(t.name, ".", moments[array - 1]);
      uint64_t bytes = t.numel * sizeof(float);
      entries.push_back(absl::StrCat("\"", name, "\":{\"dtype\":\"F32\",\"shape\":[",
                                     absl::StrJoin(t.shape, ","), "],\"data_offsets\":[", pos, ",",
                                     pos + bytes, "]}"));
      pos += bytes;
    }
  }
  std::string header = absl::StrCat("{", absl::StrJoin(entries, ","), "}");
  header.resize((header.size() + 7) / 8 * 8, ' ');  // data starts 8-byte aligned
  return header;
}

// Appends each tensor's elements of `array` in layout order, reading each
// block once, its moments decoded to fp32 (state_convert.h).
absl::Status AppendTensors(const CheckpointReader& r, int array, AtomicFile& file) {
  const Layout& layout = r.layout();
  const StateLayout from = r.state_layout();
  const StateLayout wide{from.block_elems, from.moments, MomentFormat::kFp32};
  AlignedBuffer<float> block(r.block_floats()), fp32(wide.total_floats());
  uint64_t loaded = UINT64_MAX;
  for (const auto& t : layout.tensors) {
    for (uint64_t e = t.offset; e < t.offset + t.numel;) {
      uint64_t b = e / layout.block_elems;
      if (b != loaded) {
        if (auto s = r.ReadBlock(b, block.data()); !s.ok()) return s;
        ConvertState(from, block.data(), wide, fp32.data());
        loaded = b;
      }
      uint64_t end = std::min(t.offset + t.numel, (b + 1) * layout.block_elems);
      const float* src = fp32.data() + array * size_t{wide.block_elems} + (e - b * layout.block_elems);
      if (auto s = file.Append(src, (end - e) * sizeof(float)); !s.ok()) return s;
      e = end;
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ExportSafetensors(const std::string& dir, const std::string& path,
                               bool with_moments) {
  auto reader = CheckpointReader::Open(dir);
  if (!reader.ok()) return reader.status();
  std::string header = SafetensorsHeader(**reader, with_moments);
  uint64_t n = header.size();
  unsigned char len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(n >> (8 * i));
  auto file = AtomicFile::Create(path);
  if (!file.ok()) return file.status();
  if (auto s = (*file)->Append(len, 8); !s.ok()) return s;
  if (auto s = (*file)->Append(header.data(), header.size()); !s.ok()) return s;
  for (int array = 0; array < ExportedArrays(**reader, with_moments); ++array) {
    if (auto s = AppendTensors(**reader, array, **file); !s.ok()) return s;
  }
  return (*file)->Commit();
}

}  // namespace zerostate::server
