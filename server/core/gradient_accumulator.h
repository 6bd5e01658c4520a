// The gradient accumulator of one block for one step: sums every node's
// pieces in fp32 in node-id order, whatever order they arrive in, and
// recognises retries.
//
// Node k's pieces are folded straight into the sum once nodes 0..k-1 are
// complete (the common, in-order case costs no extra memory); pieces of a
// node that arrives early are decoded into a staging buffer and folded when
// its turn comes. For each element the sum is therefore always
// ((g0 + g1) + g2) + ..., bit-identical for any arrival order.
//
// Staging buffers (block_elems floats each) are taken from the server's
// StagingBudget (server/core/staging_budget.h) when an early node's first piece
// arrives, and given back when that node is folded (its turn came), on
// Reset and when the accumulator is destroyed; the budget keeps them for
// the next early piece, so a buffer may come with another step's numbers
// in it (only what was decoded into it is ever read). When the budget is spent an
// early piece is answered kNoStaging and nothing changes: the caller waits
// without the block's mutex and tries again. The head node's pieces never
// need staging, so every block always completes.
//
// The first node's fp32 pieces may instead be received straight into the
// sum (Claim / Commit): the fold of those is a plain copy, which receiving
// in place saves, with the buffer it needs.
//
// The sum's gradient statistics (ComputeGradStats) are kept as it becomes
// final, so that they need no pass over it of their own: an element is
// final once the last node is folded over it (padding always is: zero,
// passed over). A fold of the last node that starts where the final prefix
// ends squares what it writes, from registers (the *Squared conversions of
// common/convert.h); after each fold, the final prefix is extended by
// reading the sum, where that is in cache (once pieces were streamed past
// it, only a few lines). What neither covers (pieces out of order after
// streamed ones) is read by Stats() at the end, in the same order
// (common/square_lanes.h): the statistics are bit-identical to
// ComputeGradStats over the complete sum.
//
// Single-gradient mode (LandsGradientAsBf16: one node pushing bf16
// gradients, nothing to add up): the block keeps the pushed gradient as
// bf16 where it lands (landed_sum()) instead of an fp32 sum, and the step
// reads it there (BlockRefs::grad_bf16), widening it in registers: the same
// values, half the memory, and no fp32 sum written by a fold and read back
// by the step. A piece sent in another dtype is rounded to bf16 (to nearest
// even) as it lands: the job declared bf16 gradients. The statistics are
// those of the widened gradient, squared as pieces land, as above.
// A piece whose memory its sender keeps unchanged until the step is applied
// (`held`: a same-host client's shared buffer, DataFrameMeta.held) and that
// covers the block whole (node 0's first, bf16, from element 0 through
// required(), one segment, no padding inside the block) is not even copied:
// the block keeps pointing at it, holding `held` (the mapping) until Reset,
// and the step reads the gradient there. It is squared as it lands.
//
// Not thread-safe: the owning block's mutex guards it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "absl/functional/function_ref.h"
#include "common/chunk_view.h"
#include "common/int8_wire.h"
#include "common/square_lanes.h"
#include "server/core/aligned_buffer.h"
#include "server/core/optimizer/optimizer.h"
#include "server/core/staging_budget.h"
#include "zerostate/v1/state_service.pb.h"

namespace zerostate::server {

// Whether a job's blocks keep one node's bf16 gradient as it lands
// (single-gradient mode, above): one node, bf16 gradients.
bool LandsGradientAsBf16(const v1::JobSpec& spec);

class GradientAccumulator {
 public:
  // kNoStaging: the piece is early, its node has no staging buffer yet and
  // the staging budget has no room for one; nothing changed.
  enum class Outcome { kApplied, kDuplicate, kNoStaging };

  // Of the first `required` elements of the block, those in `tensor_elems`
  // (sorted, disjoint [first, last) intervals; empty: all of them) must be
  // covered by each node and are folded. The rest is layout padding (the
  // alignment between tensors, and the tail past `required`): a node may
  // push it or not; it is never folded, and the sum holds zero there.
  // Staging buffers come from `staging` (null: unbounded), which must
  // outlive the accumulator. `land_bf16`: single-gradient mode (above);
  // REQUIRES then num_nodes == 1.
  GradientAccumulator(uint32_t num_nodes, uint32_t block_elems, uint32_t required,
                      StagingBudget* staging = nullptr,
                      std::vector<std::pair<uint32_t, uint32_t>> tensor_elems = {},
                      bool land_bf16 = false);
  ~GradientAccumulator();
  GradientAccumulator(const GradientAccumulator&) = delete;
  GradientAccumulator& operator=(const GradientAccumulator&) = delete;

