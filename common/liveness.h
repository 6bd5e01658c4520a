// How fast either end of a connection notices that its peer's host went
// silent (its network cut off, the host gone), on both planes. Without
// these, a call into a silent connection waits out its deadline
// (rpc_timeout, 60 s by default) and is retried as many times, so a
// replicated job whose primary is cut off from its trainers failed over
// only after minutes (tests/replication/netns_partition_test.py).
#pragma once

namespace zerostate {

// Data plane (TCP, common/frame_io.h TuneDataSocket): keepalive probes
// every second after a second without traffic, and TCP_USER_TIMEOUT for
// data not acknowledged: the connection ends (ETIMEDOUT) once the peer's
// kernel has been silent this long. A live peer's kernel answers even
// while its process is busy or stopped.
inline constexpr int kDeadPeerSeconds = 3;

// gRPC: the clients ping every ClientOptions::keepalive_time (1 s by
// default) and close a connection whose ping goes unanswered for
// keepalive_timeout (2 s) (client/server_conn.cc); the servers accept
// pings that often (server/state_server.cc). HTTP/2 pings are answered by
// the process, so a stopped server is noticed too.

}  // namespace zerostate
