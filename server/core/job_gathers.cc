#include "server/core/job_gathers.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/convert.h"
#include "common/int8_wire.h"
#include "common/timeline.h"

namespace zerostate::server {

absl::StatusOr<Range> JobGathers::CheckGather(const v1::GatherRequest& req) const {
  const v1::JobSpec& spec = shard_.spec();
  const bool int8 = req.dtype() == v1::DTYPE_INT8 && spec.weight_wire() == v1::WIRE_INT8;
  if (req.dtype() != v1::DTYPE_FP32 && req.dtype() != spec.weight_dtype() && !int8) {
    return absl::InvalidArgumentError(absl::StrCat(
        "dtype: ", DTypeName(req.dtype()), " is neither fp32 nor the job's weight_dtype ",
        DTypeName(spec.weight_dtype()),
        spec.weight_wire() == v1::WIRE_INT8 ? " nor int8" : " (int8 needs weight_wire WIRE_INT8)"));
  }
  const Range blocks = shard_.blocks();
  const uint64_t be = shard_.layout().block_elems;
  Range shard{blocks.begin * be, blocks.end * be};
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

uint64_t GatherBytes(Range range, uint32_t block_elems, v1::DType dtype, uint32_t max_piece) {
  if (dtype != v1::DTYPE_INT8) return range.size() * DTypeSize(dtype);
  uint64_t bytes = 0;
  for (const BlockPiece& p : SplitByBlock(range, block_elems, max_piece)) {
    bytes += Int8ChunkBytes(p.count);
  }
  return bytes;
}

namespace {

// A gather's registrations of client memory with its blocks (Block::direct).
class DirectCopies {
 public:
  DirectCopies() = default;
  DirectCopies(const DirectCopies&) = delete;
  DirectCopies& operator=(const DirectCopies&) = delete;
  ~DirectCopies() {
    for (Block* b : blocks_) {
      absl::MutexLock lock(&b->mu);
      Release(*b);
    }
  }

  // Registers `to` (null: nothing) for block b's whole copy (`count`
  // elements from its first) at `version`, where b needs a step to get
  // there and no other gather registered one.
  void Register(Block& b, uint64_t count, uint64_t version, void* to) {
    if (to == nullptr) return;
    absl::MutexLock lock(&b.mu);
    if (count != b.required || b.version >= version || b.direct.to != nullptr) return;
    b.direct = {static_cast<uint16_t*>(to), version, false};
    blocks_.push_back(&b);
  }

  // Takes back this gather's registration with `b` (if any): whether a
  // step wrote b's copy of the version b is at into its memory.
  bool Take(Block& b) ABSL_EXCLUSIVE_LOCKS_REQUIRED(b.mu) {
    auto it = std::find(blocks_.begin(), blocks_.end(), &b);
    if (it == blocks_.end()) return false;
    blocks_.erase(it);
    AwaitWriter(b);
    const bool written = b.direct.written && b.direct.version == b.version;
    Release(b);
    return written;
  }

 private:
  // A speculation writes the memory without b.mu: waits for it to end.
  static void AwaitWriter(Block& b) ABSL_EXCLUSIVE_LOCKS_REQUIRED(b.mu) {
    if (b.pending_copy == Block::PendingCopy::kClient) b.AwaitSpeculation();
  }
  // A copy computed into the memory and not yet committed is then not
  // served (kGone: the block's own copy is not of that version either).
  static void Release(Block& b) ABSL_EXCLUSIVE_LOCKS_REQUIRED(b.mu) {
    AwaitWriter(b);
    if (b.pending_copy == Block::PendingCopy::kClient) b.pending_copy = Block::PendingCopy::kGone;
    b.direct = {};
  }

  std::vector<Block*> blocks_;
};

}  // namespace

absl::Status JobGathers::CopyPiece(const BlockPiece& p, const Block& b, v1::DType source,
                                   bool int8, bool convert, Loaded* loaded,
                                   AlignedBuffer<float>* state, AlignedBuffer<uint16_t>* converted,
                                   GatherSink& sink) {
  StateTier& tier = shard_.tier();
  const bool from_master = source == v1::DTYPE_FP32 || convert;
  const size_t esize = DTypeSize(source);
  const float* master = from_master ? tier.Resident(b.local) : nullptr;
  if (from_master && master == nullptr) {
    if (state->empty()) *state = AlignedBuffer<float>(tier.shape().block_floats());
    if (loaded->block != &b || loaded->version != b.version || b.version == 0) {
      if (auto s = tier.Load(b.local, state->data()); !s.ok()) return s;
      loaded->block = &b;
      loaded->version = b.version;
    }
    master = state->data();
  }
  const char* src = from_master ? reinterpret_cast<const char*>(master)
                                : reinterpret_cast<const char*>(b.lowp.data());
  if (int8) {
    const char* codes_of = src + p.offset * esize;
    if (convert) {
      if (converted->empty()) *converted = AlignedBuffer<uint16_t>(shard_.layout().block_elems);
      EncodeFloats(master + p.offset, p.count, source, converted->data());
      codes_of = reinterpret_cast<const char*>(converted->data());
    }
    EncodeInt8(codes_of, source, p.count, /*residual=*/nullptr,
               static_cast<uint8_t*>(sink.Buffer(Int8ChunkBytes(p.count))));
  } else if (convert) {
    EncodeFloats(master + p.offset, p.count, source, sink.Buffer(p.count * esize));
  } else {
    void* into = sink.Buffer(p.count * esize);
    if (sink.BufferReadElsewhere()) {
      CopyStreaming(src + p.offset * esize, p.count * esize, into);
    } else {
      std::memcpy(into, src + p.offset * esize, p.count * esize);
    }
  }
  return absl::OkStatus();
}

absl::Status JobGathers::Gather(Range range, uint64_t min_version, v1::DType dtype,
                                uint32_t max_piece, absl::Time deadline, GatherSink& sink,
                                uint64_t* direct_elems) {
  // The int8 wire quantizes what a weight_dtype gather serves.
  const bool int8 = dtype == v1::DTYPE_INT8;
  const v1::DType source = int8 ? shard_.spec().weight_dtype() : dtype;
  // A weight_dtype piece comes from the block's copy where the job keeps
  // one (KeepsLowpCopy), else from the master, converted as it is copied
  // out: the bits the pass would have written to a copy.
  const bool convert = source != v1::DTYPE_FP32 && !shard_.keeps_lowp_copy();
  const bool from_master = source == v1::DTYPE_FP32 || convert;
  const size_t esize = DTypeSize(source);
  AlignedBuffer<uint16_t> converted;  // an int8 piece's converted master, made at first use
  // Only versions every backup holds (JobStep::visible_through); a
  // deposed copy serves none (its waiters end with the reason).
  const std::function<bool(uint64_t)> visible = [this](uint64_t version) {
    return version <= step_.visible_through() || step_.deposed();
  };
  // fp32 pieces are copied straight from the tier's resident state (the RAM
  // tier), else from the block last loaded: consecutive pieces of one block
  // at one version are served from one Load. A block's state changes only
  // with its version, except by InitWeights before the first step, so
  // version 0 is loaded for every piece. The buffer for a Load is made
  // only when a block is not resident: a RAM tier's gather never pays for
  // allocating and zeroing a block's whole state.
  const std::function<bool()> cancelled = [&sink] { return sink.Cancelled(); };
  AlignedBuffer<float> state;
  Loaded loaded;
  ChunkFields piece;
  piece.dtype = dtype;
  const std::vector<BlockPiece> pieces = SplitByBlock(range, shard_.layout().block_elems, max_piece);
  // Each block whose whole copy a same-host client gathers, not yet at the
  // version asked for, has the piece's memory in the client's buffer
  // registered before the first wait, so that the step that brings the
  // block there writes its copy into it (Block::direct) and the piece is
  // not copied; every registration is taken back by the time this returns.
  DirectCopies direct;
  if (!int8 && !convert && !from_master) {
    uint64_t at = 0;
    for (const BlockPiece& p : pieces) {
      const size_t bytes = p.count * esize;
      Block& b = shard_.block(p.block);
      if (p.offset == 0) direct.Register(b, p.count, min_version, sink.ClientBufferAt(at, bytes));
      at += bytes;
    }
  }
  for (const BlockPiece& p : pieces) {
    Block& b = shard_.block(p.block);
    {
      absl::MutexLock lock(&b.mu);
      absl::Status st = shard_.AwaitReadable(b, min_version, deadline, visible, cancelled);
      if (st.ok()) st = step_.CheckNotDeposed();
      const bool written = direct.Take(b);
      if (!st.ok()) return st;
      if (written) {
        (void)sink.Buffer(p.count * esize);  // the memory the step wrote the piece into
        if (direct_elems != nullptr) *direct_elems += p.count;
      } else if (auto s = CopyPiece(p, b, source, int8, convert || (!from_master && !b.lowp_current),
                                    &loaded, &state, &converted, sink);
                 !s.ok()) {
        return s;
      }
      if (int8) piece.elems = p.count;
      piece.block = p.block;
      piece.offset = p.offset;
      piece.version = b.version;
    }
    Timeline::Record("gather_piece", static_cast<int64_t>(p.block), static_cast<int64_t>(piece.version));
    if (!sink.Emit(piece)) return absl::CancelledError("client went away");
  }
  return absl::OkStatus();
}

namespace {

// Collects each piece into a Chunk message for a std::function.
class ChunkMessageSink final : public GatherSink {
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
    chunk_.set_elems(piece.elems);
    return emit_(chunk_);
  }

 private:
  const std::function<bool(const v1::Chunk&)>& emit_;
  v1::Chunk chunk_;
};

}  // namespace

absl::Status JobGathers::Gather(Range range, uint64_t min_version, v1::DType dtype,
                                uint32_t max_piece, absl::Time deadline,
                                const std::function<bool(const v1::Chunk&)>& emit) {
  ChunkMessageSink sink(shard_.spec().job_id(), emit);
  return Gather(range, min_version, dtype, max_piece, deadline, sink);
}

absl::Status JobGathers::ReadBlock(uint64_t local, uint64_t min_version, absl::Time deadline,
                                   float* out, uint64_t* version) {
  Block& b = shard_.local_block(local);
  absl::MutexLock lock(&b.mu);
  if (auto st = shard_.AwaitReadable(b, min_version, deadline); !st.ok()) return st;
  *version = b.version;
  return shard_.tier().Load(local, out);
}

absl::Status JobGathers::ReadBlockAt(uint64_t local, uint64_t version, float* out) {
  Block& b = shard_.local_block(local);
  absl::MutexLock lock(&b.mu);
  if (b.version != version) {
    return absl::FailedPreconditionError(absl::StrCat("block ", b.index, " is at version ",
                                                      b.version, ", not ", version));
  }
  if (b.kept.held() && b.kept.version() == version) {
    std::memcpy(out, b.kept.data(), b.kept.size() * sizeof(float));
    return absl::OkStatus();
  }
  return shard_.tier().Load(local, out);
}

}  // namespace zerostate::server
