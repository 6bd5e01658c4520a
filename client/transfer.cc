#include "client/transfer.h"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstring>
#include <deque>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "client/channel_credentials.h"
#include "client/data_streams.h"
#include "client/shm_conn.h"
#include "common/chunk_wire.h"
#include "common/convert.h"
#include "common/frame_io.h"
#include "common/int8_wire.h"
#include "grpcpp/support/sync_stream.h"

namespace zerostate::client {
namespace {

constexpr char kPushMethod[] = "/zerostate.v1.StateService/PushGradients";
constexpr char kInitMethod[] = "/zerostate.v1.StateService/InitWeights";
constexpr char kGatherMethod[] = "/zerostate.v1.StateService/Gather";

// A payload slice's claim on its ticket and on the byte budget, released
// when gRPC drops its last reference to the slice.
struct SliceLease {
  std::shared_ptr<Ticket::State> ticket;
  ByteBudget* budget;
  size_t bytes;
  std::unique_ptr<uint8_t[]> owned;  // encoded payload; null when zero-copy
  std::shared_ptr<Int8Push> int8;    // holds an int8 payload
};

void ReleaseLease(void* arg) {
  auto* lease = static_cast<SliceLease*>(arg);
  std::shared_ptr<Ticket::State> ticket = std::move(lease->ticket);
  lease->budget->Release(lease->bytes);
  delete lease;
  ticket->Done(absl::OkStatus());
}

// Where element `elem` of a push is in the caller's buffer.
const uint8_t* SourceOf(const PushCall& call, uint64_t elem) {
  return static_cast<const uint8_t*>(call.data) + (elem - call.elems.begin) * DTypeSize(call.src);
}

// Where piece `piece` of a push starts in the caller's buffer.
const uint8_t* PieceSource(const JobContext& job, const PushCall& call, const BlockPiece& piece) {
  return SourceOf(call, piece.block * job.block_elems + piece.offset);
}

// The pieces a push stream sends: its int8 payload's (`int8` not null),
// else its range in chunks of the options' size.
std::vector<BlockPiece> PushPieces(const JobContext& job, const PushCall& call,
                                   const StreamPlan& plan, const Int8Stream* int8) {
  if (int8 != nullptr) return int8->pieces;
  return SplitByBlock(plan.elems, job.block_elems,
                      ChunkElems(job.client->options().chunk_bytes, DTypeSize(call.wire),
                                 job.block_elems));
}

// Piece `i` (of `piece`) of a push stream's payload as its chunk's fields
// say it: its int8 bytes, or else the caller's bytes (nullptr when they
// need converting first) and their length.
std::pair<const uint8_t*, size_t> PiecePayload(const JobContext& job, const PushCall& call,
                                               const Int8Stream* int8, size_t i,
                                               const BlockPiece& piece) {
  if (int8 != nullptr) return {int8->bytes.data() + int8->at[i], int8->at[i + 1] - int8->at[i]};
  const size_t bytes = piece.count * DTypeSize(call.wire);
  return {call.src == call.wire ? PieceSource(job, call, piece) : nullptr, bytes};
}

// The payload of piece `i` of a stream: its int8 bytes or the caller's
// bytes when no conversion is needed, else an encoded copy.
grpc::Slice LeasePayload(const JobContext& job, const PushCall& call, const Int8Stream* int8,
                         size_t i, const BlockPiece& piece,
                         const std::shared_ptr<Ticket::State>& ticket) {
  const uint8_t* src = PieceSource(job, call, piece);
  auto [ready, bytes] = PiecePayload(job, call, int8, i, piece);
  job.budget->Acquire(bytes);
  ticket->Add(1);
  auto* lease = new SliceLease{ticket, job.budget, bytes, nullptr,
                               int8 != nullptr ? call.int8 : nullptr};
  void* payload = const_cast<uint8_t*>(ready);
  if (ready == nullptr) {
    lease->owned.reset(new uint8_t[bytes]);
    EncodeFloats(reinterpret_cast<const float*>(src), piece.count, call.wire, lease->owned.get());
    payload = lease->owned.get();
  }
  return grpc::Slice(payload, bytes, &ReleaseLease, lease);
}

absl::StatusOr<uint64_t> ResponseIncarnation(Method method, grpc::ByteBuffer& bb) {
  v1::PushResponse push;
  v1::InitWeightsResponse init;
  google::protobuf::Message* msg = method == Method::kPushGradients
                                       ? static_cast<google::protobuf::Message*>(&push)
                                       : &init;
  grpc::Status s = grpc::SerializationTraits<google::protobuf::Message>::Deserialize(&bb, msg);
  if (!s.ok()) return absl::DataLossError(absl::StrCat("bad response: ", s.error_message()));
  return method == Method::kPushGradients ? push.incarnation() : init.incarnation();
}

// The fields of a stream's chunks but their place; int8 or plain.
ChunkFields PushFields(const JobContext& job, const PushCall& call, bool int8) {
  return ChunkFields{job.job_id, call.step, call.node, 0, 0,
                     int8 ? v1::DTYPE_INT8 : call.wire, 0};
}

absl::Status PushAttempt(const JobContext& job, const PushCall& call, const StreamPlan& plan,
                         const std::shared_ptr<Ticket::State>& ticket, grpc::ClientContext& ctx,
                         uint64_t* sent) {
  ServerConn& server = job.client->server(plan.shard);
  const char* name = call.method == Method::kPushGradients ? kPushMethod : kInitMethod;
  grpc::ByteBuffer response;
  std::unique_ptr<grpc::ClientWriter<grpc::ByteBuffer>> writer(
      grpc::internal::ClientWriterFactory<grpc::ByteBuffer>::Create(
          server.NextChannel(),
          grpc::internal::RpcMethod(name, grpc::internal::RpcMethod::CLIENT_STREAMING), &ctx,
          &response));
  const Int8Stream* int8 = call.int8 != nullptr ? &call.int8->Stream(plan.elems) : nullptr;
  ChunkFields fields = PushFields(job, call, int8 != nullptr);
  const std::vector<BlockPiece> pieces = PushPieces(job, call, plan, int8);
  *sent = 0;
  for (size_t i = 0; i < pieces.size(); ++i) {
    fields.block = pieces[i].block;
    fields.offset = pieces[i].offset;
    if (int8 != nullptr) fields.elems = pieces[i].count;
    grpc::Slice payload = LeasePayload(job, call, int8, i, pieces[i], ticket);
    *sent += payload.size();
    grpc::ByteBuffer bb = MakeChunkBuffer(fields, std::move(payload));
    if (!writer->Write(bb)) break;  // the stream broke: Finish says why
  }
  writer->WritesDone();
  absl::Status s = FromGrpc(writer->Finish());
  if (!s.ok()) return s;
  absl::StatusOr<uint64_t> incarnation = ResponseIncarnation(call.method, response);
  if (!incarnation.ok()) return incarnation.status();
  return CheckIncarnation(job, plan.shard, *incarnation);
}

// Where element `elem` of a gather goes in the caller's buffer.
uint8_t* DestinationOf(const GatherCall& call, uint64_t elem) {
  return static_cast<uint8_t*>(call.out) + (elem - call.elems.begin) * DTypeSize(call.out_dtype);
}

// Where a received chunk's data goes in the caller's buffer, and how
// many elements it holds.
struct Place {
  uint8_t* out;
  uint64_t count;
};

// Checks a received chunk of `data_bytes` bytes against the stream's
// request; returns where its data goes in the caller's buffer.
absl::StatusOr<Place> PlaceOf(const JobContext& job, const GatherCall& call,
                              const StreamPlan& plan, const ChunkFields& f, size_t data_bytes) {
  size_t esize = DTypeSize(call.wire);
  uint64_t begin = f.block * job.block_elems + f.offset;
  const bool int8 = call.wire == v1::DTYPE_INT8;
  uint64_t count = int8 ? f.elems : data_bytes / esize;
  if (f.dtype != call.wire || (int8 ? !CheckInt8ChunkLength(f.elems, data_bytes).ok()
                                    : data_bytes % esize != 0)) {
    return absl::DataLossError(absl::StrCat("chunk of block ", f.block, " has dtype ",
                                            DTypeName(f.dtype), " and ", data_bytes,
                                            " bytes", int8 ? absl::StrCat(" for ", f.elems, " elements") : "",
                                            "; asked for ", DTypeName(call.wire)));
  }
  if (f.offset >= job.block_elems || begin < plan.elems.begin || begin + count > plan.elems.end) {
    return absl::DataLossError(absl::StrCat("chunk [", begin, ", ", begin + count,
                                            ") outside the asked range [", plan.elems.begin,
                                            ", ", plan.elems.end, ")"));
  }
  if (f.version < call.min_version) {
    return absl::DataLossError(absl::StrCat("chunk of block ", f.block, " at version ",
                                            f.version, " < ", call.min_version));
  }
  return Place{DestinationOf(call, begin), count};
}

// Writes a checked chunk's data (PlaceOf) into the caller's buffer at
// `out`, decoded to out_dtype. Errors: DATA_LOSS for an int8 chunk's bad
// scale.
absl::Status PlaceData(const GatherCall& call, const ChunkView& view, uint8_t* out) {
  if (call.wire != v1::DTYPE_INT8) {
    CopyChunkData(view, call.wire, call.out_dtype, out);
    return absl::OkStatus();
  }
  absl::StatusOr<Int8Chunk> chunk = ReadInt8Chunk(view, view.fields.elems);
  if (!chunk.ok()) {
    return absl::DataLossError(absl::StrCat("chunk of block ", view.fields.block, ": ",
                                            chunk.status().message()));
  }
  DecodeInt8Chunk(*chunk, call.out_dtype, out);
  return absl::OkStatus();
}

// Checks one received chunk against the stream's request and writes its
// data into the caller's buffer. Adds the elements placed to `placed`.
absl::Status PlaceChunk(const JobContext& job, const GatherCall& call, const StreamPlan& plan,
                        const std::vector<grpc::Slice>& slices, uint64_t* placed,
                        uint64_t* bytes) {
  absl::StatusOr<ChunkView> view = ParseChunk(slices);
  if (!view.ok()) return view.status();
  absl::StatusOr<Place> at = PlaceOf(job, call, plan, view->fields, view->data_bytes);
  if (!at.ok()) return at.status();
  if (absl::Status s = PlaceData(call, *view, at->out); !s.ok()) return s;
  *placed += at->count;
  *bytes += view->data_bytes;
  return absl::OkStatus();
}

// The call as one attempt sends it: the int8 wire if asked for, but on
// the same-host plane (`shm`).
GatherCall AttemptCall(const GatherCall& call, bool shm) {
  GatherCall at = call;
  if (call.int8 && !shm) at.wire = v1::DTYPE_INT8;
  return at;
}

absl::Status GatherAttempt(const JobContext& job, const GatherCall& plain, const StreamPlan& plan,
                           grpc::ClientContext& ctx, uint64_t* received) {
  const GatherCall call = AttemptCall(plain, /*shm=*/false);
  ServerConn& server = job.client->server(plan.shard);
  v1::GatherRequest req;
  req.set_job_id(job.job_id);
  req.set_min_version(call.min_version);
  req.set_dtype(call.wire);
  req.set_begin(plan.elems.begin);
  req.set_end(plan.elems.end);
  std::unique_ptr<grpc::ClientReader<grpc::ByteBuffer>> reader(
      grpc::internal::ClientReaderFactory<grpc::ByteBuffer>::Create(
          server.NextChannel(),
          grpc::internal::RpcMethod(kGatherMethod, grpc::internal::RpcMethod::SERVER_STREAMING),
          &ctx, req));
  grpc::ByteBuffer bb;
  std::vector<grpc::Slice> slices;
  uint64_t placed = 0;
  *received = 0;
  absl::Status bad;
  while (bad.ok() && reader->Read(&bb)) {
    slices.clear();
    if (!bb.Dump(&slices).ok()) bad = absl::DataLossError("unreadable message");
    if (bad.ok()) bad = PlaceChunk(job, call, plan, slices, &placed, received);
    if (!bad.ok()) ctx.TryCancel();
  }
  absl::Status s = FromGrpc(reader->Finish());
  if (!bad.ok()) return bad;
  if (!s.ok()) return s;
  if (placed != plan.elems.size()) {
    return absl::DataLossError(absl::StrCat("stream ended after ", placed, " of ",
                                            plan.elems.size(), " elements"));
  }
  return absl::OkStatus();
}

// --- The same two streams over the server's TCP data plane (data_conn.h) ---

// Push frames sent ahead of their acknowledgements.
constexpr int kPushWindow = 8;

// --- The same-host plane (shm_conn.h): payloads in the connection's segment ---

// A same-host connection's segment: a slot per push in flight, each a
// chunk rounded up to whole pages, at most kMaxShmSegmentBytes (fewer
// pushes in flight for larger chunks); a gather's pieces fill all of it.
constexpr size_t kMaxShmSegmentBytes = 64 << 20;
constexpr size_t kShmPage = 4096;

size_t ShmSlotBytes(size_t chunk_bytes) {
  return (chunk_bytes + kShmPage - 1) / kShmPage * kShmPage;
}

size_t ShmSegmentBytes(const ClientOptions& options) {
  size_t slot = ShmSlotBytes(options.chunk_bytes);
  return std::max(slot, std::min(kPushWindow * slot, kMaxShmSegmentBytes));
}

// Pushes in flight on `conn`: kPushWindow on TCP; on the same-host plane
// as many as its segment has slots of `chunk_bytes`.
int PushWindow(const DataConn& conn, size_t chunk_bytes) {
  if (conn.shm() == nullptr) return kPushWindow;
  return static_cast<int>(
      std::min<size_t>(kPushWindow, conn.shm()->size() / ShmSlotBytes(chunk_bytes)));
}

// A data connection that broke or timed out: UNAVAILABLE (retried) or
// DEADLINE_EXCEEDED, naming the data plane's address. A broken one takes
// the pool's idle connections with it (DropIdle: the server may be gone).
absl::Status Broken(DataConnPool& pool, const absl::Status& s) {
  if (!absl::IsDeadlineExceeded(s)) pool.DropIdle();
  return absl::Status(
      absl::IsDeadlineExceeded(s) ? absl::StatusCode::kDeadlineExceeded
                                  : absl::StatusCode::kUnavailable,
      absl::StrCat("data plane ", pool.address(), ": ", s.message()));
}

// The status a reply frame carries.
absl::Status StatusOf(const v1::DataFrameMeta& meta) {
  return absl::Status(static_cast<absl::StatusCode>(meta.code()), meta.message());
}

// Marks the status of an ERROR frame refusing a connection at the
// server's cap (--max_data_connections, server/dataplane/data_plane.h).
constexpr char kRefusedAtCap[] = "zerostate.io/data-plane-refused-at-cap";

// True for a connection the server refused at its cap. It read nothing
// from it, so the attempt is safely sent over gRPC instead, which has no
// such cap (retrying the data plane would likely be refused again).
bool RefusedAtCap(const absl::Status& s) { return s.GetPayload(kRefusedAtCap).has_value(); }

// The next frame from the server, of type `want` or `also`. Every error
// means the connection must be dropped: UNAVAILABLE / DEADLINE_EXCEEDED
// (Broken), DATA_LOSS (a frame this client cannot read, or of another
// type), or the code and message of an ERROR frame (RESOURCE_EXHAUSTED:
// RefusedAtCap).
absl::StatusOr<FrameStart> RecvReply(DataConnPool& pool, DataConn& conn, FrameType want,
                                     FrameType also) {
  absl::StatusOr<std::optional<FrameStart>> f = RecvFrameStart(conn.stream());
  if (!f.ok()) {
    if (absl::IsInvalidArgument(f.status())) {
      return absl::DataLossError(absl::StrCat("data plane ", pool.address(), ": ",
                                              f.status().message()));
    }
    return Broken(pool, f.status());
  }
  if (!f->has_value()) return Broken(pool, absl::UnavailableError("server closed the connection"));
  FrameStart& start = **f;
  if (start.header.type == FrameType::kError) {
    absl::Status refused(StatusOf(start.meta).code(),
                         absl::StrCat("data plane ", pool.address(), " refused a frame: ",
                                      start.meta.message()));
    if (absl::IsResourceExhausted(refused)) refused.SetPayload(kRefusedAtCap, absl::Cord());
    return refused;
  }
  if (start.header.type != want && start.header.type != also) {
    return absl::DataLossError(absl::StrCat(
        "data plane ", pool.address(), ": got a ",
        FrameTypeName(static_cast<uint8_t>(start.header.type)), " frame, expected ",
        FrameTypeName(static_cast<uint8_t>(want))));
  }
  return std::move(start);
}

// A send on `conn` that failed: when the server refused the connection at
// its cap, it closed it at once, and its ERROR frame may be waiting to be
// read (taken only when already there, without waiting); else Broken.
absl::Status SendFailed(DataConnPool& pool, DataConn& conn, const absl::Status& sent) {
  if (conn.stream().WaitReadable(absl::Now())) {
    absl::StatusOr<FrameStart> f = RecvReply(pool, conn, FrameType::kError, FrameType::kError);
    if (!f.ok() && RefusedAtCap(f.status())) return f.status();
  }
  return Broken(pool, sent);
}

// A connection to shard's data plane with the attempt's deadline, or null
// when the shard has none or it cannot be reached (a restarted server
// listens on another data port): the attempt then goes over gRPC, which
// says whether the server is down or restarted (ABORTED, incarnation).
// `pool` is set to the pool it came from, which the attempt gives it back to.
std::unique_ptr<DataConn> AcquireConn(const JobContext& job, int shard, grpc::ClientContext& ctx,
                                      std::shared_ptr<DataConnPool>* pool) {
  *pool = job.data->Of(shard);
  if (*pool == nullptr) return nullptr;
  absl::Time deadline = absl::FromChrono(ctx.deadline());
  absl::StatusOr<std::unique_ptr<DataConn>> conn = (*pool)->Acquire(deadline);
  if (!conn.ok()) return nullptr;
  (*conn)->stream().SetDeadline(deadline);
  return *std::move(conn);
}

// The shared buffer (client/shared_buffer.h) [p, p + bytes) lies in, once
// the server of same-host connection `c` mapped it (ShareBuffer), when the
// payload moves `as_is` (no conversion); else null: the payload is copied.
// Errors: the connection broke (ShareBuffer's; drop it).
absl::StatusOr<const SharedBuffer*> InPlace(const JobContext& job, DataConn& c, const void* p,
                                            size_t bytes, bool as_is) {
  if (c.shm() == nullptr || !as_is || bytes == 0) return nullptr;
  std::shared_ptr<const SharedBuffer> buffer = job.client->shared_buffers().Find(p, bytes);
  if (buffer == nullptr) return nullptr;
  const uint32_t id = buffer->id();
  absl::StatusOr<bool> mapped = ShareBuffer(c, std::move(buffer));
  if (!mapped.ok()) return mapped.status();
  return *mapped ? c.Mapped(id) : nullptr;
}

// One attempt over the connection `conn` (from AcquireConn).
absl::Status PushAttemptTcp(const JobContext& job, const PushCall& call, const StreamPlan& plan,
                            DataConnPool& pool, std::unique_ptr<DataConn> conn, uint64_t* sent_bytes) {
  DataConn& c = *conn;
  // The int8 wire but on the same-host plane, where it would buy nothing.
  const Int8Stream* int8 =
      call.int8 != nullptr && c.shm() == nullptr ? &call.int8->Stream(plan.elems) : nullptr;
  v1::DataFrameMeta meta;
  meta.set_token(job.client->job_token().Get());
  v1::Chunk* fields = meta.mutable_chunk();
  fields->set_job_id(job.job_id);
  fields->set_step(call.step);
  fields->set_node(call.node);
  fields->set_dtype(int8 != nullptr ? v1::DTYPE_INT8 : call.wire);
  int unacked = 0;
  // The frames sent and not yet acknowledged hold their bytes of the job's
  // budget, as a gRPC payload slice does until gRPC frees it; all of them
  // are given back when the attempt ends.
  struct InFlight {
    ByteBudget* budget;
    std::deque<size_t> frames;  // bytes of each unacknowledged frame, in order
    ~InFlight() {
      for (size_t bytes : frames) budget->Release(bytes);
    }
  } in_flight{job.budget, {}};
  absl::Status refused;  // the first chunk the server refused; later ones are not sent
  auto read_ack = [&]() -> absl::Status {
    absl::StatusOr<FrameStart> ack = RecvReply(pool, c, FrameType::kPushAck, FrameType::kPushAck);
    if (!ack.ok()) return ack.status();
    --unacked;
    job.budget->Release(in_flight.frames.front());
    in_flight.frames.pop_front();
    absl::Status s = StatusOf(ack->meta);
    if (s.ok()) s = CheckIncarnation(job, plan.shard, ack->meta.incarnation());
    if (refused.ok()) refused = s;
    return absl::OkStatus();
  };
  uint32_t chunk = ChunkElems(job.client->options().chunk_bytes, DTypeSize(call.wire),
                              job.block_elems);
  const size_t slot = ShmSlotBytes(size_t{chunk} * DTypeSize(call.wire));
  const int window = PushWindow(c, size_t{chunk} * DTypeSize(call.wire));
  const bool as_is = call.src == call.wire;
  absl::StatusOr<const SharedBuffer*> shared = InPlace(
      job, c, SourceOf(call, plan.elems.begin), plan.elems.size() * DTypeSize(call.src), as_is);
  if (!shared.ok()) return Broken(pool, shared.status());
  if (*shared != nullptr) {
    meta.set_shm_buffer((*shared)->id());
    meta.set_held(job.pushes_held != nullptr && job.pushes_held->load());
  }
  // An attempt that fails with frames in place not acknowledged: the
  // server may still read their payload from the caller's buffer, which is
  // the caller's again once the call returns; so the connection is let go
  // once the server closed its end (after the last of them was read), or
  // rpc_timeout passed.
  struct InPlaceFrames {
    const std::unique_ptr<DataConn>& conn;  // null once released: the attempt succeeded
    const int& unacked;
    absl::Duration wait;
    ~InPlaceFrames() {
      if (conn != nullptr && unacked > 0) AwaitServerClosed(*conn, absl::Now() + wait);
    }
  };
  std::optional<InPlaceFrames> in_place_frames;
  if (*shared != nullptr) {
    in_place_frames.emplace(
        InPlaceFrames{conn, unacked, absl::FromChrono(job.client->options().rpc_timeout)});
  }
  uint64_t sent_frames = 0;
  *sent_bytes = 0;
  const std::vector<BlockPiece> pieces = PushPieces(job, call, plan, int8);
  for (size_t i = 0; i < pieces.size(); ++i) {
    const BlockPiece& piece = pieces[i];
    if (!refused.ok()) break;
    fields->set_block(piece.block);
    fields->set_offset(piece.offset);
    if (int8 != nullptr) fields->set_elems(piece.count);
    auto [ready, bytes] = PiecePayload(job, call, int8, i, piece);
    const uint8_t* src = ready != nullptr ? ready : PieceSource(job, call, piece);
    // Same host: the frame carries where the payload is: in place in the
    // caller's shared buffer, or in the slot of the push `window` frames
    // back, acknowledged (so read) by now, encoded or copied there. TCP:
    // the payload (encoded into scratch memory if need be) follows the
    // frame on the socket.
    uint8_t* staged = nullptr;
    if (*shared != nullptr) {
      meta.set_shm_offset(static_cast<uint64_t>(src - (*shared)->data()));
    } else if (c.shm() != nullptr) {
      meta.set_shm_offset((sent_frames % window) * slot);
      staged = c.shm()->data() + meta.shm_offset();
    } else if (ready == nullptr) {
      staged = c.buffer().Reserve(bytes);
    }
    if (c.shm() != nullptr) meta.set_shm_bytes(bytes);
    if (staged != nullptr && ready == nullptr) {
      EncodeFloats(reinterpret_cast<const float*>(src), piece.count, call.wire, staged);
    } else if (staged != nullptr) {
      std::memcpy(staged, src, bytes);
    }
    const void* payload = staged != nullptr ? staged : src;
    // Room in the budget; while there is none, this attempt's own frames
    // in flight are acknowledged first (blocking with bytes held would
    // deadlock the attempts that share the budget).
    while (!job.budget->TryAcquire(bytes)) {
      if (unacked == 0) {
        job.budget->Acquire(bytes);
        break;
      }
      if (absl::Status s = read_ack(); !s.ok()) return s;
    }
    in_flight.frames.push_back(bytes);
    absl::Status sent = c.shm() != nullptr
                            ? SendFrame(c.stream(), FrameType::kPush, meta)
                            : SendFrame(c.stream(), FrameType::kPush, meta, payload, bytes);
    if (!sent.ok()) return SendFailed(pool, c, sent);
    if (*shared != nullptr) job.client->metrics().AddBytesZeroCopy(plan.shard, true, bytes);
    ++sent_frames;
    *sent_bytes += bytes;
    if (++unacked >= window) {
      if (absl::Status s = read_ack(); !s.ok()) return s;
    }
  }
  while (unacked > 0) {
    if (absl::Status s = read_ack(); !s.ok()) return s;
  }
  pool.Release(std::move(conn));
  return refused;
}

// One GATHER frame on `c` for `part` (within plan.elems), its pieces placed
// into the caller's buffer as they arrive: read from the socket; on the
// same-host plane written by the server in place when the caller's buffer
// lies in `shared` (a buffer the server mapped; the pieces' region is the
// part's place in it), else copied out of the segment (whose whole is the
// region). Errors: as GatherAttemptTcp's; the connection must then be
// dropped unless the error is the server's answer (*answered).
absl::Status GatherPart(const JobContext& job, const GatherCall& call, const StreamPlan& plan,
                        DataConnPool& pool, DataConn& c, const SharedBuffer* shared, Range part,
                        grpc::ClientContext& ctx, bool* answered, uint64_t* received) {
  *answered = false;
  v1::DataFrameMeta meta;
  meta.set_token(job.client->job_token().Get());
  v1::GatherRequest* req = meta.mutable_gather();
  req->set_job_id(job.job_id);
  req->set_min_version(call.min_version);
  req->set_dtype(call.wire);
  req->set_begin(part.begin);
  req->set_end(part.end);
  if (shared != nullptr) {
    meta.set_shm_buffer(shared->id());
    meta.set_shm_offset(static_cast<uint64_t>(DestinationOf(call, part.begin) - shared->data()));
    meta.set_shm_bytes(part.size() * DTypeSize(call.wire));
  } else if (c.shm() != nullptr) {
    meta.set_shm_bytes(c.shm()->size());
  }
  meta.set_timeout_ms(std::max<int64_t>(
      1, absl::ToInt64Milliseconds(absl::FromChrono(ctx.deadline()) - absl::Now())));
  if (absl::Status s = SendFrame(c.stream(), FrameType::kGather, meta); !s.ok()) {
    return SendFailed(pool, c, s);
  }
  StreamPlan part_plan = plan;
  part_plan.elems = part;
  uint64_t placed = 0;
  while (true) {
    absl::StatusOr<FrameStart> f =
        RecvReply(pool, c, FrameType::kGatherPiece, FrameType::kGatherEnd);
    if (!f.ok()) return f.status();
    if (f->header.type == FrameType::kGatherEnd) {
      *answered = true;
      if (absl::Status s = StatusOf(f->meta); !s.ok()) return s;
      if (absl::Status s = CheckIncarnation(job, plan.shard, f->meta.incarnation()); !s.ok()) {
        return s;
      }
      if (placed != part.size()) {
        return absl::DataLossError(
            absl::StrCat("stream ended after ", placed, " of ", part.size(), " elements"));
      }
      return absl::OkStatus();
    }
    // A piece: checked before its payload is read, which then goes straight
    // into the caller's buffer when no conversion is needed.
    const bool in_shm = c.shm() != nullptr;
    size_t bytes = in_shm ? f->meta.shm_bytes() : f->header.payload_len;
    ChunkView view = FrameChunkView(f->meta.chunk(), nullptr, 0);
    absl::StatusOr<Place> place = PlaceOf(job, call, part_plan, view.fields, bytes);
    if (!place.ok()) return place.status();
    uint8_t* const out = place->out;
    const void* from = nullptr;
    if (in_shm) {
      const ShmSegment& region = shared != nullptr ? shared->segment() : *c.shm();
      absl::StatusOr<uint8_t*> at = region.At(f->meta.shm_offset(), bytes);
      if (!at.ok() || f->header.payload_len != 0 ||
          f->meta.shm_buffer() != (shared != nullptr ? shared->id() : 0)) {
        return absl::DataLossError(absl::StrCat("data plane ", pool.address(),
                                                ": a same-host GATHER_PIECE outside its region"));
      }
      from = *at;
      // Written in place: anywhere else it might be where a later piece goes.
      if (shared != nullptr && from != out) {
        return absl::DataLossError(absl::StrCat("data plane ", pool.address(),
                                                ": a GATHER_PIECE not where its range goes"));
      }
      if (shared != nullptr) job.client->metrics().AddBytesZeroCopy(plan.shard, false, bytes);
    } else {
      void* into =
          call.wire == call.out_dtype ? static_cast<void*>(out) : c.buffer().Reserve(bytes);
      if (absl::Status s = RecvExact(c.stream(), into, bytes); !s.ok()) return Broken(pool, s);
      from = into;
    }
    if (from != out) {
      if (absl::Status s = PlaceData(call, FrameChunkView(f->meta.chunk(), from, bytes), out);
          !s.ok()) {
        return s;
      }
    }
    placed += place->count;
    *received += bytes;
  }
}

// Gives gather connection `conn` back to `pool` for another stream, unless
// `cancel` shut it down (it then closes); `interrupt` (conn's, with
// `cancel`) is reset first, so no later cancel reaches it.
void Keep(DataConnPool& pool, std::unique_ptr<DataConn> conn, CallCancel::Registration& interrupt,
          const CallCancel& cancel) {
  interrupt.Reset();
  if (cancel.Check().ok()) pool.Release(std::move(conn));
}

// A gather over the data plane: one GATHER frame on TCP; on the same-host
// plane one per segmentful of the range, one after another.
absl::Status GatherAttemptTcp(const JobContext& job, const GatherCall& plain,
                              const StreamPlan& plan, DataConnPool& pool,
                              std::unique_ptr<DataConn> conn, grpc::ClientContext& ctx,
                              CallCancel& cancel, uint64_t* received) {
  // A cancel shuts the socket down: a read waiting for the version fails
  // at once, and the connection is dropped (not answered).
  CallCancel::Registration interrupt =
      cancel.OnCancel([fd = conn->fd()] { shutdown(fd, SHUT_RDWR); });
  const GatherCall call = AttemptCall(plain, conn->shm() != nullptr);
  *received = 0;
  absl::StatusOr<const SharedBuffer*> shared =
      InPlace(job, *conn, DestinationOf(call, plan.elems.begin),
              plan.elems.size() * DTypeSize(call.out_dtype), call.wire == call.out_dtype);
  if (!shared.ok()) return Broken(pool, shared.status());
  const uint64_t part_elems =
      conn->shm() != nullptr && *shared == nullptr
          ? std::max<uint64_t>(1, conn->shm()->size() / DTypeSize(call.wire))
          : plan.elems.size();
  for (uint64_t begin = plan.elems.begin; begin < plan.elems.end; begin += part_elems) {
    Range part{begin, std::min(plan.elems.end, begin + part_elems)};
    bool answered = false;
    absl::Status s =
        GatherPart(job, call, plan, pool, *conn, *shared, part, ctx, &answered, received);
    if (!s.ok()) {
      if (answered) Keep(pool, std::move(conn), interrupt, cancel);
      return s;
    }
  }
  Keep(pool, std::move(conn), interrupt, cancel);
  return absl::OkStatus();
}

}  // namespace

namespace {

// DataPool, under `tls` (DataTlsContextFor's: null in plaintext).
std::shared_ptr<DataConnPool> MakeDataPool(const ClientOptions& options,
                                           const std::shared_ptr<SSL_CTX>& tls, int server,
                                           const std::string& grpc_address, uint32_t port,
                                           uint64_t incarnation,
                                           std::shared_ptr<ConnCutter> cutter) {
  if (port == 0) return nullptr;
  std::string address = options.data_servers.empty()
                            ? DataAddress(grpc_address, static_cast<int>(port))
                            : options.data_servers[server];
  // Idle connections kept: as many as may run at once, so that none is
  // closed and opened again every step. The push pool and the gather
  // pool each run about 2 * streams_per_server streams per server (two
  // calls' streams at once), and under a delayed update a step's pushes
  // run while the next version's gathers wait: 4 * streams_per_server.
  // With 2 (the push or the gather streams alone), the H200's delayed
  // update opened 16 connections a step, each mapping the job's shared
  // buffers anew: about 300 ms a step instead of 40.
  // Gathers to servers that all share this host are as many at once as
  // the trainer puts out (data_streams.h): as many are kept.
  SameHostPlane same_host;
  if (options.data_shm && options.data_servers.empty() && incarnation != 0) {
    same_host = {static_cast<int>(port), incarnation, ShmSegmentBytes(options)};
  }
  size_t max_idle = 4 * static_cast<size_t>(options.streams_per_server);
  if (AllServersOnThisHost(options)) {
    max_idle = std::max<size_t>(max_idle, kMaxSameHostGatherStreams);
  }
  return std::make_shared<DataConnPool>(std::move(address), max_idle, tls, same_host,
                                        std::move(cutter));
}

}  // namespace

std::vector<std::shared_ptr<DataConnPool>> DataPools(
    const ClientOptions& options, const std::vector<std::string>& addresses,
    const std::vector<uint32_t>& ports, const std::vector<uint64_t>& incarnations,
    const std::vector<std::shared_ptr<ConnCutter>>& cutters) {
  std::vector<std::shared_ptr<DataConnPool>> pools(options.servers.size());
  if (!options.data_plane) return pools;
  // The files were read and checked for the gRPC channels already; if they
  // changed since and no longer load, push and gather use gRPC.
  absl::StatusOr<std::shared_ptr<SSL_CTX>> tls = DataTlsContextFor(options);
  if (!tls.ok()) return pools;
  for (size_t i = 0; i < ports.size() && i < pools.size() && i < addresses.size(); ++i) {
    pools[i] = MakeDataPool(options, *tls, static_cast<int>(i), addresses[i], ports[i],
                            i < incarnations.size() ? incarnations[i] : 0,
                            i < cutters.size() ? cutters[i] : nullptr);
  }
  return pools;
}

std::shared_ptr<DataConnPool> DataPool(const ClientOptions& options, int server,
                                       const std::string& address, uint32_t port,
                                       uint64_t incarnation, std::shared_ptr<ConnCutter> cutter) {
  if (!options.data_plane) return nullptr;
  absl::StatusOr<std::shared_ptr<SSL_CTX>> tls = DataTlsContextFor(options);
  if (!tls.ok()) return nullptr;
  return MakeDataPool(options, *tls, server, address, port, incarnation, std::move(cutter));
}

absl::Status CheckIncarnation(const JobContext& job, int shard, uint64_t incarnation) {
  if (incarnation == job.incarnations->Of(shard)) return absl::OkStatus();
  return absl::AbortedError(absl::StrCat(
      "server ", job.client->server(shard).address(), " restarted (incarnation ",
      job.incarnations->Of(shard), ", now ", incarnation, "): its shard of job ", job.job_id,
      " was lost; register or restore the job and attach again"));
}

absl::Status RunPushStream(const JobContext& job, const PushCall& call, const StreamPlan& shard_plan,
                           const std::shared_ptr<Ticket::State>& ticket) {
  // From here on the plan names the server that serves its shard now.
  const StreamPlan plan{static_cast<uint32_t>(ServerOf(job, shard_plan.shard)), shard_plan.elems};
  ServerConn& server = job.client->server(plan.shard);
  uint64_t sent = 0;  // by the last attempt
  absl::Status s = job.client->retrier().Run(call.method, server, [&](grpc::ClientContext& ctx) {
    std::shared_ptr<DataConnPool> pool;
    std::unique_ptr<DataConn> conn;
    if (call.method == Method::kPushGradients) conn = AcquireConn(job, plan.shard, ctx, &pool);
    if (conn) {
      absl::Status s = PushAttemptTcp(job, call, plan, *pool, std::move(conn), &sent);
      if (!RefusedAtCap(s)) return s;
    }
    return PushAttempt(job, call, plan, ticket, ctx, &sent);
  }, job.unavailable_wait);
  if (s.ok()) {
    job.client->metrics().AddBytesSent(plan.shard, sent);
    if (job.tally != nullptr) job.tally->AddPush(sent, plan.elems.size());
  }
  return s;
}

absl::Status RunGatherStream(const JobContext& job, const GatherCall& call,
                             const StreamPlan& shard_plan, CallCancel& cancel) {
  const StreamPlan plan{static_cast<uint32_t>(ServerOf(job, shard_plan.shard)), shard_plan.elems};
  ServerConn& server = job.client->server(plan.shard);
  uint64_t received = 0;  // by the last attempt
  auto attempt = [&](grpc::ClientContext& ctx) {
    if (absl::Status s = cancel.Check(); !s.ok()) return s;
    std::shared_ptr<DataConnPool> pool;
    std::unique_ptr<DataConn> conn = AcquireConn(job, plan.shard, ctx, &pool);
    if (conn) {
      absl::Status s =
          GatherAttemptTcp(job, call, plan, *pool, std::move(conn), ctx, cancel, &received);
      if (!RefusedAtCap(s)) return s;
    }
    CallCancel::Registration interrupt = cancel.OnCancel([&ctx] { ctx.TryCancel(); });
    return GatherAttempt(job, call, plan, ctx, &received);
  };
  absl::Status s = job.client->retrier().Run(Method::kGather, server, [&](grpc::ClientContext& ctx) {
    return cancel.Explain(attempt(ctx));
  }, job.unavailable_wait);
  if (s.ok()) {
    job.client->metrics().AddBytesReceived(plan.shard, received);
    if (job.tally != nullptr) job.tally->AddGather(received, plan.elems.size());
  }
  return s;
}

}  // namespace zerostate::client
