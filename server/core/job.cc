#include "server/core/job.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/convert.h"
#include "common/init.h"
#include "server/core/block_wait.h"

namespace zerostate::server {
namespace {

bool HasLowp(const v1::JobSpec& spec) { return spec.weight_dtype() != v1::DTYPE_FP32; }

}  // namespace

Job::Job(v1::JobSpec spec, std::vector<std::string> servers, uint32_t shard_index,
         std::shared_ptr<StagingBudget> staging)
    : spec_(std::move(spec)),
      layout_(LayoutOf(spec_)),
      servers_(std::move(servers)),
      shard_index_(shard_index),
      blocks_(ShardBlocks(layout_.num_blocks(), servers_.size(), shard_index)),
      staging_(std::move(staging)) {
  const uint32_t be = layout_.block_elems;
  for (uint64_t b = blocks_.begin; b < blocks_.end; ++b) {
    uint64_t begin = b * be;
    auto required = static_cast<uint32_t>(std::min<uint64_t>(be, layout_.used_elems - begin));
    blocks_data_.push_back(std::make_unique<Block>(
        b, b - blocks_.begin, begin, required, be, spec_.num_nodes(), HasLowp(spec_),
        staging_.get(), TensorElements(layout_, begin, begin + required),
        GroupRuns(layout_, begin, begin + required), spec_.speculative_step()));
  }
}

absl::StatusOr<std::unique_ptr<Job>> Job::Create(v1::JobSpec spec,
                                                 std::vector<std::string> servers,
                                                 uint32_t shard_index, bool initialize,
                                                 const TierOptions& tiers,
                                                 std::shared_ptr<StagingBudget> staging) {
  std::unique_ptr<Job> job(
      new Job(std::move(spec), std::move(servers), shard_index, std::move(staging)));
  if (auto s = job->CreateTier(tiers); !s.ok()) return s;
  if (!initialize) return job;
  if (auto s = job->InitializeWeights(); !s.ok()) return s;
  return job;
}

absl::Status Job::CreateTier(const TierOptions& tiers) {
  TierShape shape{blocks_.size(), layout_.block_elems, 1 + MomentCount(spec_.optimizer().kind())};
  std::string name = absl::StrCat(spec_.job_id(), ".shard", shard_index_, "of", servers_.size());
  auto tier = MakeTier(spec_.tier(), shape, spec_.job_id(), name, tiers);
  if (!tier.ok()) return tier.status();
  tier_ = *std::move(tier);
  state_bytes_ = EstimateBytes(spec_, blocks_.size(), tiers);
  return absl::OkStatus();
}

uint64_t Job::EstimateBytes(const v1::JobSpec& spec, uint64_t shard_blocks,
                            const TierOptions& tiers) {
  const uint64_t elems = shard_blocks * spec.block_elems();
  const uint64_t state = elems * 4 * (1 + MomentCount(spec.optimizer().kind()));
  const uint64_t in_ram = elems * (4 /* gradient sum */ + (HasLowp(spec) ? 2 : 0));
  // The spec itself (tensor names above all): the job keeps it, its layout
  // a copy of every name, its info and metrics labels another.
  const uint64_t spec_bytes = 3 * spec.ByteSizeLong();
  // Speculation keeps each stepped block's previous state until its Step,
  // and the next low-precision copy aside (server/core/job_step.h).
  const uint64_t speculation =
      spec.speculative_step() ? state + elems * (HasLowp(spec) ? 2 : 0) : 0;
  return in_ram + spec_bytes + speculation + TierRamBytes(spec.tier(), state, tiers);
}


absl::Status Job::InitializeWeights() {
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
    if (!b.lowp.empty()) EncodeFloats(state.data(), b.required, spec_.weight_dtype(), b.lowp.data());
  }
  return absl::OkStatus();
}

