#include "server/dataplane/shm_session.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace zerostate::server {

void ServeShmConnection(const DataSessionContext& ctx, int fd, absl::Duration handshake_timeout) {
  const absl::Time deadline = absl::Now() + handshake_timeout;
  absl::StatusOr<int> segment_fd = RecvSegmentFd(fd, deadline);
  if (!segment_fd.ok()) return;  // not a client of this plane: nothing to answer
  absl::StatusOr<std::unique_ptr<ShmSegment>> segment = ShmSegment::Attach(*segment_fd);
  DataStream stream(fd);
  stream.SetDeadline(deadline);
  v1::DataFrameMeta ready;
  ready.set_incarnation(ctx.incarnation);
  if (!segment.ok()) {
    ready.set_code(static_cast<int>(segment.status().code()));
    ready.set_message(std::string(segment.status().message()));
  }
  if (!SendFrame(stream, FrameType::kShmReady, ready).ok() || !segment.ok()) return;
  stream.SetDeadline(absl::InfiniteFuture());
  ServeDataConnection(ctx, stream, segment->get());
}

}  // namespace zerostate::server
