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

absl::StatusOr<MemberAddresses> MemberAddressesFor(const MembershipConfig& config,
                                                   const std::string& listen) {
  auto dial = AdvertisedAddress(listen, config.advertise_address);
  if (!dial.ok()) return dial.status();
  if (config.replace.empty()) return MemberAddresses{*dial, *dial};
  if (SplitEndpoints(config.etcd_endpoints).empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "replace: '", config.replace,
        "' needs --etcd_endpoints: the new address of a replaced server is published there"));
  }
  const size_t colon = config.replace.rfind(':');
  int port = 0;
  if (colon == std::string::npos || colon == 0 ||
      config.replace.find('/') != std::string::npos ||
      !absl::SimpleAtoi(config.replace.substr(colon + 1), &port) || port <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("replace: '", config.replace,
                     "' is not the HOST:PORT name of a server (as a job's servers list it)"));
  }
  if (config.replace == *dial) {
    return absl::InvalidArgumentError(absl::StrCat(
        "replace: '", config.replace,
        "' is this server's own address; a server restarted on its address needs no --replace"));
  }
  return MemberAddresses{config.replace, *dial};
}

absl::StatusOr<std::shared_ptr<EtcdMembership>> StartMembership(
    const MembershipConfig& config, const std::string& listen,
    std::shared_ptr<prometheus::Registry> registry) {
  std::vector<std::string> endpoints = SplitEndpoints(config.etcd_endpoints);
  if (endpoints.empty() && config.replace.empty()) return std::shared_ptr<EtcdMembership>();
  auto names = MemberAddressesFor(config, listen);  // refuses --replace without endpoints
  if (!names.ok()) return names.status();
  EtcdMembershipOptions options;
  options.endpoints = std::move(endpoints);
  options.cluster = config.cluster;
  options.self = names->self;
  options.dial = names->dial;
  options.lease_ttl_seconds = config.lease_ttl_seconds;
  options.replace_wait_seconds = config.replace_wait_seconds;
  options.on_fenced = config.on_fenced;
  options.metrics = std::move(registry);
  auto started = EtcdMembership::Start(std::move(options));
  if (!started.ok()) return started.status();
  return std::shared_ptr<EtcdMembership>(*std::move(started));
}

}  // namespace zerostate::server