absl::StatusOr<Job::ChunkRef> Job::CheckChunk(const ChunkView& c, v1::DType dtype,
                                              const char* dtype_field) const {
  const ChunkFields& f = c.fields;
  if (f.block < blocks_.begin || f.block >= blocks_.end) {
    return absl::InvalidArgumentError(absl::StrCat("block: ", f.block,
                                                   " is not in this server's shard [",
                                                   blocks_.begin, ", ", blocks_.end, ")"));
  }
  if (f.dtype != dtype) {
    return absl::InvalidArgumentError(
        absl::StrCat("dtype: chunk is ", DTypeName(f.dtype), " but the job's ", dtype_field,
                     " is ", DTypeName(dtype)));
  }
  size_t esize = DTypeSize(dtype);
  if (c.data_bytes == 0 || c.data_bytes % esize != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "data: length ", c.data_bytes, " is not a positive multiple of ", esize, " bytes"));
  }
  uint64_t count = c.data_bytes / esize;
  if (f.offset + count > layout_.block_elems) {
    return absl::InvalidArgumentError(
        absl::StrCat("offset: elements [", f.offset, ", ", f.offset + count,
                     ") do not fit in a block of ", layout_.block_elems));
  }
  return ChunkRef{&block(f.block), f.offset, static_cast<uint32_t>(count)};
}

namespace {

// Marks Push's "no staging memory in time" error (Job::IsStagingWait).
constexpr char kStagingWaitPayload[] = "zerostate.server/staging_wait";

}  // namespace

bool Job::IsStagingWait(const absl::Status& status) {
  return status.GetPayload(kStagingWaitPayload).has_value();
}

absl::StatusOr<Job::ChunkRef> Job::CheckPush(const ChunkView& c) const {
  auto ref = CheckChunk(c, spec_.grad_dtype(), "grad_dtype");
  if (!ref.ok()) return ref.status();
  if (c.fields.node >= spec_.num_nodes()) {
    return absl::InvalidArgumentError(
        absl::StrCat("node: ", c.fields.node, " is not below num_nodes ", spec_.num_nodes()));
  }
  return ref;
}

absl::StatusOr<Job::ChunkRef> Job::CheckPush(const ChunkFields& fields, size_t data_bytes) const {
  ChunkView view;
  view.fields = fields;
  view.data_bytes = data_bytes;
  return CheckPush(view);
}

absl::StatusOr<Job::PushOutcome> Job::Push(const ChunkView& c, absl::Time deadline) {
  auto ref = CheckPush(c);
  if (!ref.ok()) return ref.status();
  const ChunkFields& f = c.fields;
  Block& b = *ref->block;
  // Tries under the block's mutex; a piece that needs staging memory the
  // budget does not have waits for a change without the mutex (a wait under
  // it would stop the very pushes that free memory or move the head), then
  // tries again from the start: meanwhile the step may have been applied,
  // or the node become the head and need no staging at all.
  while (true) {
    uint64_t seen = 0;
    {
      absl::MutexLock lock(&b.mu);
      if (f.step < b.version) return PushOutcome::kDuplicate;  // that step is applied
      if (f.step > b.version) {
        return absl::FailedPreconditionError(
            absl::StrCat("step: ", f.step, " is too far ahead; block ", b.index,
                         " is at version ", b.version));
      }
      // A retry racing its first attempt, whose payload is still arriving
      // in place on another connection (ClaimPush): waits for that attempt
      // to end (committed: this is a duplicate; given back: this applies).
      // Past the deadline Add says UNAVAILABLE, which clients retry.
      if (b.acc.Claimed(f.node, ref->offset, ref->count)) {
        std::function<bool()> ended = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(b.mu) {
          return shutting_down_.load() || !b.acc.Claimed(f.node, ref->offset, ref->count);
        };
        b.mu.AwaitWithDeadline(absl::Condition(&ended), deadline);
        if (shutting_down_.load()) return absl::UnavailableError("server is shutting down");
        if (f.step != b.version) continue;  // the step moved on meanwhile: judged afresh
      }
      // Read before trying, under the mutex: a change after it is seen.
      if (staging_ != nullptr) seen = staging_->generation();
      auto added = b.acc.Add(f.node, ref->offset, ref->count, c.data, f.dtype);
      if (!added.ok()) return added.status();
      if (*added == GradientAccumulator::Outcome::kApplied) {
        step_.OnComplete(b);
        return PushOutcome::kApplied;
      }
      if (*added == GradientAccumulator::Outcome::kDuplicate) return PushOutcome::kDuplicate;
    }
    // kNoStaging (only with a budget). The head node's pieces never need
    // staging, so this wait never holds up the node whose pushes complete
    // the block, and with it the budget's release.
    const bool changed = staging_->AwaitChange(seen, deadline);
    if (shutting_down_.load()) return absl::UnavailableError("server is shutting down");
    if (!changed) {
      absl::Status s = staging_->Exhausted(
          absl::StrCat("step ", f.step, ": node ", f.node, "'s chunk [", ref->offset, ", ",
                       ref->offset + ref->count, ") of block ", b.index),
          uint64_t{layout_.block_elems} * sizeof(float));
      s.SetPayload(kStagingWaitPayload, absl::Cord());
      return s;
    }
  }
}

