#include "server/dataplane/data_session.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/any_invocable.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"

namespace zerostate::server {
namespace {

// The metrics' method names of the data plane's operations (the gRPC
// path records "PushGradients" and "Gather"; the same-host plane "ShmPush"
// and "ShmGather").
constexpr char kPushMethod[] = "DataPush";
constexpr char kGatherMethod[] = "DataGather";
constexpr char kShmPushMethod[] = "ShmPush";
constexpr char kShmGatherMethod[] = "ShmGather";
constexpr char kReplicaSumMethod[] = "DataReplicaSum";
constexpr char kShmBufferMethod[] = "ShmBuffer";

// The longest sending one answer may take (a client that stopped reading).
constexpr absl::Duration kSendTimeout = absl::Seconds(60);

v1::DataFrameMeta Reply(uint64_t incarnation, const absl::Status& status) {
  v1::DataFrameMeta meta;
  meta.set_incarnation(incarnation);
  meta.set_code(static_cast<int>(status.code()));
  meta.set_message(std::string(status.message()));
  return meta;
}

// Runs a session's tasks one at a time, in order, on a thread of its own,
// so that the session thread does the next piece of work meanwhile (a
// double buffer): Job fills TCP gather piece i+1 while piece i is sent, and
// push i+1's payload is read while push i is folded and acknowledged.
class TaskThread {
 public:
  // Returns false when the connection broke; no task runs after that.
  using Task = absl::AnyInvocable<bool()>;

  TaskThread() : thread_([this] { Loop(); }) {}
  ~TaskThread() {
    {
      absl::MutexLock lock(&mu_);
      done_ = true;
    }
    thread_.join();
  }

  // Hands `task` over once the one before it has run; false (and `task`
  // dropped) once a task failed.
  bool Run(Task task) {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(this, &TaskThread::Idle));
    if (failed_) return false;
    next_ = std::move(task);
    return true;
  }

  // Waits until the tasks handed over have run; false if one failed.
  bool Drain() {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(this, &TaskThread::Idle));
    return !failed_;
  }

 private:
  bool Idle() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return failed_ || (next_ == nullptr && !running_);
  }
  bool HasWork() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return next_ != nullptr || done_; }

  void Loop() {
    while (true) {
      Task task;
      {
        absl::MutexLock lock(&mu_);
        mu_.Await(absl::Condition(this, &TaskThread::HasWork));
        if (next_ == nullptr) return;  // done
        task = std::move(next_);
        next_ = nullptr;
        running_ = true;
      }
      const bool ok = task();
      task = nullptr;  // what it holds (a buffer lease) is given back
      absl::MutexLock lock(&mu_);
      running_ = false;
      if (!ok) {
        failed_ = true;
        return;
      }
    }
  }

  absl::Mutex mu_;
  Task next_ ABSL_GUARDED_BY(mu_);
  bool running_ ABSL_GUARDED_BY(mu_) = false;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  bool failed_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;  // last: starts once the rest is constructed
};

class Session final : public GatherSink {
 public:
  Session(const DataSessionContext& ctx, DataStream& stream, const ShmSegment* shm)
      : ctx_(ctx),
        stream_(stream),
        shm_(shm),
        push_method_(shm != nullptr ? kShmPushMethod : kPushMethod),
        gather_method_(shm != nullptr ? kShmGatherMethod : kGatherMethod),
        opened_(absl::Now()) {}

  void Run() {
    while (true) {
      // Idle between frames for as long as the client likes once it sent
      // an authorized frame; within a frame, reads end at the frame timeout,
      // so a stalled client gives its buffer back.
      if (!stream_.WaitReadable(authorized_ ? absl::InfiniteFuture()
                                            : opened_ + ctx_.frame_timeout)) {
        return;
      }
      stream_.SetRecvDeadline(absl::Now() + ctx_.frame_timeout);
      absl::StatusOr<std::optional<FrameStart>> start = RecvFrameStart(stream_);
      if (start.ok() && !start->has_value()) return;  // closed at a frame boundary
      absl::Status s = start.ok() ? Serve(**start) : start.status();
      if (s.ok()) continue;
      // A frame we could not read whole: say why, then hang up (the rest
      // of the byte stream cannot be trusted).
      if (absl::IsInvalidArgument(s) || absl::IsDataLoss(s)) {
        (void)tasks_.Drain();  // the answers before it go first
        (void)Send(FrameType::kError,
                   Reply(ctx_.incarnation, absl::InvalidArgumentError(s.message())));
        LingeringClose();
      }
      return;
    }
  }

