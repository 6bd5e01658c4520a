#include "server/membership/membership_setup.h"

#include <unistd.h>

#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace zerostate::server {

absl::StatusOr<std::string> AdvertisedAddress(const std::string& listen,
                                              const std::string& advertise) {
  if (!advertise.empty()) return advertise;
  size_t colon = listen.rfind(':');
  int port = 0;
  if (colon == std::string::npos || !absl::SimpleAtoi(listen.substr(colon + 1), &port) ||
      port <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "advertise_address: none given, and --listen '", listen,
        "' has no fixed port to advertise; give --advertise_address=HOST:PORT or a fixed port"));
  }
  std::string host = listen.substr(0, colon);
  if (host.empty() || host == "0.0.0.0" || host == "::" || host == "[::]") {
    char name[256] = {};
    if (gethostname(name, sizeof(name) - 1) != 0 || name[0] == '\0') {
      return absl::InvalidArgumentError(absl::StrCat(
          "advertise_address: --listen '", listen,
          "' is on every interface and this host has no name; give --advertise_address"));
    }
    host = name;
  }
  return absl::StrCat(host, ":", port);
}

absl::StatusOr<std::shared_ptr<EtcdMembership>> StartMembership(
    const MembershipConfig& config, const std::string& listen,
    std::shared_ptr<prometheus::Registry> registry) {
  std::vector<std::string> endpoints = SplitEndpoints(config.etcd_endpoints);
  if (endpoints.empty()) return std::shared_ptr<EtcdMembership>();
  auto self = AdvertisedAddress(listen, config.advertise_address);
  if (!self.ok()) return self.status();
  EtcdMembershipOptions options;
  options.endpoints = std::move(endpoints);
  options.cluster = config.cluster;
  options.self = *self;
  options.lease_ttl_seconds = config.lease_ttl_seconds;
  options.metrics = std::move(registry);
  auto started = EtcdMembership::Start(std::move(options));
  if (!started.ok()) return started.status();
  return std::shared_ptr<EtcdMembership>(*std::move(started));
}

}  // namespace zerostate::server
