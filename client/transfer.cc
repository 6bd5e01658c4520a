#include "client/transfer.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/chunk_wire.h"
#include "common/convert.h"
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
};

void ReleaseLease(void* arg) {
  auto* lease = static_cast<SliceLease*>(arg);
  std::shared_ptr<Ticket::State> ticket = std::move(lease->ticket);
  lease->budget->Release(lease->bytes);
  delete lease;
  ticket->Done(absl::OkStatus());
}

// The payload of one piece: the caller's bytes when no conversion is
// needed, else an encoded copy.
grpc::Slice LeasePayload(const JobContext& job, const PushCall& call, const BlockPiece& piece,
                         const std::shared_ptr<Ticket::State>& ticket) {
  uint64_t first = piece.block * job.block_elems + piece.offset - call.elems.begin;
  const uint8_t* src = static_cast<const uint8_t*>(call.data) + first * DTypeSize(call.src);
  size_t bytes = piece.count * DTypeSize(call.wire);
  job.budget->Acquire(bytes);
  ticket->Add(1);
  auto* lease = new SliceLease{ticket, job.budget, bytes, nullptr};
  void* payload = const_cast<uint8_t*>(src);
  if (call.src != call.wire) {
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

absl::Status PushAttempt(const JobContext& job, const PushCall& call, const StreamPlan& plan,
                         const std::shared_ptr<Ticket::State>& ticket, grpc::ClientContext& ctx) {
  ServerConn& server = job.client->server(plan.shard);
  const char* name = call.method == Method::kPushGradients ? kPushMethod : kInitMethod;
  grpc::ByteBuffer response;
  std::unique_ptr<grpc::ClientWriter<grpc::ByteBuffer>> writer(
      grpc::internal::ClientWriterFactory<grpc::ByteBuffer>::Create(
          server.NextChannel(),
          grpc::internal::RpcMethod(name, grpc::internal::RpcMethod::CLIENT_STREAMING), &ctx,
          &response));
  ChunkFields fields{job.job_id, call.step, call.node, 0, 0, call.wire, 0};
  uint32_t chunk = ChunkElems(job.client->options().chunk_bytes, DTypeSize(call.wire),
                              job.block_elems);
  for (const BlockPiece& piece : SplitByBlock(plan.elems, job.block_elems, chunk)) {
    fields.block = piece.block;
    fields.offset = piece.offset;
    grpc::ByteBuffer bb = MakeChunkBuffer(fields, LeasePayload(job, call, piece, ticket));
    if (!writer->Write(bb)) break;  // the stream broke: Finish says why
  }
  writer->WritesDone();
  absl::Status s = FromGrpc(writer->Finish());
  if (!s.ok()) return s;
  absl::StatusOr<uint64_t> incarnation = ResponseIncarnation(call.method, response);
  if (!incarnation.ok()) return incarnation.status();
  return CheckIncarnation(job, plan.shard, *incarnation);
}

// Checks one received chunk against the stream's request and writes its
// data into the caller's buffer. Adds the elements placed to `placed`.
absl::Status PlaceChunk(const JobContext& job, const GatherCall& call, const StreamPlan& plan,
                        const std::vector<grpc::Slice>& slices, uint64_t* placed) {
  absl::StatusOr<ChunkView> view = ParseChunk(slices);
  if (!view.ok()) return view.status();
  const ChunkFields& f = view->fields;
  size_t esize = DTypeSize(call.wire);
  uint64_t begin = f.block * job.block_elems + f.offset;
  uint64_t count = view->data_bytes / esize;
  if (f.dtype != call.wire || view->data_bytes % esize != 0) {
    return absl::DataLossError(absl::StrCat("chunk of block ", f.block, " has dtype ",
                                            DTypeName(f.dtype), " and ", view->data_bytes,
                                            " bytes; asked for ", DTypeName(call.wire)));
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
  uint8_t* out = static_cast<uint8_t*>(call.out) +
                 (begin - call.elems.begin) * DTypeSize(call.out_dtype);
  CopyChunkData(*view, call.wire, call.out_dtype, out);
  *placed += count;
  return absl::OkStatus();
}

absl::Status GatherAttempt(const JobContext& job, const GatherCall& call, const StreamPlan& plan,
                           grpc::ClientContext& ctx) {
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
  absl::Status bad;
  while (bad.ok() && reader->Read(&bb)) {
    slices.clear();
    if (!bb.Dump(&slices).ok()) bad = absl::DataLossError("unreadable message");
    if (bad.ok()) bad = PlaceChunk(job, call, plan, slices, &placed);
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

}  // namespace

absl::Status CheckIncarnation(const JobContext& job, int shard, uint64_t incarnation) {
  if (incarnation == job.incarnations[shard]) return absl::OkStatus();
  return absl::AbortedError(absl::StrCat(
      "server ", job.client->server(shard).address(), " restarted (incarnation ",
      job.incarnations[shard], ", now ", incarnation, "): its shard of job ", job.job_id,
      " was lost; register or restore the job and attach again"));
}

absl::Status RunPushStream(const JobContext& job, const PushCall& call, const StreamPlan& plan,
                           const std::shared_ptr<Ticket::State>& ticket) {
  ServerConn& server = job.client->server(plan.shard);
  absl::Status s = job.client->retrier().Run(call.method, server, [&](grpc::ClientContext& ctx) {
    return PushAttempt(job, call, plan, ticket, ctx);
  });
  if (s.ok()) job.client->metrics().AddBytesSent(plan.shard, plan.elems.size() * DTypeSize(call.wire));
  return s;
}

absl::Status RunGatherStream(const JobContext& job, const GatherCall& call,
                             const StreamPlan& plan) {
  ServerConn& server = job.client->server(plan.shard);
  absl::Status s = job.client->retrier().Run(Method::kGather, server, [&](grpc::ClientContext& ctx) {
    return GatherAttempt(job, call, plan, ctx);
  });
  if (s.ok()) {
    job.client->metrics().AddBytesReceived(plan.shard, plan.elems.size() * DTypeSize(call.wire));
  }
  return s;
}

}  // namespace zerostate::client
