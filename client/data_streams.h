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

// Gathers where every server shares this host (AllServersOnThisHost). A
// gather waiting for a version holds its stream's thread and connection
// until the step that brings the version, and a server writes the new
// copy of a block straight into the gather's memory only when the gather
// reached it before the block's pass ran (server/core/block.h,
// Block::direct): so every gather the trainer puts out ahead of a step
// must be at the server by then. A trainer gathers each landing unit
// apart (about 50 for GPT-2 759M, 70 for a Llama 1.1B shape), each cut
// into streams; with a fixed pool of 2 * servers * streams threads the
// streams queued behind the first ones reached the servers after the pass
// had gone by, and on the H100 host only 0.44 of the blocks were written
// in place. So:
// - each stream spans kSameHostGatherStreamBlocks blocks at least (a
//   landing unit's part on one server is one stream; a gather of a whole
//   model still spreads over every stream, whose threads copy what is not
//   written in place);
// - the gather pool and the connections kept per server grow to as many
//   as are in flight at once, up to kMaxSameHostGatherStreams.
inline constexpr uint32_t kSameHostGatherStreamBlocks = 64;
inline constexpr int kMaxSameHostGatherStreams = 512;

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
