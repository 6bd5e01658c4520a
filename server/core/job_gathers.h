// The gathers of one job's shard (a part of Job, server/core/job.h): its
// weights served piece by piece, each piece once its block reaches the
// version asked for and the backups hold it (JobStep::visible_through), in
// fp32 from the tier or in the job's weight dtype from the low-precision
// copy; and a block's whole state for a backup's catch-up (ReadBlock,
// ReadBlockAt).
//
// Thread-safe; each piece is copied under its block's mutex only.
#pragma once

#include <cstdint>
#include <functional>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/chunk_view.h"
#include "common/shard_map.h"
#include "server/core/aligned_buffer.h"
#include "server/core/block.h"
#include "server/core/job_shard.h"
#include "server/core/job_step.h"
#include "zerostate/v1/state_service.pb.h"

namespace zerostate::server {

// Receives the pieces of a Gather, in order. Buffer() and Emit() alternate
// on the gathering thread: Buffer(bytes) returns memory for the next
// piece's payload, which JobGathers fills (once, under the block's mutex)
// before calling Emit(piece) without any lock held. Emit returns false to
// stop the gather (the client went away).
class GatherSink {
 public:
  virtual ~GatherSink() = default;
  virtual void* Buffer(size_t bytes) = 0;
  virtual bool Emit(const ChunkFields& piece) = 0;  // job_id left empty
  // Whether what the last Buffer() returned lies where nothing on this
  // host reads it soon (a same-host client's shared buffer, which its
  // device copies out of): then it is filled with non-temporal stores.
  virtual bool BufferReadElsewhere() const { return false; }
  // Where in a same-host client's own buffer (where nothing on this host
  // reads it soon) a piece of `bytes` lies whose Buffer() comes once those
  // of the `at` bytes before it did, asked for before the first Buffer():
  // the step may write the piece there itself (Block::direct), and its
  // Buffer() then returns the same memory. Null where the sink has no such
  // memory (then the piece is copied as usual).
  virtual void* ClientBufferAt(uint64_t /*at*/, size_t /*bytes*/) { return nullptr; }
  // Whether the caller went away (its connection hung up, its call was
  // cancelled): asked every kCancelPoll (block_wait.h), no lock held, while
  // the gather waits for a version, which then ends CANCELLED. Never true
  // for a caller that is merely slow or sent more.
  virtual bool Cancelled() { return false; }
};

// The payload bytes of a gather of `range` in `dtype` served in pieces of
// at most `max_piece` elements (an int8 piece carries its own scales).
uint64_t GatherBytes(Range range, uint32_t block_elems, v1::DType dtype, uint32_t max_piece);

class JobGathers {
 public:
  // Both outlive the JobGathers (Job owns all three).
  JobGathers(JobShard& shard, const JobStep& step) : shard_(shard), step_(step) {}
  JobGathers(const JobGathers&) = delete;
  JobGathers& operator=(const JobGathers&) = delete;

  // Checks a gather request; returns the element range it covers (empty
  // for the whole shard of an empty shard). Errors: INVALID_ARGUMENT
  // (dtype, range).
  [[nodiscard]] absl::StatusOr<Range> CheckGather(const v1::GatherRequest& req) const;

  // Serves `range` (from CheckGather) block piece by piece, each once its
  // block reaches min_version, into `sink`, at most `max_piece` elements
  // per piece. DTYPE_INT8 (JobSpec.weight_wire WIRE_INT8): each piece is
  // quantized (common/int8_wire.h, groups from its first element) from
  // what a weight_dtype gather serves: the low-precision copy, or the
  // master when weight_dtype is fp32; the master itself stays exact.
  // Errors: DEADLINE_EXCEEDED, UNAVAILABLE, NOT_FOUND (the job was
  // deleted), the tier's I/O errors, CANCELLED when the sink stopped it or
  // said the caller went away during a wait (naming the block and version).
  // `direct_elems` (may be null) gets the elements a step wrote into the
  // sink's client memory itself (Block::direct), which the gather did not copy.
  [[nodiscard]] absl::Status Gather(Range range, uint64_t min_version, v1::DType dtype,
                                    uint32_t max_piece, absl::Time deadline, GatherSink& sink,
                                    uint64_t* direct_elems = nullptr);
  // The same, each piece as a Chunk message (tests, tools).
  [[nodiscard]] absl::Status Gather(Range range, uint64_t min_version, v1::DType dtype,
                                    uint32_t max_piece, absl::Time deadline,
                                    const std::function<bool(const v1::Chunk&)>& emit);

  // Block `local`'s whole state (tier_shape().block_floats() floats:
  // master, then moments) once it reaches `min_version` and no step is
  // between computing and committing it; `version` gets its version.
  // Errors: DEADLINE_EXCEEDED, UNAVAILABLE, the tier's I/O errors.
  [[nodiscard]] absl::Status ReadBlock(uint64_t local, uint64_t min_version, absl::Time deadline,
                                       float* out, uint64_t* version);
  // Block `local`'s state at `version`, its current version, without
  // waiting: a speculated block's from what it keeps (a catch-up's
  // read). REQUIRES: no step's pass runs (the caller is the Step, before
  // its pass). Errors: FAILED_PRECONDITION when the block is at another
  // version; the tier's I/O errors.
  [[nodiscard]] absl::Status ReadBlockAt(uint64_t local, uint64_t version, float* out);

 private:
  // Which block the state buffer of a Gather holds, at which version.
  struct Loaded {
    const Block* block = nullptr;
    uint64_t version = 0;
  };
  // Piece `p` of block `b` into `sink`: from b's low-precision copy, or
  // from its master (`source` fp32, or `convert`: encoded as the pass
  // would have; the tier's resident state, else `state` as `loaded` says,
  // loaded where it is not), quantized when `int8` (through `converted`
  // where converted). Errors: the tier's I/O errors.
  [[nodiscard]] absl::Status CopyPiece(const BlockPiece& p, const Block& b, v1::DType source,
                                       bool int8, bool convert, Loaded* loaded,
                                       AlignedBuffer<float>* state,
                                       AlignedBuffer<uint16_t>* converted, GatherSink& sink)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(b.mu);

  JobShard& shard_;
  const JobStep& step_;
};

}  // namespace zerostate::server
