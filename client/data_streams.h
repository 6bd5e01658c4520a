// How many data plane streams the client runs to each server (pushes and
// gathers are cut across them, each on its own thread).
#pragma once

#include <string>

#include "client/client.h"

namespace zerostate::client {

// The data plane's streams to each server:
// - with the same-host plane (data_plane and data_shm, no data_servers)
//   when every server is on this host by its address (`same_host`:
//   AllServersOnThisHost), where each stream's thread copies its payloads
//   into and out of its segment: streams_per_server raised to
//   same_host_streams_per_server (8 beat 4 in 13 of 16 runs on the H200
//   host; docs/performance.md), to no more streams over all servers than
//   the host's `cores`, never below streams_per_server;
// - else under TLS records done in userspace (no kTLS, or data_ktls off:
//   `userspace_tls`), where each stream's thread seals and opens its own
//   records and the cipher is the limit: one stream per core over all
//   servers (at least one per server), at most
//   userspace_tls_streams_per_server (0: streams_per_server, as in
//   plaintext). More streams than cores only add switches between them:
//   on the 16-core host 8 streams per server beat 4 at 1 server, and 4 beat
//   8 at 4 servers; on 2 cores TLS cost 2-20% fewer CPU seconds per GB
//   with 2 streams than 4 at 1 server, and with 1 than 4 at 4 servers
//   (transport_bench --streams, interleaved; docs/performance.md, "TLS");
// - else streams_per_server.
int DataStreamsPerServer(const ClientOptions& o, bool userspace_tls, bool same_host, int cores);

// The cores this process may run on (its CPU affinity: under `taskset`
// or a container's cpuset, fewer than the host has); the host's count
// where the affinity cannot be read. At least 1. The `cores` that
// DataStreamsPerServer sizes the streams by.
int UsableCores();

// Whether `address` ("host:port", "[v6]:port") names this host without a
// lookup: localhost, this host's name (gethostname), a loopback address
// or an address of one of its interfaces (getifaddrs). A name that would
// need DNS counts as another host.
bool OnThisHost(const std::string& address);
// Whether every one of o.servers is OnThisHost, and the same-host plane is
// on (data_plane, data_shm, no data_servers).
bool AllServersOnThisHost(const ClientOptions& o);

}  // namespace zerostate::client