void Job::AwaitStagingRoom(const ChunkFields& f, size_t data_bytes, absl::Time deadline) {
  if (staging_ == nullptr) return;
  auto ref = CheckPush(f, data_bytes);
  if (!ref.ok()) return;
  Block& b = *ref->block;
  const uint64_t bytes = uint64_t{layout_.block_elems} * sizeof(float);
  while (!shutting_down_.load()) {
    uint64_t seen = 0;
    {
      absl::MutexLock lock(&b.mu);
      if (f.step != b.version || !b.acc.NeedsStaging(f.node, ref->offset, ref->count) ||
          staging_->free() >= bytes) {
        return;
      }
      seen = staging_->generation();
    }
    if (!staging_->AwaitChange(seen, deadline)) return;
  }
}

void Job::ReleaseStaging() {
  for (auto& bp : blocks_data_) {
    absl::MutexLock lock(&bp->mu);
    bp->acc.Reset();
  }
}

Job::PushClaim Job::ClaimPush(const ChunkFields& f, size_t data_bytes) {
  PushClaim claim;
  auto ref = CheckPush(f, data_bytes);
  if (!ref.ok()) return claim;
  Block& b = *ref->block;
  absl::MutexLock lock(&b.mu);
  if (f.step != b.version) return claim;
  float* into = b.acc.Claim(f.node, ref->offset, ref->count, f.dtype);
  if (into == nullptr) return claim;
  claim.job_ = this;
  claim.block_ = &b;
  claim.offset_ = ref->offset;
  claim.count_ = ref->count;
  claim.epoch_ = b.acc.epoch();
  claim.data_ = into;
  return claim;
}

Job::PushClaim& Job::PushClaim::operator=(PushClaim&& other) noexcept {
  Release();
  job_ = other.job_;
  block_ = std::exchange(other.block_, nullptr);
  offset_ = other.offset_;
  count_ = other.count_;
  epoch_ = other.epoch_;
  data_ = std::exchange(other.data_, nullptr);
  return *this;
}

absl::StatusOr<Job::PushOutcome> Job::PushClaim::Commit() {
  Block* b = std::exchange(block_, nullptr);
  absl::MutexLock lock(&b->mu);
  if (!b->acc.Commit(offset_, count_, epoch_)) {
    return absl::UnavailableError(absl::StrCat("block ", b->index,
                                               " was restored while the chunk arrived; push it again"));
  }
  job_->step_.OnComplete(*b);
  return PushOutcome::kApplied;
}

void Job::PushClaim::Release() {
  if (block_ == nullptr) return;
  absl::MutexLock lock(&block_->mu);
  block_->acc.Abandon(offset_, count_, epoch_);
  block_ = nullptr;
}

