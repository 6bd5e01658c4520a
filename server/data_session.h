// One connection of the TCP data plane (server/data_plane.h): reads frames
// (common/frame.h) and serves them with the same code as the gRPC
// handlers: a PUSH goes through JobRegistry::Authorize and Job::Push, a
// GATHER through Authorize, Job::CheckGather and Job::Gather, whose pieces
// are sent (sendmsg) from the buffer Job fills. A second thread per
// connection folds and acknowledges push i while push i+1 is read, and
// sends gather piece i while piece i+1 is filled; answers keep the frames'
// order. Every reply carries the server's incarnation; an error is a
// status code and message. A frame that cannot be parsed is answered by an
// ERROR frame, then the connection is closed.
#pragma once

#include <cstdint>

#include "absl/time/time.h"
#include "common/frame_io.h"
#include "server/data_buffers.h"
#include "server/job_registry.h"
#include "server/metrics.h"

namespace zerostate::server {

struct DataSessionContext {
  JobRegistry* jobs = nullptr;
  ServerMetrics* metrics = nullptr;
  uint64_t incarnation = 0;
  absl::Duration max_wait = absl::Minutes(10);  // cap on any wait
  uint32_t gather_piece_elems = 256 * 1024;
  // Payload buffers of every session (required).
  DataBufferPool* buffers = nullptr;
};

// Serves connection `fd` until the peer closes it, a frame is malformed or
// the connection breaks. Does not close fd.
void ServeDataConnection(const DataSessionContext& ctx, int fd);

}  // namespace zerostate::server
