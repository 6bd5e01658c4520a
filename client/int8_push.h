// The compressed wire on the trainer's side (JobSpec.gradient_wire
// WIRE_INT8; common/int8_wire.h): the error feedback a job's pushes keep,
// and a push call's int8 payload, encoded once.
//
// Error feedback: each node's rounding error of its last push of an
// element is added to its next push of that element before it is
// quantized, so the sum of what a node sent over steps stays within one
// quantum of the sum of its true gradients. The store lives as long as the
// JobClient (a process that pushes the same ranges every step, as both
// drivers do); a new JobClient starts from zero residuals.
//
// Encoded once: a push call's payload is quantized the first time one of
// its streams is sent (each stream its own pieces, on the pool), then kept
// with the call, so that a retry and a failover's replay send the same
// bytes and the residual moves once per push. The same-host plane sends
// the plain payload instead (compression buys nothing there) and leaves
// the residual alone.
// Thread-safe.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "absl/base/call_once.h"
#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "client/client.h"
#include "client/plan.h"
#include "common/shard_map.h"
#include "zerostate/v1/state_service.pb.h"

namespace zerostate::client {

// Counts what JobClient::wire_stats reports (WireStats, client/client.h),
// once per stream that succeeded (not per retried attempt).
class WireTally {
 public:
  void AddPush(uint64_t bytes, uint64_t elems) {
    push_bytes_ += bytes;
    push_elems_ += elems;
  }
  void AddGather(uint64_t bytes, uint64_t elems) {
    gather_bytes_ += bytes;
    gather_elems_ += elems;
  }
  WireStats Get() const {
    return {push_bytes_.load(), push_elems_.load(), gather_bytes_.load(), gather_elems_.load()};
  }

 private:
  std::atomic<uint64_t> push_bytes_{0}, push_elems_{0}, gather_bytes_{0}, gather_elems_{0};
};

class ErrorFeedback {
 public:
  explicit ErrorFeedback(uint32_t block_elems) : block_elems_(block_elems) {}
  // Node `node`'s residual of block `block` (block_elems floats, zero at
  // first), valid as long as this object. Two callers may use disjoint
  // parts of one block's residual at once.
  float* Residual(uint32_t node, uint64_t block);

 private:
  const uint32_t block_elems_;
  absl::Mutex mu_;
  absl::flat_hash_map<std::pair<uint32_t, uint64_t>, std::unique_ptr<float[]>> residuals_
      ABSL_GUARDED_BY(mu_);
};

// One stream's int8 payload: its pieces (SplitByBlock of its range in
// chunks of `chunk` elements), back to back.
struct Int8Stream {
  std::vector<BlockPiece> pieces;
  std::vector<size_t> at;  // pieces.size() + 1 offsets into bytes
  std::vector<uint8_t> bytes;
};

class Int8Push {
 public:
  // A push of `count` elements from `data` (elements of `src`) starting at
  // flat element `begin`, by `node`, with residuals from `feedback` (which
  // must outlive this), for the streams `plans` (PlanStreams' for the
  // call), each split into pieces of `chunk` elements.
  Int8Push(ErrorFeedback* feedback, uint32_t node, uint64_t begin, const void* data,
           v1::DType src, uint32_t block_elems, uint32_t chunk,
           const std::vector<StreamPlan>& plans);

  // The payload of the stream whose range is `elems` (one of the plans'),
  // encoded by the first caller. REQUIRES: the caller's data is unchanged
  // until every stream of the call was encoded.
  const Int8Stream& Stream(Range elems);

 private:
  struct Slot {
    Range elems;
    absl::once_flag once;
    Int8Stream stream;
  };
  void Encode(Slot& slot) const;

  ErrorFeedback* const feedback_;
  const uint32_t node_;
  const uint64_t begin_;
  const void* const data_;
  const v1::DType src_;
  const uint32_t block_elems_;
  const uint32_t chunk_;
  std::vector<std::unique_ptr<Slot>> slots_;  // constant after construction
};

}  // namespace zerostate::client
