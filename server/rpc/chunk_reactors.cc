#include "server/rpc/chunk_reactors.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace zerostate::server {

ChunkReader::ChunkReader(Apply apply, Done done)
    : apply_(std::move(apply)), done_(std::move(done)) {
  StartRead(&buffer_);
}

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
    if (Job::IsStagingWait(status)) return ApplyWaiting(std::move(slices), *std::move(chunk));
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
  // The thread of the previous wait ends with the read that led here.
  if (waiter_.joinable()) {
    if (waiter_.get_id() == std::this_thread::get_id()) {
      waiter_.detach();  // this read completed inline; the thread touches nothing after
    } else {
      waiter_.join();
    }
  }
  waiter_ = std::thread([this, slices = std::move(slices), chunk = std::move(chunk)] {
    Continue(apply_(chunk, /*may_wait=*/true));
  });
}

void ChunkReader::OnDone() {
  // Finish may have been the waiter's last act; it ends at once.
  if (waiter_.joinable()) {
    if (waiter_.get_id() == std::this_thread::get_id()) {
      waiter_.detach();
    } else {
      waiter_.join();
    }
  }
  delete this;
}

GatherWriter::GatherWriter(std::string job_id, Produce produce, Done done)
    : job_id_(std::move(job_id)) {
  thread_ = std::thread([this, produce = std::move(produce), done = std::move(done)] {
    Run(produce, done);
  });
}

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
  // Finish was the thread's last act; it ends at once. (gRPC runs OnDone
  // on its own threads; the check only guards against joining oneself.)
  if (thread_.get_id() == std::this_thread::get_id()) {
    thread_.detach();
  } else {
    thread_.join();
  }
  delete this;
}

}  // namespace zerostate::server
