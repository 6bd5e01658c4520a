#include "server/data_session.h"

#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <optional>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"

namespace zerostate::server {
namespace {

// The metrics' method names of the data plane's operations (the gRPC
// path records "PushGradients" and "Gather").
constexpr char kPushMethod[] = "DataPush";
constexpr char kGatherMethod[] = "DataGather";

// The longest a read or write inside a frame may block.
constexpr absl::Duration kMidFrameTimeout = absl::Seconds(60);

v1::DataFrameMeta Reply(uint64_t incarnation, const absl::Status& status) {
  v1::DataFrameMeta meta;
  meta.set_incarnation(incarnation);
  meta.set_code(static_cast<int>(status.code()));
  meta.set_message(std::string(status.message()));
  return meta;
}

// Sends one gather's pieces on a thread of its own, so that Job fills
// piece i+1 while piece i is on the wire (a double buffer: one piece being
// filled, at most one handed over or being sent).
class PieceSender {
 public:
  explicit PieceSender(int fd) : fd_(fd), thread_([this] { Loop(); }) {}
  ~PieceSender() { Finish(); }

  // Hands a filled piece over once the previous one is sent; false once a
  // send failed (the client went away).
  bool Send(v1::DataFrameMeta meta, DataBufferPool::Lease piece, size_t bytes) {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(this, &PieceSender::Idle));
    if (failed_) return false;
    next_.emplace(Piece{std::move(meta), std::move(piece), bytes});
    return true;
  }

  // Waits for the pieces handed over to be sent; true if all were. Their
  // payload bytes are in sent().
  bool Finish() {
    {
      absl::MutexLock lock(&mu_);
      done_ = true;
    }
    if (thread_.joinable()) thread_.join();
    return !failed_;
  }
  uint64_t sent() const { return sent_; }  // after Finish()

 private:
  struct Piece {
    v1::DataFrameMeta meta;
    DataBufferPool::Lease lease;
    size_t bytes = 0;
  };

  bool Idle() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return failed_ || (!next_.has_value() && !sending_);
  }
  bool HasWork() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return next_.has_value() || done_; }

  void Loop() {
    while (true) {
      Piece p;
      {
        absl::MutexLock lock(&mu_);
        mu_.Await(absl::Condition(this, &PieceSender::HasWork));
        if (!next_.has_value()) return;  // done
        p = std::move(*next_);
        next_.reset();
        sending_ = true;
      }
      const bool ok =
          SendFrame(fd_, FrameType::kGatherPiece, p.meta, p.lease.data(), p.bytes).ok();
      p.lease = DataBufferPool::Lease();  // given back
      absl::MutexLock lock(&mu_);
      sending_ = false;
      if (!ok) {
        failed_ = true;
        return;
      }
      sent_ += p.bytes;
    }
  }

  const int fd_;
  absl::Mutex mu_;
  std::optional<Piece> next_ ABSL_GUARDED_BY(mu_);
  bool sending_ ABSL_GUARDED_BY(mu_) = false;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  bool failed_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t sent_ = 0;  // written by the sending thread only
  std::thread thread_;  // last: starts once the rest is constructed
};

class Session final : public Job::GatherSink {
 public:
  Session(const DataSessionContext& ctx, int fd) : ctx_(ctx), fd_(fd) {}

  void Run() {
    while (true) {
      // Idle between frames for as long as the client likes; within a
      // frame, socket reads and writes time out (kMidFrameTimeout), so a
      // stalled client gives its buffer back.
      pollfd p{fd_, POLLIN, 0};
      while (poll(&p, 1, -1) < 0 && errno == EINTR) {
      }
      absl::StatusOr<std::optional<FrameStart>> start = RecvFrameStart(fd_);
      if (start.ok() && !start->has_value()) return;  // closed at a frame boundary
      absl::Status s = start.ok() ? Serve(**start) : start.status();
      if (s.ok()) continue;
      // A frame we could not read whole: say why, then hang up (the rest
      // of the byte stream cannot be trusted).
      if (absl::IsInvalidArgument(s) || absl::IsDataLoss(s)) {
        (void)SendFrame(fd_, FrameType::kError,
                        Reply(ctx_.incarnation, absl::InvalidArgumentError(s.message())));
        LingeringClose();
      }
      return;
    }
  }

  // Sends FIN after the answer, then reads and drops what the client still
  // sends (briefly, and a bounded amount): closing with unread bytes would
  // send a reset, which can destroy the answer before the client reads it.
  void LingeringClose() {
    shutdown(fd_, SHUT_WR);
    SetSocketDeadline(fd_, absl::Now() + absl::Seconds(1));
    char sink[64 << 10];
    for (int i = 0; i < 256 && recv(fd_, sink, sizeof(sink), 0) > 0; ++i) {
    }
  }

