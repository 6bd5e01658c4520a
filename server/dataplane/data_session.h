// One connection of the TCP data plane (server/dataplane/data_plane.h):
// reads frames (common/frame.h) and serves them with the same core handlers
// as the gRPC edge: a PUSH goes through PushHandler
// (server/core/push_handler.h: authorization, deadline, in-place receive,
// staging wait, fold), a GATHER through GatherHandler
// (server/core/gather_handler.h), whose pieces are sent (sendmsg) from the
// buffer Job fills. A second thread per
// connection folds and acknowledges push i while push i+1 is read, and
// sends gather piece i while piece i+1 is filled; answers keep the frames'
// order. Every reply carries the server's incarnation; an error is a
// status code and message. A frame that cannot be parsed is answered by an
// ERROR frame, then the connection is closed.
//
// What a client that has no valid token can take (docs/reliability.md): a
// frame is authorized (JobRegistry::Authorize) from its header and meta,
// before any of its payload is read; an unauthorized push's payload is
// read into a small scratch buffer and dropped, never into the shared
// pool, and answered with the refusal. Every frame must arrive whole
// within the frame timeout of its first byte (its payload within the
// frame timeout of the server being ready for it), so a frame that
// trickles gives its buffer back when the connection is closed; a
// connection that has not yet sent an authorized frame is closed after
// that long idle.
//
// A REPLICA_SUM (a shard's primary to its backup) is checked
// from its meta (DataSessionContext::replica_sums) before its payload is
// read, as a push is; a refused one's payload is dropped the same way, and
// each is answered by a REPLICA_SUM_ACK, in order with the other answers.
// The same-host plane takes none.
//
// On the same-host plane (server/dataplane/shm_session.h) the session is the same but
// for where payloads are: with a segment, a PUSH's payload is read (and
// folded) straight from the segment and a gather's pieces are written into
// the region its GATHER names, each GATHER_PIECE saying where; a frame
// whose payload lies outside the segment, or a TCP-style payload on such a
// connection (or shm fields on a TCP one), is a bad frame. A same-host
// client may also have the session map shared buffers of its own (a
// SHM_BUFFER frame, then the memfd; answered SHM_READY, in order), up to
// the caps above, kept for the connection's life: a PUSH's payload or a
// GATHER's region may then lie in one (meta shm_buffer), checked as
// against the segment (a buffer not mapped here is a bad frame too).
#pragma once

#include <cstdint>

#include "absl/time/time.h"
#include "common/frame_io.h"
#include "common/shm_segment.h"
#include "server/core/gather_handler.h"
#include "server/core/metrics.h"
#include "server/core/push_handler.h"
#include "server/core/replica_sums.h"
#include "server/dataplane/data_buffers.h"
#include "server/dataplane/shared_mappings.h"

namespace zerostate::server {

struct DataSessionContext {
  // The core's push and gather paths (required), shared with the gRPC edge.
  const PushHandler* pushes = nullptr;
  const GatherHandler* gathers = nullptr;
  ServerMetrics* metrics = nullptr;
  uint64_t incarnation = 0;
  // Where a backup keeps the sums of REPLICA_SUM frames; null:
  // such frames are refused (FAILED_PRECONDITION).
  ReplicaSums* replica_sums = nullptr;
  // Payload buffers of every session (required).
  DataBufferPool* buffers = nullptr;
  // The shared buffers every same-host session maps, each once for all of
  // them (required).
  SharedMappings* shared_mappings = nullptr;
  // How long a frame may take to arrive (--data_frame_timeout_seconds).
  absl::Duration frame_timeout = absl::Seconds(60);
  // The caps on the shared buffers one same-host connection may have
  // mapped (SHM_BUFFER): how many, and their bytes in all. They bound the
  // address space and page tables a client can make the server hold.
  size_t max_shared_buffers = 64;
  uint64_t max_shared_bytes = uint64_t{1} << 40;  // 1 TiB
};

// Serves `stream` until the peer closes it, a frame is malformed, a
// timeout above passes or the connection breaks. Does not close its
// socket. Payloads travel in `shm` (the connection's segment, which must
// outlive the call) unless null.
void ServeDataConnection(const DataSessionContext& ctx, DataStream& stream,
                         const ShmSegment* shm = nullptr);

}  // namespace zerostate::server
