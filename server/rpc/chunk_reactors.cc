#include "server/rpc/chunk_reactors.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace zerostate::server {

ChunkReader* ChunkReader::Start(Apply apply, Done done, WaitPool& waits, StreamCap::Slot slot) {
  auto* reader = new ChunkReader(std::move(apply), std::move(done), waits, std::move(slot));
  reader->self_.reset(reader);
  reader->StartRead(&reader->buffer_);
  return reader;
}

ChunkReader::ChunkReader(Apply apply, Done done, WaitPool& waits, StreamCap::Slot slot)
    : apply_(std::move(apply)), done_(std::move(done)), waits_(waits), slot_(std::move(slot)) {}

void ChunkReader::OnReadDone(bool ok) {
  // !ok: the client half-closed the stream (or the call is gone, when the
  // status no longer reaches anyone).
  if (!ok) return Finish(done_(absl::OkStatus()));
  std::vector<grpc::Slice> slices;  // references, not copies, of the received bytes
  absl::Status status = absl::OkStatus();
  if (grpc::Status dumped = buffer_.Dump(&slices); !dumped.ok()) {
    status = absl::InternalError(absl::StrCat("reading a chunk: ", dumped.error_message()));
  } else if (absl::StatusOr<ChunkView> chunk = ParseChunk(slices); !chunk.ok()) {
    status = absl::InvalidArgumentError(chunk.status().message());
  } else {
    status = apply_(*chunk, /*may_wait=*/false);
    if (JobPushes::IsStagingWait(status)) return ApplyWaiting(std::move(slices), *std::move(chunk));
  }
  buffer_.Clear();
  Continue(status);
}

void ChunkReader::Continue(const absl::Status& status) {
  if (!status.ok()) return Finish(done_(status));
  StartRead(&buffer_);
}

void ChunkReader::ApplyWaiting(std::vector<grpc::Slice> slices, ChunkView chunk) {
  buffer_.Clear();  // `slices` keep the chunk's bytes
  // Continue is the task's last act on the reader; `me` keeps it alive
  // until the task is gone, should gRPC be done with the call meanwhile.
  waits_.Run([me = self_, slices = std::move(slices), chunk = std::move(chunk)]() mutable {
    me->Continue(me->apply_(chunk, /*may_wait=*/true));
  });
}

void ChunkReader::OnDone() {
  self_.reset();  // deletes this, unless a task on waits_ still holds it
}

GatherWriter* GatherWriter::Start(std::string job_id, Produce produce, Done done, WaitPool& waits,
                                  StreamCap::Slot slot) {
  auto* writer = new GatherWriter(std::move(job_id), std::move(slot));
  writer->self_.reset(writer);
  waits.Run([me = writer->self_, produce = std::move(produce), done = std::move(done)] {
    me->Run(produce, done);
  });
  return writer;
}

GatherWriter::GatherWriter(std::string job_id, StreamCap::Slot slot)
    : job_id_(std::move(job_id)), slot_(std::move(slot)) {}

void GatherWriter::Run(const Produce& produce, const Done& done) {
  absl::Status status = produce(*this);
  if (!AwaitIdle() && status.ok()) status = absl::CancelledError("client went away");
  Finish(done(status, bytes_));
}

void* GatherWriter::Buffer(size_t bytes) {
  next_ = grpc::Slice(bytes);  // uninitialized; Job fills all of it
  return const_cast<uint8_t*>(next_.begin());
}

bool GatherWriter::Emit(const ChunkFields& piece) {
  ChunkFields fields = piece;
  fields.job_id = job_id_;
  bytes_ += next_.size();
  grpc::ByteBuffer chunk = MakeChunkBuffer(fields, std::move(next_));
  if (!AwaitIdle()) return false;
  {
    absl::MutexLock lock(&mu_);
    writing_ = true;
  }
  in_flight_.Swap(&chunk);
  StartWrite(&in_flight_);
  return true;
}

bool GatherWriter::AwaitIdle() {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](bool* writing) { return !*writing; }, &writing_));
  return !failed_;
}

void GatherWriter::OnWriteDone(bool ok) {
  absl::MutexLock lock(&mu_);
  writing_ = false;
  if (!ok) failed_ = true;
}

void GatherWriter::OnDone() {
  self_.reset();  // deletes this, unless the producing task still holds it
}

}  // namespace zerostate::server