  // Job::GatherSink. Buffer() runs under a block's mutex, which pushes
  // holding buffers may need: it must not wait for the budget.
  void* Buffer(size_t bytes) override {
    piece_bytes_ = bytes;
    piece_ = ctx_.buffers->Borrow(bytes, /*wait=*/false);
    return piece_.data();
  }
  bool Emit(const ChunkFields& piece) override {
    v1::DataFrameMeta meta;
    v1::Chunk* c = meta.mutable_chunk();
    c->set_step(piece.step);
    c->set_block(piece.block);
    c->set_offset(piece.offset);
    c->set_dtype(piece.dtype);
    c->set_version(piece.version);
    return sender_->Send(std::move(meta), std::move(piece_), piece_bytes_);
  }

 private:
  // Serves one frame whose header and meta are read. Errors end the
  // connection: INVALID_ARGUMENT / DATA_LOSS (a bad frame; answered), or
  // I/O errors.
  absl::Status Serve(const FrameStart& f) {
    switch (f.header.type) {
      case FrameType::kPush:
        return ServePush(f);
      case FrameType::kGather:
        return ServeGather(f);
      default:
        return absl::InvalidArgumentError(
            absl::StrCat("data plane frame: a client may send PUSH or GATHER frames, not ",
                         FrameTypeName(static_cast<uint8_t>(f.header.type))));
    }
  }

  absl::Time DeadlineOf(const v1::DataFrameMeta& meta) const {
    absl::Time cap = absl::Now() + ctx_.max_wait;
    if (meta.timeout_ms() == 0) return cap;
    return std::min(cap, absl::Now() + absl::Milliseconds(std::min<uint64_t>(meta.timeout_ms(),
                                                                             uint64_t{1} << 40)));
  }

  absl::Status ServePush(const FrameStart& f) {
    const absl::Time start = absl::Now();
    bool duplicate = false;
    absl::Status s;
    {
      // Held while the payload is read and folded; waits while the
      // server's frames in flight fill the budget (no lock held here).
      DataBufferPool::Lease payload = ctx_.buffers->Borrow(f.header.payload_len, /*wait=*/true);
      absl::Status read = RecvExact(fd_, payload.data(), f.header.payload_len);
      if (absl::IsDataLoss(read)) {
        return absl::DataLossError(absl::StrCat("truncated frame payload: ", read.message()));
      }
      if (!read.ok()) return read;
      s = Push(f.meta, payload.data(), f.header.payload_len, &duplicate);
    }
    ctx_.metrics->RecordRpc(kPushMethod, s, absl::ToDoubleSeconds(absl::Now() - start),
                            f.header.payload_len, 0);
    v1::DataFrameMeta ack = Reply(ctx_.incarnation, s);
    ack.set_duplicate(duplicate);
    return SendFrame(fd_, FrameType::kPushAck, ack);
  }

  absl::Status Push(const v1::DataFrameMeta& meta, const uint8_t* payload, size_t bytes,
                    bool* duplicate) {
    auto job = ctx_.jobs->Authorize(meta.chunk().job_id(), meta.token());
    if (!job.ok()) return job.status();
    auto outcome = (*job)->Push(FrameChunkView(meta.chunk(), payload, bytes));
    if (!outcome.ok()) return outcome.status();
    *duplicate = *outcome == Job::PushOutcome::kDuplicate;
    return absl::OkStatus();
  }

  absl::Status ServeGather(const FrameStart& f) {
    const absl::Time start = absl::Now();
    absl::Status s;
    {
      PieceSender sender(fd_);
      sender_ = &sender;
      s = Gather(f.meta);
      if (!sender.Finish() && s.ok()) s = absl::CancelledError("client went away");
      sender_ = nullptr;
      gathered_ = sender.sent();
    }
    ctx_.metrics->RecordRpc(kGatherMethod, s, absl::ToDoubleSeconds(absl::Now() - start), 0,
                            gathered_);
    if (absl::IsCancelled(s)) return absl::UnavailableError("client went away");
    v1::DataFrameMeta end = Reply(ctx_.incarnation, s);
    end.set_bytes(gathered_);
    return SendFrame(fd_, FrameType::kGatherEnd, end);
  }

  absl::Status Gather(const v1::DataFrameMeta& meta) {
    const v1::GatherRequest& req = meta.gather();
    auto job = ctx_.jobs->Authorize(req.job_id(), meta.token());
    if (!job.ok()) return job.status();
    auto range = (*job)->CheckGather(req);
    if (!range.ok()) return range.status();
    return (*job)->Gather(*range, req.min_version(), req.dtype(), ctx_.gather_piece_elems,
                          DeadlineOf(meta), *this);
  }

  const DataSessionContext& ctx_;
  const int fd_;
  DataBufferPool::Lease piece_;  // the gather piece being filled
  PieceSender* sender_ = nullptr;  // during a gather
  size_t piece_bytes_ = 0;
  uint64_t gathered_ = 0;
};

}  // namespace

void ServeDataConnection(const DataSessionContext& ctx, int fd) {
  TuneDataSocket(fd);
  timeval tv = absl::ToTimeval(kMidFrameTimeout);
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  Session(ctx, fd).Run();
}

}  // namespace zerostate::server