  // Adds node `node`'s elements [offset, offset + count) from `data`
  // (elements of `dtype`). A piece that lies entirely within pieces this
  // node already sent is a retry: kDuplicate, nothing changes. A piece that
  // overlaps earlier ones only in part is INVALID_ARGUMENT, nothing changes.
  // An early piece that finds no staging memory is kNoStaging (above).
  // REQUIRES: node < num_nodes, offset + count <= block_elems (checked by the caller).
  [[nodiscard]] absl::StatusOr<Outcome> Add(uint32_t node, uint32_t offset, uint32_t count,
                                            const void* data, v1::DType dtype);
  // The same with the elements spread over `data`'s segments (as received,
  // without copying them together first); an element may straddle two.
  // REQUIRES as above, and the segments hold count elements.
  // `held` (may be null): the segments stay valid and unchanged while
  // held lives and until Reset (single-gradient mode may keep pointing at
  // them, above).
  [[nodiscard]] absl::StatusOr<Outcome> Add(uint32_t node, uint32_t offset, uint32_t count,
                                            absl::Span<const ChunkView::Segment> data,
                                            v1::DType dtype,
                                            std::shared_ptr<const void> held = nullptr);
  // The same for a compressed chunk (common/int8_wire.h) of chunk.elems
  // elements, dequantized as it is folded.
  [[nodiscard]] absl::StatusOr<Outcome> Add(uint32_t node, uint32_t offset,
                                            const Int8Chunk& chunk);

  // Whether Add of this piece would need a new staging buffer: not a
  // retry, its node early, and without one yet. REQUIRES as Add.
  bool NeedsStaging(uint32_t node, uint32_t offset, uint32_t count) const;

  // Receiving in place. For a piece of node 0 in fp32 whose elements no
  // earlier piece covers, while node 0 is still the one folded into the sum
  // (its fold would be a copy): reserves [offset, offset + count) and
  // returns where in the sum its elements go, for the caller to write
  // without holding the mutex, then Commit (applied) or Abandon (not
  // written whole; the range is free again, and whatever was written there
  // is overwritten when node 0's piece does arrive). nullptr when the piece
  // must go through Add (another node or dtype, a retry, an overlap, layout
  // padding). Until then, an Add that overlaps the range is UNAVAILABLE: a
  // retry racing the attempt still receiving; it is answered once that
  // ends. REQUIRES: offset + count <= block_elems.
  float* Claim(uint32_t node, uint32_t offset, uint32_t count, v1::DType dtype);
  // Marks a range claimed at `epoch` (epoch() when Claim returned) received.
  // False when it is no longer claimed (Reset ran since), and then nothing
  // changes; so does Abandon then.
  bool Commit(uint32_t offset, uint32_t count, uint64_t epoch);
  void Abandon(uint32_t offset, uint32_t count, uint64_t epoch);
  // Counts Resets.
  uint64_t epoch() const { return epoch_; }
  // True when node `node`'s [offset, offset + count) overlaps a range still
  // claimed (an Add of it now would be UNAVAILABLE).
  bool Claimed(uint32_t node, uint32_t offset, uint32_t count) const;

  // True once every node has covered the block's tensor elements and all are folded.
  bool complete() const { return head_ == num_nodes_; }

  // The summed gradient; valid in full once complete(). Null in
  // single-gradient mode: see landed_sum().
  const float* sum() const { return landed_.empty() ? sum_.data() : nullptr; }
  // Single-gradient mode: the gradient as bf16, valid in full once
  // complete(); else null.
  const uint16_t* landed_sum() const {
    return landed_.empty() ? nullptr : held_data_ != nullptr ? held_data_ : landed_.data();
  }
  // Whether landed_sum() points at a sender's held memory (above).
  bool landed_held() const { return held_data_ != nullptr; }
  // The gradient's first required() elements as fp32 bytes into *out
  // (either mode), for a replica. REQUIRES: complete().
  void CopySum(std::string* out) const;
  // True when pieces of the sum were last written with non-temporal stores
  // (the first node's long pieces, DecodeFloatsStreaming, with no later
  // node folded over them since): the sum is then not in cache, and reading
  // it costs a pass over memory.
  bool streamed() const { return streamed_; }
  uint32_t required() const { return required_; }

  // The statistics are kept over the sum's first stats_at() elements;
  // Stats() reads only the rest.
  uint32_t stats_at() const { return static_cast<uint32_t>(stats_lanes_.elems); }
  // ComputeGradStats(sum(), required()), bit for bit. REQUIRES: complete().
  GradStats Stats() const;

  // A replicated step: takes `sum` (the primary's summed
  // gradient of the block, its first required() elements) as every node's
  // complete contribution, as if folded here. Forgets pieces and claims
  // first (Reset); the padding past required() stays zero. The statistics
  // are taken in the copy (Stats() reads nothing more).
  void SetSum(const float* sum);

