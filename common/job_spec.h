// A job's spec, validated and with defaults filled in, and the flat layout it
// implies. Shared by server (which enforces it) and client (which checks
// before anything is sent), so both give the same error for the same spec.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/field_limits.h"
#include "zerostate/v1/state_service.pb.h"

namespace zerostate {

// v1 here is the generated ::zerostate::v1 itself (no alias: clang rejects an
// alias that redeclares a namespace of the same name).

inline constexpr uint32_t kDefaultBlockElems = 262144;  // 1 MiB of fp32
inline constexpr uint32_t kMaxBlockElems = 1u << 24;
inline constexpr uint32_t kTensorAlignElems = 64;       // 256 bytes: a cache line pair
inline constexpr size_t kMaxTensors = 1 << 20;
inline constexpr uint64_t kMaxTotalElems = 1ull << 40;

// Where one tensor lives in the job's flat fp32 space.
struct TensorSlot {
  std::string name;
  std::vector<int64_t> shape;
  uint64_t offset = 0;  // multiple of kTensorAlignElems
  uint64_t numel = 0;
  v1::InitKind init = v1::INIT_DEFAULT;
  float init_scale = 0;
  uint32_t group = 0;  // kNoGroup, or i + 1 for a tensor in spec.groups(i)
};

// TensorSlot::group of a tensor in no group: it steps with the job's optimizer.
inline constexpr uint32_t kNoGroup = 0;

// The flat space: tensors end to end, each aligned, the total padded to a
// whole number of blocks. Padding elements are zero and never change
// (their gradient is zero; every optimizer here maps 0 to 0 for them).
struct Layout {
  std::vector<TensorSlot> tensors;
  uint32_t block_elems = 0;
  uint64_t used_elems = 0;   // end of the last tensor
  uint64_t total_elems = 0;  // padded to a multiple of block_elems
  uint64_t num_blocks() const { return total_elems / block_elems; }
};

// Checks every field of `spec` and returns a copy with defaults filled in
// (block size, optimizer hyper-parameters, and in each of `groups` every
// value it leaves unset: weight_decay and, for ADAMW/ADAM/LION, the betas
// from the optimizer, lr_scale 1). Normalizing a normalized spec changes
// nothing. Errors are INVALID_ARGUMENT and name the field, e.g.
// "tensors[3].shape[1]: dimension 0 must be >= 1" or
// "groups[1].tensors[0]: no tensor is named 'bias'".
[[nodiscard]] absl::StatusOr<v1::JobSpec> NormalizeJobSpec(const v1::JobSpec& spec);

// OK when `format` is a MomentFormat this build knows; else
// INVALID_ARGUMENT naming moment_format and the value. Every optimizer
// takes every format.
[[nodiscard]] absl::Status CheckMomentFormat(int format);

// Whether the spec's backups fit a cluster of `num_servers` (each shard's
// copies are on distinct servers): INVALID_ARGUMENT naming `replicas` when
// replicas >= num_servers.
[[nodiscard]] absl::Status CheckReplicas(const v1::JobSpec& spec, size_t num_servers);

// The layout of a normalized spec. REQUIRES: spec came from NormalizeJobSpec.
Layout LayoutOf(const v1::JobSpec& spec);

// The elements of the flat range [begin, end) that belong to a tensor (not
// to the alignment padding between tensors or after the last), as sorted,
// disjoint [first, last) intervals relative to `begin`.
// REQUIRES: end - begin < 2^32.
std::vector<std::pair<uint32_t, uint32_t>> TensorElements(const Layout& layout, uint64_t begin,
                                                          uint64_t end);

// A run of a block's elements [begin, end), relative to the block, whose
// tensors are all in one group (TensorSlot::group).
struct GroupRun {
  uint32_t begin = 0;
  uint32_t end = 0;
  uint32_t group = kNoGroup;
  bool operator==(const GroupRun& o) const {
    return begin == o.begin && end == o.end && group == o.group;
  }
};

// The flat range [begin, end) cut where the tensor group changes: sorted
// runs that cover [0, end - begin) with no gap, adjacent runs in different
// groups. Padding joins the run before it (leading padding the first run),
// which is harmless since every optimizer maps zero state to zero. A cut
// falls on a tensor's offset, so when `begin` is a multiple of
// kTensorAlignElems every run but the first begins on one too. A range of
// one group (the common case) is one run. REQUIRES: end - begin < 2^32.
std::vector<GroupRun> GroupRuns(const Layout& layout, uint64_t begin, uint64_t end);

// Names the first field where two normalized specs differ, or "" if equal.
std::string FirstDifference(const v1::JobSpec& a, const v1::JobSpec& b);

// Checks a job id: [A-Za-z0-9._-]{1,128}. INVALID_ARGUMENT naming the first
// bad character escaped (a non-ASCII one whole) and its byte offset; an id
// too long is not echoed.
[[nodiscard]] absl::Status ValidateJobId(const std::string& job_id);

// Bytes of one element of `dtype` (DTYPE_INT8: 1, the code; a chunk adds
// its scales, common/int8_wire.h); 0 for DTYPE_UNSPECIFIED or unknown values.
size_t DTypeSize(v1::DType dtype);

// "fp32", "bf16", "fp16", "int8" or "unspecified".
const char* DTypeName(v1::DType dtype);

}  // namespace zerostate
