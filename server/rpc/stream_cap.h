// The cap on the gRPC edge's chunk streams (InitWeights, PushGradients,
// Gather) open at once (--max_grpc_streams), as the data plane caps its
// connections (--max_data_connections): a stream over the cap is answered
// RESOURCE_EXHAUSTED before any of its messages is read, and counted
// (zerostate_grpc_streams_refused_total; zerostate_grpc_streams is the
// gauge of those open). Bounds the edge's threads that wait (WaitPool).
// Thread-safe.
#pragma once

#include <optional>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "server/core/metrics.h"

namespace zerostate::server {

class StreamCap {
 public:
  // A stream's place under the cap, given back when destroyed. Movable.
  class Slot {
   public:
    Slot() = default;
    Slot(Slot&& other) noexcept : cap_(std::exchange(other.cap_, nullptr)) {}
    Slot& operator=(Slot&& other) noexcept {
      if (this != &other) {
        Release();
        cap_ = std::exchange(other.cap_, nullptr);
      }
      return *this;
    }
    ~Slot() { Release(); }

   private:
    friend class StreamCap;
    explicit Slot(StreamCap* cap) : cap_(cap) {}
    void Release();
    StreamCap* cap_ = nullptr;
  };

  // REQUIRES: max_streams >= 1. `metrics` must outlive the cap and its slots.
  StreamCap(int max_streams, ServerMetrics& metrics);

  // A slot for a new stream; when `max_streams` are open, RESOURCE_EXHAUSTED
  // naming the cap and the flag (counted as refused).
  [[nodiscard]] absl::StatusOr<Slot> Take();

  // INVALID_ARGUMENT naming --max_grpc_streams unless max_streams >= 1.
  [[nodiscard]] static absl::Status Check(int max_streams);

 private:
  const int max_;
  ServerMetrics& metrics_;
  absl::Mutex mu_;
  int open_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace zerostate::server
