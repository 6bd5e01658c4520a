#include "server/core/job_shard.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/convert.h"
#include "common/init.h"
#include "common/int8_wire.h"
#include "server/core/block_wait.h"

namespace zerostate::server {

bool LowpCopyOptional(const v1::JobSpec& spec) {
  return spec.weight_dtype() != v1::DTYPE_FP32 && spec.tier() == v1::TIER_RAM;
}

bool KeepsLowpCopy(const v1::JobSpec& spec, bool weight_copy) {
  return spec.weight_dtype() != v1::DTYPE_FP32 && (weight_copy || !LowpCopyOptional(spec));
}

JobShard::JobShard(v1::JobSpec spec, std::vector<std::string> servers, uint32_t shard_index,
                   std::shared_ptr<StagingBudget> staging, bool weight_copy)
    : spec_(std::move(spec)),
      layout_(LayoutOf(spec_)),
      servers_(std::move(servers)),
      shard_index_(shard_index),
      blocks_(ShardBlocks(layout_.num_blocks(), servers_.size(), shard_index)),
      keeps_lowp_copy_(KeepsLowpCopy(spec_, weight_copy)),
      staging_(std::move(staging)) {
  const uint32_t be = layout_.block_elems;
  const bool has_lowp = keeps_lowp_copy_;
  for (uint64_t b = blocks_.begin; b < blocks_.end; ++b) {
    uint64_t begin = b * be;
    auto required = static_cast<uint32_t>(std::min<uint64_t>(be, layout_.used_elems - begin));
    blocks_data_.push_back(std::make_unique<Block>(
        b, b - blocks_.begin, begin, required, be, spec_.num_nodes(), has_lowp, staging_.get(),
        TensorElements(layout_, begin, begin + required),
        GroupRuns(layout_, begin, begin + required), spec_.speculative_step(),
        LandsGradientAsBf16(spec_)));
  }
}

absl::Status JobShard::Open(const TierOptions& tiers) {
  const StateLayout state = StateLayoutOf(spec_);
  TierShape shape{blocks_.size(), state.block_elems, 1 + state.moments, state.format};
  std::string name = absl::StrCat(spec_.job_id(), ".shard", shard_index_, "of", servers_.size());
  auto tier = MakeTier(spec_.tier(), shape, spec_.job_id(), name, tiers);
  if (!tier.ok()) return tier.status();
  tier_ = *std::move(tier);
  return absl::OkStatus();
}

absl::Status JobShard::InitializeWeights() {
  AlignedBuffer<float> state(tier_->shape().block_floats());
  for (auto& bp : blocks_data_) {
    Block& b = *bp;
    absl::MutexLock lock(&b.mu);
    std::fill(state.data(), state.data() + state.size(), 0.0f);
    if (!spec_.streamed_init()) {  // else zeros until InitWeights
      FillInitialWeights(layout_, spec_.seed(), Range{b.flat_begin, b.flat_begin + b.required},
                         state.data());
    }
    if (auto s = tier_->Store(b.local, state.data()); !s.ok()) return s;
    if (!b.lowp.empty()) {
      EncodeFloats(state.data(), b.required, spec_.weight_dtype(), b.lowp.data());
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<JobShard::ChunkRef> JobShard::CheckChunk(const ChunkView& c, v1::DType dtype,
                                                        const char* dtype_field) const {
  const ChunkFields& f = c.fields;
  if (f.block < blocks_.begin || f.block >= blocks_.end) {
    return absl::InvalidArgumentError(absl::StrCat("block: ", f.block,
                                                   " is not in this server's shard [",
                                                   blocks_.begin, ", ", blocks_.end, ")"));
  }
  if (f.dtype != dtype) {
    return absl::InvalidArgumentError(absl::StrCat("dtype: chunk is ", DTypeName(f.dtype),
                                                   " but the job's ", dtype_field, " is ",
                                                   DTypeName(dtype)));
  }
  size_t esize = DTypeSize(dtype);
  uint64_t count = f.elems;
  if (dtype == v1::DTYPE_INT8) {
    if (auto s = CheckInt8ChunkLength(f.elems, c.data_bytes); !s.ok()) return s;
  } else if (c.data_bytes == 0 || c.data_bytes % esize != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "data: length ", c.data_bytes, " is not a positive multiple of ", esize, " bytes"));
  } else {
    count = c.data_bytes / esize;
  }
  if (f.offset + count > layout_.block_elems) {
    return absl::InvalidArgumentError(absl::StrCat("offset: elements [", f.offset, ", ",
                                                   f.offset + count, ") do not fit in a block of ",
                                                   layout_.block_elems));
  }
  return ChunkRef{&block(f.block), f.offset, static_cast<uint32_t>(count)};
}

absl::Status JobShard::AwaitBlock(Block& b, absl::Time deadline, const std::function<bool()>& pred,
                                  const std::function<std::string()>& what,
                                  const std::function<bool()>& cancelled) const {
  std::function<bool()> settled = [&] { return deleted_.load() || pred(); };
  absl::Status s = server::AwaitBlock(b, shutting_down_, deadline, settled, what, cancelled);
  if (s.ok() && deleted_.load()) {
    return absl::NotFoundError(absl::StrCat(
        "job ", spec_.job_id(), " was deleted while a call waited on its block ", b.index));
  }
  return s;
}

absl::Status JobShard::AwaitVersion(Block& b, uint64_t version, absl::Time deadline) const {
  return AwaitBlock(
      b, deadline, [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(b.mu) { return b.version >= version; },
      [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(b.mu) {
        return absl::StrCat("block ", b.index, " is at version ", b.version,
                            " and did not reach version ", version, " in time");
      });
}

absl::Status JobShard::AwaitReadable(Block& b, uint64_t version, absl::Time deadline,
                                     const std::function<bool(uint64_t)>& visible,
                                     const std::function<bool()>& cancelled) const {
  return AwaitBlock(
      b, deadline,
      [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(b.mu) {
        return b.version >= version && !b.stepping() && (visible == nullptr || visible(version));
      },
      [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(b.mu) {
        return absl::StrCat("block ", b.index, " is at version ", b.version,
                            b.stepping() ? " (a step in progress)" : "",
                            " and did not reach version ", version, " in time");
      },
      cancelled);
}

ShardProgress JobShard::Progress() const {
  ShardProgress p;
  uint64_t lo = UINT64_MAX;
  for (const auto& bp : blocks_data_) {
    absl::MutexLock lock(&bp->mu);
    lo = std::min(lo, bp->version);
    p.max_version = std::max(p.max_version, bp->version);
    if (!bp->acc.complete()) ++p.blocks_waiting;
    if (bp->speculation() == Block::Speculation::kDone) ++p.blocks_speculated;
  }
  p.min_version = blocks_data_.empty() ? 0 : lo;
  return p;
}

void JobShard::MarkDeleted() {
  deleted_ = true;
  // Releasing each block's mutex makes absl re-evaluate its waiters' conditions.
  for (auto& bp : blocks_data_) absl::MutexLock lock(&bp->mu);
}

void JobShard::Shutdown() {
  shutting_down_ = true;
  // Releasing each block's mutex makes absl re-evaluate its waiters' conditions.
  for (auto& bp : blocks_data_) absl::MutexLock lock(&bp->mu);
  if (staging_ != nullptr) staging_->Notify();  // pushes waiting for staging
}

}  // namespace zerostate::server
