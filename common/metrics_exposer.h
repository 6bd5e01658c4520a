// The Prometheus HTTP endpoint of the server and the worker: prometheus-cpp's
// Exposer (civetweb) with settings fit for an untrusted network.
//
// civetweb serves each connection on one of a fixed set of threads and, by
// default, waits 30 s for a request's headers; prometheus-cpp starts two such
// threads, so two clients that send half a request held every scrape for
// half a minute, again and again. Here a request must arrive whole within
// kMetricsRequestTimeout, more threads serve, and keep-alive is off, so a
// slow or idle client holds one thread for at most that long.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "prometheus/exposer.h"
#include "prometheus/registry.h"

namespace zerostate {

inline constexpr int kMetricsThreads = 8;
inline constexpr absl::Duration kMetricsRequestTimeout = absl::Seconds(5);

struct MetricsEndpoint {
  std::unique_ptr<prometheus::Exposer> exposer;
  std::string address;  // "HOST:PORT" with the bound port
};

// Serves `registry` on GET /metrics at `address` ("host:port", port 0: any
// free port). Errors: UNAVAILABLE naming `flag` and the address when it
// cannot be bound (in use, no such host), never an exception.
[[nodiscard]] absl::StatusOr<MetricsEndpoint> StartMetricsEndpoint(
    const std::string& flag, const std::string& address,
    const std::shared_ptr<prometheus::Registry>& registry);

}  // namespace zerostate
