#include "client/shm_conn.h"

#include <sys/socket.h>
#include <unistd.h>

#include "absl/strings/str_cat.h"

namespace zerostate::client {
namespace {

// The server's SHM_READY answer on `stream`. Errors: the connection broke
// or closed (UNAVAILABLE, DEADLINE_EXCEEDED), or another frame came
// (UNAVAILABLE naming it and its message, e.g. an ERROR).
absl::StatusOr<v1::DataFrameMeta> RecvReady(DataStream& stream) {
  absl::StatusOr<std::optional<FrameStart>> ready = RecvFrameStart(stream);
  if (!ready.ok()) return ready.status();
  if (!ready->has_value()) return absl::UnavailableError("server closed the connection");
  if ((*ready)->header.type != FrameType::kShmReady) {
    return absl::UnavailableError(
        absl::StrCat("server answered ", FrameTypeName(static_cast<uint8_t>((*ready)->header.type)),
                     ": ", (*ready)->meta.message()));
  }
  return std::move((*ready)->meta);
}

}  // namespace

absl::StatusOr<std::unique_ptr<DataConn>> ConnectSameHost(int port, uint64_t incarnation,
                                                          size_t segment_bytes,
                                                          absl::Time deadline) {
  absl::StatusOr<int> fd = ConnectShm(port);
  if (!fd.ok()) return fd.status();
  auto stream = std::make_unique<DataStream>(*fd);
  absl::StatusOr<std::unique_ptr<ShmSegment>> segment = ShmSegment::Create(segment_bytes);
  absl::Status s = segment.ok() ? SendSegmentFd(*fd, (*segment)->fd()) : segment.status();
  if (s.ok()) {
    stream->SetDeadline(deadline);
    absl::StatusOr<v1::DataFrameMeta> ready = RecvReady(*stream);
    if (!ready.ok()) {
      s = ready.status();
    } else if (ready->code() != 0) {
      s = absl::UnavailableError(absl::StrCat("server answered SHM_READY: ", ready->message()));
    } else if (ready->incarnation() != incarnation) {
      s = absl::FailedPreconditionError(absl::StrCat(
          "another server (incarnation ", ready->incarnation(), ", not ", incarnation, ")"));
    }
  }
  if (!s.ok()) {
    stream.reset();
    close(*fd);
    return absl::Status(
        s.code(), absl::StrCat("same-host data plane @", ShmSocketName(port), ": ", s.message()));
  }
  stream->SetDeadline(absl::InfiniteFuture());
  return std::make_unique<DataConn>(*fd, std::move(stream), *std::move(segment));
}

void AwaitServerClosed(DataConn& conn, absl::Time deadline) {
  conn.stream().CloseSend();
  conn.stream().SetRecvDeadline(deadline);
  char sink[4096];
  while (true) {
    absl::StatusOr<size_t> r = conn.stream().RecvSome(sink, sizeof(sink));
    if (!r.ok() || *r == 0) return;
  }
}

absl::StatusOr<bool> ShareBuffer(DataConn& conn, std::shared_ptr<const SharedBuffer> buffer) {
  if (conn.Mapped(buffer->id()) != nullptr) return true;
  if (conn.Refused(buffer->id())) return false;
  v1::DataFrameMeta meta;
  meta.set_shm_buffer(buffer->id());
  // The descriptor right after the frame: the server reads the frame's
  // bytes exactly, then this one message with its descriptor.
  absl::Status s = SendFrame(conn.stream(), FrameType::kShmBuffer, meta);
  if (s.ok()) s = SendSegmentFd(conn.fd(), buffer->segment().fd());
  if (!s.ok()) return s;
  absl::StatusOr<v1::DataFrameMeta> ready = RecvReady(conn.stream());
  if (!ready.ok()) return ready.status();
  const bool mapped = ready->code() == 0;
  conn.AddShared(std::move(buffer), mapped);
  return mapped;
}

}  // namespace zerostate::client
