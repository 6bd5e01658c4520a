// The server's membership from its flags (--etcd_endpoints, --cluster,
// --etcd_lease_ttl_seconds, --advertise_address): off without endpoints,
// an EtcdMembership otherwise. main() calls this; a server without
// replicated jobs (k = 0) needs nothing of it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "prometheus/registry.h"
#include "server/membership/etcd_membership.h"

namespace zerostate::server {

struct MembershipConfig {
  // Comma-separated etcd client endpoints; empty: no membership.
  std::string etcd_endpoints;
  std::string cluster = "default";
  int64_t lease_ttl_seconds = 10;
  // What other servers and clients dial to reach this server's gRPC port;
  // empty: derived from --listen (AdvertisedAddress).
  std::string advertise_address;
};

// `advertise` when set; else `listen` with a wildcard host (0.0.0.0, ::,
// [::] or none) replaced by this host's name. INVALID_ARGUMENT when that
// leaves port 0 (any free port: nobody could be told where to dial).
[[nodiscard]] absl::StatusOr<std::string> AdvertisedAddress(const std::string& listen,
                                                            const std::string& advertise);

// Null when config.etcd_endpoints is empty; else a started EtcdMembership
// advertising AdvertisedAddress(listen, ...), its metrics in `registry`.
// Errors: those of AdvertisedAddress and EtcdMembership::Start.
[[nodiscard]] absl::StatusOr<std::shared_ptr<EtcdMembership>> StartMembership(
    const MembershipConfig& config, const std::string& listen,
    std::shared_ptr<prometheus::Registry> registry);

}  // namespace zerostate::server
