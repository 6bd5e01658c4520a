// The state server's TCP data plane: a listener next to the gRPC port that
// serves PushGradients and Gather as framed messages over plain TCP
// (common/frame.h), a thread per connection (clients hold a few persistent
// connections per server, so threads stay few, and a gather that waits for
// a version simply blocks its own thread). docs/architecture.md says why
// there are two planes. Plaintext, or TLS 1.3 with the gRPC port's
// certificates (DataTlsContext; mutual TLS with its client CA), the
// handshake done on the connection's own thread within kHandshakeTimeout.
// With `shm`, it also listens on the abstract unix socket named after its
// TCP port (common/shm_segment.h) for clients on this host, whose payloads
// then travel in shared memory (server/dataplane/shm_session.h); those connections
// count against the same cap.
// Connections are capped (--max_data_connections):
// each costs two threads, and a client that opens them without end must
// not exhaust the server's; one over the cap gets an ERROR frame
// (RESOURCE_EXHAUSTED) and is closed (under TLS closed at once: no
// handshake is spent on it), and the client falls back to gRPC.
// Thread-safe.
#pragma once

#include <list>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "server/dataplane/data_tls_context.h"
#include "server/dataplane/data_session.h"

namespace zerostate::server {

inline constexpr absl::Duration kHandshakeTimeout = absl::Seconds(10);

class DataPlane {
 public:
  // Listens on `listen` ("host:port", IPv4 or a name; port 0: any free
  // port) and serves at most `max_connections` (> 0) connections at once
  // with `ctx` (whose pointers must outlive the DataPlane), under TLS with
  // `tls` unless null (which must outlive the DataPlane too). Errors:
  // INVALID_ARGUMENT (not host:port, names --data_listen; max_connections
  // < 1, names --max_data_connections), UNAVAILABLE (cannot bind; names
  // the address).
  // With `shm`, also listens for same-host clients; when that name cannot
  // be bound (another process holds it), says so on stderr and serves TCP
  // only.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<DataPlane>> Start(
      const std::string& listen, const DataSessionContext& ctx, int max_connections,
      DataTlsContext* tls, bool shm = false);
  // OK for a connection cap of at least 1; else INVALID_ARGUMENT naming
  // --max_data_connections.
  [[nodiscard]] static absl::Status CheckMaxConnections(int max_connections);

  // Shutdown(), then joins every thread.
  ~DataPlane();

  // The bound port.
  int port() const { return port_; }
  // Whether same-host clients are served through shared memory.
  bool shm() const { return shm_fd_ >= 0; }

  // Stops accepting and breaks every open connection (their sessions end
  // at their next read or write). Idempotent.
  void Shutdown();

 private:
  struct Conn {
    int fd;
    std::thread thread;
    bool done = false;
  };
  DataPlane(int listen_fd, int shm_fd, int wake_fd, int port, const DataSessionContext& ctx,
            int max_connections, DataTlsContext* tls);
  // Accepts on `listen_fd` (the unix socket of same-host clients when
  // `shm`) until Shutdown.
  void AcceptLoop(int listen_fd, bool shm);
  // Serves accepted socket `fd` (not closed): its handshake under TLS
  // (or its segment, `shm`), then its session.
  void Serve(int fd, bool shm);
  // Answers `fd` with an ERROR frame naming the cap, then closes it.
  void Refuse(int fd, bool shm);
  // The gauge of open connections. REQUIRES: mu_ held.
  void PublishOpenLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Joins and forgets sessions that ended. REQUIRES: mu_ held.
  void ReapLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int listen_fd_;
  const int shm_fd_;   // the same-host unix listener, or -1
  const int wake_fd_;  // an eventfd: readable once Shutdown ran
  const int port_;
  const DataSessionContext ctx_;
  const int max_connections_;
  DataTlsContext* const tls_;
  absl::Mutex mu_;
  // Whether a TLS connection's records were described on stderr (once).
  bool described_ ABSL_GUARDED_BY(mu_) = false;
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
  // Sessions still running (conns_ also holds ended ones not yet reaped).
  int open_ ABSL_GUARDED_BY(mu_) = 0;
  std::list<Conn> conns_ ABSL_GUARDED_BY(mu_);
  std::thread acceptor_;
  std::thread shm_acceptor_;  // runs when shm_fd_ >= 0
};

}  // namespace zerostate::server
