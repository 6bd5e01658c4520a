// The limit the transport benchmark compares against: plain TCP throughput
// between two processes of this machine over loopback, with blocking
// sockets, 1 MiB writes and reads, one thread per connection. Each write
// and read reuses one 1 MiB buffer (which stays in cache), unless the
// tensor variant is asked for: then the sender sends, and the receiver
// receives into, one total_bytes buffer each (memory, like a tensor's),
// each connection its contiguous share.
#pragma once

#include <cstdint>

#include "absl/status/statusor.h"

namespace zerostate::bench {

struct RawTcpResult {
  double bytes_per_s = 0;  // from the start signal to the last byte received
  double cpu_s = 0;        // of sender and receiver, from process start to end
  double busy_fraction = 0;  // of the host's cores, over the same time as bytes_per_s
};

// Forks a sender process that opens `connections` connections to this
// one and sends `total_bytes` spread over them.
// REQUIRES: called before this process starts any thread (it forks).
absl::StatusOr<RawTcpResult> MeasureRawTcp(int connections, uint64_t total_bytes,
                                           bool tensor_buffers = false);

}  // namespace zerostate::bench
