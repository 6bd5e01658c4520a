// The limit the transport benchmark compares against: plain TCP throughput
// between two processes of this machine over loopback, with blocking
// sockets, 1 MiB writes and reads, one thread per connection.
#pragma once

#include <cstdint>

#include "absl/status/statusor.h"

namespace zerostate::bench {

// Forks a sender process that opens `connections` connections to this
// one and sends `total_bytes` spread over them; returns bytes per second
// from the start signal to the last byte received.
// REQUIRES: called before this process starts any thread (it forks).
absl::StatusOr<double> MeasureRawTcp(int connections, uint64_t total_bytes);

}  // namespace zerostate::bench
