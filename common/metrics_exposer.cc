#include "common/metrics_exposer.h"

#include <exception>
#include <vector>

#include "absl/strings/str_cat.h"

namespace zerostate {

absl::StatusOr<MetricsEndpoint> StartMetricsEndpoint(
    const std::string& flag, const std::string& address,
    const std::shared_ptr<prometheus::Registry>& registry) {
  std::vector<std::string> options = {
      "listening_ports",    address,
      "num_threads",        absl::StrCat(kMetricsThreads),
      "request_timeout_ms", absl::StrCat(absl::ToInt64Milliseconds(kMetricsRequestTimeout)),
      "enable_keep_alive",  "no",
  };
  MetricsEndpoint endpoint;
  try {
    endpoint.exposer = std::make_unique<prometheus::Exposer>(std::move(options));
  } catch (const std::exception& e) {
    return absl::UnavailableError(
        absl::StrCat(flag, ": cannot listen on ", address, " (in use, or no such address): ",
                     e.what()));
  }
  endpoint.exposer->RegisterCollectable(registry);
  auto ports = endpoint.exposer->GetListeningPorts();
  endpoint.address =
      absl::StrCat(address.substr(0, address.rfind(':')), ":", ports.empty() ? 0 : ports.front());
  return endpoint;
}

}  // namespace zerostate
