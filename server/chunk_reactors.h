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

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "common/chunk_wire.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/server_callback.h"
#include "server/job.h"

namespace zerostate::server {

class ChunkReader final : public grpc::ServerReadReactor<grpc::ByteBuffer> {
 public:
  // Called for each chunk in order, on one of gRPC's callback threads (so
  // it must not wait for anything but a block's mutex). The view's data
  // lies in the received slices, valid only during the call. An error
  // stops the stream: later chunks are not read.
  using Apply = std::function<absl::Status(const ChunkView& chunk)>;
  // Called once at the end with the first error (or OK at the end of the
  // stream); writes the response and returns the call's status.
  using Done = std::function<grpc::Status(const absl::Status& status)>;

  // Starts reading.
  ChunkReader(Apply apply, Done done);

  void OnReadDone(bool ok) override;
  void OnDone() override { delete this; }

 private:
  const Apply apply_;
  const Done done_;
  grpc::ByteBuffer buffer_;
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