  // Node ids that have not yet covered the tensor elements, for error messages.
  std::vector<uint32_t> MissingNodes() const;

  // Forgets every piece and claim (the next step starts); staging buffers
  // go back to the budget. Keeps the sum's memory.
  void Reset();

  // Bytes held, including staging buffers of early nodes.
  size_t bytes() const;
  // Bytes of one staging buffer.
  uint64_t staging_bytes() const { return uint64_t{block_elems_} * sizeof(float); }

 private:
  struct NodeState {
    std::vector<std::pair<uint32_t, uint32_t>> received;  // sorted, merged [begin, end)
    AlignedBuffer<float> staging;                          // early pieces, decoded
    bool Covers(uint32_t begin, uint32_t end) const;
  };

  // Records [begin, end) as received; false if it overlaps part of an earlier piece.
  static bool Insert(NodeState& node, uint32_t begin, uint32_t end);
  // True when `ns` has covered every tensor element of the block.
  bool CoversTensors(const NodeState& ns) const;
  // Calls fn(first, last) for each part of [begin, end) that is tensor elements.
  template <class Fn>
  void ForEachTensorPart(uint32_t begin, uint32_t end, Fn fn) const;
  // Zeroes the sum's padding elements within [begin, end) (written by a
  // payload received in place).
  void ZeroPadding(uint32_t begin, uint32_t end);
  // Ends the claim of [offset, offset + count) made at `epoch`, zeroing its
  // padding; false when there is none (Reset ran since).
  bool EndClaim(uint32_t offset, uint32_t count, uint64_t epoch);
  // Add's checks and bookkeeping around fold(begin, end), which folds the
  // piece's elements in [begin, end).
  [[nodiscard]] absl::StatusOr<Outcome> AddPiece(
      uint32_t node, uint32_t offset, uint32_t count,
      absl::FunctionRef<void(uint32_t begin, uint32_t end)> fold);
  // Folds the elements of `data` (starting at element `begin`) that lie below `end`.
  void Fold(uint32_t node, uint32_t begin, uint32_t end,
            absl::Span<const ChunkView::Segment> data, v1::DType dtype);
  void Fold(uint32_t node, uint32_t begin, uint32_t end, const Int8Chunk& chunk);
  // Folds n contiguous elements at `at` (DTYPE_INT8: `data` is an Int8Run).
  void FoldRun(uint32_t node, uint32_t at, size_t n, const void* data, v1::DType dtype);
  void AdvanceHead();
  // The end of the final elements from stats_at() on (see the top).
  uint32_t FinalEnd() const;
  // Moves stats_at() to `to` when only padding (not claimed) lies between.
  void SkipPadding(uint32_t to);
  // Extends the statistics over the final elements past stats_at(), reading
  // the sum (a few lines at most once it was streamed past the cache).
  void AdvanceStats();
  // Frees node state's staging buffer, if any, back to the budget.
  void FreeStaging(NodeState& ns);
  // Adds the squares of the gradient's elements [begin, end) to `lanes`,
  // reading sum_ or widening landed_.
  void AddSumSquares(uint32_t begin, uint32_t end, SquareLanes* lanes) const;
  // Single-gradient mode: node 0's n elements at `begin` where they land.
  void Land(uint32_t begin, size_t n, const void* data, v1::DType dtype, SquareLanes* lanes);
  // Whether a piece may be kept where it lies rather than landed (above).
  bool MayHold(uint32_t node, uint32_t offset, uint32_t count,
               absl::Span<const ChunkView::Segment> data, v1::DType dtype) const;

  const uint32_t num_nodes_;
  const uint32_t block_elems_;
  const uint32_t required_;
  StagingBudget* const staging_;
  const std::vector<std::pair<uint32_t, uint32_t>> tensor_elems_;  // sorted, within [0, required_)
  AlignedBuffer<float> sum_;         // empty in single-gradient mode
  AlignedBuffer<uint16_t> landed_;  // single-gradient mode only
  const uint16_t* held_data_ = nullptr;  // the gradient in a sender's held memory, or null
  std::shared_ptr<const void> held_;     // keeps that memory mapped
  std::vector<NodeState> nodes_;
  uint32_t head_ = 0;  // nodes [0, head_) are complete and folded
  bool streamed_ = false;  // see streamed()
  std::vector<std::pair<uint32_t, uint32_t>> claimed_;  // node 0's ranges being received in place
  uint64_t epoch_ = 0;
  SquareLanes stats_lanes_;  // the statistics of sum_[0, stats_at())
};

}  // namespace zerostate::server
