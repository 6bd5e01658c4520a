// One connection of the same-host data plane (common/shm_segment.h): a
// client on this host connected to the abstract unix socket that
// DataPlane listens on next to its TCP port. The connection's first
// message hands over the client's sealed memfd segment; the server maps it
// and answers SHM_READY (code 0, its incarnation, so that the client knows
// it reached the server it registered with), or SHM_READY with the reason
// it could not (the client then uses TCP). From then on the connection is
// an ordinary data plane session (server/dataplane/data_session.h) whose payloads
// lie in the segment: the same frames, authorization per frame by token,
// exactly-once pushes and gathers, through the same Job calls.
//
// No TLS: the segment and the socket never leave the host, and the kernel
// lets only processes of this host (and network namespace) connect; every
// frame still carries the job's token, which is checked as on TCP.
#pragma once

#include "server/dataplane/data_session.h"

namespace zerostate::server {

// Serves accepted unix socket `fd` (not closed) until the session ends; a
// client that sends no segment within `handshake_timeout` is dropped.
void ServeShmConnection(const DataSessionContext& ctx, int fd, absl::Duration handshake_timeout);

}  // namespace zerostate::server
