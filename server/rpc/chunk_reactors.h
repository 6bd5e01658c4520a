// The state server's chunk streams on gRPC's callback API, with messages
// as raw grpc::ByteBuffers (no protobuf `bytes` copy in either direction):
//
// - ChunkReader reads a client stream of Chunk messages (PushGradients,
//   InitWeights) and hands each one, parsed in place (common/chunk_wire.h),
//   to a function that folds or copies the payload straight out of the
//   received slices.
// - GatherWriter writes a server stream of Chunk messages (Gather), each a
//   small header slice plus a payload slice that Job::Gather fills once.
//
// Both delete themselves when gRPC is done with the call (OnDone).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "common/chunk_wire.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/server_callback.h"
#include "server/core/job.h"

namespace zerostate::server {

class ChunkReader final : public grpc::ServerReadReactor<grpc::ByteBuffer> {
 public:
  // Called for each chunk in order, first with may_wait false on one of
  // gRPC's callback threads, where it must not wait for anything but a
  // block's mutex. A chunk it answers with Job::IsStagingWait (no staging
  // memory free now) is applied again with may_wait true on a thread of
  // the reader's own, which may wait for staging memory up to the call's
  // deadline; the stream reads on once that ends. The view's data lies in
  // the received slices, valid only during the call. An error stops the
  // stream: later chunks are not read.
  using Apply = std::function<absl::Status(const ChunkView& chunk, bool may_wait)>;
  // Called once at the end with the first error (or OK at the end of the
  // stream); writes the response and returns the call's status.
  using Done = std::function<grpc::Status(const absl::Status& status)>;

  // Starts reading.
  ChunkReader(Apply apply, Done done);

  void OnReadDone(bool ok) override;
  void OnDone() override;

 private:
  // Reads the next chunk after `status` OK, else finishes the call.
  void Continue(const absl::Status& status);
  // Applies `chunk` (whose data `slices` hold) with may_wait on waiter_.
  void ApplyWaiting(std::vector<grpc::Slice> slices, ChunkView chunk);

  const Apply apply_;
  const Done done_;
  grpc::ByteBuffer buffer_;
  // The last chunk applied with may_wait; its last act is Continue.
  std::thread waiter_;
};

class GatherWriter final : public grpc::ServerWriteReactor<grpc::ByteBuffer>,
                           public Job::GatherSink {
 public:
  // Fills the sink (through Job::Gather); may wait for a version.
  using Produce = std::function<absl::Status(Job::GatherSink& sink)>;
  // Called once at the end with produce's result and the payload bytes
  // written; returns the call's status.
  using Done = std::function<grpc::Status(const absl::Status& status, uint64_t bytes)>;

  // Runs produce on a thread of its own: a gather waits for blocks to reach
  // a version, which must not hold one of gRPC's callback threads. One
  // piece is on the wire while produce fills the next. `job_id` goes into
  // every chunk.
  GatherWriter(std::string job_id, Produce produce, Done done);

  // Job::GatherSink, on the producing thread.
  void* Buffer(size_t bytes) override;
  bool Emit(const ChunkFields& piece) override;

  void OnWriteDone(bool ok) override;
  void OnDone() override;

 private:
  void Run(const Produce& produce, const Done& done);
  // Waits until no write is in flight; false if one failed.
  bool AwaitIdle();

  const std::string job_id_;
  grpc::Slice next_;  // the payload Buffer() handed out last
  uint64_t bytes_ = 0;
  absl::Mutex mu_;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool failed_ ABSL_GUARDED_BY(mu_) = false;
  grpc::ByteBuffer in_flight_;  // owned by gRPC while writing_
  std::thread thread_;
};

}  // namespace zerostate::server