  // Ends this side after the answer (close_notify under TLS, then FIN),
  // then reads and drops what the client still sends (briefly, and a
  // bounded amount): closing with unread bytes would send a reset, which
  // can destroy the answer before the client reads it.
  void LingeringClose() {
    stream_.CloseSend();
    stream_.SetRecvDeadline(absl::Now() + absl::Seconds(1));
    char sink[16 << 10];
    for (int i = 0; i < 1024; ++i) {
      absl::StatusOr<size_t> r = stream_.RecvSome(sink, sizeof(sink));
      if (!r.ok() || *r == 0) break;
    }
  }

  // Sends a frame, taking at most kSendTimeout.
  absl::Status Send(FrameType type, const v1::DataFrameMeta& meta, const void* payload = nullptr,
                    size_t bytes = 0) {
    stream_.SetSendDeadline(absl::Now() + kSendTimeout);
    return SendFrame(stream_, type, meta, payload, bytes);
  }

  // GatherSink. Buffer() runs under a block's mutex, which pushes
  // holding buffers may need: it must not wait for the budget.
  // On the same-host plane the piece goes into the next bytes of the
  // GATHER's region (checked to hold the range; a pool buffer, and the
  // gather stopped, should the pieces ever pass it).
  void* Buffer(size_t bytes) override {
    piece_bytes_ = bytes;
    if (shm_ != nullptr && region_used_ + bytes <= region_bytes_) {
      uint8_t* at = region_ + region_used_;
      piece_at_ = region_offset_ + region_used_;
      region_used_ += bytes;
      return at;
    }
    region_overflow_ = shm_ != nullptr;
    piece_ = ctx_.buffers->Borrow(bytes, /*wait=*/false);
    return piece_.data();
  }
  // In a client's shared buffer (not this connection's segment, which the
  // client copies out of at once).
  bool BufferReadElsewhere() const override {
    return shm_ != nullptr && region_buffer_ != 0 && !region_overflow_;
  }
  void* ClientBufferAt(uint64_t at, size_t bytes) override {
    if (shm_ == nullptr || region_buffer_ == 0 || region_used_ + at + bytes > region_bytes_) {
      return nullptr;
    }
    return region_ + region_used_ + at;
  }
  // The client hung up (Ticket::Cancel shuts its socket down, or it
  // closed or broke the connection): the raw socket, TLS or not, reports
  // the peer's shutdown or an error. Bytes waiting to be read (a next
  // frame the client pipelined) never count.
  bool Cancelled() override {
    pollfd p{stream_.fd(), POLLRDHUP, 0};
    return poll(&p, 1, 0) == 1 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
  }
  bool Emit(const ChunkFields& piece) override {
    v1::DataFrameMeta meta;
    v1::Chunk* c = meta.mutable_chunk();
    c->set_step(piece.step);
    c->set_block(piece.block);
    c->set_offset(piece.offset);
    c->set_dtype(piece.dtype);
    c->set_version(piece.version);
    c->set_elems(piece.elems);
    if (region_overflow_) return false;
    if (shm_ != nullptr) {
      // Only the frame saying where the piece lies: sent here, at once. A
      // hand-off to tasks_ cost a thread wake-up per piece, and the next
      // piece waited for it (ServeGather drained tasks_ before the first).
      meta.set_shm_buffer(region_buffer_);
      meta.set_shm_offset(piece_at_);
      meta.set_shm_bytes(piece_bytes_);
      if (!Send(FrameType::kGatherPiece, meta).ok()) return false;
      gathered_ += piece_bytes_;
      return true;
    }
    return tasks_.Run(
        [this, meta = std::move(meta), piece = std::move(piece_), bytes = piece_bytes_]() mutable {
          if (!Send(FrameType::kGatherPiece, meta, piece.data(), bytes).ok())
            return false;
          gathered_ += bytes;
          return true;
        });
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
      case FrameType::kReplicaSum:
        return ServeReplicaSum(f);
      case FrameType::kShmBuffer:
        return ServeShmBuffer(f);
      default:
        return absl::InvalidArgumentError(absl::StrCat(
            "data plane frame: a client may send PUSH, GATHER, REPLICA_SUM or SHM_BUFFER "
            "frames, not ",
            FrameTypeName(static_cast<uint8_t>(f.header.type))));
    }
  }

  // When the frame's sender gives up: its timeout counts from the frame's
  // arrival (none: never). The core's handlers answer a margin before it.
  static absl::Time CallerDeadline(const v1::DataFrameMeta& meta) {
    if (meta.timeout_ms() == 0) return absl::InfiniteFuture();
    return absl::Now() +
           absl::Milliseconds(std::min<uint64_t>(meta.timeout_ms(), uint64_t{1} << 40));
  }

  // Where a frame's payload is on the same-host plane: null on a TCP
  // connection. Errors: INVALID_ARGUMENT (a bad frame: shm fields on TCP,
  // a payload on the socket of a same-host connection, or ShmAt's).
  absl::StatusOr<const uint8_t*> ShmPayload(const FrameStart& f) const {
    if (shm_ == nullptr) {
      if (f.meta.shm_offset() == 0 && f.meta.shm_bytes() == 0 && f.meta.shm_buffer() == 0) {
        return nullptr;
      }
      return absl::InvalidArgumentError(
          "data plane frame: shm_buffer / shm_offset / shm_bytes on a TCP connection");
    }
    if (f.header.payload_len != 0) {
      return absl::InvalidArgumentError(
          "data plane frame: a payload on the socket of a same-host (shm) connection");
    }
    absl::StatusOr<uint8_t*> at =
        ShmAt(f.meta.shm_buffer(), f.meta.shm_offset(), f.meta.shm_bytes());
    if (!at.ok()) return Prefixed("data plane frame: ", at.status());
    return *at;
  }

  static absl::Status Prefixed(absl::string_view prefix, const absl::Status& s) {
    return absl::Status(s.code(), absl::StrCat(prefix, s.message()));
  }

  // The `bytes` bytes at `offset` of the memory `buffer` names on this
  // same-host connection: 0 its segment, else a shared buffer mapped here.
  // Errors: INVALID_ARGUMENT naming a buffer not mapped here, or the range
  // and the size of the memory it is outside of.
  absl::StatusOr<uint8_t*> ShmAt(uint32_t buffer, uint64_t offset, uint64_t bytes) const {
    if (buffer == 0) return shm_->At(offset, bytes);
    auto it = shared_.find(buffer);
    if (it == shared_.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("shm_buffer ", buffer, ": no shared buffer of that id on this connection"));
    }
    absl::StatusOr<uint8_t*> at = it->second->At(offset, bytes);
    if (!at.ok()) return Prefixed(absl::StrCat("shared buffer ", buffer, ": "), at.status());
    return *at;
  }

  // SHM_BUFFER: maps the shared buffer whose memfd follows the frame, for
  // the connection's life, and answers SHM_READY in order with the other
  // answers. A refused one (MapShared's errors) is answered and changes
  // nothing. Errors: INVALID_ARGUMENT (a bad frame: on TCP, id 0, no memfd
  // after it).
  absl::Status ServeShmBuffer(const FrameStart& f) {
    const absl::Time start = absl::Now();
    const uint32_t id = f.meta.shm_buffer();
    if (shm_ == nullptr) {
      return absl::InvalidArgumentError("data plane frame: SHM_BUFFER on a TCP connection");
    }
    if (id == 0) {
      return absl::InvalidArgumentError(
          "data plane frame: SHM_BUFFER names shm_buffer 0 (the connection's own segment)");
    }
    absl::StatusOr<int> fd = RecvSegmentFd(stream_.fd(), absl::Now() + ctx_.frame_timeout);
    if (!fd.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "data plane frame: SHM_BUFFER ", id, " without its memfd: ", fd.status().message()));
    }
    absl::Status mapped = MapShared(id, *fd);
    return Answer(mapped, start, kShmBufferMethod, FrameType::kShmReady, 0);
  }

  // Maps `fd` (owned; closed on error) as shared buffer `id`. Errors:
  // ALREADY_EXISTS (an id mapped before), RESOURCE_EXHAUSTED naming the
  // cap it would pass, FAILED_PRECONDITION / UNAVAILABLE (ShmSegment::Attach's:
  // not sealed, empty, cannot map).
  absl::Status MapShared(uint32_t id, int fd) {
    struct stat st {};
    absl::Status refused;
    if (shared_.contains(id)) {
      refused = absl::AlreadyExistsError(
          absl::StrCat("shared buffer ", id, " is mapped on this connection already"));
    } else if (shared_.size() >= ctx_.max_shared_buffers) {
      refused = absl::ResourceExhaustedError(
          absl::StrCat("shared buffer ", id, ": this connection has ", shared_.size(),
                       " mapped, the cap of shared buffers per connection (max_shared_buffers)"));
    } else if (fstat(fd, &st) == 0 &&
               static_cast<uint64_t>(st.st_size) > ctx_.max_shared_bytes - shared_bytes_) {
      refused = absl::ResourceExhaustedError(
          absl::StrCat("shared buffer ", id, " of ", st.st_size, " bytes: with the ", shared_bytes_,
                       " mapped on this connection it passes the cap of ", ctx_.max_shared_bytes,
                       " bytes of shared buffers per connection (max_shared_bytes)"));
    }
    if (!refused.ok()) {
      close(fd);
      return refused;
    }
    // Mapped whole if the client allocated it (a gather's first write to
    // each page would fault otherwise), once for all the connections that
    // name the same memfd, held for this connection's life.
    absl::StatusOr<std::shared_ptr<const ShmSegment>> buffer = ctx_.shared_mappings->Attach(fd);
    if (!buffer.ok()) return Prefixed(absl::StrCat("shared buffer ", id, ": "), buffer.status());
    shared_bytes_ += (*buffer)->size();
    shared_[id] = *std::move(buffer);
    return absl::OkStatus();
  }

  absl::Status ServePush(const FrameStart& f) {
    const absl::Time start = absl::Now();
    absl::StatusOr<const uint8_t*> in_shm = ShmPayload(f);
    if (!in_shm.ok()) return in_shm.status();
    const uint8_t* shm_payload = *in_shm;
    const size_t bytes = shm_ != nullptr ? f.meta.shm_bytes() : f.header.payload_len;
    const ChunkFields fields = FrameChunkView(f.meta.chunk(), nullptr, 0).fields;
    // Authorized once for the frame, from its header and meta. The first
    // node's fp32 payload goes straight into the block's sum (in_place());
    // any other into a buffer, held while it is read and folded (waiting
    // while the server's frames in flight fill the budget; no lock held).
    // A push that would wait for staging memory waits in Begin, before its
    // payload is read, not holding a frame buffer meanwhile: with many
    // connections of early nodes waiting, their buffers could fill the
    // pool the head node's frames need. A bad frame gets neither: Apply
    // says why.
    absl::StatusOr<PushHandler::Push> push =
        ctx_.pushes->Begin(fields, f.meta.token(), bytes, CallerDeadline(f.meta),
                           PushHandler::Payload::kToRead);
    if (!push.ok()) return RefusePush(f, push.status(), start);
    authorized_ = true;
    DataBufferPool::Lease payload;
    // A payload in the segment is folded from there: no buffer.
    if (push->in_place() == nullptr && shm_payload == nullptr) {
      payload = ctx_.buffers->Borrow(bytes, /*wait=*/true);
    }
    if (shm_payload != nullptr) {
      if (push->in_place() != nullptr) std::memcpy(push->in_place(), shm_payload, bytes);
    } else {
      void* into = push->in_place() != nullptr ? push->in_place() : payload.data();
      stream_.SetRecvDeadline(absl::Now() + ctx_.frame_timeout);  // the waits above do not count
      absl::Status read = RecvExact(stream_, into, bytes);
      if (absl::IsDataLoss(read)) {
        return absl::DataLossError(absl::StrCat("truncated frame payload: ", read.message()));
      }
      if (!read.ok()) return read;  // the claim, if any, is given back
    }
    const uint8_t* source = shm_payload != nullptr ? shm_payload : payload.data();
    // A payload in a shared buffer its client holds until the step: the
    // core may keep pointing at it (ChunkView::held), the mapping with it.
    std::shared_ptr<const void> held;
    if (f.meta.held() && f.meta.shm_buffer() != 0 && shm_payload != nullptr) {
      held = shared_.at(f.meta.shm_buffer());  // ShmPayload found it
    }
    // Applied and acknowledged on tasks_ while the next frame is read. A
    // push frame usually carries no timeout: it may wait for staging
    // memory (on this task thread, no lock held) as long as the server
    // lets any call wait, like a gather without one.
    const bool handed = tasks_.Run([this, start, meta = f.meta, payload = std::move(payload),
                                    push = *std::move(push), source, bytes,
                                    held = std::move(held)]() mutable {
      ChunkView view = FrameChunkView(meta.chunk(), source, bytes);
      view.held = std::move(held);
      absl::StatusOr<PushOutcome> outcome = ctx_.pushes->Apply(push, view, /*may_wait=*/true);
      payload = DataBufferPool::Lease();  // given back
      push = PushHandler::Push();  // the claim, then the job
      ctx_.metrics->RecordRpc(push_method_, outcome.status(),
                              absl::ToDoubleSeconds(absl::Now() - start), bytes, 0);
      v1::DataFrameMeta ack = Reply(ctx_.incarnation, outcome.status());
      ack.set_duplicate(outcome.ok() && *outcome == PushOutcome::kDuplicate);
      return Send(FrameType::kPushAck, ack).ok();
    });
    return handed ? absl::OkStatus() : absl::UnavailableError("client went away");
  }

  // A push whose token or job was refused: its payload is dropped (no
  // pool buffer, no claim), and the refusal is the frame's answer, in order.
  absl::Status RefusePush(const FrameStart& f, const absl::Status& refused, absl::Time start) {
    return Refuse(f, refused, start, push_method_, FrameType::kPushAck);
  }

  // Reads a refused frame's payload into a small scratch buffer, drops it,
  // and answers `refused` with a `answer` frame, in order.
  absl::Status Refuse(const FrameStart& f, const absl::Status& refused, absl::Time start,
                      const char* method, FrameType answer) {
    char scratch[16 << 10];
    for (uint64_t left = f.header.payload_len; left > 0;) {
      size_t n = static_cast<size_t>(std::min<uint64_t>(left, sizeof(scratch)));
      absl::Status read = RecvExact(stream_, scratch, n);
      if (absl::IsDataLoss(read)) {
        return absl::DataLossError(absl::StrCat("truncated frame payload: ", read.message()));
      }
      if (!read.ok()) return read;
      left -= n;
    }
    return Answer(refused, start, method, answer, 0);
  }

  // Records `status` in the metrics and sends it as a `type` frame, on
  // tasks_ (in order with the answers before it).
  absl::Status Answer(const absl::Status& status, absl::Time start, const char* method,
                      FrameType type, uint64_t bytes) {
    const bool handed = tasks_.Run([this, status, start, method, type, bytes] {
      ctx_.metrics->RecordRpc(method, status, absl::ToDoubleSeconds(absl::Now() - start), bytes, 0);
      return Send(type, Reply(ctx_.incarnation, status)).ok();
    });
    return handed ? absl::OkStatus() : absl::UnavailableError("client went away");
  }

  // A primary's summed gradient of one block: checked from its
  // meta, then its payload read and kept until the step's ApplyStep.
  absl::Status ServeReplicaSum(const FrameStart& f) {
    const absl::Time start = absl::Now();
    if (shm_ != nullptr) {
      return absl::InvalidArgumentError(
          "data plane frame: REPLICA_SUM on a same-host (shm) connection");
    }
    if (absl::StatusOr<const uint8_t*> in_shm = ShmPayload(f); !in_shm.ok()) {
      return in_shm.status();
    }
    const uint64_t bytes = f.header.payload_len;
    absl::Status checked =
        ctx_.replica_sums == nullptr
            ? absl::FailedPreconditionError("REPLICA_SUM: this server keeps no replica sums")
            : ctx_.replica_sums->Check(f.meta.token(), f.meta.replica_sum(), bytes);
    if (!checked.ok()) {
      return Refuse(f, checked, start, kReplicaSumMethod, FrameType::kReplicaSumAck);
    }
    authorized_ = true;
    std::string sum = ctx_.replica_sums->buffers().Buffer(bytes);
    stream_.SetRecvDeadline(absl::Now() + ctx_.frame_timeout);
    absl::Status read = RecvExact(stream_, sum.data(), bytes);
    if (absl::IsDataLoss(read)) {
      return absl::DataLossError(absl::StrCat("truncated frame payload: ", read.message()));
    }
    if (!read.ok()) return read;
    absl::Status kept = ctx_.replica_sums->Keep(f.meta.replica_sum(), std::move(sum));
    return Answer(kept, start, kReplicaSumMethod, FrameType::kReplicaSumAck, bytes);
  }

  absl::Status ServeGather(const FrameStart& f) {
    const absl::Time start = absl::Now();
    // The pushes before it are acknowledged first; its pieces are sent on
    // tasks_ (gathered_ counts their bytes there).
    if (!tasks_.Drain()) return absl::UnavailableError("client went away");
    gathered_ = 0;
    absl::Status s = Gather(f.meta);
    if (!tasks_.Drain() && s.ok()) s = absl::CancelledError("client went away");
    ctx_.metrics->RecordRpc(gather_method_, s, absl::ToDoubleSeconds(absl::Now() - start), 0,
                            gathered_);
    if (absl::IsCancelled(s)) return absl::UnavailableError("client went away");
    v1::DataFrameMeta end = Reply(ctx_.incarnation, s);
    end.set_bytes(gathered_);
    return Send(FrameType::kGatherEnd, end);
  }

  absl::Status Gather(const v1::DataFrameMeta& meta) {
    auto gather = ctx_.gathers->Begin(meta.gather(), meta.token(), CallerDeadline(meta));
    if (!gather.ok()) return gather.status();
    authorized_ = true;
    if (shm_ != nullptr) {
      if (absl::Status s = UseRegion(meta, gather->bytes); !s.ok()) return s;
    }
    return ctx_.gathers->Serve(*gather, *this);
  }

  // Takes the GATHER's region (of the segment or a shared buffer) for its
  // `bytes` of pieces. Errors: INVALID_ARGUMENT naming what does not fit.
  absl::Status UseRegion(const v1::DataFrameMeta& meta, uint64_t bytes) {
    absl::StatusOr<uint8_t*> at = ShmAt(meta.shm_buffer(), meta.shm_offset(), meta.shm_bytes());
    if (!at.ok()) return Prefixed("GATHER region: ", at.status());
    if (meta.shm_bytes() < bytes) {
      return absl::InvalidArgumentError(absl::StrCat("GATHER region of ", meta.shm_bytes(),
                                                     " bytes cannot hold the range's ", bytes));
    }
    region_ = *at;
    region_buffer_ = meta.shm_buffer();
    region_offset_ = meta.shm_offset();
    region_bytes_ = meta.shm_bytes();
    region_used_ = 0;
    region_overflow_ = false;
    return absl::OkStatus();
  }

  const DataSessionContext& ctx_;
  DataStream& stream_;
  const ShmSegment* const shm_;    // the same-host plane's segment, or null
  // The shared buffers mapped on this same-host connection, by id, and
  // their bytes (session thread only; the task thread uses only payload
  // pointers into them, which stay valid: none is unmapped before tasks_
  // stopped).
  absl::flat_hash_map<uint32_t, std::shared_ptr<const ShmSegment>> shared_;
  uint64_t shared_bytes_ = 0;
  const char* const push_method_;  // for the metrics
  const char* const gather_method_;
  // The current GATHER's region: in shm_ or shared buffer region_buffer_,
  // at region_offset_ there, starting at region_ (gathering thread only).
  uint8_t* region_ = nullptr;
  uint32_t region_buffer_ = 0;
  uint64_t region_offset_ = 0;
  uint64_t region_bytes_ = 0;
  uint64_t region_used_ = 0;
  bool region_overflow_ = false;
  uint64_t piece_at_ = 0;  // where the piece being filled starts in the region's memory
  const absl::Time opened_;
  bool authorized_ = false;  // a frame of this connection was authorized (session thread only)
  DataBufferPool::Lease piece_;  // the gather piece being filled
  size_t piece_bytes_ = 0;
  uint64_t gathered_ = 0;  // written during a gather: by tasks_ (TCP), by Emit (same host)
  TaskThread tasks_;       // last: stopped before the rest is destroyed
};

}  // namespace

void ServeDataConnection(const DataSessionContext& ctx, DataStream& stream, const ShmSegment* shm) {
  Session(ctx, stream, shm).Run();
}

}  // namespace zerostate::server
