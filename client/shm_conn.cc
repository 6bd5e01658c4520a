#include "client/shm_conn.h"

#include <unistd.h>

#include "absl/strings/str_cat.h"

namespace zerostate::client {

absl::StatusOr<std::unique_ptr<DataConn>> ConnectSameHost(int port, uint64_t incarnation,
                                                          size_t segment_bytes,
                                                          absl::Time deadline) {
  absl::StatusOr<int> fd = ConnectShm(port);
  if (!fd.ok()) return fd.status();
  auto stream = std::make_unique<DataStream>(*fd);
  absl::StatusOr<std::unique_ptr<ShmSegment>> segment = ShmSegment::Create(segment_bytes);
  absl::Status s = segment.ok() ? SendSegmentFd(*fd, (*segment)->fd()) : segment.status();
  absl::StatusOr<std::optional<FrameStart>> ready = absl::UnavailableError("not sent");
  if (s.ok()) {
    stream->SetDeadline(deadline);
    ready = RecvFrameStart(*stream);
    if (!ready.ok()) {
      s = ready.status();
    } else if (!ready->has_value()) {
      s = absl::UnavailableError("server closed the connection");
    } else if ((*ready)->header.type != FrameType::kShmReady || (*ready)->meta.code() != 0) {
      s = absl::UnavailableError(absl::StrCat(
          "server answered ", FrameTypeName(static_cast<uint8_t>((*ready)->header.type)), ": ",
          (*ready)->meta.message()));
    } else if ((*ready)->meta.incarnation() != incarnation) {
      s = absl::FailedPreconditionError(absl::StrCat("another server (incarnation ",
                                                     (*ready)->meta.incarnation(), ", not ",
                                                     incarnation, ")"));
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

}  // namespace zerostate::client
