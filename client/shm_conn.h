// The client's side of the same-host data plane (common/shm_segment.h,
// server/dataplane/shm_session.h): a connection to the unix socket of the server
// whose TCP data port is known, with a fresh segment handed over and
// acknowledged. Thread-safe (no shared state).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/data_conn.h"

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

}  // namespace zerostate::client