absl::Status Job::InitWeights(const ChunkView& c) {
  if (!spec_.streamed_init()) {
    return absl::FailedPreconditionError(
        "job was registered with seeded weights (streamed_init is false)");
  }
  auto ref = CheckChunk(c, v1::DTYPE_FP32, "initial weights dtype");
  if (!ref.ok()) return ref.status();
  Block& b = *ref->block;
  absl::MutexLock lock(&b.mu);
  if (b.version != 0 || b.stepping) {
    return absl::FailedPreconditionError(absl::StrCat(
        "block ", b.index, " is at version ", b.version, b.stepping ? " (being stepped)" : "",
        "; initial weights can be streamed only before the first step"));
  }
  AlignedBuffer<float> state(tier_->shape().block_floats());
  if (auto s = tier_->Load(b.local, state.data()); !s.ok()) return s;
  CopyChunkData(c, v1::DTYPE_FP32, v1::DTYPE_FP32, state.data() + ref->offset);
  if (auto s = tier_->Store(b.local, state.data()); !s.ok()) return s;
  if (!b.lowp.empty()) {
    EncodeFloats(state.data() + ref->offset, ref->count, spec_.weight_dtype(),
                 b.lowp.data() + ref->offset);
  }
  return absl::OkStatus();
}

absl::Status Job::AwaitBlock(Block& b, absl::Time deadline, const std::function<bool()>& pred,
                             const std::function<std::string()>& what,
                             const std::function<bool()>& cancelled) const {
  std::function<bool()> settled = [&] { return deleted_.load() || pred(); };
  absl::Status s = server::AwaitBlock(b, shutting_down_, deadline, settled, what, cancelled);
  if (s.ok() && deleted_.load()) {
    return absl::NotFoundError(absl::StrCat("job ", spec_.job_id(),
                                            " was deleted while a call waited on its block ",
                                            b.index));
  }
  return s;
}

