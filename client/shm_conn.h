// The client's side of the same-host data plane (common/shm_segment.h,
// server/dataplane/shm_session.h): a connection to the unix socket of the server
// whose TCP data port is known, with a fresh segment handed over and
// acknowledged; and the shared buffers (client/shared_buffer.h) such a
// connection has its server map. Thread-safe (no shared state).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/data_conn.h"
#include "client/shared_buffer.h"

namespace zerostate::client {

// A connection to the same-host plane of the server whose data port is
// `port`, with a segment of `segment_bytes`, once that server answered
// SHM_READY with `incarnation` (another server, e.g. one in another
// network namespace reached by the same name, answers with its own).
// Errors: UNAVAILABLE (no such server on this host, or it did not attach
// the segment: with the reason), FAILED_PRECONDITION (it is another
// server: the incarnations), DEADLINE_EXCEEDED. Every error means: use TCP.
[[nodiscard]] absl::StatusOr<std::unique_ptr<DataConn>> ConnectSameHost(int port,
                                                                        uint64_t incarnation,
                                                                        size_t segment_bytes,
                                                                        absl::Time deadline);

// Has the server of same-host connection `conn` map `buffer` for the
// connection's life (a SHM_BUFFER frame and the memfd, then waits for its
// SHM_READY), unless it was asked before: true once mapped; false once
// refused (its caps; the refusal is remembered and the connection copies
// for that buffer). Within the stream's deadline; nothing else may be in
// flight on `conn`. Errors: UNAVAILABLE / DEADLINE_EXCEEDED (broken, or
// an ERROR frame): drop the connection.
[[nodiscard]] absl::StatusOr<bool> ShareBuffer(DataConn& conn,
                                               std::shared_ptr<const SharedBuffer> buffer);

// Closes the sending side of `conn` and waits until the server closed its
// end (it does once every frame it read was served, whatever it read from
// shared memory done), reading and dropping its answers, or until
// `deadline`. For a connection given up with frames in flight.
void AwaitServerClosed(DataConn& conn, absl::Time deadline);

}  // namespace zerostate::client
