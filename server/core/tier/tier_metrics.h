// What the NVMe tier reports about its I/O, as a small interface so the
// tier does not depend on Prometheus. The server passes one sink per job
// (server/core/metrics.h implements it); tests and benchmarks may pass none.
// Implementations must be thread-safe.
#pragma once

#include <cstdint>

#include "server/core/io/env.h"

namespace zerostate::server {

class TierMetricsSink {
 public:
  virtual ~TierMetricsSink() = default;
  // One finished request: its kind, bytes moved and latency (submit to completion).
  virtual void RecordIo(io::IoOp op, uint64_t bytes, double seconds) = 0;
  // Requests in flight in the tier's Update pipeline right now.
  virtual void SetQueueDepth(int in_flight) = 0;
  virtual void RecordCache(bool hit) = 0;
};

}  // namespace zerostate::server