absl::Status Job::AwaitVersion(Block& b, uint64_t version, absl::Time deadline) const {
  return AwaitBlock(
      b, deadline, [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(b.mu) { return b.version >= version; },
      [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(b.mu) {
        return absl::StrCat("block ", b.index, " is at version ", b.version,
                            " and did not reach version ", version, " in time");
      });
}

absl::Status Job::AwaitReadable(Block& b, uint64_t version, absl::Time deadline,
                                bool acknowledged) const {
  return AwaitBlock(
      b, deadline,
      [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(b.mu) {
        return b.version >= version && !b.stepping &&
               (!acknowledged || version <= step_.visible_through());
      },
      [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(b.mu) {
        return absl::StrCat("block ", b.index, " is at version ", b.version,
                            b.stepping ? " (a step in progress)" : "",
                            " and did not reach version ", version, " in time");
      });
}

absl::StatusOr<Job::StepOutcome> Job::ApplyReplicatedStep(
    const v1::StepRequest& req, const std::vector<std::pair<uint64_t, std::string>>& grads,
    ThreadPool& pool) {
  absl::MutexLock replica_lock(&replica_mu_);
  const uint64_t step = req.step();
  // Everything is checked before anything changes.
  std::vector<const std::string*> by_local(blocks_data_.size(), nullptr);
  for (const auto& [index, grad] : grads) {
    if (index < blocks_.begin || index >= blocks_.end) {
      return absl::InvalidArgumentError(absl::StrCat("block: ", index, " is not in shard ",
                                                     shard_index_, " [", blocks_.begin, ", ",
                                                     blocks_.end, ")"));
    }
    const Block& b = block(index);
    if (grad.size() != size_t{b.required} * sizeof(float) || by_local[b.local] != nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("grad: block ", index, " has ", grad.size(),
                                                     " bytes (or came twice); it needs ",
                                                     size_t{b.required} * sizeof(float)));
    }
    by_local[b.local] = &grad;
  }
  for (auto& bp : blocks_data_) {
    absl::MutexLock lock(&bp->mu);
    if (bp->version != step && bp->version != step + 1) {
      return absl::FailedPreconditionError(absl::StrCat(
          "block ", bp->index, " of this copy is at version ", bp->version, ", not ", step, " or ",
          step + 1, ": the copy needs a catch-up before it can apply step ", step));
    }
    if (bp->version == step && by_local[bp->local] == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("grad: block ", bp->index, " of step ", step, " is missing"));
    }
  }
  for (auto& bp : blocks_data_) {
    Block& b = *bp;
    absl::MutexLock lock(&b.mu);
    if (b.version != step) continue;
    b.acc.SetSum(reinterpret_cast<const float*>(by_local[b.local]->data()));
    step_.OnComplete(b);  // its statistics: a GradStats retried here after a failover finds them
  }
  v1::StepRequest plain = req;
  plain.set_ahead(false);
  return Step(plain, absl::InfiniteFuture(), pool);
}

absl::Status Job::ReadBlock(uint64_t local, uint64_t min_version, absl::Time deadline,
                            float* out, uint64_t* version) {
  Block& b = *blocks_data_[local];
  absl::MutexLock lock(&b.mu);
  if (auto st = AwaitReadable(b, min_version, deadline); !st.ok()) return st;
  *version = b.version;
  return tier_->Load(local, out);
}

absl::Status Job::ReadBlockAt(uint64_t local, uint64_t version, float* out) {
  Block& b = *blocks_data_[local];
  absl::MutexLock lock(&b.mu);
  if (b.version != version) {
    return absl::FailedPreconditionError(absl::StrCat("block ", b.index, " is at version ",
                                                      b.version, ", not ", version));
  }
  if (b.kept.held() && b.kept.version() == version) {
    std::memcpy(out, b.kept.data(), b.kept.size() * sizeof(float));
    return absl::OkStatus();
  }
  return tier_->Load(local, out);
}

absl::StatusOr<Range> Job::CheckGather(const v1::GatherRequest& req) const {
  if (req.dtype() != v1::DTYPE_FP32 && req.dtype() != spec_.weight_dtype()) {
    return absl::InvalidArgumentError(
        absl::StrCat("dtype: ", DTypeName(req.dtype()), " is neither fp32 nor the job's weight_dtype ",
                     DTypeName(spec_.weight_dtype())));
  }
  Range shard{blocks_.begin * layout_.block_elems, blocks_.end * layout_.block_elems};
  // begin = end = 0 asks for the whole shard: nothing on an empty one.
  if (req.begin() == 0 && req.end() == 0 && shard.empty()) return shard;
  Range r = req.begin() == 0 && req.end() == 0 ? shard : Range{req.begin(), req.end()};
  if (r.begin >= r.end || r.begin < shard.begin || r.end > shard.end) {
    return absl::InvalidArgumentError(absl::StrCat("range: [", r.begin, ", ", r.end,
                                                   ") is empty or outside this server's shard [",
                                                   shard.begin, ", ", shard.end, ")"));
  }
  return r;
}

absl::Status Job::Gather(Range range, uint64_t min_version, v1::DType dtype, uint32_t max_piece,
                         absl::Time deadline, GatherSink& sink) {
  const bool from_master = dtype == v1::DTYPE_FP32;
  const size_t esize = DTypeSize(dtype);
  // fp32 pieces are copied straight from the tier's resident state (the RAM
  // tier), else from the block last loaded: consecutive pieces of one block
  // at one version are served from one Load. A block's state changes only
  // with its version, except by InitWeights before the first step, so
  // version 0 is loaded for every piece.
  AlignedBuffer<float> state(from_master ? tier_->shape().block_floats() : 0);
  const Block* loaded = nullptr;
  uint64_t loaded_version = 0;
  ChunkFields piece;
  piece.dtype = dtype;
  for (const BlockPiece& p : SplitByBlock(range, layout_.block_elems, max_piece)) {
    Block& b = block(p.block);
    {
      absl::MutexLock lock(&b.mu);
      if (auto st = AwaitReadable(b, min_version, deadline, /*acknowledged=*/true); !st.ok()) {
        return st;
      }
      const float* master = from_master ? tier_->Resident(b.local) : nullptr;
      if (from_master && master == nullptr) {
        if (loaded != &b || loaded_version != b.version || b.version == 0) {
          if (auto s = tier_->Load(b.local, state.data()); !s.ok()) return s;
          loaded = &b;
          loaded_version = b.version;
        }
        master = state.data();
      }
      const char* src = from_master ? reinterpret_cast<const char*>(master)
                                    : reinterpret_cast<const char*>(b.lowp.data());
      std::memcpy(sink.Buffer(p.count * esize), src + p.offset * esize, p.count * esize);
      piece.block = p.block;
      piece.offset = p.offset;
      piece.version = b.version;
    }
    if (!sink.Emit(piece)) return absl::CancelledError("client went away");
  }
  return absl::OkStatus();
}

namespace {

// Collects each piece into a Chunk message for a std::function.
class ChunkMessageSink final : public Job::GatherSink {
 public:
  ChunkMessageSink(const std::string& job_id, const std::function<bool(const v1::Chunk&)>& emit)
      : emit_(emit) {
    chunk_.set_job_id(job_id);
  }
  void* Buffer(size_t bytes) override {
    chunk_.mutable_data()->resize(bytes);
    return chunk_.mutable_data()->data();
  }
  bool Emit(const ChunkFields& piece) override {
    chunk_.set_block(piece.block);
    chunk_.set_offset(piece.offset);
    chunk_.set_dtype(piece.dtype);
    chunk_.set_version(piece.version);
    return emit_(chunk_);
  }

 private:
  const std::function<bool(const v1::Chunk&)>& emit_;
  v1::Chunk chunk_;
};

}  // namespace

absl::Status Job::Gather(Range range, uint64_t min_version, v1::DType dtype, uint32_t max_piece,
                         absl::Time deadline,
                         const std::function<bool(const v1::Chunk&)>& emit) {
  ChunkMessageSink sink(spec_.job_id(), emit);
  return Gather(range, min_version, dtype, max_piece, deadline, sink);
}

v1::JobInfo Job::Info() const {
  v1::JobInfo info;
  info.set_job_id(spec_.job_id());
  info.set_total_elems(layout_.total_elems);
  info.set_block_elems(layout_.block_elems);
  info.set_num_blocks(layout_.num_blocks());
  info.set_first_block(blocks_.begin);
  info.set_shard_blocks(blocks_.size());
  uint64_t version = UINT64_MAX;
  for (const auto& bp : blocks_data_) {
    absl::MutexLock lock(&bp->mu);
    version = std::min(version, bp->version);
  }
  info.set_version(blocks_data_.empty() ? 0 : version);
  for (const TensorSlot& t : layout_.tensors) {
    auto* p = info.add_tensors();
    p->set_name(t.name);
    p->set_offset(t.offset);
    p->set_numel(t.numel);
  }
  info.set_state_bytes(state_bytes_);
  return info;
}

void Job::FillStatus(v1::JobStatusResponse* out) const {
  *out->mutable_info() = Info();
  *out->mutable_spec() = spec_;
  uint64_t lo = UINT64_MAX, hi = 0, waiting = 0, speculated = 0;
  for (const auto& bp : blocks_data_) {
    absl::MutexLock lock(&bp->mu);
    lo = std::min(lo, bp->version);
    hi = std::max(hi, bp->version);
    if (!bp->acc.complete()) ++waiting;
    if (bp->speculation == Block::Speculation::kDone) ++speculated;
  }
  out->set_min_version(blocks_data_.empty() ? 0 : lo);
  out->set_max_version(hi);
  out->set_blocks_waiting(waiting);
  out->set_blocks_speculated(speculated);
}

void Job::MarkDeleted() {
  deleted_ = true;
  // Releasing each block's mutex makes absl re-evaluate its waiters' conditions.
  for (auto& bp : blocks_data_) absl::MutexLock lock(&bp->mu);
}

void Job::Shutdown() {
  shutting_down_ = true;
  // Releasing each block's mutex makes absl re-evaluate its waiters' conditions.
  for (auto& bp : blocks_data_) absl::MutexLock lock(&bp->mu);
  if (staging_ != nullptr) staging_->Notify();  // pushes waiting for staging
}

absl::StatusOr<std::unique_ptr<Job::CheckpointGuard>> Job::BeginCheckpoint(uint64_t version) {
  auto guard = std::make_unique<CheckpointGuard>(this);
  // No optimizer pass may be under way: one that had computed a block at
  // `version` before copy-on-write was in force would commit it past
  // `version` with no snapshot, and until it commits the block's version
  // passes the check below while the tier already holds the next state.
  absl::MutexLock pass_lock(&step_.pass_mu());
  cow_version_ = version;
  for (auto& bp : blocks_data_) {
    absl::MutexLock lock(&bp->mu);
    if (bp->version > version) {
      return absl::FailedPreconditionError(
          absl::StrCat("version: ", version, " is from the past; block ", bp->index,
                       " is already at version ", bp->version));
    }
  }
  return guard;
}

Job::CheckpointGuard::CheckpointGuard(Job* job) : job_(job) {
  absl::MutexLock lock(&job->checkpoint_mu_);
  job->checkpoint_mu_.Await(absl::Condition(
      +[](bool* running) { return !*running; }, &job->checkpoint_running_));
  job->checkpoint_running_ = true;
}

Job::CheckpointGuard::~CheckpointGuard() {
  job_->cow_version_ = kNoCheckpoint;
  for (auto& bp : job_->blocks_data_) {
    absl::MutexLock lock(&bp->mu);
    bp->kept.Release(KeptState::kCheckpoint);
  }
  absl::MutexLock lock(&job_->checkpoint_mu_);
  job_->checkpoint_running_ = false;
}

absl::Status Job::SnapshotBlock(uint64_t local, uint64_t version, absl::Time deadline,
                                float* out) {
  Block& b = *blocks_data_[local];
  absl::MutexLock lock(&b.mu);
  if (auto st = AwaitVersion(b, version, deadline); !st.ok()) return st;
  // A snapshot exists once a step has computed the block at `version`. The
  // step commits (b.version + 1) in a later critical section, after the
  // tier has the new state (RAM: updated in place; NVMe: written), so even
  // while b.version == version the tier may hold version + 1: the snapshot
  // is the state at `version` whenever there is one.
  // A speculated block (not yet committed) keeps its state at `version` there too.
  if (b.kept.held() && b.kept.version() == version) {
    std::memcpy(out, b.kept.data(), b.kept.size() * sizeof(float));
    b.kept.Release(KeptState::kCheckpoint);
    return absl::OkStatus();
  }
  if (b.version == version) return tier_->Load(local, out);
  return absl::InternalError(absl::StrCat("block ", b.index, " moved past version ", version,
                                          " without a copy-on-write snapshot"));
}

absl::Status Job::RestoreTrainerState(uint64_t version, const std::string& state) {
  if (auto s = TrainerStates::Check(state); !s.ok()) {
    return absl::DataLossError(absl::StrCat("checkpoint manifest ", s.message()));
  }
  if (!state.empty()) step_.trainer_states().Record(version, state);
  return absl::OkStatus();
}

absl::Status Job::RestoreBlock(uint64_t local, const float* state, uint64_t version) {
  Block& b = *blocks_data_[local];
  absl::MutexLock lock(&b.mu);
  if (auto s = tier_->Store(local, state); !s.ok()) return s;
  if (!b.lowp.empty()) EncodeFloats(state, b.required, spec_.weight_dtype(), b.lowp.data());
  b.version = version;
  b.acc.Reset();
  return absl::OkStatus();
}

}  // namespace zerostate::server
