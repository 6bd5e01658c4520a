// How many data plane streams the client runs to each server (pushes and
// gathers are cut across them, each on its own thread).
#pragma once

#include "client/client.h"

namespace zerostate::client {

// streams_per_server, raised under TLS records done in userspace (no kTLS,
// or data_ktls off: `userspace_tls`), where each stream's thread seals and
// opens its own records: to userspace_tls_streams_per_server, so that the
// cipher runs on more cores at once, but to no more streams over all
// servers than the host's `cores`, one cipher per core (on the 16-core
// host, 8 streams per server beat 4 at 1 server, and 4 beat 8 at 4
// servers: docs/performance.md, "TLS"). Never below streams_per_server.
int DataStreamsPerServer(const ClientOptions& o, bool userspace_tls, int cores);

}  // namespace zerostate::client
