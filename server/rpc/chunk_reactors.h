// The state server's chunk streams on gRPC's callback API, with messages
// as raw grpc::ByteBuffers (no protobuf `bytes` copy in either direction):
//
// - ChunkReader reads a client stream of Chunk messages (PushGradients,
//   InitWeights) and hands each one, parsed in place (common/chunk_wire.h),
//   to a function that folds or copies the payload straight out of the
//   received slices.
// - GatherWriter writes a server stream of Chunk messages (Gather), each a
//   small header slice plus a payload slice that JobGathers::Gather fills once.
//
// What waits (a chunk for staging memory, a gather for a version) runs on
// the edge's WaitPool, never on one of gRPC's callback threads and never on
// a thread of its own. Each holds its stream's StreamCap::Slot, and frees
// itself once gRPC is done with the call (OnDone) and no task of the pool
// still runs for it.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "common/chunk_wire.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/server_callback.h"
#include "server/core/job.h"
#include "server/rpc/stream_cap.h"
#include "server/rpc/wait_pool.h"

namespace zerostate::server {

class ChunkReader final : public grpc::ServerReadReactor<grpc::ByteBuffer> {
 public:
  // Called for each chunk in order, first with may_wait false on one of
  // gRPC's callback threads, where it must not wait for anything but a
  // block's mutex. A chunk it answers with JobPushes::IsStagingWait (no staging
  // memory free now) is applied again with may_wait true on a thread of
  // `waits`, which may wait for staging memory up to the call's deadline;
  // the stream reads on once that ends. The view's data lies in the
  // received slices, valid only during the call. An error stops the
  // stream: later chunks are not read.
  using Apply = std::function<absl::Status(const ChunkView& chunk, bool may_wait)>;
  // Called once at the end with the first error (or OK at the end of the
  // stream); writes the response and returns the call's status.
  using Done = std::function<grpc::Status(const absl::Status& status)>;

  // Starts reading. `waits` must outlive the stream.
  static ChunkReader* Start(Apply apply, Done done, WaitPool& waits, StreamCap::Slot slot);

  void OnReadDone(bool ok) override;
  void OnDone() override;

 private:
  ChunkReader(Apply apply, Done done, WaitPool& waits, StreamCap::Slot slot);
  // Reads the next chunk after `status` OK, else finishes the call.
  void Continue(const absl::Status& status);
  // Applies `chunk` (whose data `slices` hold) with may_wait on waits_.
  void ApplyWaiting(std::vector<grpc::Slice> slices, ChunkView chunk);

  const Apply apply_;
  const Done done_;
  WaitPool& waits_;
  const StreamCap::Slot slot_;
  grpc::ByteBuffer buffer_;
  // gRPC's reference, dropped in OnDone; a task on waits_ holds another.
  std::shared_ptr<ChunkReader> self_;
};

class GatherWriter final : public grpc::ServerWriteReactor<grpc::ByteBuffer>, public GatherSink {
 public:
  // Fills the sink (through the core's GatherHandler); may wait for a version.
  using Produce = std::function<absl::Status(GatherSink& sink)>;
  // Called once at the end with produce's result and the payload bytes
  // written; returns the call's status.
  using Done = std::function<grpc::Status(const absl::Status& status, uint64_t bytes)>;

  // Runs produce on a thread of `waits` (which must outlive the stream): a
  // gather waits for blocks to reach a version, which must not hold one of
  // gRPC's callback threads. One piece is on the wire while produce fills
  // the next. `job_id` goes into every chunk.
  static GatherWriter* Start(std::string job_id, Produce produce, Done done, WaitPool& waits,
                             StreamCap::Slot slot);

  // GatherSink, on the producing thread.
  void* Buffer(size_t bytes) override;
  bool Emit(const ChunkFields& piece) override;
  // Once gRPC saw the call cancelled (the client cancelled its context or
  // its connection went; or its deadline passed, which the wait's own
  // deadline comes a margin before): a wait for a version ends.
  bool Cancelled() override { return cancelled_.load(); }

  void OnCancel() override { cancelled_.store(true); }
  void OnWriteDone(bool ok) override;
  void OnDone() override;

 private:
  GatherWriter(std::string job_id, StreamCap::Slot slot);
  void Run(const Produce& produce, const Done& done);
  // Waits until no write is in flight; false if one failed.
  bool AwaitIdle();

  const std::string job_id_;
  const StreamCap::Slot slot_;
  grpc::Slice next_;  // the payload Buffer() handed out last
  uint64_t bytes_ = 0;
  std::atomic<bool> cancelled_{false};
  absl::Mutex mu_;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool failed_ ABSL_GUARDED_BY(mu_) = false;
  grpc::ByteBuffer in_flight_;  // owned by gRPC while writing_
  // gRPC's reference, dropped in OnDone; the producing task holds another.
  std::shared_ptr<GatherWriter> self_;
};

// A stream refused before it began (over the cap): finishes at once with
// `status`.
class RefusedReader final : public grpc::ServerReadReactor<grpc::ByteBuffer> {
 public:
  explicit RefusedReader(const grpc::Status& status) { Finish(status); }
  void OnDone() override { delete this; }
};
class RefusedWriter final : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
 public:
  explicit RefusedWriter(const grpc::Status& status) { Finish(status); }
  void OnDone() override { delete this; }
};

}  // namespace zerostate::server
