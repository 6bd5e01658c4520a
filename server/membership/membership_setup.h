// The server's membership from its flags (--etcd_endpoints, --cluster,
// --etcd_lease_ttl_seconds, --advertise_address, --replace): off without endpoints,
// an EtcdMembership otherwise. main() calls this; a server without
// replicated jobs (k = 0) needs nothing of it.
#pragma once

#include <cstdint>
#include <functional>
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
  // --replace: the name (advertised address) of a server this process
  // takes the place of from another address: once the old process's lease
  // has lapsed (it is dead or hung; never by revoking it) it joins under
  // that name and publishes its own address for the name
  // (Membership::Resolve), where peers and clients find it. Empty: this
  // server is named by its own address.
  std::string replace;
  // --replace_wait_seconds: EtcdMembershipOptions::replace_wait_seconds.
  int64_t replace_wait_seconds = -1;
  // EtcdMembershipOptions::on_fenced.
  std::function<void(const std::string& why)> on_fenced;
};

// What this server is called in the membership, and where it is dialled.
struct MemberAddresses {
  std::string self;  // its name: what jobs list and claims record
  std::string dial;  // its own gRPC address
};

// `advertise` when set; else `listen` with a wildcard host (0.0.0.0, ::,
// [::] or none) replaced by this host's name. INVALID_ARGUMENT when that
// leaves port 0 (any free port: nobody could be told where to dial).
[[nodiscard]] absl::StatusOr<std::string> AdvertisedAddress(const std::string& listen,
                                                            const std::string& advertise);

// The name and dialled address of a server with `config` listening on
// `listen`: both AdvertisedAddress(listen, advertise_address), or, with
// config.replace, named by it. INVALID_ARGUMENT, naming the flag: those of
// AdvertisedAddress; --replace without --etcd_endpoints (nobody could
// learn the new address); --replace that is not HOST:PORT, or has '/', or
// is this server's own address (a restart there needs no --replace).
[[nodiscard]] absl::StatusOr<MemberAddresses> MemberAddressesFor(const MembershipConfig& config,
                                                                const std::string& listen);

// Null when config.etcd_endpoints is empty (an error with --replace);
// else a started EtcdMembership under MemberAddressesFor(config, listen),
// its metrics in `registry`. Errors: those of MemberAddressesFor and
// EtcdMembership::Start.
[[nodiscard]] absl::StatusOr<std::shared_ptr<EtcdMembership>> StartMembership(
    const MembershipConfig& config, const std::string& listen,
    std::shared_ptr<prometheus::Registry> registry);

}  // namespace zerostate::server
